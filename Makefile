# Two entry points for a fresh machine with Python 3.11+:  `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SIZE   ?= 100k
CORPUS ?= generated

.PHONY: setup demo test lint stress bench bench-ci bench-mcp clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m memstore.demo

test: $(STAMP)
	$(PY) -m ruff check memstore tests benchmarks
	$(PY) -m mypy
	$(PY) -m pytest -q

stress: $(STAMP)
	MEMSTORE_STRESS=full $(PY) -m pytest -q -m stress

bench: $(STAMP)
	$(PY) -m benchmarks.run --size $(SIZE) --corpus $(CORPUS)

bench-ci: $(STAMP)
	$(PY) -m benchmarks.run --size 20k --gate

bench-mcp: $(STAMP)
	$(PY) -m benchmarks.mcp --size $(SIZE) --json benchmarks/results/mcp-$(SIZE).json

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
