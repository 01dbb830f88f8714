"""Load `atbprof diff --trace` outputs into the real Perfetto trace_processor (v52, WASM under Node) and check them.

The layout is the one in `atbprof/writers/diff_trace.py`'s docstring: pid 1 `diff` (tid 1 "Pairs"), pid 2 base and
pid 3 new (tid 1 "Steps", tids 2.. "Stream N" and, for overlapping foreign kernels, "Stream N (overlap k)").
Cases: our seed 000 baseline vs lnfused runs (3 decode steps), and HTA's TraceDiff control/test Kineto pair. The
same checks as tests/tp/test_traces_load.py, plus: slices equal the ops of the paired steps, pairs aligned, and the
project's own validator (`atbprof validate`, as a user runs it) finds nothing.
"""

from __future__ import annotations

import gzip
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from atbprof.importers import load_profile
from atbprof.importers.base import Profile
from atbprof.writers.diff_trace import DiffTraceResult, write_diff_trace
from tests.conftest import run_cache
from tests.tp.wasm_tp import WasmEngine, WasmTraceProcessor, require_wasm_trace_processor

require_wasm_trace_processor()


ROOT = Path(__file__).resolve().parents[2]
ANCHORS = ROOT.parent / "shared" / "anchors" / "traces"
RUNS = {
    "baseline": ("seed000-baseline.yaml", ["workload.decode_tokens=3", "output.trace=false"]),
    "lnfused": ("seed000-lnfused.yaml", ["workload.decode_tokens=3", "output.trace=false"]),
}
PID_DIFF, PID_BASE, PID_NEW = 1, 2, 3
CASES = ["ours", "hta", "hta-shifted"]


@dataclass
class Loaded:
    case: str
    profiles: tuple[Profile, Profile]
    pairs: list[tuple[int, int]]
    result: DiffTraceResult
    tp: WasmTraceProcessor
    events: list[dict[str, Any]]

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.tp.rows(sql)

    def scalar(self, sql: str) -> Any:
        return self.tp.scalar(sql)

    def paired_ops(self, side: int) -> pa.Table:
        ops = self.profiles[side].ops
        steps = [p[side] for p in self.pairs]
        return pa.concat_tables([ops.filter(pc.equal(ops.column("step"), s)) for s in steps])


def _inputs(case: str, root: Path) -> tuple[tuple[Profile, Profile], list[tuple[int, int]], str]:
    if case == "ours":
        get = run_cache(root, RUNS)
        return (load_profile(get("baseline")), load_profile(get("lnfused"))), [(k, k) for k in range(4)], "c.json"
    paths = (ANCHORS / "hta_trace_diff_control.json.gz", ANCHORS / "hta_trace_diff_test.json.gz")
    for p in paths:
        if not p.exists():
            pytest.skip(f"sample not available: {p}")
    profiles = (load_profile(paths[0]), load_profile(paths[1]))
    if case == "hta":
        return profiles, [(s, s) for s in range(1009, 1015)], "c.json.gz"
    return profiles, [(1009 + k, 1010 + k) for k in range(5)] + [(1012, 1012)], "c.json.gz"  # offset + a repeat


@pytest.fixture(scope="module", params=CASES)
def loaded(
    request: pytest.FixtureRequest, tp_engine: WasmEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loaded]:
    root = tmp_path_factory.mktemp(f"diff_trace_{request.param}")
    profiles, pairs, name = _inputs(request.param, root)
    out = root / name
    result = write_diff_trace(*profiles, pairs, out)
    data = out.read_bytes()
    doc = orjson.loads(gzip.decompress(data) if name.endswith(".gz") else data)
    tp = WasmTraceProcessor(trace=out, engine=tp_engine)  # finalize errors raise here
    yield Loaded(request.param, profiles, pairs, result, tp, doc["traceEvents"])
    tp.close()


def _thread_slices(pid: int, where: str = "true", cols: str = "s.*") -> str:
    return f"""
        select {cols} from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
        join process p using (upid) where p.pid = {pid} and ({where})"""


def test_no_error_or_data_loss_stats(loaded: Loaded) -> None:
    bad = loaded.rows(
        "select name, idx, severity, source, value from stats where severity in ('error', 'data_loss') and value > 0"
    )
    assert bad == [], f"trace_processor reported problems: {bad}"


def test_no_negative_durations(loaded: Loaded) -> None:
    assert loaded.scalar("select count(*) from slice where dur < 0") == 0


def test_no_tid_or_pid_zero(loaded: Loaded) -> None:
    assert loaded.rows("select utid, tid, upid from thread where tid = 0") == [(0, 0, 0)]
    assert loaded.rows("select upid, pid from process where pid = 0") == [(0, 0)]
    assert loaded.scalar("select count(*) from thread_track where utid = 0") == 0


def test_processes(loaded: Loaded) -> None:
    procs = dict(loaded.rows("select pid, name from process where pid != 0"))
    assert set(procs) == {PID_DIFF, PID_BASE, PID_NEW}
    assert procs[PID_DIFF] == "diff"
    assert procs[PID_BASE].startswith("base: ") and procs[PID_NEW].startswith("new: ")


def test_op_slices_are_the_ops_of_the_paired_steps(loaded: Loaded) -> None:
    for side, pid in enumerate((PID_BASE, PID_NEW)):
        ops = loaded.paired_ops(side)
        got = loaded.rows(
            _thread_slices(pid, "t.name like 'Stream %'", "s.name, s.dur, extract_arg(s.arg_set_id, 'args.step')")
        )
        assert len(got) == ops.num_rows
        want = zip(
            ops.column("op_name").to_pylist(),
            ops.column("task_dur_ns").to_pylist(),
            ops.column("step").to_pylist(),
            strict=True,
        )
        assert sorted(got) == sorted(want)
        streams = {r[0] for r in loaded.rows(_thread_slices(pid, "t.name like 'Stream %'", "distinct t.name"))}
        assert {n.split(" (")[0] for n in streams} == {f"Stream {s}" for s in set(ops.column("stream_id").to_pylist())}


def test_args(loaded: Loaded) -> None:
    keys = {
        r[0]
        for r in loaded.rows(
            f"select distinct key from args where arg_set_id in ({_thread_slices(2, cols='s.arg_set_id')})"
        )
    }
    assert {"args.op_index", "args.op_type", "args.step", "args.dur_ns"} <= keys
    if loaded.case == "ours":
        assert {"args.layer", "args.role", "args.input_shapes", "args.phase"} <= keys
        fused = loaded.scalar(
            _thread_slices(PID_NEW, "extract_arg(s.arg_set_id, 'args.fused_from') is not null", "count(*)")
        )
        assert fused == sum(1 for v in loaded.paired_ops(1).column("fused_from").to_pylist() if v)
    diff = loaded.rows(
        _thread_slices(
            PID_DIFF,
            "true",
            "extract_arg(s.arg_set_id, 'args.base_ms'), extract_arg(s.arg_set_id, 'args.new_ms'), "
            "extract_arg(s.arg_set_id, 'args.delta_ms'), extract_arg(s.arg_set_id, 'args.delta_pct')",
        )
    )
    assert len(diff) == len(loaded.pairs)
    for base_ms, new_ms, delta_ms, delta_pct in diff:
        assert base_ms > 0 and new_ms > 0
        assert delta_ms == pytest.approx(new_ms - base_ms, abs=1e-9)
        assert delta_pct == pytest.approx(100 * (new_ms - base_ms) / base_ms, abs=1e-3)


def test_pairs_are_aligned(loaded: Loaded) -> None:
    starts = {
        pid: [r[0] for r in loaded.rows(_thread_slices(pid, "t.name = 'Steps'", "s.ts") + " order by s.ts")]
        for pid in (PID_BASE, PID_NEW)
    }
    assert len(starts[PID_BASE]) == len(loaded.pairs)
    assert starts[PID_BASE] == starts[PID_NEW]
    windows = loaded.rows(_thread_slices(PID_DIFF, "true", "s.ts, s.ts + s.dur") + " order by s.ts")
    for (lo, hi), t in zip(windows, starts[PID_BASE], strict=True):
        assert lo <= t < hi
        inside = loaded.scalar(f"select count(*) from slice where ts >= {lo} and ts + dur <= {hi}")
        outside_pid1 = loaded.scalar(_thread_slices(PID_DIFF, f"s.ts >= {lo} and s.ts + s.dur <= {hi}", "count(*)"))
        assert inside - outside_pid1 > 2, "the pair's op slices lie in its window"


def test_slices_nest_on_every_track(loaded: Loaded) -> None:
    partial = loaded.rows("""
        select track_id, depth, prev_name, prev_end, name, ts from (
            select track_id, depth, name, ts,
                   lag(name) over w as prev_name, lag(ts + dur) over w as prev_end
            from slice window w as (partition by track_id, depth order by ts, id))
        where prev_end is not null and ts < prev_end limit 10""")
    assert partial == [], f"partially overlapping slices: {partial}"
    assert loaded.scalar("select count(*) from slice where depth > 0 and dur > 0") == 0, "ops never nest"


def test_every_json_event_is_imported(loaded: Loaded) -> None:
    ph: dict[str, int] = {}
    for ev in loaded.events:
        ph[ev["ph"]] = ph.get(ev["ph"], 0) + 1
    assert set(ph) == {"M", "X"}
    assert loaded.scalar("select count(*) from slice") == ph["X"]
    assert loaded.result.events_written == len(loaded.events)


def test_atbprof_validate_finds_nothing(loaded: Loaded) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "atbprof", "validate", str(loaded.result.path), "--format", "json"],
        capture_output=True,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    report = orjson.loads(proc.stdout)
    assert report["findings"] == [], report["findings"]
