"""docs/performance.md's summary is what benchmarks/*.json give (scripts/bench_summary.py), and every result file
the summary reads is there: the page holds no hand-copied figure."""

import importlib.util
from types import ModuleType

from tests.conftest import ROOT


def _summary(script: str = "bench_summary") -> ModuleType:
    spec = importlib.util.spec_from_file_location(script, ROOT / "scripts" / f"{script}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_performance_summary_is_generated_from_the_results() -> None:
    mod = _summary()
    page = mod.PAGE.read_text()
    assert mod.updated(page) == page, "run `python scripts/bench_summary.py` (or `make bench`)"
    for name in ("scale", "cluster", "diff", "sweep", "serving"):
        assert (mod.RESULTS / f"{name}.json").is_file(), f"benchmarks/{name}.json: run `make bench`"
    assert len(mod.rows()) >= 9


def test_the_serving_page_comparison_is_generated_from_its_results() -> None:
    """docs/serving.md's table against the published benchmark is what benchmarks/serving_published.json gives."""
    import json

    mod = _summary("compare_serving")
    page = mod.PAGE.read_text()
    doc = json.loads(mod.RESULTS.read_text())
    assert mod.updated(page, doc) == page, "run `python scripts/compare_serving.py`"
    assert [c["name"] for c in doc["cases"]] == [c["name"] for c in _published()["cases"]]


def _published() -> dict:
    from atbprof.yamlio import load_data

    return load_data((ROOT / "benchmarks" / "serving_published.yaml").read_text())  # type: ignore[no-any-return]


def test_the_msmodeling_comparison_is_generated_from_its_results() -> None:
    """docs/serving.md's table beside msModeling is what benchmarks/msmodeling_serving.json gives, for every case
    the script runs, both execution modes."""
    import json

    mod = _summary("compare_msmodeling")
    page = mod.PAGE.read_text()
    doc = json.loads(mod.RESULTS.read_text())
    assert mod.updated(page, doc) == page, "run `python scripts/compare_msmodeling.py`"
    assert [c["name"] for c in doc["cases"]] == [c["name"] for c in mod.CASES]
    assert all([v["mode"] for v in c["ours"]] == mod.MODES for c in doc["cases"])
