"""write_diff_trace: two profiles side by side, step-aligned, capped, deterministic, atomic, and importable."""

from __future__ import annotations

import dataclasses
import gzip
import itertools
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.errors import AtbprofError, InputError, OutputExistsError
from atbprof.importers import load_profile
from atbprof.importers.base import Profile
from atbprof.validate import validate_trace
from atbprof.writers.diff_trace import DiffTraceResult, write_diff_trace
from atbprof.writers.diff_trace_text import stream_lanes
from tests.conftest import run_cache

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "traces"
HTA = (ANCHORS / "hta_trace_diff_control.json.gz", ANCHORS / "hta_trace_diff_test.json.gz")
RUNS = {
    "baseline": ("seed000-baseline.yaml", ["workload.decode_tokens=3", "output.trace=false", "name=seed000-baseline"]),
    "lnfused": ("seed000-lnfused.yaml", ["workload.decode_tokens=3", "output.trace=false", "name=seed000-lnfused"]),
}
PAIRS = [(0, 0), (1, 1), (2, 2), (3, 3)]


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> tuple[Profile, Profile]:
    get = run_cache(tmp_path_factory.mktemp("diff_trace_runs"), RUNS)
    return load_profile(get("baseline")), load_profile(get("lnfused"))


@pytest.fixture(scope="module")
def hta() -> tuple[Profile, Profile]:
    for p in HTA:
        if not p.exists():
            pytest.skip(f"sample not available: {p}")
    return load_profile(HTA[0]), load_profile(HTA[1])


def events(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    doc = orjson.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)
    return list(doc["traceEvents"])


def slices(evs: list[dict[str, Any]], pid: int, thread: Callable[[str], bool]) -> list[dict[str, Any]]:
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    return [e for e in evs if e["ph"] == "X" and e["pid"] == pid and thread(names[e["pid"], e["tid"]])]


def ns(us_value: float) -> int:
    return round(us_value * 1000)


def op_rows(profile: Profile, steps: list[int]) -> dict[int, dict[str, Any]]:
    """op_index -> row, for the ops of `steps`."""
    rows = profile.ops.to_pylist()
    return {r["op_index"]: r for r in rows if r["step"] in steps}


def assert_clean(path: Path) -> None:
    report = validate_trace(path)
    assert report.findings == (), [f.to_dict() for f in report.findings]


# -- alignment and content -----------------------------------------------------------------------------------


def test_pairs_start_at_the_same_ts_and_ops_keep_their_offsets(ours: tuple[Profile, Profile], tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    result = write_diff_trace(*ours, PAIRS, out)
    evs = events(out)
    steps = {pid: slices(evs, pid, lambda n: n == "Steps") for pid in (2, 3)}
    assert [e["args"]["step"] for e in steps[2]] == [b for b, _ in PAIRS]
    starts = [ns(e["ts"]) for e in steps[2]]
    assert starts == [ns(e["ts"]) for e in steps[3]], "pair k of both sides must start at the same ts"
    for pid, profile in zip((2, 3), ours, strict=True):
        frame = {r["step"]: r for r in profile.steps.to_pylist()}
        at = dict(zip([b for b, _ in PAIRS], starts, strict=True))
        ops = op_rows(profile, [b for b, _ in PAIRS])
        for e in slices(evs, pid, lambda n: n.startswith("Stream")):
            r = ops[e["args"]["op_index"]]
            shift = at[r["step"]] - frame[r["step"]]["host_start_ns"]  # frame start (host start) lands on T_k
            assert (ns(e["ts"]), ns(e["dur"])) == (r["task_start_ns"] + shift, r["task_dur_ns"])
    # T_k = T_{k-1} + longest span of pair k-1 + a gap: pair windows are disjoint and in order
    diff = slices(evs, 1, lambda n: n == "Pairs")
    assert len(diff) == len(PAIRS) == len(result.pairs)
    for prev, cur in itertools.pairwise(diff):
        assert ns(prev["ts"]) + ns(prev["dur"]) < ns(cur["ts"])
    for k in range(1, len(PAIRS)):
        span = max(
            r["sync_end_ns"] - r["host_start_ns"] for p in ours for r in p.steps.to_pylist() if r["step"] == k - 1
        )
        assert starts[k] - starts[k - 1] > span
    assert_clean(out)


def test_slice_counts_and_args(ours: tuple[Profile, Profile], tmp_path: Path) -> None:
    out = tmp_path / "c.json.gz"
    result = write_diff_trace(*ours, [(1, 1), (3, 2)], out, labels=("unfused", "fused"))
    evs = events(out)
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert procs == {1: "diff", 2: "unfused: seed000-baseline", 3: "fused: seed000-lnfused"}
    sort = {e["pid"]: e["args"]["sort_index"] for e in evs if e["name"] == "process_sort_index"}
    assert sort[2] < sort[3], "base above new"
    for pid, profile, steps in ((2, ours[0], [1, 3]), (3, ours[1], [1, 2])):
        ops = op_rows(profile, steps)
        got = slices(evs, pid, lambda n: n.startswith("Stream"))
        assert sorted(e["args"]["op_index"] for e in got) == sorted(ops), "exactly the ops of the paired steps"
        for e in got:
            r, a = ops[e["args"]["op_index"]], e["args"]
            assert e["name"] == r["op_name"]
            assert (a["op_type"], a["step"], a["layer"], a["role"], a["phase"]) == (
                r["op_type"],
                r["step"],
                r["layer"],
                r["role"],
                r["phase"],
            )
            assert a["input_shapes"] == r["input_shapes"]
            assert a["dur_ns"] == r["task_dur_ns"] == ns(e["dur"])
            assert a.get("fused_from", "") == "+".join(r["fused_from"] or [])
    fused = [e for e in slices(evs, 3, lambda n: n.startswith("Stream")) if "fused_from" in e["args"]]
    want = [r for r in op_rows(ours[1], [1, 2]).values() if r["fused_from"]]
    assert len(fused) == len(want) > 0
    assert sum(e["args"]["op_type"] == "FusedAddRmsNormMatMul" for e in fused) > 0
    frames = {
        p: {r["step"]: r["sync_end_ns"] - r["host_start_ns"] for r in pr.steps.to_pylist()}
        for p, pr in ((2, ours[0]), (3, ours[1]))
    }
    diff = slices(evs, 1, lambda n: n == "Pairs")
    for e, (b, n) in zip(diff, [(1, 1), (3, 2)], strict=True):
        a = e["args"]
        assert (a["base_step"], a["new_step"]) == (b, n)
        assert a["base_ms"] == frames[2][b] / 1e6 and a["new_ms"] == frames[3][n] / 1e6
        assert a["delta_ms"] == (frames[3][n] - frames[2][b]) / 1e6
        assert a["delta_pct"] == round(100 * (frames[3][n] - frames[2][b]) / frames[2][b], 3) < 0
    assert result.events_written == len(evs)
    assert result.pairs == ((1, 1), (3, 2)) and result.pairs_dropped == () and result.note is None
    assert_clean(out)


def test_no_tid_zero_and_every_slice_on_a_named_thread(hta: tuple[Profile, Profile], tmp_path: Path) -> None:
    out = tmp_path / "h.json"
    write_diff_trace(*hta, [(s, s) for s in range(1009, 1015)], out)
    evs = events(out)
    named = {(e["pid"], e["tid"]) for e in evs if e["name"] == "thread_name"}
    assert all(e["pid"] > 0 and e["tid"] > 0 for e in evs if "tid" in e)
    assert {(e["pid"], e["tid"]) for e in evs if e["ph"] == "X"} <= named
    assert max(e["tid"] for e in evs if "tid" in e) < 100
    assert_clean(out)


def test_foreign_overlapping_stream_ops_go_to_extra_lanes(hta: tuple[Profile, Profile], tmp_path: Path) -> None:
    out = tmp_path / "h.json"
    write_diff_trace(*hta, [(1010, 1011)], out)
    evs = events(out)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in evs:
        if e["ph"] == "X":
            by_thread[e["pid"], e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    for key, spans in by_thread.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), f"overlap on {names[key]}"
    lanes = [n for (pid, _), n in names.items() if pid == 3 and "overlap" in n]
    assert lanes, "the test profile has overlapping kernels on stream 7 in step 1011"
    assert (
        sum(len(v) for (pid, tid), v in by_thread.items() if pid == 3 and tid > 1)
        == hta[1].ops.filter(pc.equal(hta[1].ops.column("step"), 1011)).num_rows
    )
    assert_clean(out)


def test_frame_falls_back_to_the_op_span(hta: tuple[Profile, Profile], tmp_path: Path) -> None:
    bare = tuple(dataclasses.replace(p, step_frames=None, steps=None) for p in hta)
    out = tmp_path / "bare.json"
    write_diff_trace(bare[0], bare[1], [(1012, 1012)], out)
    evs = events(out)
    steps = slices(evs, 2, lambda n: n == "Steps") + slices(evs, 3, lambda n: n == "Steps")
    for e, p in zip(steps, hta, strict=True):
        ops = p.ops.filter(pc.equal(p.ops.column("step"), 1012))
        first = pc.min(ops.column("task_start_ns")).as_py()
        last = pc.max(pc.add(ops.column("task_start_ns"), ops.column("task_dur_ns"))).as_py()
        assert ns(e["dur"]) == last - first
    assert ns(steps[0]["ts"]) == ns(steps[1]["ts"])
    first_ops = [min(ns(e["ts"]) for e in slices(evs, pid, lambda n: n.startswith("Stream"))) for pid in (2, 3)]
    assert first_ops == [ns(steps[0]["ts"])] * 2, "with no frame, the first op is the anchor"
    assert_clean(out)


# -- files: determinism, overwrite, cap, bad pairs ---------------------------------------------------------------


def test_two_writes_are_byte_identical(ours: tuple[Profile, Profile], tmp_path: Path) -> None:
    for name in ("a.json.gz", "a.json"):
        write_diff_trace(*ours, PAIRS, tmp_path / "one" / name)
        write_diff_trace(*ours, PAIRS, tmp_path / "two" / name)
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
    plain = (tmp_path / "one" / "a.json").read_bytes()
    assert gzip.decompress((tmp_path / "one" / "a.json.gz").read_bytes()) == plain
    assert [p.name for p in (tmp_path / "one").iterdir() if p.name.startswith(".")] == [], "temp file left over"


def test_refuses_to_overwrite_without_force(ours: tuple[Profile, Profile], tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    out.write_text("mine")
    with pytest.raises(OutputExistsError, match="--force"):
        write_diff_trace(*ours, PAIRS, out)
    with pytest.raises(OutputExistsError, match="is not a diff trace atbprof wrote"):
        write_diff_trace(*ours, PAIRS, out, force=True)  # --force replaces only what atbprof wrote
    assert out.read_text() == "mine"
    out.unlink()
    write_diff_trace(*ours, PAIRS, out)
    first = out.read_bytes()
    write_diff_trace(*ours, PAIRS[:1], out, force=True)
    assert events(out) and out.read_bytes() != first
    with pytest.raises(AtbprofError, match="is a directory"):
        write_diff_trace(*ours, PAIRS, tmp_path, force=True)


def test_unknown_step_names_the_input_and_writes_nothing(ours: tuple[Profile, Profile], tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    with pytest.raises(InputError, match=r"has no step 9; its steps are: 0, 1, 2, 3"):
        write_diff_trace(*ours, [(1, 1), (2, 9)], out)
    assert list(tmp_path.iterdir()) == []


def test_cap_keeps_the_first_whole_pairs(ours: tuple[Profile, Profile], tmp_path: Path) -> None:
    n = [sum(1 for r in p.ops.column("step").to_pylist() if r == s) for s in range(4) for p in ours]
    per_pair = [n[2 * k] + n[2 * k + 1] + 3 for k in range(4)]  # ops of both sides, 2 step slices, 1 diff slice
    out = tmp_path / "c.json"
    result = write_diff_trace(*ours, PAIRS, out, max_events=sum(per_pair[:2]) + per_pair[2] - 1)
    assert result == DiffTraceResult(out, ((0, 0), (1, 1)), ((2, 2), (3, 3)), result.events_written, result.note)
    assert result.note is not None and "first 2 of 4" in result.note
    evs = events(out)
    assert result.events_written == len(evs)
    assert sum(e["ph"] == "X" for e in evs) == sum(per_pair[:2])
    assert {e["args"]["step"] for e in evs if e["ph"] == "X" and e["pid"] > 1} == {0, 1}
    exact = write_diff_trace(*ours, PAIRS, out, force=True, max_events=sum(per_pair))
    assert exact.pairs_dropped == () and exact.note is None
    none = write_diff_trace(*ours, PAIRS, out, force=True, max_events=10)
    assert none.pairs == () and len(none.pairs_dropped) == 4
    assert not any(e["ph"] == "X" for e in events(out))
    assert_clean(out)


# -- lanes ---------------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 15)), max_size=60))
def test_lanes_never_overlap_and_are_as_few_as_the_peak_concurrency(ops: list[tuple[int, int, int]]) -> None:
    sid = np.array([o[0] for o in ops], np.int64)
    start = np.array([o[1] for o in ops], np.int64)
    end = start + np.array([o[2] for o in ops], np.int64)
    lanes = stream_lanes(sid, start, end)
    for s in set(sid.tolist()):
        on = sid == s
        for lane in set(lanes[on].tolist()):
            spans = sorted(zip(start[on & (lanes == lane)].tolist(), end[on & (lanes == lane)].tolist(), strict=True))
            # in (start, end) order each op starts when the previous one has ended: disjoint, or a zero-length
            # op at a boundary (which Perfetto nests at worst); never a partial overlap
            assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "two ops of one lane overlap"
        # first fit in start order is optimal: lanes = 1 + the most ops still running when one starts
        spans = sorted(zip(start[on].tolist(), end[on].tolist(), strict=True))
        peak = max(sum(e > spans[j][0] for _, e in spans[:j]) for j in range(len(spans)))
        assert lanes[on].max() + 1 == peak + 1
