# turbdb — `make help` lists the targets. Everything installs into .venv inside the repo.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DB ?= data
DATASET ?= isotropic64
HOST ?= 127.0.0.1
PORT ?= 8000
WHEEL_DIR ?= dist
# NATIVE=1: compile for this CPU only (target-cpu=native); the default build runs anywhere and
# picks its SIMD path (AVX-512, AVX2+FMA, NEON, portable) at run time.
ifeq ($(NATIVE),1)
export RUSTFLAGS := $(RUSTFLAGS) -C target-cpu=native
endif
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: help setup build wheel demo serve dataset test test-rust test-python bench bench-deps bench-ingest bench-query bench-track bench-service bench-workload bench-http-workload fuzz bench-cluster check-aarch64 wheel-aarch64 clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-14s %s\n", $$1, $$2}'

# Each step runs only when its inputs changed: the venv once, the Python dependencies when
# pyproject.toml changes, the Rust extension when a Rust source does. Cargo's progress is shown.
RUST_SOURCES := Cargo.toml Cargo.lock $(shell find crates -name '*.rs' -o -name Cargo.toml)

$(VENV)/.deps:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "maturin>=1.5,<2"
	touch $@

$(VENV)/.installed: $(VENV)/.deps pyproject.toml
	@echo "make: installing turbdb's dependencies and building the extension (release; cargo's progress follows)"
	$(VENV)/bin/maturin develop --release --extras test
	touch $@ $(VENV)/.built

$(VENV)/.built: $(VENV)/.installed $(RUST_SOURCES)
	@echo "make: Rust sources changed: rebuilding the extension (release)"
	$(VENV)/bin/maturin develop --release --skip-install
	touch $@

setup: $(VENV)/.deps ## create .venv with maturin (build installs the dependencies)

build: $(VENV)/.built ## release build of the Rust extension into .venv (skipped when nothing changed)
	@$(PY) -c "import turbdb._core"

wheel: setup ## abi3 manylinux wheel into dist/ (WHEEL_DIR=); pip install it anywhere, no Rust needed
	$(VENV)/bin/maturin build --release --out $(WHEEL_DIR)

wheel-aarch64: setup ## the same wheel for aarch64 Linux, cross-built (needs the rustup target and gcc-aarch64-linux-gnu)
	CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc $(VENV)/bin/maturin build --release --target aarch64-unknown-linux-gnu --out $(WHEEL_DIR)

check-aarch64: setup ## the NEON build under qemu: cargo test for aarch64, then the aarch64 wheel's smoke test (slow; scripts/check_aarch64.sh)
	scripts/check_aarch64.sh all

# The two built-in DNS datasets (docs/simulate.md): isotropic64, the quick default (Re_λ ≈ 40,
# 100 steps, a few minutes), and isotropic256 (Re_λ ≈ 117, a short inertial range, 41 steps,
# 11 GB, about half an hour on 2 cores). Any other name gets the 64³ settings.
GRID ?= $(if $(filter isotropic256,$(DATASET)),256,64)
STEPS ?= $(if $(filter isotropic256,$(DATASET)),41,100)

dataset: build ## create a dataset if it is missing (DATASET=isotropic64 or isotropic256; DB=data)
	$(PY) -m turbdb.cli simulate $(DB) --name $(DATASET) --grid $(GRID) --steps $(STEPS) --if-missing

demo: dataset ## set everything up and run the demo on the default dataset
	$(PY) -m turbdb.cli demo $(DB) --name $(DATASET)

serve: dataset ## run the web service on the default dataset (HOST=, PORT=, TOKENS=tokens.toml); prints its address and limits
	$(PY) -m turbdb.cli serve $(DB) --host $(HOST) --port $(PORT) $(if $(TOKENS),--tokens $(TOKENS))

test: build test-rust test-python ## set up, then run cargo test and pytest

test-rust:
	cargo test --workspace --exclude turbdb-py --quiet

# Test files run on up to four processes at once (pytest-xdist), each file whole on one
# (its module fixtures, such as the 64^3 DNS run, are made once): on CI's 2 cores the suite
# takes about 3.5 minutes instead of 5.8.
test-python:
	$(PY) -m pytest -q --numprocesses auto --maxprocesses 4 --dist loadfile

fuzz: build ## a longer fuzzing run: schemathesis on the HTTP API (300 examples per operation) and the hypothesis argument checks
	TURBDB_FUZZ_EXAMPLES=300 $(PY) -m pytest -q tests/service/test_schema_fuzz.py tests/test_bad_calls.py --hypothesis-seed=0

# What only the benchmarks need: numba compiles the plain gather that the kernel is measured against.
bench-deps: setup ## the benchmarks' own dependencies (numba) into .venv
	$(PY) -m pip install --quiet "numba>=0.60"

bench-ingest: build ## ingest throughput from an in-memory array (bench/results/ingest.json)
	$(PY) bench/ingest.py

bench-query: build bench-deps ## point-query throughput, streaming vs sorted/direct vs scipy (bench/results/query.json)
	$(PY) bench/query.py

bench-track: build ## particle-tracking throughput, track vs client-side loop, in-process and HTTP (bench/results/track.json)
	$(PY) bench/track.py

bench-service: build ## HTTP latency (1, 100, 1e4 points) and 1e6-point throughput vs in-process (bench/results/service.json)
	$(PY) bench/service.py

bench-workload: build ## many users at once: schedulers × cache policies on one trace (bench/results/workload.json)
	$(PY) bench/workload.py

bench-http-workload: build ## many users over HTTP: turbdb serve without an engine vs --scheduler jaws (bench/results/http_workload.json)
	$(PY) bench/http_workload.py

bench-cluster: build ## Dask cluster: 1 vs 2 workers vs in-process, a half-speed worker, kill -9 replay (bench/results/cluster.json)
	$(PY) bench/cluster.py

bench: bench-ingest bench-query bench-track bench-service bench-workload bench-http-workload bench-cluster ## every benchmark

clean: ## remove build products and the venv (keeps data/)
	rm -rf target dist $(VENV) .pytest_cache .hypothesis
