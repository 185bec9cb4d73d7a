# Two entry points on a fresh clone: `make demo` (train the grokking example) and `make test`
# (the import contracts and ruff, then the test suite).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# Validation every 50 steps draws the grokking delay on the curves; the analyses keep their 500-step cadence.
demo: setup
	$(BIN)/lenscope run grokking/train logging/validation_interval=50 logging/analysis_interval=500

test: setup
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=20  # two workers: one a core; a file's tests stay together; the slowest listed

bench: setup
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf runs results .pytest_cache
