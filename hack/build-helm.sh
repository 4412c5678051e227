#!/usr/bin/env bash
# Builds helm from its Go module into the same cache as the control-plane binaries
# (hack/build-controlplane.sh), once per pinned version. Prints the path of the binary.
# Usage: hack/build-helm.sh   (NODEWRIGHT_CACHE overrides ~/.cache/nodewright)
set -euo pipefail

HELM_VERSION=v3.19.2

cache="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}"
bin="$cache/bin"
out="$bin/helm-$HELM_VERSION"
mkdir -p "$bin"

if ! command -v go >/dev/null 2>&1; then
  echo "build-helm: Go is required to build helm" >&2
  exit 1
fi

if [[ ! -x "$out" ]]; then
  echo "build-helm: building helm $HELM_VERSION (first time only)" >&2
  start=$SECONDS
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  # `go install pkg@version` builds with helm's own go.mod and go.sum: the versions helm released.
  GOBIN="$work" CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$work/helm" "$out"
  echo "build-helm: built helm in $((SECONDS - start)) s" >&2
fi
ln -sf "helm-$HELM_VERSION" "$bin/helm"
echo "$bin/helm"
