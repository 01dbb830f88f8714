"""The Perfetto protobuf trace (trace.pftrace) against the Chrome JSON trace of the same run, both loaded into the
real trace_processor (v52, WASM under Node): the same slices, counters, flows and args, per process and track.

JSON threads and the protobuf's tracks are matched by (process name, thread or track name). The protobuf file
is also decoded strictly (trace_processor silently drops a torn tail), with the packet count the writer reports.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from google.protobuf.message import DecodeError
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

from atbprof.config import load_config
from atbprof.sim.simulate import Simulation
from atbprof.writers.base import TraceMeta
from atbprof.writers.chrome import RATIO_KEYS, ChromeTraceWriter
from atbprof.writers.perfetto import INT_KEYS, STR_KEYS, PerfettoTraceWriter
from tests.tp.wasm_tp import WasmEngine, WasmTraceProcessor, require_wasm_trace_processor

require_wasm_trace_processor()


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CASES: dict[str, tuple[str, list[str]]] = {
    "tiny-llama": ("tiny-llama.yaml", []),
    "tiny-gpt": ("tiny-gpt.yaml", []),
    "graph-mode": ("tiny-llama.yaml", ["execution.mode=graph"]),
    "seed000-baseline": ("seed000-baseline.yaml", ["workload.decode_tokens=3"]),
    "seed000-lnfused": ("seed000-lnfused.yaml", ["workload.decode_tokens=2"]),
    "7b-fully-unfused": ("seed000-baseline.yaml", ["workload.decode_tokens=2", "fusion=none"]),
    "llama2-7b-910b2": ("llama2-7b-910b2.yaml", ["workload.decode_tokens=2", "workload.prompt_len=64"]),
    "prefill-only": ("tiny-llama.yaml", ["workload.decode_tokens=0"]),
    "long-decode": ("tiny-llama.yaml", ["workload.decode_tokens=64"]),
    "multi-stream": ("tiny-llama.yaml", []),  # odd ops on stream 3, even on 0; host_tid 4242; META: stream 0 only
    "numerics": ("tiny-llama.yaml", ["numerics.enabled=true", "fusion=aggressive"]),  # numerics_* args on fused ops
}
PROCESSES = {1: "CANN", 65537: "Ascend Hardware", 3: "Overlap Analysis", 4: "Model"}
SLICES = """
    select coalesce(tp.name, pp.name) as proc, coalesce(th.name, t.name) as track, s.ts, s.dur, s.name, s.depth,
           par.name as parent, s.category, s.arg_set_id
    from slice s join track t on s.track_id = t.id
    left join thread_track tt on tt.id = s.track_id left join thread th on th.utid = tt.utid
    left join process tp on tp.upid = th.upid
    left join process_track pt on pt.id = s.track_id left join process pp on pp.upid = pt.upid
    left join slice par on par.id = s.parent_id"""
FLOWS = """
    select so.name, so.ts, si.name, si.ts from flow f join slice so on f.slice_out = so.id
    join slice si on f.slice_in = si.id"""
COUNTERS = """
    select p.name, t.name, c.ts, c.value from counter c join process_counter_track t on c.track_id = t.id
    join process p using (upid)"""
PARTIAL_OVERLAPS = """
    select count(*) from (select ts, lag(ts + dur) over w as prev_end from slice
                          window w as (partition by track_id, depth order by ts, id))
    where prev_end is not null and ts < prev_end"""
BAD_STATS = "select name, value from stats where severity in ('error', 'data_loss') and value > 0"
THREADS = "select p.pid, t.tid, t.name from thread t join process p using (upid) where t.name is not null and p.pid"
ARGS = """
    select arg_set_id, key, int_value, string_value, real_value from args
    where arg_set_id in (select arg_set_id from slice)"""


@dataclass
class View:
    """What trace_processor made of one trace."""

    stats: list[tuple[Any, ...]]
    negative: int
    partial_overlaps: int
    processes: dict[int, str]
    threads: set[tuple[int, int, str]]
    slices: list[tuple[Any, ...]]  # proc, track, ts, dur, name, depth, parent
    categories: Counter[tuple[str, str, Any]]
    args: dict[tuple[Any, ...], dict[str, Any]]  # (proc, track, ts, depth) -> args without "args."/"debug."
    flows: list[tuple[Any, ...]]
    counters: dict[tuple[str, str], list[tuple[int, float]]]


def _view(tp: WasmTraceProcessor) -> View:
    rows = tp.rows(SLICES)
    by_set: dict[int, dict[str, Any]] = {}
    for set_id, k, i, s, r in tp.rows(ARGS):
        by_set.setdefault(set_id, {})[k.split(".", 1)[1]] = i if i is not None else s if s is not None else r
    counters: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for proc, name, ts, value in tp.rows(COUNTERS):
        counters.setdefault((proc, name), []).append((ts, value))
    return View(
        stats=tp.rows(BAD_STATS),
        negative=tp.scalar("select count(*) from slice where dur < 0"),
        partial_overlaps=tp.scalar(PARTIAL_OVERLAPS),
        processes=dict(tp.rows("select pid, name from process where pid != 0")),
        threads=set(tp.rows(THREADS)),
        slices=sorted(r[:7] for r in rows),
        categories=Counter((r[0], r[1], r[7]) for r in rows),
        args={(*r[:3], r[5]): by_set.get(r[8], {}) for r in rows},
        flows=sorted(tp.rows(FLOWS)),
        counters={k: sorted(v) for k, v in counters.items()},
    )


@dataclass
class Pair:
    case: str
    ops: pa.Table
    host_tid: int
    json: View
    proto: View
    raw: bytes
    packets: int


def _write_run(case: str, out: Path) -> tuple[pa.Table, int, int]:
    """Both traces of one run (every batch to both writers); returns the ops, host tid and packets written."""
    name, overrides = CASES[case]
    cfg = load_config(FIXTURES / name, overrides)
    sim = Simulation(cfg)
    streams = tuple(sorted({int(s) for pm in sim.phases.values() for s in pm.stream}))
    meta = TraceMeta(cfg.name, sim.device.name, sim.device.soc_version, cfg.execution.mode, streams)
    if case == "multi-stream":
        meta = TraceMeta(cfg.name, sim.device.name, sim.device.soc_version, cfg.execution.mode, (0,), 4242)
    out.mkdir(parents=True)
    proto = PerfettoTraceWriter()
    writers: list[ChromeTraceWriter | PerfettoTraceWriter] = [ChromeTraceWriter(), proto]
    for w in writers:
        w.open(out, meta)
    batches = []
    for batch in sim.batches():
        if case == "multi-stream":
            i = batch.schema.get_field_index("stream_id")
            sid = pc.if_else(pc.equal(pc.bit_wise_and(batch.column("op_index"), 1), 1), 3, 0)
            cols = [sid.cast(pa.int32()) if j == i else c for j, c in enumerate(batch.columns)]
            batch = pa.RecordBatch.from_arrays(cols, schema=batch.schema)
        batches.append(batch)
        for w in writers:
            w.write_batch(batch)
    for w in writers:
        w.close(sim.steps_table())
    return pa.Table.from_batches(batches), meta.host_tid, proto.packets


@pytest.fixture(scope="session", params=list(CASES))
def pair(
    request: pytest.FixtureRequest, tp_engine: WasmEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    case: str = request.param
    out = tmp_path_factory.mktemp("pftrace") / case
    ops, host_tid, packets = _write_run(case, out)
    with WasmTraceProcessor(trace=out / "trace.json.gz", engine=tp_engine) as tp:  # one trace at a time
        json_view = _view(tp)
    with WasmTraceProcessor(trace=out / "trace.pftrace", engine=tp_engine) as tp:
        proto_view = _view(tp)
    yield Pair(case, ops, host_tid, json_view, proto_view, (out / "trace.pftrace").read_bytes(), packets)


def test_strict_wire_decode(pair: Pair) -> None:
    trace = Trace.FromString(pair.raw)  # raises on a torn or garbled file, which trace_processor would accept
    assert len(trace.packet) == pair.packets
    with pytest.raises(DecodeError):
        Trace.FromString(pair.raw[:-3])


def test_loads_cleanly(pair: Pair) -> None:
    for view in (pair.json, pair.proto):
        assert view.stats == [], f"trace_processor reported problems: {view.stats}"
        assert view.negative == 0 and view.partial_overlaps == 0
    assert pair.proto.processes == PROCESSES
    h = pair.host_tid
    assert {(1, h, f"Thread {h}"), (1, h + 1, "Host steps")} <= pair.proto.threads
    assert {(4, 1, "Steps"), (4, 2, "Layers"), (4, 3, "Blocks")} <= pair.proto.threads
    assert pair.proto.threads == pair.json.threads  # the same thread tracks as the JSON trace, stream tids too


def test_nesting_as_designed(pair: Pair) -> None:
    """Only step frames have children (host overhead, sync); every other slice is at depth 0."""
    nested = Counter((s[0], s[1], s[4], s[5], s[6] and s[6].split(" ")[0]) for s in pair.proto.slices if s[5])
    assert set(nested) <= {("CANN", "Host steps", n, 1, "Step") for n in ("host overhead", "sync (D2H token)")}
    assert sum(nested.values()) > 0


def test_same_slices_per_process_and_track(pair: Pair) -> None:
    j, p = pair.json, pair.proto
    per_track = Counter(s[:2] for s in p.slices)
    assert per_track == Counter(s[:2] for s in j.slices)
    streams = {f"Stream {s}" for s in pc.unique(pair.ops["stream_id"]).to_pylist()}
    assert {t for proc, t in per_track if proc == "Ascend Hardware"} == streams
    assert sum(per_track[("Ascend Hardware", t)] for t in streams) == pair.ops.num_rows
    assert Counter(s[4] for s in p.slices) == Counter(s[4] for s in j.slices)  # names
    assert p.slices == j.slices  # ts, dur (exact ns), name, depth and parent on every track


def test_device_slice_times_are_exact_ns(pair: Pair) -> None:
    o = pair.ops
    want = sorted(
        zip(o["task_start_ns"].to_pylist(), o["task_dur_ns"].to_pylist(), o["op_name"].to_pylist(), strict=True)
    )
    got = sorted((s[2], s[3], s[4]) for s in pair.proto.slices if s[0] == "Ascend Hardware")
    assert got == want


def _same(a: Any, b: Any) -> bool:
    """Equal; reals within 1e-12 (trace_processor's JSON number parser can be 1 ulp off the nearest double)."""
    return bool(a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-12)))


def test_same_args(pair: Pair) -> None:
    """Every debug annotation equals the JSON arg of the same name (device slices and host launches)."""
    j, p = pair.json, pair.proto
    assert p.categories == j.categories
    assert set(p.args) == set(j.args)
    for key, args in p.args.items():
        want = j.args[key]
        wrong = {k: (v, want.get(k)) for k, v in args.items() if not _same(v, want.get(k))}
        assert wrong == {}, key
    per_op = len(INT_KEYS) + len(RATIO_KEYS) + len(STR_KEYS)  # + fused_from when not empty; item_id per launch
    fused = sum(1 for f in pair.ops["fused_from"].to_pylist() if f)
    launched = pair.ops.num_rows - pair.ops["host_launch_start_ns"].null_count
    numerics = sum(k.startswith("numerics_") for a in p.args.values() for k in a)  # run --numerics: fused kernels
    assert sum(map(len, p.args.values())) == per_op * pair.ops.num_rows + fused + launched + numerics


def test_same_flows(pair: Pair) -> None:
    assert pair.proto.flows == pair.json.flows
    launched = pair.ops.num_rows - pair.ops["host_launch_start_ns"].null_count
    assert len(pair.proto.flows) == launched
    assert (launched == 0) == (pair.case == "graph-mode")


def test_same_counters(pair: Pair) -> None:
    j, p = pair.json, pair.proto
    assert set(p.counters) == {("Ascend Hardware", "HBM bandwidth GB/s"), ("Ascend Hardware", "AI Core utilization %")}
    assert set(j.counters) == set(p.counters)
    for k in p.counters:
        assert [ts for ts, _ in p.counters[k]] == [ts for ts, _ in j.counters[k]], k
        assert all(_same(a, b) for (_, a), (_, b) in zip(p.counters[k], j.counters[k], strict=True)), k
        assert all(round(v, 3) == v for _, v in p.counters[k])  # the nearest doubles to the JSON's 3 decimals
