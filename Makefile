# One command sets up and runs the demo, one sets up and runs the tests. Both build the virtual
# environment from nothing, from the lock files (exact versions of every package, transitive ones
# included), with uv (the version the lock pins): torch==2.13.0 first (a CPU wheel on local disk here; a bare `torch` requirement
# would pull a multi-GB CUDA build), then requirements-dev.lock, then the project itself.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The lock's own uv installs it (its version pinned there): parallel, from its cache, about a
# third of pip's time for the same packages.
UV     := $(PY) -m uv pip install --quiet --python $(PY)
# What `make lock` resolves for: CI's and the worker image's Python and platform, torch's CPU build.
TORCH_WHEELS ?= /opt/wheels
LOCK_FOR := --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
            --find-links $(TORCH_WHEELS) -c .ci/torch-cpu.txt
# pytest-xdist: one worker per core, each test module on one worker (its module-scoped fixtures,
# a pipeline run or a server, are built once); `make test WORKERS=0` runs in this process.
WORKERS ?= auto
PYTEST  := $(PY) -m pytest -q -n $(WORKERS) --dist loadfile
# The fast tests the dependency-range checks run (no model-heavy end-to-end suites).
RANGE_TESTS ?= -n $(WORKERS) --dist loadfile \
    tests/pipeline/test_graph_configurations.py tests/pipeline/test_pipeline_e2e.py tests/transforms

.PHONY: setup demo split-demo docs lint test test-fast test-lowest test-newest test-range lock bench clean chromium

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock requirements-dev.lock
	.ci/install-ocr-libs
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $$(grep '^uv==' requirements-dev.lock)
	$(UV) --find-links $(TORCH_WHEELS) torch==2.13.0
	$(UV) --find-links $(TORCH_WHEELS) -r requirements-dev.lock
	$(UV) --no-deps -e .
	$(PY) -m pip check
	touch $(STAMP)

# Refresh the locks to the newest versions pyproject.toml allows; commit both, and CI tests them.
lock: $(STAMP)
	$(PY) -m uv pip compile pyproject.toml --extra all --upgrade --quiet $(LOCK_FOR) -o requirements.lock
	$(PY) -m uv pip compile pyproject.toml --extra dev --upgrade --quiet $(LOCK_FOR) \
	    -c requirements.lock -o requirements-dev.lock

demo: $(STAMP)
	$(VENV)/bin/chunkline run --config configs/local.yaml
	$(VENV)/bin/chunkline query out "how long should the arm warm up before calibration?" -k 3

split-demo: $(STAMP)
	$(VENV)/bin/chunkline split examples/guide.md --max-tokens 64 --overlap 8 --view

# The run report's browser test needs Debian's chromium and chromedriver (apt, when missing).
chromium:
	.ci/install-chromium

# The 30 slowest tests are listed at the end: where CI's minutes go.
test: $(STAMP) chromium
	$(PYTEST) --durations=30

# The fast tier, the loop while changing the library: every test not marked slow (none runs a
# Beam pipeline, builds a job graph, reads by OCR or feeds a megabyte-sized input); make test
# runs both tiers.
test-fast: $(STAMP)
	$(PYTEST) -m "not slow"

# The docs site (mkdocs.yml, docs/) into build/site; warnings are errors (tests/test_docs.py too).
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

# Static checks, before any test runs: ruff (pyproject.toml's [tool.ruff]), then mypy on the whole
# chunkline namespace, chunkline.pipeline and chunkline.transforms included ([tool.mypy];
# .ci/typecheck.py): ~18 s from a clean clone on an idle machine (mypy has no cache there; ~23 s
# of CPU on 2 busy cores), about a second once .cache/mypy holds one.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) .ci/typecheck.py

# The fast tests at the ends of the declared ranges, laid over the lock in a throwaway folder:
# each edge dependency's lower bound, and every package's newest release the ranges allow.
test-lowest: $(STAMP)
	$(PY) .ci/dependency_range.py lowest -- $(RANGE_TESTS)

test-newest: $(STAMP)
	$(PY) .ci/dependency_range.py newest -- $(RANGE_TESTS)

# CI: each check only when its stamp no longer holds: the lowest when the ranges or the lock
# changed since .ci/lowest-tested, the newest also when a release newer than .ci/newest-tested's
# appeared (found by a resolution, seconds). A passing check rewrites its stamp: commit it.
test-range: $(STAMP)
	$(PY) .ci/dependency_range.py lowest --if-changed -- $(RANGE_TESTS)
	$(PY) .ci/dependency_range.py newest --if-changed -- $(RANGE_TESTS)

bench: $(STAMP)
	$(PY) bench/split_bench.py --out bench/results_split.md
	$(PY) bench/pipeline_bench.py --out bench/results_pipeline.md
	$(PY) bench/dedupe_bench.py | tee bench/results_dedupe.md
	$(PY) bench/reindex_bench.py --out bench/results_reindex.md
	$(PY) bench/retrieval_eval.py --max-tokens 222 128 | tee bench/results_retrieval.md

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .cache
