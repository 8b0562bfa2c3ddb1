# TokenFleet — the two commands: `make up` and `make test`. Everything else supports them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# The source roots (one per role, see README): they must match pyproject's hatch sources.
ROOTS  := api libraries operator gateway worker-image fleet devstack cli
export TOKENFLEET_CACHE ?= $(HOME)/.cache/tokenfleet
# Debian packages the platform runs (and gcc for make native and the static pause binary), as
# command:package (tools/preflight.sh installs them). Prometheus is not among them: Debian's
# cannot discover pods; tools/build.sh builds it. The real node needs runc (crun fails on this
# hybrid cgroup layout), the CNI plugins (bridge, host-local, loopback) and iptables (the kubelet's
# canary chains); the images are built with podman/buildah on a base bootstrapped by mmdebstrap.
export TOKENFLEET_APT := redis-server:redis-server gcc:build-essential \
  podman:podman buildah:buildah runc:runc mmdebstrap:mmdebstrap iptables:iptables \
  /usr/lib/cni/bridge:containernetworking-plugins

.PHONY: help up down status test unit integration lint crds manifests monitoring bench clean \
  preflight binaries native images prepared locks

help:
	@echo "make up      start the local platform (control plane, simulated GPU nodes, node agent)"
	@echo "make down    stop everything make up started"
	@echo "make test    lint + the full test suite against the real local control plane"
	@echo "make lint    ruff, mypy --strict, import-linter"
	@echo "make crds    re-render crds/ (and the chart's copy) from tokenfleet.api"
	@echo "make manifests  re-render manifests/ from charts/tokenfleet (helm template)"
	@echo "make monitoring  re-render monitoring/rendered/ (PodMonitors, rules, dashboards)"
	@echo "make images  build the container images (podman; cached)"
	@echo "make native  compile the hot paths with mypyc (make up and make test do it)"
	@echo "make bench   benchmarks (figures, side by side with peers)"
	@echo "make clean   stop and remove .tokenfleet/ state (keeps the binary cache)"

preflight:
	@tools/preflight.sh

# Re-install when the project's dependencies change.
$(VENV)/.installed: pyproject.toml | preflight
	@echo "installing the Python environment in $(VENV)/ ..."
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[dev]'
	@touch $@

binaries: preflight
	@echo "building control-plane binaries and helm (cached in $(TOKENFLEET_CACHE)/bin) ..."
	@tools/build.sh >/dev/null

# Container images (TokenFleet, the worker simulator, the real node's pause image), built with
# podman on a Debian base bootstrapped with mmdebstrap; cached per user by a hash of their inputs.
images: preflight $(VENV)/.installed
	@echo "building container images (cached in $(TOKENFLEET_CACHE)/images) ..."
	@PYTHON=$(PY) tools/images.sh >/dev/null

# All at once: the Go builds keep the cores busy while the Python environment and the image
# builds mostly wait on downloads and disk (the worker image waits only for the simulator's set).
prepared: preflight
	@echo "building binaries and images (cached in $(TOKENFLEET_CACHE)) ..."
	@tools/build.sh >/dev/null & go_builds=$$!; \
	  { $(MAKE) --no-print-directory $(VENV)/.installed && PYTHON=$(PY) tools/images.sh >/dev/null; } \
	    || { kill $$go_builds 2>/dev/null; exit 1; }; \
	  wait $$go_builds

# The images' dependency locks (hashes included) from pyproject.toml and the worker's inputs.
LOCK := $(VENV)/bin/uv pip compile --universal --python-version 3.11 --generate-hashes --quiet \
  --custom-compile-command "make locks"
locks: $(VENV)/.installed
	$(LOCK) pyproject.toml -o images/tokenfleet/requirements.lock
	$(LOCK) images/worker-sim/requirements.in -o images/worker-sim/requirements.lock

# The routing, admission and simulator cores compiled with mypyc (tokenfleet.native): cached per
# user, keyed by their sources; without it they run interpreted, about 2.5x slower.
native: $(VENV)/.installed
	@$(PY) tools/build_native.py

up: prepared native
	@$(PY) -m tokenfleet.devstack up

down: $(VENV)/.installed
	@$(PY) -m tokenfleet.devstack down

status: $(VENV)/.installed
	@$(PY) -m tokenfleet.devstack status

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check $(ROOTS) tests bench tools
	$(VENV)/bin/mypy $(addsuffix /tokenfleet,$(ROOTS)) tools/build_native.py
	$(VENV)/bin/lint-imports
	$(PY) -m tokenfleet.api.crd --check crds
	$(PY) -m tokenfleet.api.crd --check charts/tokenfleet/crds
	$(PY) -m tokenfleet.devstack.monitoring --check monitoring

# Scrape jobs, rules and dashboards are written once in monitoring/; this renders what each kind
# of Prometheus/Grafana installation consumes (a unit test fails when it is stale).
monitoring: $(VENV)/.installed
	$(PY) -m tokenfleet.devstack.monitoring --write monitoring

unit: $(VENV)/.installed native
	$(PY) -m pytest tests/unit

# The real-node tests and the make-up journey run the images: build them from these sources
# (cached by a hash of their inputs, so only a change rebuilds).
integration: $(VENV)/.installed prepared
	$(PY) -m pytest tests/integration

test: lint prepared native
	$(PY) -m pytest tests

# Benchmarks print figures side by side; they assert nothing and are not part of make test.
# The peers (LiteLLM proxy, vllm-router) live in their own venv: large, and not our dependencies.
PEERS := bench/.venv-peers
$(PEERS)/.installed:
	@echo "installing benchmark peers (LiteLLM proxy, vllm-router) in $(PEERS)/ ..."
	@test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	@$(PEERS)/bin/pip install -q --upgrade pip
	@# litellm 1.107 and later move the proxy into litellm-proxy(-extras) releases that our
	@# package registry does not carry: 1.106.12 is the newest whose proxy extra installs.
	@$(PEERS)/bin/pip install -q 'litellm[proxy]==1.106.12' 'vllm-router==0.1.17' 'py-spy==0.4.3'
	@touch $@

# The real load tools (guidellm, inference-perf) that bench/real_clients.py drives, in their own
# venv too: torch (guidellm's data loader) brings its CUDA wheels from PyPI, about 6 GB.
# inference-perf 0.7.0 declares Python >= 3.12 but imports and runs on 3.11: its dependencies are
# in the pinned list, and it goes in last without its metadata's Python check.
CLIENTS := bench/.venv-clients
$(CLIENTS)/.installed: bench/clients-requirements.txt
	@echo "installing benchmark clients (guidellm, inference-perf) in $(CLIENTS)/ ..."
	@test -x $(CLIENTS)/bin/python || $(PYTHON) -m venv $(CLIENTS)
	@$(CLIENTS)/bin/pip install -q --upgrade pip
	@$(CLIENTS)/bin/pip install -q -r bench/clients-requirements.txt
	@$(CLIENTS)/bin/pip install -q --no-deps --ignore-requires-python 'inference-perf==0.7.0'
	@touch $@

bench: $(VENV)/.installed binaries native $(PEERS)/.installed $(CLIENTS)/.installed
	$(PY) bench/gateway_overhead.py
	$(PY) bench/operator_scale.py
	$(PY) bench/kube_watch.py
	$(PY) bench/routing.py
	$(PY) bench/slot_sharing.py
	$(PY) bench/autoscaling.py
	$(PY) bench/preemptions.py
	$(PY) bench/simulator.py
	$(PY) bench/sim_accuracy.py
	$(PY) bench/response_cache.py
	$(PY) bench/adapters.py
	$(PY) bench/classifier.py
	$(PY) bench/spill.py
	$(PY) bench/real_clients.py
	$(PY) bench/gateway_platform.py  # Kubernetes mode: measures a running make up, else says it skipped

crds: $(VENV)/.installed
	$(PY) -m tokenfleet.api.crd --write crds
	$(PY) -m tokenfleet.api.crd --write charts/tokenfleet/crds

# manifests/ (kustomize, GitOps) is rendered from the chart with the built helm; a test checks
# it is current, like the CRDs.
manifests: $(VENV)/.installed binaries
	$(PY) tools/render_manifests.py --write

clean: down
	rm -rf .tokenfleet
