# atbprof developer commands. `make test` is the README's test command (fresh venv in .venv).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test lint format bench calibrate examples clean

# the C sources too: the editable install compiles atbprof/importers/native_src into the source tree
$(BIN)/atbprof: pyproject.toml $(wildcard atbprof/importers/native_src/*)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,torch]'
	touch $@

venv: $(BIN)/atbprof

test: venv
	$(BIN)/pytest -q

lint: venv
	$(BIN)/ruff check atbprof tests scripts
	$(BIN)/ruff format --check atbprof tests scripts
	$(BIN)/mypy

format: venv
	$(BIN)/ruff format atbprof tests scripts
	$(BIN)/ruff check --fix atbprof tests scripts

bench: venv
	$(BIN)/python scripts/bench_run.py

calibrate: venv
	$(BIN)/python scripts/calibrate.py --sweep

examples: venv
	$(BIN)/python scripts/make_examples.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
