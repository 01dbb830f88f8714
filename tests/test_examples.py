"""The committed example runs under traces/examples/ are what the current code produces."""

import importlib.util

from tests.conftest import ROOT


def test_examples_are_current() -> None:
    spec = importlib.util.spec_from_file_location("make_examples", ROOT / "scripts" / "make_examples.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.stale(ROOT / "traces" / "examples") == [], "run `python scripts/make_examples.py`"
