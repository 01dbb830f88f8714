"""The validator on real traces: the anchors under shared/anchors (pinned findings) and our own traces (clean).

Overlap counts: shared/anchors/traces/README.md lists 6,451 partially overlapping X events for HTA's control trace
(4,038 test, 766 ns_resolution, 49 resnet50, 49 alexnet, 42 ascend). The real trace_processor v52 reports
slice_drop_overlapping_complete_event = 26 / 44 / 774 / 0 / 8 / 38 for the same files (test_tp_crosscheck.py
checks every count here against it), and so does this validator. The README's re-implementation did not sort
events the way trace_processor does (equal ts: E first, then X by descending duration, then file order), so
parents that the file lists after their children at the same µs looked like overlaps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from atbprof.validate import validate_trace
from atbprof.validate.report import LOSSY
from tests.conftest import ROOT

SHARED = ROOT.parent / "shared" / "anchors"
OUR_EXAMPLES = sorted((ROOT / "traces" / "examples").glob("*/trace.json.gz"))


@dataclass(frozen=True)
class Pinned:
    events: int
    slices: int
    flows: int
    counters: int
    findings: dict[str, int]


PINNED: dict[str, Pinned] = {
    "traces/hta_amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz": Pinned(
        220, 115, 20, 0,
        {"flow_end_without_start": 5, "tid_zero": 36, "string_pid_tid": 4, "metadata_ignored": 17,
         "display_time_unit_ignored": 1},
    ),
    "traces/hta_critical_path_alexnet.json.gz": Pinned(
        1408, 862, 117, 0,
        {"flow_end_without_start": 228, "tid_out_of_range": 12, "overlapping_slices": 8, "string_pid_tid": 4,
         "metadata_ignored": 9},
    ),
    "traces/hta_mtia_inference_rank_0.json.gz": Pinned(
        16158, 14167, 1166, 0,
        {"overlapping_slices": 14, "pid_out_of_range": 2, "string_pid_tid": 4, "metadata_ignored": 3,
         "display_time_unit_ignored": 1},
    ),
    "traces/hta_ns_resolution_rank0.pt.trace.json.gz": Pinned(
        68692, 44648, 7000, 0,
        {"flow_end_without_start": 8928, "overlapping_slices": 774, "tid_out_of_range": 116, "ts_precision": 51459,
         "string_pid_tid": 4, "metadata_ignored": 9, "display_time_unit_ignored": 1},
    ),
    "traces/hta_trace_diff_control.json.gz": Pinned(
        109123, 74913, 9450, 0,
        {"flow_end_without_start": 15242, "tid_out_of_range": 620, "overlapping_slices": 26, "string_pid_tid": 4,
         "metadata_ignored": 9},
    ),
    "traces/hta_trace_diff_test.json.gz": Pinned(
        105167, 68282, 15018, 0,
        {"flow_end_without_start": 11797, "tid_out_of_range": 586, "overlapping_slices": 44, "string_pid_tid": 4,
         "metadata_ignored": 9},
    ),
    "traces/hta_triton_example.json.gz": Pinned(
        71, 10, 1, 0, {"string_pid_tid": 4, "metadata_ignored": 17, "display_time_unit_ignored": 1}
    ),
    "traces/kineto_tbplugin_resnet50_worker0.pt.trace.json.gz": Pinned(
        75718, 57506, 9096, 0, {"string_pid_tid": 53766, "flow_bound_to_ended_slice": 9096, "metadata_ignored": 9}
    ),
    "traces/mstt_ascend_npu_trace_view.json": Pinned(
        3670, 2174, 493, 0,
        {"pid_out_of_range": 554, "flow_end_without_start": 220, "overlapping_slices": 38, "ts_precision": 2766,
         "flow_bound_to_ended_slice": 102, "string_timestamps": 3638, "metadata_ignored": 4},
    ),
    "ascend_samples/msinsight_imagenet_cnn_level0_rank0/ASCEND_PROFILER_OUTPUT/trace_view.json": Pinned(
        8375, 3195, 396, 5952,
        {"flow_end_without_start": 215, "flow_no_enclosing_slice": 210, "overlapping_slices": 184,
         "ts_precision": 5720, "tid_zero": 202, "string_timestamps": 8312, "metadata_ignored": 12},
    ),
}  # fmt: skip
PINNED["ascend_samples/mstt_advisor_ut/trace_view.json"] = PINNED["traces/mstt_ascend_npu_trace_view.json"]
ANCHORS = [SHARED / name for name in sorted(PINNED)]

needs_anchors = pytest.mark.skipif(not SHARED.is_dir(), reason="shared/anchors is not next to the repository")


@needs_anchors
@pytest.mark.parametrize("name", sorted(PINNED))
def test_anchor_findings_are_pinned(name: str) -> None:
    report = validate_trace(SHARED / name)
    pinned = PINNED[name]
    s = report.summary
    assert (s.events, s.slices, s.flows, s.counters) == (pinned.events, pinned.slices, pinned.flows, pinned.counters)
    assert {f.rule: f.count for f in report.findings} == pinned.findings
    assert report.loses_data == any(f.severity in LOSSY for f in report.findings)


@needs_anchors
def test_hta_control_overlaps_agree_with_trace_processor_not_the_readme() -> None:
    report = validate_trace(SHARED / "traces/hta_trace_diff_control.json.gz")
    overlap = report.by_rule()["overlapping_slices"]
    assert overlap.count == 26  # trace_processor v52: slice_drop_overlapping_complete_event = 26 (README: 6,451)
    assert "of 74,937 X" in overlap.message


@needs_anchors
def test_ascend_overlap_analysis_pid_beyond_uint32_is_reported() -> None:
    report = validate_trace(SHARED / "traces/mstt_ascend_npu_trace_view.json")
    finding = report.by_rule()["pid_out_of_range"]
    assert (finding.severity, finding.count) == ("data_loss", 554)
    assert "pid 4,376,751,100 → 0" in finding.message
    assert report.loses_data


@needs_anchors
def test_old_kineto_string_tids_split_threads() -> None:
    report = validate_trace(SHARED / "traces/kineto_tbplugin_resnet50_worker0.pt.trace.json.gz")
    rules = report.by_rule()
    assert "tid '25738' (a string) and tid 25738 (a number) become two different threads" in rules[
        "string_pid_tid"].message  # fmt: skip
    # the flow starts sit on the numeric thread, the launches on the string one: every arrow binds elsewhere
    assert rules["flow_bound_to_ended_slice"].count == report.summary.flows == 9096


@pytest.mark.parametrize("path", OUR_EXAMPLES, ids=lambda p: p.parent.name)
def test_our_examples_validate_clean(path: Path) -> None:
    report = validate_trace(path)
    assert not report.loses_data
    assert {f.severity for f in report.findings} <= {"info"}, report.findings


def test_a_fresh_run_validates_clean(tiny_run_dir: Path) -> None:
    report = validate_trace(tiny_run_dir)  # a run directory resolves to its trace
    assert report.path.endswith("trace.json.gz")
    assert not report.loses_data
    assert {f.severity for f in report.findings} <= {"info"}, report.findings
    s = report.summary
    assert s.slices > 0 and s.flows > 0 and s.counters > 0
    assert s.processes == 4
