#!/usr/bin/env bash
# Builds the Go peers of nodewright's benchmarks into a cache directory outside the repository,
# once per go.mod/go.sum (and main.go) content. Prints the bin directory.
# Usage: bench/peers/build.sh [PEER...]   (NODEWRIGHT_CACHE overrides ~/.cache/nodewright)
# With no PEER: the framework bench's controller-runtime contender and client-go informer.
# cilium (Cilium's Azure IPAM operator, large: asked for by `python -m bench.ipam --peer cilium`
# only) is built from upstream's module with its ipam_provider_azure tag, as cilium-operator-azure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}"
bin="$cache/bench-bin"
mkdir -p "$bin"

if ! command -v go >/dev/null 2>&1; then
  echo "bench/peers/build.sh: Go is required to build the Go peers" >&2
  exit 1
fi

peers=("$@")
if [[ ${#peers[@]} -eq 0 ]]; then
  peers=(controller-runtime client-go-informer)
fi

for peer in "${peers[@]}"; do
  dir="$here/$peer"
  target=. tags=""
  if [[ "$peer" == cilium ]]; then
    target=github.com/cilium/cilium/operator tags=ipam_provider_azure
  fi
  sources=("$dir"/go.mod "$dir"/go.sum)
  if compgen -G "$dir/*.go" >/dev/null; then sources+=("$dir"/*.go); fi
  stamp="$(cat "${sources[@]}" | sha256sum | cut -c1-12)"
  out="$bin/$peer-$stamp"
  if [[ ! -x "$out" ]]; then
    echo "bench/peers/build.sh: building $peer (first time only)" >&2
    start=$SECONDS
    (cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -tags "$tags" -ldflags "-s -w" -o "$out.tmp" "$target")
    mv "$out.tmp" "$out"
    echo "bench/peers/build.sh: built $peer in $((SECONDS - start)) s" >&2
  fi
  ln -sf "$(basename "$out")" "$bin/$peer"
done
echo "$bin"
