#!/usr/bin/env bash
# Builds Prometheus and promtool from their Go module into the same cache as the control-plane
# binaries (hack/build-controlplane.sh), once per pinned version. Prints the bin directory.
# The web UI's assets are not embedded (no `builtinassets` tag) and no service discovery but the
# static and file ones is built in (`remove_all_sd`): the HTTP API and static targets are all the
# tests and `make run` use, and the build takes a fraction of the time. Usage: hack/build-prometheus.sh   (NODEWRIGHT_CACHE overrides ~/.cache/nodewright)
set -euo pipefail

PROMETHEUS_VERSION=v0.316.0

cache="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}"
bin="$cache/bin"
mkdir -p "$bin"

if ! command -v go >/dev/null 2>&1; then
  echo "build-prometheus: Go is required to build Prometheus" >&2
  exit 1
fi

missing=()
for name in prometheus promtool; do
  [[ -x "$bin/$name-$PROMETHEUS_VERSION" ]] || missing+=("$name")
done
if ((${#missing[@]})); then
  echo "build-prometheus: building ${missing[*]} $PROMETHEUS_VERSION (first time only)" >&2
  start=$SECONDS
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  pv="github.com/prometheus/common/version"
  packages=()
  for name in "${missing[@]}"; do
    packages+=("github.com/prometheus/prometheus/cmd/$name@$PROMETHEUS_VERSION")
  done
  # `go install pkg@version` builds with Prometheus' own go.mod and go.sum: the versions it released.
  GOBIN="$work" CGO_ENABLED=0 go install -trimpath -tags remove_all_sd \
    -ldflags "-s -w -X $pv.Version=${PROMETHEUS_VERSION#v} -X $pv.Branch=release" \
    "${packages[@]}"
  for name in "${missing[@]}"; do
    mv "$work/$name" "$bin/$name-$PROMETHEUS_VERSION"
  done
  echo "build-prometheus: built ${missing[*]} in $((SECONDS - start)) s" >&2
fi
ln -sf "prometheus-$PROMETHEUS_VERSION" "$bin/prometheus"
ln -sf "promtool-$PROMETHEUS_VERSION" "$bin/promtool"
echo "$bin"
