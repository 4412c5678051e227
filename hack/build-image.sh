#!/usr/bin/env bash
# `make image`: builds the manager image from the Dockerfile with buildah; no container engine.
#
# BASE_IMAGE empty (the default here and in CI): the base is a root filesystem made with
# mmdebstrap from Debian bookworm's packages (python3 3.11, python3-venv, ca-certificates),
# imported once as localhost/nodewright-base:bookworm; no registry is needed. BASE_IMAGE set:
# the Dockerfile's FROM uses it instead (its own default is the public python slim image, pinned
# by digest, for machines that can pull). pip in the build trusts the host's CA bundle (mounted
# read-only), so a TLS-intercepting proxy works. Needs: buildah, podman, mmdebstrap, runc
# (Debian packages; .ci/run installs them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CACHE="${NODEWRIGHT_CACHE:-$HOME/.cache/nodewright}"
IMAGE="${IMAGE:-localhost/nodewright:dev}"
BASE_IMAGE="${BASE_IMAGE:-}"
LOCAL_BASE="localhost/nodewright-base:bookworm"
mkdir -p "$CACHE"

# crun fails on hybrid cgroups here and podman's default ulimits cannot be set: runc and no
# default ulimits (see hack/containers.conf).
export CONTAINERS_CONF="${CONTAINERS_CONF:-$PWD/hack/containers.conf}"

if [[ -z "$BASE_IMAGE" ]]; then
  BASE_IMAGE="$LOCAL_BASE"
  if ! podman image exists "$LOCAL_BASE"; then
    echo "== base root filesystem from Debian bookworm (mmdebstrap)"
    tarball="$CACHE/nodewright-base-bookworm.$$.tar"  # mmdebstrap picks the format from ".tar"
    trap 'rm -f "$tarball"' EXIT
    mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,ca-certificates \
      bookworm "$tarball"
    podman import --quiet "$tarball" "$LOCAL_BASE" >/dev/null
  fi
fi

host_ca=/etc/ssl/certs/ca-certificates.crt
ca_args=()
if [[ -r "$host_ca" ]]; then
  ca_args=(--volume "$host_ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
fi

echo "== image $IMAGE from $BASE_IMAGE"
buildah bud --quiet --runtime runc --isolation chroot --network host --layers \
  --build-arg "BASE_IMAGE=$BASE_IMAGE" "${ca_args[@]}" \
  --tag "$IMAGE" --file Dockerfile .
podman image inspect --format 'ci: image {{.RepoTags}} {{.Size}} bytes' "$IMAGE"
