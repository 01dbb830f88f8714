"""The rich view and its --format json twin."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from atbprof.validate import render_validation, validate_trace, validation_json
from tests.validate.cases import Case, X

BAD = [X("outer", 0, 10), X("overlap", 5, 10), X("neg", 40, -1), X("tid0", 60, 1, pid=3, tid=0)]


def _text(path: Path) -> str:
    console = Console(record=True, width=200, color_system=None)
    render_validation(validate_trace(path), console)
    return console.export_text()


def test_rich_view_shows_verdict_rules_events_and_fixes(tmp_path: Path) -> None:
    text = _text(Case(BAD, {}).write(tmp_path, "bad"))
    assert "Perfetto would lose or mangle data" in text
    for rule in ("overlapping_slices", "negative_dur", "tid_zero"):
        assert rule in text
    assert "#1" in text and "#2" in text
    assert "how to fix" in text and "nest or be disjoint" in text


def test_rich_view_of_a_clean_trace(tmp_path: Path) -> None:
    text = _text(Case([X("a", 0, 10), X("b", 1, 2)], {}).write(tmp_path, "ok"))
    assert "imports cleanly in Perfetto" in text
    assert "no findings" in text


def test_json_twin(tmp_path: Path) -> None:
    report = validate_trace(Case(BAD, {}).write(tmp_path, "bad"))
    doc = json.loads(json.dumps(validation_json(report)))
    assert doc["loses_data"] is True
    assert doc["counts"] == {"error": 0, "data_loss": 2, "warning": 1, "info": 0}
    assert doc["summary"]["events"] == 4 and doc["summary"]["events_by_ph"] == {"X": 4}
    by_rule = {f["rule"]: f for f in doc["findings"]}
    assert by_rule["overlapping_slices"]["event_index"] == 1
    assert by_rule["overlapping_slices"]["event_indices"] == [1]
    assert set(by_rule["negative_dur"]) == {
        "severity", "rule", "count", "event_index", "event_indices", "message", "fix_hint"
    }  # fmt: skip
    assert doc["findings"][0]["severity"] == "data_loss"  # most severe first
