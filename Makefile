# Two commands do all set-up on a fresh machine:
#   make demo   - venv, install, `memarc up --demo` (embedded PostgreSQL/Redis/index, BIRD cards);
#                 UP_ARGS="--port 8100 --explorer-port 8101" picks other ports
#   make test   - venv, install, pytest (real PostgreSQL and Redis: MEMARC_TEST_* URLs or embedded)
#   make docs   - the manual (docs/) built into site/ with mkdocs --strict
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SHARED_MODELS := $(abspath ../shared/models)

# Offline model copies of the team folder, when present (fastembed downloads otherwise).
ifneq ($(wildcard $(SHARED_MODELS)/all-MiniLM-L6-v2-onnx/model.onnx),)
export MEMARC_DENSE_MODEL_PATH ?= $(SHARED_MODELS)/all-MiniLM-L6-v2-onnx
export MEMARC_BM25_MODEL_PATH ?= $(SHARED_MODELS)/bm25
endif

.PHONY: install demo test docs fuzz bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

demo: install
	$(BIN)/memarc up --demo $(UP_ARGS)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The manual (docs/) as a site in site/, warnings as errors (a broken link or anchor fails).
docs: $(VENV)/.docs-installed
	$(BIN)/mkdocs build --strict --site-dir site

$(VENV)/.docs-installed: pyproject.toml
	test -x $(BIN)/pip || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -e ".[docs]"
	touch $@

# The long Schemathesis run over every operation (MEMARC_FUZZ_EXAMPLES per operation and mode).
fuzz: install
	$(BIN)/python -m pytest -m fuzz_long -s tests/test_fuzz.py $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/recall_quality.py

clean:
	rm -rf $(VENV) .memarc .pytest_cache site
