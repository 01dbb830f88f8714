"""PerfettoTraceWriter: TrackEvent protobuf trace, hand-encoded hot path, streamed, atomic, byte-deterministic.

Traces are decoded strictly with the generated classes and replayed like a trace processor (sort by timestamp,
file order among equals; END closes the innermost open slice of its track), then compared with the op table.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import DebugAnnotation, Trace, TrackDescriptor, TrackEvent

from atbprof.errors import SchemaError
from atbprof.optable.schema import OPS_SCHEMA, PIPES
from atbprof.writers import perfetto, protowire
from atbprof.writers.base import TraceMeta
from atbprof.writers.chrome import PID_DEVICE, RATIO_KEYS
from atbprof.writers.perfetto import PerfettoTraceWriter
from tests.conftest import fixture_config, simulate_table

META = TraceMeta(run_name="t", device_name="910B3", soc_version="Ascend910B3", execution_mode="eager", host_tid=7)
KINDS = ("event_names", "event_categories", "debug_annotation_names", "debug_annotation_string_values")


@dataclass
class Slice:
    track: int
    name: str
    ts: int
    dur: int
    depth: int
    cats: list[str]
    args: dict[str, Any]
    flows: list[int]
    ends_flows: list[int]


@dataclass
class Decoded:
    packets: int
    tracks: dict[int, TrackDescriptor]
    slices: list[Slice] = field(default_factory=list)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))

    def on(self, track_name: str) -> list[Slice]:
        uuids = {u for u, d in self.tracks.items() if (d.name or d.thread.thread_name) == track_name}
        return sorted((s for s in self.slices if s.track in uuids), key=lambda s: (s.ts, s.depth))


def _value(a: DebugAnnotation, strings: dict[int, bytes]) -> Any:
    (fd, value), *rest = [(f, v) for f, v in a.ListFields() if f.name not in ("name_iid", "name")]
    assert not rest
    return strings[value].decode() if fd.name == "string_value_iid" else value


def decode(raw: bytes) -> Decoded:
    """Strict decode; every iid and track must be defined before it is used."""
    trace = Trace.FromString(raw)
    tables: dict[str, dict[int, Any]] = {k: {} for k in KINDS}
    out = Decoded(len(trace.packet), {})
    events: list[tuple[int, int, Any, dict[str, Any]]] = []
    for i, p in enumerate(trace.packet):
        if p.sequence_flags & 1:
            assert i == 0 and all(not t for t in tables.values())
        for kind in KINDS:
            for entry in getattr(p.interned_data, kind):
                assert entry.iid not in tables[kind], (kind, entry.iid)
                tables[kind][entry.iid] = entry.str if kind == KINDS[3] else entry.name
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in out.tracks and (not d.parent_uuid or d.parent_uuid in out.tracks)
            out.tracks[d.uuid] = d
        if p.HasField("track_event"):
            te = p.track_event
            assert p.trusted_packet_sequence_id == 1 and p.sequence_flags == 2 and te.track_uuid in out.tracks
            names, strings = tables["debug_annotation_names"], tables[KINDS[3]]
            ev: dict[str, Any] = {"name": tables["event_names"][te.name_iid] if te.name_iid else None}
            ev["cats"] = [tables["event_categories"][c] for c in te.category_iids]
            ev["args"] = {names[a.name_iid]: _value(a, strings) for a in te.debug_annotations}
            assert len(ev["args"]) == len(te.debug_annotations) and None not in ev["args"]
            events.append((p.timestamp, i, te, ev))
    stacks: dict[int, list[tuple[int, Any, dict[str, Any]]]] = defaultdict(list)
    for ts, _, te, ev in sorted(events, key=lambda e: e[:2]):
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            stacks[te.track_uuid].append((ts, te, ev))
        elif te.type == TrackEvent.TYPE_SLICE_END:
            t0, b, bev = stacks[te.track_uuid].pop()
            depth = len(stacks[te.track_uuid])
            flows = (list(b.flow_ids), list(b.terminating_flow_ids))
            out.slices.append(Slice(b.track_uuid, bev["name"], t0, ts - t0, depth, bev["cats"], bev["args"], *flows))
        else:
            assert te.type == TrackEvent.TYPE_COUNTER
            out.counters[te.track_uuid].append((ts, te.double_counter_value))
    assert not any(stacks.values()), "unterminated slices"
    assert all(len(set(t.values())) == len(t) for t in tables.values()), "a text interned twice"
    return out


def write(tmp: Path, ops: pa.Table, steps: pa.Table, cuts: tuple[int, ...] = (), meta: TraceMeta = META) -> bytes:
    """Write `ops` cut into batches at row offsets `cuts`; return the file's bytes (packet count checked)."""
    tmp.mkdir(parents=True, exist_ok=True)
    w = PerfettoTraceWriter()
    w.open(tmp, meta)
    for a, b in zip((0, *cuts), (*cuts, ops.num_rows), strict=True):
        for batch in ops.slice(a, b - a).to_batches():
            w.write_batch(batch)
    w.close(steps)
    raw = (tmp / w.filename).read_bytes()
    assert len(Trace.FromString(raw).packet) == w.packets
    return raw


def replace(ops: pa.Table, name: str, values: list[Any]) -> pa.Table:
    f = OPS_SCHEMA.field(name)
    return ops.set_column(ops.schema.get_field_index(name), f, pa.array(values, f.type))


@pytest.fixture(scope="module")
def tiny() -> tuple[pa.Table, pa.Table]:
    sim, ops = simulate_table(fixture_config("tiny-llama.yaml"))
    return ops, sim.steps_table()


@pytest.fixture(scope="module")
def run(tiny: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, pa.Table, Decoded]:
    ops, steps = tiny  # step 3 as in graph mode (no host launches)
    graph = pc.equal(ops["step"], 3)
    for k in ("host_launch_start_ns", "host_launch_dur_ns"):
        ops = replace(ops, k, pc.if_else(graph, pa.scalar(None, pa.int64()), ops[k]).to_pylist())
    ops = replace(ops, "op_name", ['We"ird\\ näme' if i == 3 else n for i, n in enumerate(ops["op_name"].to_pylist())])
    return ops, steps, decode(write(tmp_path_factory.mktemp("run"), ops, steps, (50,)))


def test_track_hierarchy_and_ordering(run: Any) -> None:
    tracks = run[2].tracks
    procs = {d.process.pid: (u, d) for u, d in tracks.items() if d.HasField("process")}
    assert {pid: d.process.process_name for pid, (_, d) in procs.items()} == {
        1: "CANN", PID_DEVICE: "Ascend Hardware", 3: "Overlap Analysis", 4: "Model",
    }  # fmt: skip
    assert all(d.child_ordering == TrackDescriptor.EXPLICIT for _, d in procs.values())
    children: dict[str, list[str]] = defaultdict(list)
    for d in sorted(tracks.values(), key=lambda d: d.sibling_order_rank):
        if d.parent_uuid:
            children[tracks[d.parent_uuid].process.process_name].append(d.name or d.thread.thread_name)
    assert children == {
        "CANN": ["Host steps", "Thread 7"],
        "Ascend Hardware": ["Stream 2", "AI Core utilization %", "HBM bandwidth GB/s"],
        "Overlap Analysis": ["Computing", "Free"],
        "Model": ["Steps", "Layers", "Blocks"],
    }
    threads = {(d.thread.pid, d.thread.tid) for d in tracks.values() if d.HasField("thread")}
    # thread tracks as in the JSON trace (the UI orders a process's threads by tid, its other tracks by name)
    assert threads == {(1, 7), (1, 8), (PID_DEVICE, 2), (3, 1), (3, 2), (4, 1), (4, 2), (4, 3)}
    units = {d.name: d.counter.unit_name for d in tracks.values() if d.HasField("counter")}
    assert units == {"HBM bandwidth GB/s": "GB/s", "AI Core utilization %": "%"}


def test_device_slices_annotations_and_flows(run: Any) -> None:
    ops, _, dec = run
    rows = ops.to_pylist()
    dev = dec.on("Stream 2")
    assert [(s.name, s.ts, s.dur, s.depth) for s in dev] == [
        (r["op_name"], r["task_start_ns"], r["task_dur_ns"], 0) for r in rows
    ]
    launched = [r for r in rows if r["host_launch_start_ns"] is not None]
    assert 0 < len(launched) < len(rows)
    host = dec.on("Thread 7")
    assert [(s.name, s.ts, s.dur, s.args, s.flows) for s in host] == [
        (
            "Node@launch",
            r["host_launch_start_ns"],
            r["host_launch_dur_ns"],
            {"item_id": r["op_name"]},
            [r["op_index"] + 1],
        )
        for r in launched
    ]
    for s, r in zip(dev, rows, strict=True):
        assert s.cats == ["Task"] and s.flows == []
        assert s.ends_flows == ([r["op_index"] + 1] if r["host_launch_start_ns"] is not None else [])
        want = {"Task Id": r["task_id"], "layer": r["layer"], "step": r["step"], "Block Dim": r["block_dim"]}
        want |= {"hbm_bytes": r["hbm_read_bytes"] + r["hbm_write_bytes"], "flops": r["flops"]}
        want |= {RATIO_KEYS[p]: round(r[f"{p}_ratio"] * 1000) / 1000 for p in PIPES}
        want |= {"Task Type": r["task_type"], "OP Type": r["op_type"], "role": r["role"], "bound": r["bound"]}
        want |= {"Input Shapes": r["input_shapes"], "Input Data Types": r["input_dtypes"]}
        want |= {"Output Shapes": r["output_shapes"], "Output Data Types": r["output_dtypes"]}
        want |= {"fused_from": "+".join(r["fused_from"])} if r["fused_from"] else {}
        assert s.args == want
    assert any(s.args.get("fused_from") for s in dev) and any(s.args["layer"] == -1 for s in dev)


def test_overlap_model_counters_and_host_steps(run: Any) -> None:
    ops, steps, dec = run
    busy = dec.on("Computing")
    free = dec.on("Free")
    spans = sorted([(s.ts, s.ts + s.dur, "C") for s in busy] + [(s.ts, s.ts + s.dur, "F") for s in free])
    assert spans[0][0] == ops["task_start_ns"][0].as_py() and spans[-1][2] == "C"
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in itertools.pairwise(spans))
    n_steps = steps.num_rows
    assert [s.name for s in dec.on("Steps")] == ["Step 0 (prefill)", *(f"Step {i} (decode)" for i in range(1, n_steps))]
    assert [s.name for s in dec.on("Layers")][:4] == ["head", "layer 0", "layer 1", "head"]
    assert {s.name for s in dec.on("Blocks")} == {"head", "attention", "ffn"}
    frames = dec.on("Host steps")
    assert [s.name for s in frames if s.depth == 0] == [f"Step {r['step']} ({r['phase']})" for r in steps.to_pylist()]
    assert {s.name for s in frames if s.depth == 1} == {"host overhead", "sync (D2H token)"}
    n_blocks = len(dec.on("Blocks"))
    uuid = {d.name: u for u, d in dec.tracks.items()}
    for name, top in (("HBM bandwidth GB/s", math.inf), ("AI Core utilization %", 100.0)):
        samples = dec.counters[uuid[name]]
        assert len(samples) == n_blocks + n_steps and all(0 <= v <= top for _, v in samples)
        assert sum(v == 0 for _, v in samples) >= n_steps and max(v for _, v in samples) > 0


def test_batching_and_chunking_do_not_change_bytes(tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ops, steps = tiny
    ref = write(tmp_path / "a", ops, steps)
    assert write(tmp_path / "b", ops, steps) == ref  # deterministic across runs
    for i, cuts in enumerate([(40, 90), (1, 2, 37, 38), (ops.num_rows - 1,)]):  # 1 batch vs 3 batches, ...
        assert write(tmp_path / f"c{i}", ops, steps, cuts) == ref
    for chunk in (1, 3, 26):  # groups, busy intervals and first uses of names cross many chunks
        monkeypatch.setattr(perfetto, "_CHUNK", chunk)
        assert write(tmp_path / f"d{chunk}", ops, steps, (20,)) == ref
    for dense in (0.0, 2.0):  # busy intervals encoded with the ops / apart
        monkeypatch.setattr(perfetto, "_DENSE", dense)
        assert write(tmp_path / f"e{dense}", ops, steps, (20,)) == ref


def test_failure_leaves_nothing(tiny: Any, tmp_path: Path) -> None:
    ops, _ = tiny
    w = PerfettoTraceWriter()
    w.open(tmp_path, META)
    w.write_batch(ops.to_batches()[0])
    with pytest.raises(SchemaError):
        w.write_batch(ops.drop_columns(["flops"]).to_batches()[0])
    assert list(tmp_path.iterdir()) == []
    w = PerfettoTraceWriter()
    w.open(tmp_path, META)
    w.write_batch(ops.to_batches()[0])
    w.abort()
    assert list(tmp_path.iterdir()) == []
    w.open(tmp_path, META)
    with pytest.raises(ValueError, match="negative"):
        w.write_batch(replace(ops, "task_start_ns", [-5] * ops.num_rows).to_batches()[0])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="host_tid"):
        PerfettoTraceWriter().open(tmp_path, TraceMeta("t", "d", "s", "eager", host_tid=0))


def test_stream_zero_new_streams_odd_ratios_and_empty_run(tiny: Any, tmp_path: Path) -> None:
    ops, steps = tiny
    n = ops.num_rows
    ops = replace(ops, "stream_id", [0 if i % 3 else 5 for i in range(n)])
    ops = replace(ops, "mac_ratio", [1.5, math.nan, -0.2, math.inf] + [0.25] * (n - 4))
    dec = decode(write(tmp_path / "z", ops, steps))  # META declares stream 2 only: 0 and 5 are found on the way
    names = {d.name or d.thread.thread_name for d in dec.tracks.values()}
    assert {"Stream 0", "Stream 2", "Stream 5"} <= names
    assert len(dec.on("Stream 0")) + len(dec.on("Stream 5")) == n and dec.on("Stream 2") == []
    mac = [s.args["aic_mac_ratio"] for s in sorted(dec.on("Stream 0") + dec.on("Stream 5"), key=lambda s: s.ts)]
    assert mac[:5] == [1.5, 0.0, 0.0, float(1 << 40) / 1000, 0.25]
    w = PerfettoTraceWriter()
    w.open(tmp_path, META)
    w.close(steps.slice(0, 0))
    empty = decode((tmp_path / w.filename).read_bytes())
    assert empty.packets == w.packets and empty.slices == [] and not empty.counters


def test_protowire_matches_the_generated_classes() -> None:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

    rng = np.random.default_rng(0)
    n = 500
    ts = rng.integers(0, 1 << 62, n)
    ts[:6] = [0, 1, 127, 128, 16383, 16384]
    ival = rng.integers(-(1 << 40), 1 << 62, n)
    ival[:3] = [-1, np.iinfo(np.int64).min, np.iinfo(np.int64).max]
    dbl, some = rng.normal(size=n), rng.random(n) < 0.5
    te = protowire.field_msg(4, [*protowire.field_varint(1, 3), *protowire.field_varint(4, ival)])
    te += protowire.field_msg(4, [*protowire.field_varint(1, 4), *protowire.field_fixed64(5, dbl)], ~some)
    te += [*protowire.field_varint(9, 1), *protowire.field_varint(11, ts), *protowire.field_fixed64(47, ts, some)]
    msg = protowire.field_msg(1, [*protowire.field_varint(8, ts), *protowire.field_msg(11, te)], some | (ts % 3 > 0))
    raw, sizes = protowire.encode(msg, n)
    want = b""
    for i in range(n):
        if not (some[i] or ts[i] % 3):
            continue
        p = TracePacket(timestamp=int(ts[i]))
        e = p.track_event
        e.type, e.track_uuid = 1, int(ts[i])
        if some[i]:
            e.flow_ids.append(int(ts[i]))
        e.debug_annotations.add(name_iid=3, int_value=int(ival[i]))
        if not some[i]:
            e.debug_annotations.add(name_iid=4, double_value=float(dbl[i]))
        want += Trace(packet=[p]).SerializeToString()
    assert raw.tobytes() == want and int(sizes.sum()) == len(want)
    assert protowire.varint(-1) == b"\xff" * 9 + b"\x01" and protowire.varint(300) == b"\xac\x02"


def test_strings_are_interned_once(tiny: Any, tmp_path: Path) -> None:
    ops, steps = tiny
    raw = write(tmp_path, ops, steps)
    assert raw.count(b"Node@launch") == raw.count(b"Input Shapes") == 1
    dec = decode(raw)  # checks that no text is interned twice
    assert len(dec.slices) > 4 * len(set(ops["op_name"].to_pylist()))
