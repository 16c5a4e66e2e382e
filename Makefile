# trainyard — the two commands a new user needs are `make demo` and `make test`.
# Both create .venv and install what they need on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# extras to install; CI jobs that only check the repository use EXTRAS=repo (no torch)
EXTRAS ?= dev
PREVIEWS ?= previews

.DEFAULT_GOAL := help
.PHONY: help setup test demo lint validate bench tools clean

help:
	@echo "make demo      the main path end to end on local defaults"
	@echo "make test      the test suite"
	@echo "make validate  render and validate every cluster, write pod previews to previews/"
	@echo "make lint      ruff"
	@echo "make bench     benchmarks (figures, not pass/fail); needs wrk and hey"
	@echo "make setup     create .venv and install .[dev] (done by the targets above)"

# A second run is a no-op unless pyproject.toml changed.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "trainyard needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(EXTRAS)]'
	@touch $(STAMP)

setup: $(STAMP)

# kustomize is the one system tool the repository needs; say so clearly when it is missing.
tools:
	@command -v kustomize >/dev/null 2>&1 || kubectl kustomize --help >/dev/null 2>&1 || { \
	  echo "error: neither 'kustomize' nor 'kubectl' (with its built-in kustomize) is on PATH."; \
	  echo "       install one of them: https://kubectl.docs.kubernetes.io/installation/kustomize/"; \
	  exit 2; }

test: setup tools
	$(BIN)/python -m pytest -q

# Render and check every cluster; write each job's pod preview to $(PREVIEWS)/ (git-ignored).
validate: setup tools
	rm -rf $(PREVIEWS)
	$(BIN)/trainyard validate --previews $(PREVIEWS)

demo: setup tools
	$(BIN)/trainyard demo

lint: setup
	$(BIN)/ruff check .

# Figures for the README; each script writes its table to bench/results/.
bench: setup
	@command -v wrk >/dev/null 2>&1 && command -v hey >/dev/null 2>&1 || { \
	  echo "error: the HTTPS benchmark needs the load generators wrk and hey (Debian: apt-get install wrk hey)"; \
	  exit 2; }
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/webhook_http.py
	$(BIN)/python bench/webhook_limits.py
	$(BIN)/python bench/validate.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
