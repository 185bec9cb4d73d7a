# Two entry points on a fresh clone: `make demo` (train the grokking example) and `make test`
# (the import contracts and ruff, then the test suite); `make test-fast` skips the tests marked slow.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo lint test test-fast coverage profile-tests bench clean

# SETUP_EXTRAS: the test tools and every extra a doc's tested session uses (docs/experiments.md exports runs), so a
# user who ran `make demo` follows each doc as it stands (tests/test_setup_extras.py checks this).
SETUP_EXTRAS := test,export

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[$(SETUP_EXTRAS)]'
	touch $(STAMP)

setup: $(STAMP)

# Validation every 50 steps draws the grokking delay on the curves; the analyses keep their 500-step cadence.
demo: setup
	$(BIN)/lenscope run grokking/train logging/validation_interval=50 logging/analysis_interval=500

# Two workers, one a core; a file's tests stay together (they share its module fixtures); the 20 slowest listed.
PYTEST := $(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=20

lint: setup
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIN)/ruff check .

test: lint
	$(PYTEST)

test-fast: lint
	$(PYTEST) -m "not slow"

# The suite under coverage (slower: not the check before a commit); prints the line rate over src/.
coverage: setup
	$(BIN)/python -m pip install -q 'coverage>=7.10' 'pytest-cov>=6'
	rm -f .coverage .coverage.*
	$(PYTEST) --cov --cov-report=
	$(BIN)/python -m coverage combine -q || true
	$(BIN)/python -m coverage report --format=total

# The suite under tests/suite_profile.py: each test's CPU and subprocess starts, JAX's compile time by function.
profile-tests: setup
	rm -rf suite-profile
	PYTHONPATH=tests LENSCOPE_SUITE_PROFILE=$(CURDIR)/suite-profile $(PYTEST) -p suite_profile
	$(BIN)/python tests/suite_profile.py suite-profile

bench: setup
	for f in bench/*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

clean:
	rm -rf runs results .pytest_cache suite-profile
