# One command sets up and runs the demo, one sets up and runs the tests. Both build the virtual
# environment from nothing: torch==2.13.0 first (a CPU wheel on local disk here; a bare `torch`
# requirement would pull a multi-GB CUDA build), then the project with its dev extras.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo split-demo test bench clean chromium

setup: $(STAMP)

$(STAMP): pyproject.toml
	.ci/install-ocr-libs
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/chunkline run --config configs/local.yaml
	$(VENV)/bin/chunkline query out "how long should the arm warm up before calibration?" -k 3

split-demo: $(STAMP)
	$(VENV)/bin/chunkline split examples/guide.md --max-tokens 64 --overlap 8 --view

# The run report's browser test needs Debian's chromium and chromedriver (apt, when missing).
chromium:
	.ci/install-chromium

test: $(STAMP) chromium
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/split_bench.py --out bench/results_split.md
	$(PY) bench/pipeline_bench.py --out bench/results_pipeline.md
	$(PY) bench/dedupe_bench.py | tee bench/results_dedupe.md
	$(PY) bench/reindex_bench.py --out bench/results_reindex.md
	$(PY) bench/retrieval_eval.py --max-tokens 222 128 | tee bench/results_retrieval.md

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
