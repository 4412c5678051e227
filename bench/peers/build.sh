#!/usr/bin/env bash
# Builds the Go peers of nodewright's benchmarks (the controller-runtime contender and the
# client-go informer) into a cache directory outside the repository, once per go.sum content.
# Prints the bin directory. Usage: bench/peers/build.sh   (NODEWRIGHT_CACHE overrides ~/.cache/nodewright)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}"
bin="$cache/bench-bin"
mkdir -p "$bin"

if ! command -v go >/dev/null 2>&1; then
  echo "bench/peers/build.sh: Go is required to build the Go peers" >&2
  exit 1
fi

for peer in controller-runtime client-go-informer; do
  dir="$here/$peer"
  stamp="$(cat "$dir/go.mod" "$dir/go.sum" "$dir/main.go" | sha256sum | cut -c1-12)"
  out="$bin/$peer-$stamp"
  if [[ ! -x "$out" ]]; then
    echo "bench/peers/build.sh: building $peer (first time only)" >&2
    start=$SECONDS
    (cd "$dir" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "-s -w" -o "$out.tmp" .)
    mv "$out.tmp" "$out"
    echo "bench/peers/build.sh: built $peer in $((SECONDS - start)) s" >&2
  fi
  ln -sf "$(basename "$out")" "$bin/$peer"
done
echo "$bin"
