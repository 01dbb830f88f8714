"""docs/performance.md's summary is what benchmarks/*.json give (scripts/bench_summary.py), and every result file
the summary reads is there: the page holds no hand-copied figure."""

import importlib.util
from types import ModuleType

from tests.conftest import ROOT


def _summary() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_summary", ROOT / "scripts" / "bench_summary.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_performance_summary_is_generated_from_the_results() -> None:
    mod = _summary()
    page = mod.PAGE.read_text()
    assert mod.updated(page) == page, "run `python scripts/bench_summary.py` (or `make bench`)"
    for name in ("scale", "cluster", "diff", "sweep"):
        assert (mod.RESULTS / f"{name}.json").is_file(), f"benchmarks/{name}.json: run `make bench`"
    assert len(mod.rows()) >= 9
