# trainyard — the two commands a new user needs are `make demo` and `make test`.
# Both create .venv and install what they need on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# extras to install for `make setup` and `make validate`; CI jobs that only check the repository
# use EXTRAS=repo (no torch). test, demo, lint and bench always need (and install) dev.
EXTRAS ?= dev
# One stamp per extras set installed: switching EXTRAS installs what the other set lacks.
STAMP   = $(VENV)/.installed-$(1)
PREVIEWS ?= previews
# Python's default, even where the environment turns it off: compiled modules, and pytest's rewritten
# test modules, are kept in __pycache__/ (git-ignored). Without them each pytest process compiles
# the suite's 250 test modules again: about 6 of its 12 seconds of collection on 2 cores.
unexport PYTHONDONTWRITEBYTECODE

.DEFAULT_GOAL := help
# the install stamps are real targets, never intermediate files to delete
.PRECIOUS: $(VENV)/.installed-%
.PHONY: help setup test test-fast test-changed demo lint hooks validate bench bench-scale tools kube kube-demo promtool redis clean

help:
	@echo "make demo      the main path end to end on local defaults: a TrainJob through the real"
	@echo "               controllers on a local control plane (make demo OFFLINE=1: without Kubernetes)"
	@echo "               (make demo DEMO='--admission policy': the pods through the MutatingAdmissionPolicies, offline)"
	@echo "make test      the test suite, every tier (what CI runs)"
	@echo "make test-fast every test but the slow tiers (network namespaces, torchrun, servers, the demo)"
	@echo "make test-changed the tests that cover what changed against main, and why (trainyard dev tests)"
	@echo "make validate  render and validate every cluster, write pod previews to previews/"
	@echo "make lint      ruff (rules and format), mypy on the typed floors, the duplicate-fact check"
	@echo "make hooks     have git refuse a commit subject over 72 characters (.githooks/commit-msg)"
	@echo "make bench     benchmarks (figures, not pass/fail); needs wrk"
	@echo "make bench-scale validate and render at scale: a 1,024-node cluster with up to 200 job folders"
	@echo "make setup     create .venv and install .[dev] (done by the targets above)"
	@echo "make promtool  install promtool (Debian's prometheus) for the alert rule tests (done by test, test-fast)"
	@echo "make redis     install Debian's redis-server, which Argo CD needs in the cluster tier (done by test)"

# A second run is a no-op unless pyproject.toml changed.
$(VENV)/.installed-%: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "trainyard needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$*]'
	@touch $@

setup: $(call STAMP,$(EXTRAS))

# kustomize and Helm at the versions Argo CD v3.6.2 bundles, built from kube/kustomize/go.mod and
# kube/helm/go.mod (Go >= 1.26 needed; kustomize's Go 1.27 toolchain fetched from the module proxy)
# and linked into .venv/bin: the repository never depends on whichever kustomize or helm a machine has.
tools: $(call STAMP,$(EXTRAS))
	@$(BIN)/trainyard cluster build --into $(BIN) kustomize helm

# the cluster tier's Kubernetes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl) from kube/go.mod, the upstream controllers (Kueue, JobSet, Trainer, training-operator)
# from kube/controllers/go.mod and Argo CD from kube/argocd/go.mod (its Go 1.27 toolchain fetched from
# the module proxy), built on first use with progress shown, then cached (~/.cache/trainyard)
kube: $(call STAMP,$(EXTRAS))
	@$(BIN)/trainyard cluster build >/dev/null

# what the demo runs: Kubernetes, the controllers and Argo CD (which syncs the job the demo pushes)
kube-demo: $(call STAMP,$(EXTRAS))
	@$(BIN)/trainyard cluster build kube controllers argocd >/dev/null

# promtool for the alert rules' tests (tests/monitoring) and prometheus for the demo's scrapes:
# Debian's prometheus package, installed when either is missing and this is a root shell with
# apt-get; otherwise say what to install.
PROMETHEUS_APT := apt-get install -y --no-install-recommends prometheus
promtool:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "promtool or prometheus is missing: $(PROMETHEUS_APT)"; \
	  $(PROMETHEUS_APT) || { echo "apt-get update, then again"; apt-get update && $(PROMETHEUS_APT); }; \
	else \
	  echo "promtool or prometheus is missing: install Debian's prometheus package (apt-get install prometheus)"; exit 2; \
	fi

# Redis for Argo CD's application controller and repo-server in the cluster tier
# (tests/trainyard/cluster/test_argocd_itself.py): Debian's redis-server, installed as promtool is.
REDIS_APT := apt-get install -y --no-install-recommends redis-server
redis:
	@command -v redis-server >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "redis-server is missing: $(REDIS_APT)"; \
	  $(REDIS_APT) || { echo "apt-get update, then again"; apt-get update && $(REDIS_APT); }; \
	else \
	  echo "redis-server is missing: install Debian's redis-server package (apt-get install redis-server)"; exit 2; \
	fi

# Every test: the fast tiers spread over the cores, then the slow tiers in one process (they start
# control planes, torchrun jobs and servers, which contend for 2 cores). Both run; either failing
# fails the target.
test: $(call STAMP,dev) tools kube promtool redis
	@$(BIN)/python -m pytest -q -m "$(FAST_TIERS)" -n $(TEST_WORKERS) $(TEST_DIST); fast=$$?; \
	$(BIN)/python -m pytest -q -m "$(SLOW_TIERS)" --durations=30; slow=$$?; \
	echo "make test: fast tiers exit $$fast, slow tiers exit $$slow"; [ $$fast = 0 ] && [ $$slow = 0 ]

# The inner loop: every test but the slow tiers (pytest markers, listed in pyproject.toml), spread
# over the cores.
SLOW_TIERS := netns or torchrun or server or e2e or cluster
FAST_TIERS := not ($(SLOW_TIERS))
TEST_WORKERS ?= auto
# worksteal: an idle worker takes tests queued for a busy one, so neither waits at the end
TEST_DIST := --dist worksteal
test-fast: $(call STAMP,dev) tools promtool
	$(BIN)/python -m pytest -q -m "$(FAST_TIERS)" -n $(TEST_WORKERS) $(TEST_DIST)

# The tests that cover what changed against $(TEST_BASE) (committed since the merge base,
# uncommitted, untracked), found from the imports; each printed with why before pytest runs them.
# TEST_CHANGED_FLAGS: more pytest flags, e.g. TEST_CHANGED_FLAGS='-m "not cluster"'.
TEST_BASE ?= main
TEST_CHANGED_FLAGS ?=
test-changed: $(call STAMP,dev) tools promtool
	$(BIN)/trainyard dev tests --base $(TEST_BASE) --run -- -q $(TEST_CHANGED_FLAGS)

# Render and check every cluster; write each job's pod preview to $(PREVIEWS)/ (git-ignored).
# VALIDATE_FLAGS: more flags, e.g. --changed-since origin/main (a pull request's folders only)
# or --no-cache (kustomize builds are kept in .trainyard-cache/, keyed by content).
VALIDATE_FLAGS ?=
validate: $(call STAMP,$(EXTRAS)) tools
	rm -rf $(PREVIEWS)
	$(BIN)/trainyard validate --previews $(PREVIEWS) $(VALIDATE_FLAGS)

# The job on a local control plane with the real controllers (Go needed; root for the pods'
# network namespaces). OFFLINE=1: the path without Kubernetes, for a machine without Go.
# DEMO: extra arguments, e.g. DEMO='--admission policy --cluster prod-ib --job horovod'
ifeq ($(OFFLINE),1)
demo: $(call STAMP,dev) tools
	$(BIN)/trainyard demo --offline $(DEMO)
else
demo: $(call STAMP,dev) tools kube-demo promtool redis
	$(BIN)/trainyard demo $(DEMO)
endif

# mypy checks the packages [tool.mypy] lists (the fully annotated floors); tests/test_facts.py finds
# a label, annotation, env name or port defined in two modules (it runs with the suite as well).
lint: $(call STAMP,dev)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_facts.py

# git runs the hooks of .githooks/ as checked out, in this clone and in its worktrees (the setting
# is the repository's, the path relative to each working tree); no .venv needed.
hooks:
	git config core.hooksPath .githooks
	@echo "git runs .githooks/ now: commit-msg refuses a subject over 72 characters"

# Figures for bench/README.md; each script writes its table to bench/results/.
bench: $(call STAMP,dev) tools kube
	@command -v wrk >/dev/null 2>&1 || { \
	  echo "error: the HTTPS benchmarks need the load generator wrk (Debian: apt-get install wrk)"; \
	  exit 2; }
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/webhook_http.py --repeat 3
	$(BIN)/python bench/webhook_cpu.py --rounds 16
	$(BIN)/python bench/webhook_limits.py
	$(BIN)/python bench/validate.py
	$(BIN)/python bench/apiserver_admission.py

# validate and render offline at scale: the dev cluster declaring 1,024 nodes, 0 to 200 job folders
# (bench/results/validate_scale.md); the cluster-side scale benchmarks are not written yet
bench-scale: $(call STAMP,dev) tools
	$(BIN)/python bench/validate.py --nodes 1024 --jobs 0,50,100,150,200 --out bench/results/validate_scale.md

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
