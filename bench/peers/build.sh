#!/usr/bin/env bash
# Builds the Go peers of nodewright's benchmarks (the controller-runtime contender, the client-go
# informer, and aad-pod-identity's MIC, unmodified, from its Go module) into a cache directory
# outside the repository, once per go.mod/go.sum content. Prints the bin directory.
# Usage: bench/peers/build.sh [PEER...]   (default: the framework contenders; `mic`, `cilium` on request; NODEWRIGHT_CACHE overrides ~/.cache/nodewright)
# Only the benches call this: CI and the test suite never build peers.
set -euo pipefail
shopt -s nullglob

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}"
bin="$cache/bench-bin"
mkdir -p "$bin"

if ! command -v go >/dev/null 2>&1; then
  echo "bench/peers/build.sh: Go is required to build the Go peers" >&2
  exit 1
fi

# peer directory -> what to build in it ("." = its own main.go, else a package of a required module)
declare -A targets=(
  [controller-runtime]=.
  [client-go-informer]=.
  [mic]=github.com/Azure/aad-pod-identity/cmd/mic
  [cilium]=github.com/cilium/cilium/operator
)
# peer -> build tags (Cilium's Azure IPAM registers under ipam_provider_azure)
declare -A tags=([cilium]=ipam_provider_azure)

peers=("$@")
if [[ ${#peers[@]} -eq 0 ]]; then
  peers=(controller-runtime client-go-informer)  # the framework contenders of `make bench`
fi

for peer in "${peers[@]}"; do
  target="${targets[$peer]:?unknown peer $peer}"
  dir="$here/$peer"
  stamp="$(cat "$dir"/go.mod "$dir"/go.sum "$dir"/*.go | sha256sum | cut -c1-12)"
  out="$bin/$peer-$stamp"
  if [[ ! -x "$out" ]]; then
    echo "bench/peers/build.sh: building $peer (first time only)" >&2
    start=$SECONDS
    (cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -tags "${tags[$peer]:-}" -ldflags "-s -w" -o "$out.tmp" "$target")
    mv "$out.tmp" "$out"
    echo "bench/peers/build.sh: built $peer in $((SECONDS - start)) s" >&2
  fi
  ln -sf "$(basename "$out")" "$bin/$peer"
done
echo "$bin"
