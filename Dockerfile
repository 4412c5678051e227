# syntax=docker/dockerfile:1
# The nodewright manager image: runtime dependencies only, installed from the hashed lock
# (--require-hashes), non-root, read-only root filesystem friendly, config from a mounted file.
#
# BASE_IMAGE: any Debian-based image with python3 (3.11+) and its venv module. The default is the
# public python slim image pinned by its multi-platform manifest digest (python:3.11.13-slim-bookworm,
# digest taken from public Dockerfiles that pin it; our machines cannot pull it to check).
# `make image` passes a base made with mmdebstrap from Debian bookworm packages instead
# (hack/build-image.sh), where python3 is Debian's 3.11.
ARG BASE_IMAGE=docker.io/library/python:3.11.13-slim-bookworm@sha256:86adf8dbadc3d6e82ee5dd2c74bec2e1c2467cdad47886280501df722372d2e1

FROM ${BASE_IMAGE} AS build
# A CA bundle for pip (a mounted host bundle behind a TLS-intercepting proxy); empty: the image's.
ARG PIP_CERT=""
WORKDIR /src
RUN python3 -m venv /opt/nodewright
COPY requirements.lock requirements-build.lock ./
RUN /opt/nodewright/bin/pip install --no-cache-dir --disable-pip-version-check --require-virtualenv \
      --require-hashes --only-binary=:all: ${PIP_CERT:+--cert "$PIP_CERT"} -r requirements.lock \
 && /opt/nodewright/bin/pip install --no-cache-dir --disable-pip-version-check --require-virtualenv \
      --require-hashes --only-binary=:all: ${PIP_CERT:+--cert "$PIP_CERT"} -r requirements-build.lock
COPY pyproject.toml README.md ./
COPY nodewright ./nodewright
# The project itself: built with the hashed setuptools just installed; no index, no other download.
RUN /opt/nodewright/bin/pip install --no-cache-dir --disable-pip-version-check --no-deps \
      --no-index --no-build-isolation . \
 && /opt/nodewright/bin/python -m compileall -q /opt/nodewright

FROM ${BASE_IMAGE}
COPY --from=build /opt/nodewright /opt/nodewright
ENV PATH=/opt/nodewright/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532: the conventional "nonroot" uid/gid; numeric, so no passwd entry is needed.
USER 65532:65532
# 8443: /metrics over HTTPS (TokenReview + SubjectAccessReview); 8081: /healthz, /readyz.
EXPOSE 8443 8081
ENTRYPOINT ["nodewright"]
CMD ["run", "--config", "/etc/nodewright/config.yaml"]
