# nodewright developer tasks. `make help` lists them.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

VENV      ?= .venv
PYTHON    := $(VENV)/bin/python
CACHE     ?= $(HOME)/.cache/nodewright
BIN       := $(CACHE)/bin
PYTEST_ARGS ?=
FULL      ?=

export NODEWRIGHT_CACHE := $(CACHE)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(PYTHON): pyproject.toml requirements-dev.lock
	python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is required")'
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check "uv==0.13.9"
	$(VENV)/bin/uv pip install --quiet --python $(PYTHON) -r requirements-dev.lock
	$(VENV)/bin/uv pip install --quiet --python $(PYTHON) --no-deps -e .
	@touch $(PYTHON)

.PHONY: install-dev
install-dev: $(PYTHON) ## Create .venv with the pinned development dependencies.

.PHONY: controlplane
controlplane: ## Build the local cluster (etcd, kube-apiserver, controller manager, scheduler, kwok) and kubectl (once).
	@bash hack/build-controlplane.sh >/dev/null

.PHONY: helm
helm: ## Build helm from its Go module (once, into the cache; the chart tests use it).
	@bash hack/build-helm.sh >/dev/null

.PHONY: prometheus
prometheus: ## Build Prometheus and promtool from their Go module (once, into the cache; make run and the tests use them).
	@bash hack/build-prometheus.sh >/dev/null

.PHONY: helm-lint
helm-lint: helm ## helm lint --strict the chart generated from config/ (charts/nodewright).
	$(BIN)/helm lint --strict charts/nodewright

.PHONY: lint
lint: $(PYTHON) ## ruff, mypy --strict, import-linter layer contracts, CRDs up to date, hadolint.
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(PYTHON) -m hack.manifests --check
	$(VENV)/bin/hadolint Dockerfile

.PHONY: fmt
fmt: $(PYTHON) ## Format and autofix with ruff.
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Two pytest-xdist workers by default (each its own control plane and emulator, a test file per
# worker): about 15.5 minutes on two cores (1,817 tests). TEST_WORKERS=0 runs serially. Files are
# handed out in collection order, where tests/conftest.py puts the slowest first
# (HEAVY_FILES_FIRST): xdist's default order (most tests first) left them for the end.
TEST_WORKERS ?= 2

.PHONY: test
test: $(PYTHON) controlplane helm prometheus ## Run every test against a real local control plane (TEST_WORKERS=0 for one process).
	$(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: $(PYTHON) helm prometheus ## Run only the tests that need no cluster (helm and promtool are still needed).
	$(PYTHON) -m pytest -m "not cluster" $(PYTEST_ARGS)

.PHONY: run
run: $(PYTHON) controlplane prometheus ## Start the local environment, Prometheus included, and print how to reach it (Ctrl-C stops it).
	$(PYTHON) -m nodewright.devenv up

.PHONY: bench
bench: $(PYTHON) controlplane ## Run the benchmarks (quick; FULL=1 for the full sizes; CPU_LIMIT=0.5 under a pod-like CPU quota).
	$(PYTHON) -m bench $(if $(FULL),--full,) $(if $(CPU_LIMIT),--cpu-limit $(CPU_LIMIT),)

.PHONY: manifests
manifests: $(PYTHON) ## Generate config/crd, config/rbac and charts/nodewright from the models and RBAC_RULES.
	$(PYTHON) -m hack.manifests

.PHONY: install
install: controlplane ## Install the CRDs into the cluster of $$KUBECONFIG.
	$(BIN)/kubectl apply -k config/crd

.PHONY: deploy
deploy: controlplane ## Deploy the manager into the cluster of $$KUBECONFIG.
	$(BIN)/kubectl apply -k config/default

IMAGE     ?= localhost/nodewright:dev
BASE_IMAGE ?=

.PHONY: image
image: ## Build the manager image with buildah, no engine (base from Debian via mmdebstrap unless BASE_IMAGE=...).
	IMAGE=$(IMAGE) BASE_IMAGE=$(BASE_IMAGE) bash hack/build-image.sh

.PHONY: image-test
image-test: $(PYTHON) controlplane ## Run the image with podman (non-root, read-only) against the local control plane and ARM emulator.
	IMAGE=$(IMAGE) $(PYTHON) -m hack.image_test

.PHONY: docker-build
docker-build: ## Build the manager image with a Docker engine (none runs on our dev machines; see `make image`).
	docker build -t nodewright:dev .
