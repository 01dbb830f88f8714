# atbprof developer commands. `make test` is the README's test command (fresh venv in .venv).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: venv test lint format bench calibrate examples docs clean

# The stamp, not .venv/bin/atbprof, says the editable install with the test extras is there: the README's main job
# (`pip install .` into .venv) makes .venv/bin/atbprof too, and `make test` must work after it, and before it.
# The C sources too: the editable install compiles atbprof/importers/native_src into the source tree.
STAMP := $(VENV)/.atbprof-dev-install
# What the suite needs: its runner, the docs builder (a test builds the site), the trace tools, torch (Hugging Face
# reference tests), Ray (a real local head) and msprof-analyze (exports are checked by Ascend's own tool); and the
# linters, for `make lint` in the same venv.
EXTRAS := test,lint,docs,tp,torch,ray,ascend-tools
$(STAMP): pyproject.toml setup.py $(wildcard atbprof/importers/native_src/*)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[$(EXTRAS)]'
	touch $@

# a later `pip install .` replaces the editable install: reinstall it (python -I: the source tree is not on the path)
EDITABLE := $(BIN)/python -I -c "import atbprof, pathlib, sys; \
	sys.exit(pathlib.Path(atbprof.__file__).resolve().parent != pathlib.Path('atbprof').resolve())"

venv: $(STAMP)
	@$(EDITABLE) 2>/dev/null || { rm -f $(STAMP); $(MAKE) --no-print-directory $(STAMP); }

test: venv
	$(BIN)/pytest -q

lint: venv
	$(BIN)/ruff check atbprof tests scripts
	$(BIN)/ruff format --check atbprof tests scripts
	$(BIN)/mypy

format: venv
	$(BIN)/ruff format atbprof tests scripts
	$(BIN)/ruff check --fix atbprof tests scripts

# The benches whose results feed docs/performance.md's summary write them to benchmarks/; the summary is then
# generated from those files (scripts/bench_summary.py), so the page never holds a hand-copied figure.
bench: venv
	$(BIN)/python scripts/bench_run.py
	$(BIN)/python scripts/bench_fidelity.py
	$(BIN)/python scripts/prefill_grid.py
	$(BIN)/python scripts/bench_sweep.py --json benchmarks/sweep.json
	$(BIN)/python scripts/bench_scale.py --json benchmarks/scale.json
	$(BIN)/python scripts/bench_cluster.py --ranks 4,32,128,1024 --json benchmarks/cluster.json
	$(BIN)/python scripts/bench_analyze.py --only kineto --repeat 7 --json benchmarks/kineto.json
	$(BIN)/python scripts/bench_diff.py --json benchmarks/diff.json
	$(BIN)/python scripts/bench_serving.py --json benchmarks/serving.json
	$(BIN)/python scripts/bench_summary.py

calibrate: venv
	$(BIN)/python scripts/calibrate.py --sweep

docs: venv
	$(BIN)/mkdocs build --strict

examples: venv
	$(BIN)/python scripts/make_examples.py
	$(BIN)/python scripts/make_figures.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
