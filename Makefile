# One command sets up and runs the demo, one sets up and runs the tests. Both build the virtual
# environment from nothing, from the lock files (exact versions of every package, transitive ones
# included), with uv (the version the lock pins): torch first, at the lock's version, from the
# first source that is there (see TORCH_FROM), then requirements-dev.lock, then the project itself.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The lock's own uv installs it (its version pinned there): parallel, from its cache, about a
# third of pip's time for the same packages. --compile-bytecode: uv, unlike pip, writes no .pyc
# by default, and where PYTHONDONTWRITEBYTECODE is set (CI images, containers) Python never
# writes one either, so every process compiled torch, transformers and Beam from source: 13 of
# a one-file run's 27 s (bench/RESULTS.md, "A run's fixed cost"). Compiled once here instead.
UV     := $(PY) -m uv pip install --quiet --compile-bytecode --python $(PY)
# torch is pinned by version only (torch==2.13.0): PEP 440 lets any local build satisfy it (+cpu,
# +cu130, none), and which build a machine gets is a choice of source, made here in this order:
# - TORCH_WHEELS, a folder holding a torch wheel of that version (a machine's own cache): that
#   wheel, nothing else;
# - TORCH_INDEX, an index the user names, e.g. PyTorch's CPU builds, which skip ~2.5 GB of CUDA
#   libraries: make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu
# - else PyPI's build (CUDA-enabled on Linux; it runs on CPUs too).
# From a folder or an index torch comes alone (--no-deps): a CPU build needs nothing the lock
# lacks. PyPI's build brings its CUDA libraries, every package shared with the lock held to it.
TORCH        := $(shell grep -m1 '^torch==' requirements-dev.lock)
TORCH_WHEELS ?= /opt/wheels
TORCH_INDEX  ?=
TORCH_WHEEL  := $(firstword $(wildcard $(TORCH_WHEELS)/torch-$(patsubst torch==%,%,$(TORCH))-*.whl \
                                       $(TORCH_WHEELS)/torch-$(patsubst torch==%,%,$(TORCH))+*.whl))
TORCH_FROM   := $(if $(TORCH_WHEEL),--no-deps --no-index --find-links $(TORCH_WHEELS),\
                $(if $(TORCH_INDEX),--no-deps --index-url $(TORCH_INDEX),-c requirements-dev.lock))
# What `make lock` resolves for: CI's and the worker image's Python and platform, and torch's CPU
# build (its dependencies are what every build needs; the CUDA libraries are a build's own, never
# pinned). .ci/torch.txt holds torch at its version: a newer torch is a deliberate change there.
# The CPU build comes from TORCH_WHEELS when it holds one, else from PyTorch's CPU index; the
# local label (+cpu) is dropped from the pin, so any build of that version satisfies the lock.
LOCK_TORCH_INDEX ?= $(or $(TORCH_INDEX),https://download.pytorch.org/whl/cpu)
LOCK_FOR := --python-version 3.11 --python-platform x86_64-manylinux_2_28 -c .ci/torch.txt \
            $(if $(TORCH_WHEEL),--find-links $(TORCH_WHEELS),\
                 --extra-index-url $(LOCK_TORCH_INDEX) --index-strategy unsafe-best-match)
# pytest-xdist: one worker per core, each test module on one worker (its module-scoped fixtures,
# a pipeline run or a server, are built once); `make test WORKERS=0` runs in this process.
WORKERS ?= auto
PYTEST  := $(PY) -m pytest -q -n $(WORKERS) --dist loadfile
# The fast tests the dependency-range checks run (no model-heavy end-to-end suites).
RANGE_TESTS ?= -n $(WORKERS) --dist loadfile \
    tests/pipeline/test_graph_configurations.py tests/pipeline/test_pipeline_e2e.py tests/transforms

# Prism, Beam's portable runner in Go (runner.name PrismRunner), at the lock's Beam version, built
# from source into the venv's bin (where chunkline finds it; Beam would otherwise download it at
# run time): ~90 s the first time, seconds from Go's caches after. Without Go, or when the build
# fails (no module proxy), one line and setup goes on: every other runner works without it.
BEAM_VERSION := $(patsubst apache-beam==%,%,$(shell grep -m1 '^apache-beam==' requirements-dev.lock))
PRISM_PKG    := github.com/apache/beam/sdks/v2/go/cmd/prism@v$(BEAM_VERSION)
define BUILD_PRISM
@if ! command -v go >/dev/null 2>&1; then \
    echo "make setup: go not found, Prism not built (PrismRunner needs it; install Go and rerun, see docs/runners.md)"; \
elif GOBIN=$(abspath $(VENV))/bin go install $(PRISM_PKG); then \
    echo "make setup: Prism v$(BEAM_VERSION) in $(VENV)/bin/prism"; \
else \
    echo "make setup: go install $(PRISM_PKG) failed, Prism not built (see above)"; \
fi
endef

.PHONY: setup demo split-demo docs lint test test-fast test-lowest test-newest test-range lock bench clean chromium libreoffice

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock requirements-dev.lock
	.ci/install-ocr-libs
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $$(grep '^uv==' requirements-dev.lock)
	$(UV) $(TORCH_FROM) '$(TORCH)'
	$(UV) -r requirements-dev.lock
	$(UV) --no-deps -e .
	$(PY) -m pip check
	$(BUILD_PRISM)
	touch $(STAMP)

# Refresh the locks to the newest versions pyproject.toml allows; commit both, and CI tests them.
lock: $(STAMP)
	$(PY) -m uv pip compile pyproject.toml --extra all --upgrade --quiet $(LOCK_FOR) -o requirements.lock
	$(PY) -m uv pip compile pyproject.toml --extra dev --upgrade --quiet $(LOCK_FOR) \
	    -c requirements.lock -o requirements-dev.lock
	sed -i -E 's/^(torch==[^+ ]+)\+[A-Za-z0-9.]+$$/\1/' requirements.lock requirements-dev.lock
	! grep -n '^nvidia-\|^triton==' requirements.lock requirements-dev.lock

demo: $(STAMP)
	$(VENV)/bin/chunkline run --config configs/local.yaml
	$(VENV)/bin/chunkline query out "how long should the arm warm up before calibration?" -k 3

split-demo: $(STAMP)
	$(VENV)/bin/chunkline split examples/guide.md --max-tokens 64 --overlap 8 --view

# The run report's browser test needs Debian's chromium and chromedriver (apt, when missing).
chromium:
	.ci/install-chromium

# The OpenDocument tests convert files with headless LibreOffice (apt, when missing).
libreoffice:
	.ci/install-libreoffice

# The 30 slowest tests are listed at the end: where CI's minutes go.
test: $(STAMP) chromium libreoffice
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
