"""The seed-000 figure (README, docs/sweeps.md) and its table (docs/sweeps.md) are what the current code draws from
fixtures/sweeps/seed000.yaml."""

import importlib.util

from tests.conftest import ROOT


def test_the_readme_figure_is_current() -> None:
    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "scripts" / "make_figures.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.stale() == [], "run `python scripts/make_figures.py`"
