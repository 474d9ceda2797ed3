# Two commands do all the set-up on a fresh machine with only python3 and pip:
#   make report   runs the main job (specsim report)
#   make test     runs lint, type checks and the whole test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION ?= 2.13.0

.PHONY: report test bench clean browser llama-cpp-optional

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch is pinned to the CPU build on this platform's disk; an unpinned torch pulls CUDA.
	$(BIN)/python -m pip install --quiet 'torch==$(TORCH_VERSION)'
	$(BIN)/python -m pip install --quiet -e '.[test,measure,sweep]'
	touch $(STAMP)

report: $(STAMP)
	$(BIN)/specsim report

test: $(STAMP) browser llama-cpp-optional
	$(BIN)/ruff check specsim tests benchmarks studies
	$(BIN)/ruff format --check specsim tests benchmarks studies conftest.py
	$(BIN)/mypy
	$(BIN)/python tests/mutations.py
	$(BIN)/python -m pytest

# The report's browser test needs Debian's headless Chromium. Installed here when
# running as root with apt (CI); elsewhere the test is skipped with a message.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
	      >/dev/null 2>&1 || echo "could not install chromium: the browser test will be skipped"; \
	  else echo "chromium not found: the browser test will be skipped"; fi; }

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# One-line cost bugs, each applied to a copy of the package; every one must fail a test
# (tests/mutations.py; results in docs/testing.md).
.PHONY: mutations
mutations: $(STAMP)
	$(BIN)/python tests/mutations.py

# llama.cpp's llama-bench and llama-speculative-simple, built from the pinned PyPI sdist of
# llama-cpp-python under .venv/llama.cpp (needs cmake and a C/C++ compiler; docs/llama-cpp.md).
.PHONY: llama-cpp
llama-cpp: $(STAMP)
	$(BIN)/python -m specsim.measure.llamacpp_build --root $(VENV)/llama.cpp --jobs 2

# make test builds them too where it can (about 4 minutes on 2 cores, cached in .venv), so
# that the end-to-end test runs the real engine; a machine without cmake or a compiler, or
# without the registry, skips that test (with its reason) instead of failing the run.
.PHONY: llama-cpp-optional
llama-cpp-optional: $(STAMP)
	@$(MAKE) --no-print-directory llama-cpp \
	  || echo "llama.cpp not built: its end-to-end tests will be skipped"

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
