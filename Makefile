# Two commands do all the set-up on a fresh machine with only python3 and pip:
#   make report   runs the main job (specsim report)
#   make test     runs lint, type checks and the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0

.PHONY: report test bench clean docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU build on this platform's disk; an unpinned torch pulls CUDA.
	$(BIN)/python -m pip install --quiet 'torch==$(TORCH_VERSION)'
	$(BIN)/python -m pip install --quiet -e '.[test,measure,sweep]'
	touch $(STAMP)

report: $(STAMP)
	$(BIN)/specsim report

test: $(STAMP)
	$(BIN)/ruff check specsim tests benchmarks studies
	$(BIN)/mypy
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
