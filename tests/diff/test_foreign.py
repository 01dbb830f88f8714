"""`diff` on foreign inputs: the HTA TraceDiff pair (what HTA's own TraceDiff finds, plus alignment and statistics),
a profile against itself, and a run of ours against a foreign profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from atbprof.diff.api import diff
from atbprof.importers import load_profile
from atbprof.importers.base import Profile
from tests.diff.conftest import HTA_CONTROL, HTA_TEST
from tests.importers.conftest import shared

PINNED = Path(__file__).parent / "data" / "hta_ops_diff.json"


@pytest.fixture(scope="module")
def hta_pair() -> tuple[Profile, Profile]:
    return load_profile(shared(HTA_CONTROL)), load_profile(shared(HTA_TEST))


def test_hta_pair_finds_what_hta_tracediff_finds(hta_pair: tuple[Profile, Profile]) -> None:
    control, test = hta_pair
    report = diff(control, test, top=100_000).report
    pinned = json.loads(PINNED.read_text())["all"]  # HTA 0.5.0 ops_diff on GPU kernels, full names
    short = {**_types(control), **_types(test)}
    rows = {r.name: r for r in report.rows}
    test_types = set(_types(test).values())
    control_types = set(_types(control).values())
    gone = {short[n] for n in pinned["deleted"] if short[n] not in test_types}
    new = {short[n] for n in pinned["added"] if short[n] not in control_types}
    assert len(gone) >= 20 and len(new) >= 10  # kernels whose every variant disappeared / appeared
    assert all(rows[t].classification == "removed" and rows[t].new_ops_per_step == 0 for t in gone)
    assert all(rows[t].classification == "added" and rows[t].base_ops_per_step == 0 for t in new)
    # HTA compares counts of the first iteration only; we align all 6 steps and give an interval
    head = report.headline.decode_ms_per_token
    assert head is not None and head.method == "paired-t" and head.base_steps.n == head.new_steps.n == 6
    assert head.ci_low is not None and head.ci_low > 0 and head.significant  # test is slower in every step
    m = report.matching
    assert m.method == "alignment" and m.pairs == 6
    # what the GPU runs after the last ProfilerStep frame ended is in no step (11 and 34 kernels and copies)
    assert (m.base_outside_steps_ops, m.new_outside_steps_ops) == (11, 34)
    # the ops of removed (added) rows have no counterpart: unmatched, next to those rows
    removed = sum(round(r.base_ops_per_step * m.pairs) for r in report.rows if r.classification == "removed")
    assert m.base_unmatched_ops >= removed > 0
    assert m.base_matched_ops + m.base_unmatched_ops + m.base_outside_steps_ops == control.ops.num_rows
    assert m.new_matched_ops + m.new_unmatched_ops + m.new_outside_steps_ops == test.ops.num_rows


def _types(p: Profile) -> dict[str, str]:
    return dict(zip(p.ops.column("op_name").to_pylist(), p.ops.column("op_type").to_pylist(), strict=True))


def test_a_profile_against_itself_changes_nothing(hta_pair: tuple[Profile, Profile]) -> None:
    control, _ = hta_pair
    report = diff(control, control).report
    head = report.headline.decode_ms_per_token
    assert head is not None and head.delta == 0 and not head.significant
    assert {r.classification for r in report.rows} == {"unchanged"}
    assert report.matching.base_unmatched_ops == 0


def test_alignment_treats_a_known_fusion_as_one_edit(diff_runs) -> None:  # type: ignore[no-untyped-def]
    # the same two runs, but matched as foreign inputs would be (no graph): --map forces the alignment path
    base = diff_runs("seed000-baseline.yaml", "workload.decode_tokens=4")
    new = diff_runs("seed000-lnfused.yaml", "workload.decode_tokens=4")
    exact = {r.name: r for r in diff(base, new, top=1000).report.rows if r.classification == "fused"}
    aligned = diff(base, new, top=1000, name_map={"NoSuchKernel": "Renamed"})
    assert aligned.matching.method == "alignment"
    rows = {r.name: r for r in aligned.report.rows if r.classification == "fused"}
    assert set(rows) == set(exact)
    for name, row in rows.items():
        assert row.instances_per_step == exact[name].instances_per_step
        assert row.delta_us == pytest.approx(exact[name].delta_us, abs=0.01)


def test_a_run_against_its_torch_npu_export_matches_op_for_op(diff_runs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from atbprof.export import export_run

    run = diff_runs("seed000-baseline.yaml", "workload.decode_tokens=4")
    exported = export_run(Path(run.source), "ascend-pt", tmp_path)
    foreign = load_profile(exported.root)
    assert foreign.kind == "ascend_pt" and foreign.steps is None  # no graph, no steps table: aligned
    report = diff(run, foreign).report
    assert report.matching.method == "alignment"
    assert report.matching.base_unmatched_ops == report.matching.new_unmatched_ops == 0
    assert report.matching.base_matched_ops == report.matching.new_matched_ops == run.ops.num_rows
    # the export's ProfilerStep frames are the run's step walls: nothing changes, by any figure
    for f in (report.headline.decode_ms_per_token, report.headline.ttft_ms):
        assert f is not None and not f.significant and abs(f.delta) < 1e-3
    assert not any(c.significant for c in report.categories)
    assert {r.classification for r in report.rows} == {"unchanged"}
