"""Load atbprof's Chrome traces into the real Perfetto trace_processor (v52, WASM under Node) and check them.

The layout asserted here is the one in `atbprof/writers/chrome.py`'s docstring: pid 1 `CANN` (host launches on
tid `host_tid`, step frames on `host_tid + 1` "Host steps"), pid 2 `Ascend Hardware` (thread "Stream <sid>" per
stream, tid = sid or 65536 for stream 0; counters), pid 3 `Overlap Analysis` (tid 1 Computing, tid 2 Free),
pid 4 `Model` (tid 1 Steps, 2 Layers, 3 Blocks). Counts come from the run's own ops.parquet / steps.parquet.
trace_processor v52 reads the gzip itself (`test_gzip_is_read_natively` checks it against the decompressed bytes).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from perfetto.common.exceptions import PerfettoException

from atbprof.config import load_config
from atbprof.run import run_simulation
from atbprof.sim.simulate import Simulation
from atbprof.writers.base import TraceMeta
from atbprof.writers.chrome import ChromeTraceWriter
from atbprof.writers.parquet import ParquetOpsWriter
from atbprof.writers.selection import parse_ranges
from tests.tp.wasm_tp import WasmEngine, WasmTraceProcessor, gunzipped_chunks, require_wasm_trace_processor

require_wasm_trace_processor()


ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
EXAMPLES = sorted(ROOT.glob("traces/examples/*/trace.json.gz"))

PID_HOST, PID_DEVICE, PID_OVERLAP, PID_MODEL = 1, 65537, 3, 4
STREAM0_TID = 65536
PROCESSES = {PID_HOST: "CANN", PID_DEVICE: "Ascend Hardware", PID_OVERLAP: "Overlap Analysis", PID_MODEL: "Model"}

# name -> (fixture config, --set overrides); a callable builds the run directory itself
GENERATED: dict[str, tuple[str, list[str]]] = {
    "tiny-llama": ("tiny-llama.yaml", []),
    "tiny-gpt": ("tiny-gpt.yaml", []),
    "seed000-baseline": ("seed000-baseline.yaml", ["workload.decode_tokens=3"]),
    "seed000-lnfused": ("seed000-lnfused.yaml", ["workload.decode_tokens=3"]),
    "llama2-7b-910b2": ("llama2-7b-910b2.yaml", ["workload.decode_tokens=2", "workload.prompt_len=64"]),
    "prefill-only": ("tiny-llama.yaml", ["workload.decode_tokens=0"]),
    "graph-mode": ("tiny-llama.yaml", ["execution.mode=graph"]),
    "long-decode": ("tiny-llama.yaml", ["workload.decode_tokens=64"]),
    "numerics": ("tiny-llama.yaml", ["numerics.enabled=true", "fusion=aggressive"]),
    "7b-fully-unfused": ("seed000-baseline.yaml", ["workload.decode_tokens=2", "fusion=none"]),
    "7b-default-graph": ("llama2-7b-910a.yaml", ["workload.decode_tokens=2", "execution.mode=graph"]),
    "trace-selection": (
        "tiny-llama.yaml",
        ["workload.decode_tokens=6", "output.trace_steps=0-2,5", "output.trace_layers=1"],
    ),
}
SYNTHETIC = ["multi-stream"]  # tiny-llama's ops moved to streams 0 and 3, host_tid 4242 (writer called directly)
CASES = [*GENERATED, *SYNTHETIC, *(f"example:{p.parent.name}" for p in EXAMPLES)]


def _selected(ops: pa.Table, steps: pa.Table, step_ranges: str | None, layer_ranges: str | None):
    """The ops and steps a trace with --trace-steps / --trace-layers should show."""
    if step_ranges is not None:
        keep = [s for s in steps.column("step").to_pylist() if _in(s, step_ranges)]
        ops = ops.filter(pc.is_in(ops.column("step"), pa.array(keep, pa.int32())))
        steps = steps.filter(pc.is_in(steps.column("step"), pa.array(keep, pa.int32())))
    if layer_ranges is not None:
        layer = ops.column("layer").to_pylist()
        ops = ops.filter(pa.array([v == -1 or _in(v, layer_ranges) for v in layer]))
    return ops, steps


def _in(value: int, ranges: str) -> bool:
    return any(a <= value <= (10**9 if b is None else b) for a, b in parse_ranges(ranges, "test"))


def _multi_stream_run(out: Path) -> None:
    """Streams 0 (-> tid 65536) and 3 and a host tid that is not a pid: layouts no fixture config produces."""
    cfg = load_config(FIXTURES / "tiny-llama.yaml", [])
    sim = Simulation(cfg)
    meta = TraceMeta(cfg.name, sim.device.name, sim.device.soc_version, cfg.execution.mode, (0, 3), 4242)
    out.mkdir(parents=True)
    writers = [ParquetOpsWriter(), ChromeTraceWriter()]
    for w in writers:
        w.open(out, meta)
    for batch in sim.batches():
        i = batch.schema.get_field_index("stream_id")
        odd = pc.equal(pc.bit_wise_and(batch.column("op_index"), 1), 1)
        sid = pc.if_else(odd, 3, 0).cast(batch.schema.field(i).type)
        batch = pa.RecordBatch.from_arrays(
            [sid if j == i else c for j, c in enumerate(batch.columns)], schema=batch.schema
        )
        for w in writers:
            w.write_batch(batch)
    steps = sim.steps_table()
    for w in writers:
        w.close(steps)


@dataclass
class Loaded:
    case: str
    run_dir: Path
    tp: WasmTraceProcessor
    ops: pa.Table  # the ops the trace should show (all of ops.parquet unless output.trace_max_steps)
    steps: pa.Table
    events: list[dict[str, Any]]
    other: dict[str, Any]

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        return self.tp.rows(sql)

    def scalar(self, sql: str) -> Any:
        return self.tp.scalar(sql)

    @property
    def host_tid(self) -> int:
        return int(self.other.get("host_tid", 1))

    @property
    def n_launches(self) -> int:
        col = self.ops.column("host_launch_start_ns")
        return len(col) - col.null_count


def _run_dir(case: str, root: Path) -> Path:
    if case.startswith("example:"):
        return ROOT / "traces" / "examples" / case.split(":", 1)[1]
    out = root / case
    if case == "multi-stream":
        _multi_stream_run(out)
    else:
        name, overrides = GENERATED[case]
        run_simulation(load_config(FIXTURES / name, overrides), out)
    return out


@pytest.fixture(scope="session")
def runs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tp_runs")


@pytest.fixture(scope="session", params=CASES)
def loaded(request: pytest.FixtureRequest, tp_engine: WasmEngine, runs_root: Path) -> Iterator[Loaded]:
    """One run, loaded once (session-scoped params group the tests of one case together)."""
    case: str = request.param
    run_dir = _run_dir(case, runs_root)
    trace = run_dir / "trace.json.gz"
    for name in ("ops.parquet", "steps.parquet"):
        if not (run_dir / name).exists():
            pytest.skip(f"{run_dir} has no {name} to compare the trace with")
    ops, steps = pq.read_table(run_dir / "ops.parquet"), pq.read_table(run_dir / "steps.parquet")
    if (run_dir / "run.json").exists():
        output = orjson.loads((run_dir / "run.json").read_bytes())["config"]["output"]
        ops, steps = _selected(ops, steps, output.get("trace_steps"), output.get("trace_layers"))
    doc = orjson.loads(gzip.decompress(trace.read_bytes()))
    tp = WasmTraceProcessor(trace=trace, engine=tp_engine)  # finalize errors raise here
    yield Loaded(case, run_dir, tp, ops, steps, doc["traceEvents"], doc.get("otherData", {}))
    tp.close()


# -- the checks -----------------------------------------------------------------------------------------------


def test_no_error_or_data_loss_stats(loaded: Loaded) -> None:
    bad = loaded.rows(
        "select name, idx, severity, source, value from stats where severity in ('error', 'data_loss') and value > 0"
    )
    assert bad == [], f"trace_processor reported problems: {bad}"


def test_no_negative_durations(loaded: Loaded) -> None:
    assert loaded.scalar("select count(*) from slice where dur < 0") == 0


def test_no_tid_or_pid_zero(loaded: Loaded) -> None:
    # v52 always has the swapper placeholder: utid 0 (tid 0) in upid 0 (pid 0); nothing else may have tid 0.
    assert loaded.rows("select utid, tid, upid from thread where tid = 0") == [(0, 0, 0)]
    assert loaded.rows("select upid, pid from process where pid = 0") == [(0, 0)]
    assert loaded.scalar("select count(*) from thread_track where utid = 0") == 0
    bad = [e for e in loaded.events if e.get("tid") == 0 or e.get("pid") == 0]
    assert bad == [], f"events with pid/tid 0 (Perfetto merges tid 0 into the main thread): {bad[:3]}"


def test_processes_and_threads(loaded: Loaded) -> None:
    procs = dict(loaded.rows("select pid, name from process where pid != 0"))
    assert procs == PROCESSES
    threads = loaded.rows(
        "select p.pid, t.tid, t.name from thread t join process p using (upid) where t.name is not null"
    )
    h = loaded.host_tid
    streams = sorted(set(loaded.ops.column("stream_id").to_pylist()))
    expected = {(PID_HOST, h, f"Thread {h}"), (PID_HOST, h + 1, "Host steps")}
    expected |= {(PID_DEVICE, s or STREAM0_TID, f"Stream {s}") for s in streams}
    expected |= {(PID_OVERLAP, 1, "Computing"), (PID_OVERLAP, 2, "Free")}
    expected |= {(PID_MODEL, 1, "Steps"), (PID_MODEL, 2, "Layers"), (PID_MODEL, 3, "Blocks")}
    assert set(threads) == expected
    assert len(threads) == len(expected), f"duplicate thread rows: {sorted(threads)}"


def _thread_slices(pid: int, where: str = "true", cols: str = "s.*") -> str:
    return f"""
        select {cols} from slice s join thread_track tt on s.track_id = tt.id join thread t using (utid)
        join process p using (upid) where p.pid = {pid} and ({where})"""


def test_device_slices_match_ops(loaded: Loaded) -> None:
    got = loaded.rows(_thread_slices(PID_DEVICE, "t.name like 'Stream %'", "t.tid, s.ts, s.dur, s.depth, s.name"))
    assert len(got) == loaded.ops.num_rows
    assert {r[3] for r in got} <= {0}, "device slices must all be at depth 0"
    assert loaded.scalar(_thread_slices(PID_DEVICE, "t.name not like 'Stream %'", "count(*)")) == 0
    o = loaded.ops
    sid = np.array(o.column("stream_id").to_pylist())
    want = sorted(
        zip(
            np.where(sid == 0, STREAM0_TID, sid).tolist(),
            o.column("task_start_ns").to_pylist(),
            o.column("task_dur_ns").to_pylist(),
            o.column("op_name").to_pylist(),
            strict=True,
        )
    )
    assert sorted((r[0], r[1], r[2], r[4]) for r in got) == want


def test_host_launch_slices(loaded: Loaded) -> None:
    h = loaded.host_tid
    got = loaded.rows(_thread_slices(PID_HOST, f"t.tid = {h}", "s.ts, s.dur, s.depth, s.name"))
    assert len(got) == loaded.n_launches
    if loaded.case == "graph-mode":
        assert got == []
    assert {r[2] for r in got} <= {0}, "launch slices must all be at depth 0"
    assert {r[3] for r in got} <= {"Node@launch"}
    launched = loaded.ops.filter(pc.is_valid(loaded.ops.column("host_launch_start_ns")))
    want = sorted(
        zip(
            launched.column("host_launch_start_ns").to_pylist(),
            launched.column("host_launch_dur_ns").to_pylist(),
            strict=True,
        )
    )
    assert sorted((r[0], r[1]) for r in got) == want


def test_flows_link_each_launch_to_its_task(loaded: Loaded) -> None:
    assert loaded.scalar("select count(*) from flow") == loaded.n_launches
    h = loaded.host_tid
    rows = loaded.rows("""
        select po.pid, tout.tid, pi.pid, tin.name,
               extract_arg(so.arg_set_id, 'args.connection_id') as c_out,
               extract_arg(si.arg_set_id, 'args.connection_id') as c_in
        from flow f
        join slice so on f.slice_out = so.id join thread_track tto on so.track_id = tto.id
        join thread tout on tto.utid = tout.utid join process po on tout.upid = po.upid
        join slice si on f.slice_in = si.id join thread_track tti on si.track_id = tti.id
        join thread tin on tti.utid = tin.utid join process pi on tin.upid = pi.upid""")
    assert len(rows) == loaded.n_launches
    wrong = [r for r in rows if r[:2] != (PID_HOST, h) or r[2] != PID_DEVICE or r[4] is None or r[4] != r[5]]
    assert wrong == [], f"flows not bound launch -> the device task with the same connection_id: {wrong[:5]}"


def test_counters(loaded: Loaded) -> None:
    rows = loaded.rows("""
        select p.pid, t.name, count(c.id), min(c.value), max(c.value)
        from process_counter_track t join process p using (upid) left join counter c on c.track_id = t.id
        group by t.id order by t.name""")
    by_name = {r[1]: r for r in rows}
    assert set(by_name) == {"AI Core utilization %", "HBM bandwidth GB/s"}, rows
    for pid, name, n, lo, hi in rows:
        assert pid == PID_DEVICE, name
        assert n > 0, f"counter {name} has no samples"
        assert lo >= 0 and hi > 0, (name, lo, hi)
    assert by_name["AI Core utilization %"][4] <= 100.0 + 1e-6


def test_model_and_host_step_slices(loaded: Loaded) -> None:
    steps = loaded.steps.to_pylist()
    got = loaded.rows(_thread_slices(PID_MODEL, "t.tid = 1", "s.name, s.depth"))
    assert len(got) == len(steps)
    want = [f"Step {r['step']} ({r['phase']})" for r in steps]
    assert sorted(n for n, _ in got) == sorted(want)
    assert {d for _, d in got} <= {0}
    h = loaded.host_tid
    frames = loaded.rows(_thread_slices(PID_HOST, f"t.tid = {h + 1} and s.depth = 0", "s.name"))
    assert sorted(frames) == sorted((f"Step {r['step']} ({r['phase']})",) for r in steps)
    assert loaded.scalar(_thread_slices(PID_MODEL, "t.tid in (2, 3)", "count(*)")) > 0


def test_overlap_analysis_matches_busy_union(loaded: Loaded) -> None:
    """Computing = union of device task intervals (touching tasks coalesce); Free = the gaps between them."""
    s = np.array(loaded.ops.column("task_start_ns").to_pylist(), dtype=np.int64)
    e = s + np.array(loaded.ops.column("task_dur_ns").to_pylist(), dtype=np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    brk = np.flatnonzero(s[1:] > reach[:-1]) + 1
    starts = np.concatenate(([0], brk))
    busy = list(zip(s[starts].tolist(), (reach[np.concatenate((brk - 1, [len(s) - 1]))]).tolist(), strict=True))
    got = loaded.rows(_thread_slices(PID_OVERLAP, "true", "t.name, s.ts, s.ts + s.dur"))
    computing = sorted((a, b) for n, a, b in got if n == "Computing")
    free = sorted((a, b) for n, a, b in got if n == "Free")
    assert computing == busy
    assert free == [(busy[i][1], busy[i + 1][0]) for i in range(len(busy) - 1)]


def test_slices_nest_on_every_track(loaded: Loaded) -> None:
    # Same track and depth, ordered by ts: each slice starts after the previous one ended (no partial overlap).
    partial = loaded.rows("""
        select track_id, depth, prev_name, prev_end, name, ts from (
            select track_id, depth, name, ts,
                   lag(name) over w as prev_name, lag(ts + dur) over w as prev_end
            from slice window w as (partition by track_id, depth order by ts, id))
        where prev_end is not null and ts < prev_end limit 10""")
    assert partial == [], f"partially overlapping slices: {partial}"
    outside = loaded.rows("""
        select c.id, c.name, c.ts, c.dur, p.name, p.ts, p.dur from slice c join slice p on c.parent_id = p.id
        where c.track_id != p.track_id or c.depth != p.depth + 1 or c.ts < p.ts or c.ts + c.dur > p.ts + p.dur
        limit 10""")
    assert outside == [], f"children outside their parent: {outside}"
    assert loaded.scalar("select count(*) from slice where (depth = 0) != (parent_id is null)") == 0


def test_every_json_event_is_imported(loaded: Loaded) -> None:
    """X events -> slices, C -> one sample per numeric arg, s/f pairs -> flows: nothing silently dropped."""
    ph: dict[str, int] = {}
    for ev in loaded.events:
        ph[ev["ph"]] = ph.get(ev["ph"], 0) + 1
    assert set(ph) <= {"M", "X", "C", "s", "f"}, ph
    assert loaded.scalar("select count(*) from slice") == ph.get("X", 0)
    n_counter_values = sum(len(ev["args"]) for ev in loaded.events if ev["ph"] == "C")
    assert loaded.scalar("select count(*) from counter") == n_counter_values
    assert ph.get("s", 0) == ph.get("f", 0) == loaded.scalar("select count(*) from flow")


# -- the harness itself ---------------------------------------------------------------------------------------


def test_gzip_is_read_natively(tp_engine: WasmEngine, runs_root: Path) -> None:
    """trace_processor v52 decompresses gzip itself: same tables as feeding the decompressed JSON."""
    out = runs_root / "gzip-check"
    run_simulation(load_config(FIXTURES / "tiny-gpt.yaml", ["workload.decode_tokens=1"]), out)
    sql = "select (select count(*) from slice), (select count(*) from counter), (select count(*) from flow)"
    with WasmTraceProcessor(trace=out / "trace.json.gz", engine=tp_engine) as tp:
        native = tp.rows(sql)
    with WasmTraceProcessor(trace=gunzipped_chunks(out / "trace.json.gz"), engine=tp_engine) as tp:
        plain = tp.rows(sql)
    assert native == plain
    assert native[0][0] > 0


def test_finalize_error_raises(tp_engine: WasmEngine) -> None:
    text = b'{"traceEvents":[{"name":"a","ph":"X","pid":1,"tid":2,"ts":1,"dur":2},{"name":"b","ph":"X","pi'
    with pytest.raises(PerfettoException, match="incomplete"):
        WasmTraceProcessor(trace=text, engine=tp_engine)


def test_overlap_is_reported(tp_engine: WasmEngine) -> None:
    """A partial overlap on one thread is dropped by v52 with an error stat: the stats check catches it."""
    events = [
        {"name": "outer", "ph": "X", "pid": 1, "tid": 2, "ts": 0, "dur": 10},
        {"name": "overlap", "ph": "X", "pid": 1, "tid": 2, "ts": 5, "dur": 10},
    ]
    with WasmTraceProcessor(trace=orjson.dumps({"traceEvents": events}), engine=tp_engine) as tp:
        stats = tp.rows("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
        assert tp.scalar("select count(*) from slice") == 1
    assert stats == [("slice_drop_overlapping_complete_event", 1)]


def test_examples_present() -> None:
    if not EXAMPLES:
        pytest.skip("no committed traces under traces/examples/*/trace.json.gz (nothing to load)")
