# turbdb — `make help` lists the targets. Everything installs into .venv inside the repo.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DB ?= data
DATASET ?= isotropic64
HOST ?= 127.0.0.1
PORT ?= 8000
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup build demo serve dataset test test-rust test-python bench bench-ingest bench-query bench-track bench-service bench-workload clean

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

$(VENV)/.deps:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "maturin>=1.5,<2"
	touch $@

setup: $(VENV)/.deps ## create .venv with maturin (build installs the dependencies)

build: setup ## release build of the Rust extension into .venv
	$(VENV)/bin/maturin develop --release --extras test --quiet
	@$(PY) -c "import turbdb._core" 

dataset: build ## create the default dataset (isotropic64 in data/; override with DATASET=, DB=) if it is missing
	$(PY) -m turbdb.cli simulate $(DB) --name $(DATASET) --grid 64 --if-missing

demo: dataset ## set everything up and run the demo on the default dataset
	$(PY) -m turbdb.cli demo $(DB) --name $(DATASET)

serve: dataset ## run the web service on the default dataset (HOST=, PORT=, TOKENS=tokens.toml); prints its address
	$(PY) -m turbdb.cli serve $(DB) --host $(HOST) --port $(PORT) $(if $(TOKENS),--tokens $(TOKENS))

test: build test-rust test-python ## set up, then run cargo test and pytest

test-rust:
	cargo test --workspace --exclude turbdb-py --quiet

test-python:
	$(PY) -m pytest -q

bench-ingest: build ## ingest throughput from an in-memory array (bench/results/ingest.json)
	$(PY) bench/ingest.py

bench-query: build ## point-query throughput, streaming vs sorted/direct vs scipy (bench/results/query.json)
	$(PY) bench/query.py

bench-track: build ## particle-tracking throughput, track vs client-side loop, in-process and HTTP (bench/results/track.json)
	$(PY) bench/track.py

bench-service: build ## HTTP latency (1, 100, 1e4 points) and 1e6-point throughput vs in-process (bench/results/service.json)
	$(PY) bench/service.py

bench-workload: build ## many users at once: schedulers × cache policies on one trace (bench/results/workload.json)
	$(PY) bench/workload.py

bench: bench-ingest bench-query bench-track bench-service bench-workload ## every benchmark

clean: ## remove build products and the venv (keeps data/)
	rm -rf target $(VENV) .pytest_cache .hypothesis
