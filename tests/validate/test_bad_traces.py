"""Hand-made bad traces: each problem is found by the right rule, with the right count and verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from atbprof.validate import RULES, validate_trace
from atbprof.validate.report import LOSSY
from tests.validate.cases import CASES, Case, X


@pytest.mark.parametrize("name", sorted(CASES))
def test_case_is_found_by_its_rule(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    report = validate_trace(case.write(tmp_path, name))
    found = {f.rule: f.count for f in report.findings}
    for rule, count in case.findings.items():
        assert found.get(rule) == count, f"{name}: {rule} expected ×{count}, found {found}"
    lossy_found = {f.rule for f in report.findings if f.severity in LOSSY}
    lossy_expected = {r for r in case.findings if RULES[r].severity in LOSSY}
    assert lossy_found == lossy_expected, f"{name}: {found}"
    assert report.loses_data == bool(lossy_expected)


def test_findings_point_at_the_offending_events(tmp_path: Path) -> None:
    events = [X(f"ok{i}", i * 100, 10) for i in range(5)] + [X("outer", 1000, 10), X("overlap", 1005, 10)]
    report = validate_trace(Case(events, {}).write(tmp_path, "t"))
    (finding,) = [f for f in report.findings if f.rule == "overlapping_slices"]
    assert finding.event_indices == (6,)
    assert finding.event_index == 6
    assert "'overlap'" in finding.message and "'outer'" in finding.message
    assert finding.fix_hint == RULES["overlapping_slices"].fix


def test_repeated_violations_are_aggregated(tmp_path: Path) -> None:
    events = [X(f"e{i}", i, -1) for i in range(10_000)]
    report = validate_trace(Case(events, {}).write(tmp_path, "t"))
    (finding,) = report.findings
    assert (finding.rule, finding.count) == ("negative_dur", 10_000)
    assert finding.event_indices == (0, 1, 2, 3, 4)


def test_overlaps_are_judged_after_rounding_to_ns(tmp_path: Path) -> None:
    # in µs the child ends 0.0004 after its parent; in ns both end at 1000 (llround): nested, as Perfetto sees it
    nested = [X("parent", 0, 1.0004), X("child", 0.0004, 1.0004)]
    assert validate_trace(Case(nested, {}).write(tmp_path, "nested")).findings == ()
    # [0, 1000] and [1, 1001] ns: the child ends 1 ns after its parent
    overlap = [X("parent", 0, 1.0004), X("child", 0.0006, 1.0)]
    report = validate_trace(Case(overlap, {}).write(tmp_path, "overlap"))
    assert [f.rule for f in report.findings] == ["overlapping_slices"]
    assert "ends 1 ns after it" in report.findings[0].message


def test_sorter_puts_parents_before_children_at_equal_ts(tmp_path: Path) -> None:
    # the child comes first in the file, but Perfetto sorts equal-ts X by descending dur: nested, not overlapping
    events = [X("child", 0, 5), X("parent", 0, 10)]
    assert validate_trace(Case(events, {}).write(tmp_path, "t")).findings == ()


def test_e_without_name_closes_the_innermost_b(tmp_path: Path) -> None:
    events = [
        {"ph": "B", "name": "a", "cat": "x", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "E", "cat": "y", "ts": 5, "pid": 1, "tid": 1},  # another cat: does not close it
        {"ph": "E", "ts": 6, "pid": 1, "tid": 1},  # no name, no cat: closes it
    ]
    report = validate_trace(Case(events, {}).write(tmp_path, "t"))
    assert {f.rule: f.count for f in report.findings} == {"unmatched_end": 1}
    assert report.summary.slices == 1
