"""The three forms of the report: rich (terminal), Markdown and JSON carry the same content in the same order."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from rich.console import Console

from atbprof.analyze import AnalysisReport, analyze
from atbprof.analyze.attribute import NO_DEVICE_OP
from atbprof.analyze.patterns import KINDS
from atbprof.importers.base import Profile
from atbprof.render.analyze import analysis_json, analysis_markdown, render_analysis, sections

Runs = Callable[..., Profile]


@pytest.fixture(scope="module")
def report(runs: Runs) -> AnalysisReport:
    return analyze(runs("seed000-baseline.yaml", "workload.decode_tokens=4"), top=3)


def rich_text(report: AnalysisReport) -> str:
    console = Console(record=True, width=240, highlight=False, soft_wrap=True, color_system=None)
    render_analysis(report, console)
    return console.export_text()


def test_json_twin_is_the_documented_contract(report: AnalysisReport) -> None:
    doc = orjson.loads(orjson.dumps(analysis_json(report)))
    for key in ("schema_version", "source", "summary", "has_unfused", "findings", "breakdown", "whatif"):
        assert key in doc
    assert "occurrences" not in doc  # the per-occurrence table is for the library, not the JSON
    assert doc["source"]["path"] == report.source.path and doc["source"]["kind"] == "atbprof-run"
    assert doc["findings"]
    for item in doc["findings"]:
        assert item["kind"] in KINDS
        assert isinstance(item["count"], int) and item["count"] > 0
        assert isinstance(item["time_us"], float) and isinstance(item["est_saving_us"], float)
    assert doc["has_unfused"] is True
    assert {"phases", "by_op_type", "by_layer", "by_bound", "idle"} <= set(doc["breakdown"])


def test_rich_report_order_summary_findings_breakdown_next(report: AnalysisReport) -> None:
    text = rich_text(report)
    lines = text.strip().splitlines()
    assert lines[0].startswith(report.summary[:60])
    order = [text.index(s) for s in ("findings", "phases", "op types", "bound", "idle", "what-if", "assumptions")]
    assert order == sorted(order)
    assert lines[-1].startswith("next: ") and "atbprof analyze" in lines[-1]


def test_markdown_twin_has_the_same_sections_and_rows(report: AnalysisReport) -> None:
    md = analysis_markdown(report)
    assert md.splitlines()[2] == f"**{report.summary}**"
    for sec in sections(report)[1:]:
        assert f"## {sec.title}" in md
        for row in sec.rows:
            assert "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" in md
        for line in sec.lines:
            assert line in md
    text = rich_text(report)
    for sec in sections(report):
        for row in sec.rows:
            assert row[0] in text


def test_top_bounds_every_list(report: AnalysisReport) -> None:
    b = report.breakdown
    types = [r for r in b.by_op_type if r.name != NO_DEVICE_OP]  # the step time no kernel owns: a row of its own
    assert len(types) == 4 and types[-1].name.endswith("more)") and b.by_op_type[-1].name == NO_DEVICE_OP
    assert len([r for r in b.by_layer if r.name != NO_DEVICE_OP]) == 4 and len(b.idle.waited_for) <= 4
    assert all(len(f.examples) <= 3 for f in report.findings)
    assert len(report.findings) <= 3


def test_fail_on_unfused_flag(runs: Runs) -> None:
    assert analyze(runs("seed000-baseline.yaml", "workload.decode_tokens=4"), whatif=False).has_unfused
    assert not analyze(runs("tiny-llama.yaml", "fusion=all"), whatif=False).has_unfused
    assert analyze(runs("seed000-lnfused.yaml"), whatif=False).has_unfused  # its RoPE is not fused
