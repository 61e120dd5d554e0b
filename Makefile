# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test bench bench-peers clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,langchain,langgraph,cluster,embed]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tierstore demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

# pytest-benchmark suites, then `tierstore bench` (peer comparisons; `make bench BENCH_ARGS=--quick`).
# The peers (Chroma, LangChain) need the bench extra: `make bench-peers` installs it first.
bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks -q --benchmark-only --benchmark-columns=min,median,mean,rounds
	$(BIN)/tierstore bench $(BENCH_ARGS)

bench-peers: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/tierstore bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .benchmarks .hypothesis demo-store
