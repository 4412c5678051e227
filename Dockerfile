# syntax=docker/dockerfile:1
# The nodewright manager image: runtime dependencies only, non-root, config from a mounted file.

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
RUN python -m venv /opt/nodewright
COPY requirements.lock ./
RUN /opt/nodewright/bin/pip install --no-cache-dir --require-virtualenv -r requirements.lock
COPY pyproject.toml README.md ./
COPY nodewright ./nodewright
RUN /opt/nodewright/bin/pip install --no-cache-dir --no-deps .

FROM python:3.11-slim-bookworm
RUN useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin nodewright
COPY --from=build /opt/nodewright /opt/nodewright
ENV PATH=/opt/nodewright/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["nodewright"]
CMD ["run", "--config", "/etc/nodewright/config.yaml"]
