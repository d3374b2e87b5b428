# Two commands do all set-up on a fresh machine:
#   make demo   - venv, the runtime only (`pip install -e .`), `memarc up --demo` (embedded
#                 PostgreSQL/Redis/index, BIRD cards);
#                 UP_ARGS="--port 8100 --explorer-port 8101" picks other ports
#   make test   - venv, the runtime and the test extra (`pip install -e ".[test]"`), pytest (real
#                 PostgreSQL and Redis: MEMARC_TEST_* URLs or embedded), in TEST_WORKERS
#                 pytest-xdist workers, the 20 slowest tests printed at the end
#   make test-unit - the pure tests (tests/unit): no PostgreSQL, Redis or model, under a minute
#   make docs   - the manual (docs/) built into site/ with mkdocs --strict
# `make install` is the developer's set-up (runtime and test extra, as `make test` needs);
# `make install-runtime` the runtime alone (as `make demo` needs). Each install has its stamp in
# the venv, and the test install stamps the runtime one too, so `make demo` and `make test` in
# either order install each part once (again only after pyproject.toml changes).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHARED_MODELS := $(abspath ../shared/models)

# Offline model copies of the team folder, when present (fastembed downloads otherwise).
ifneq ($(wildcard $(SHARED_MODELS)/all-MiniLM-L6-v2-onnx/model.onnx),)
export MEMARC_DENSE_MODEL_PATH ?= $(SHARED_MODELS)/all-MiniLM-L6-v2-onnx
export MEMARC_BM25_MODEL_PATH ?= $(SHARED_MODELS)/bm25
endif

# Parallel test workers (pytest-xdist): most of a test's time is spent waiting on PostgreSQL,
# Redis, a subprocess or a browser, so more workers than the 2 cores pay (docs/development.md
# has the measurement); TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 4

.PHONY: install install-runtime demo test test-unit docs fuzz bench clean

install: $(VENV)/.installed-test

install-runtime: $(VENV)/.installed-runtime

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

# the test extra includes the runtime and the docs extra: its install brings their stamps up to
# date too
$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@ $(VENV)/.installed-runtime $(VENV)/.installed-docs

demo: install-runtime
	$(BIN)/memarc up --demo $(UP_ARGS)

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --durations=20 $(PYTEST_ARGS)

# The pure tests: no service is started or needed (the MEMARC_TEST_* URLs are unset for them).
test-unit: install
	env -u MEMARC_TEST_DATABASE_URL -u MEMARC_TEST_REDIS_URL $(BIN)/python -m pytest tests/unit \
	  --durations=10 $(PYTEST_ARGS)

# The manual (docs/) as a site in site/, warnings as errors (a broken link or anchor fails).
docs: $(VENV)/.installed-docs
	$(BIN)/mkdocs build --strict --site-dir site

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[docs]"
	touch $@

# The long Schemathesis run over every operation (MEMARC_FUZZ_EXAMPLES per operation and mode).
fuzz: install
	$(BIN)/python -m pytest -m fuzz_long -s tests/test_fuzz.py $(PYTEST_ARGS)

bench: install-runtime
	$(BIN)/python bench/recall_quality.py

clean:
	rm -rf $(VENV) .memarc .pytest_cache site
