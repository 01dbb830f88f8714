"""ChromeTraceWriter: msprof-layout Chrome JSON trace, streamed, gzip, atomic, deterministic."""

from __future__ import annotations

import gzip
import itertools
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from atbprof.errors import SchemaError
from atbprof.optable.schema import OPS_SCHEMA, PIPES, STEPS_SCHEMA
from atbprof.writers import chrome
from atbprof.writers.base import TraceMeta
from atbprof.writers.chrome import PID_DEVICE, ChromeTraceWriter

HEAD_PRE = [("head.embed", "GatherV2", "AI_VECTOR_CORE")]
LAYER = [
    ("attn.norm", "RmsNorm", "AI_VECTOR_CORE"),
    ("attn.qkv", "MatMulV2", "AI_CORE"),
    ("attn.fa", "FusedInferAttentionScore", "MIX_AIC"),
    ("attn.o", "MatMulV2", "AI_CORE"),
    ("ffn.norm", "AddRmsNorm", "AI_VECTOR_CORE"),
    ("ffn.gate_up", "MatMulV2", "AI_CORE"),
    ("ffn.act", "SwiGlu", "AI_VECTOR_CORE"),
    ("ffn.down", "MatMulV2", "AI_CORE"),
]
HEAD_POST = [("head.norm", "RmsNorm", "AI_VECTOR_CORE"), ("head.lm", "MatMulV2", "AI_CORE")]
HEAD_POST += [("head.sample", "ArgMaxV2", "AI_CPU")]
META = TraceMeta(run_name="t", device_name="910B3", soc_version="Ascend910B3", execution_mode="eager", host_tid=7)


def make_ops(
    n_steps: int = 2, n_layers: int = 2, graph_steps: tuple[int, ...] = (), seed: int = 0
) -> tuple[pa.Table, pa.Table]:
    """A plausible op table: host launches ahead of sequential device tasks, gaps (some 0 = touching)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    t, dev_end = 1_234, 0
    for step in range(n_steps):
        phase = "prefill" if step == 0 else "decode"
        host_start, overhead = t, 20_000 + rng.randrange(1_000)
        h, first = host_start + overhead, len(rows)
        plan = [(-1, *r) for r in HEAD_PRE] + [(ly, *r) for ly in range(n_layers) for r in LAYER]
        for layer, role, op_type, task_type in plan + [(-1, *r) for r in HEAD_POST]:
            i = len(rows)
            launch, ldur = h, 3_000 + rng.randrange(5_000)
            h += ldur + rng.randrange(500)
            gap = 0 if rng.randrange(3) == 0 else rng.randrange(1, 2_000)
            start = max(launch + ldur + 1_000, dev_end + gap)
            dur = 2_000 + rng.randrange(30_000)
            graph = step in graph_steps
            row: dict[str, Any] = dict(op_index=i, step=step, phase=phase, layer=layer, node_id=i % 50, role=role)
            row |= dict(op_name='Weird"Na\\me' if i == 3 else f"{op_type}_{layer}", op_type=op_type)
            row |= dict(task_type=task_type, stream_id=2, task_id=i % 65536, task_start_ns=start, task_dur_ns=dur)
            row |= dict(task_wait_ns=start - dev_end, block_dim=20, mix_block_dim=0, kv_len=16 + step)
            row |= dict(host_launch_start_ns=None if graph else launch, host_launch_dur_ns=None if graph else ldur)
            row |= dict(input_shapes='"1,4096;4096,4096"', input_dtypes="DT_BF16;DT_BF16")
            row |= dict(output_shapes='"1,4096"', output_dtypes="DT_BF16", bound="memory")
            row |= dict(flops=rng.randrange(10**9), hbm_read_bytes=rng.randrange(10**7))
            row |= dict(hbm_write_bytes=rng.randrange(10**6), fused_from=["Add", "RmsNorm"] * (op_type == "AddRmsNorm"))
            row |= {f"{p}_time_ns": dur // 3 for p in PIPES} | {f"{p}_ratio": rng.random() for p in PIPES}
            rows.append(row)
            dev_end = start + dur
        sync_end = dev_end + 15_000
        srow = dict(step=step, phase=phase, kv_len=16 + step, tokens=16 if step == 0 else 1, op_count=len(rows) - first)
        srow |= dict(host_start_ns=host_start, host_overhead_ns=overhead, first_op_index=first, sync_end_ns=sync_end)
        steps.append(srow | dict(device_start_ns=rows[first]["task_start_ns"], device_end_ns=dev_end))
        t = sync_end + 2_000
    return pa.Table.from_pylist(rows, schema=OPS_SCHEMA), pa.Table.from_pylist(steps, schema=STEPS_SCHEMA)


def write(tmp: Path, ops: pa.Table, steps: pa.Table, cuts: tuple[int, ...] = ()) -> bytes:
    """Write `ops` cut into batches at row offsets `cuts`; return the file's bytes."""
    tmp.mkdir(parents=True, exist_ok=True)
    w = ChromeTraceWriter()
    w.open(tmp, META)
    for a, b in zip((0, *cuts), (*cuts, ops.num_rows), strict=True):
        for batch in ops.slice(a, b - a).to_batches():
            w.write_batch(batch)
    w.close(steps)
    return (tmp / w.filename).read_bytes()


def replace(ops: pa.Table, name: str, values: list[Any]) -> pa.Table:
    field = OPS_SCHEMA.field(name)
    return ops.set_column(ops.schema.get_field_index(name), field, pa.array(values, field.type))


def load(raw: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(gzip.decompress(raw))
    return doc


def ns(v: float) -> int:
    return round(v * 1000)


def span(e: dict[str, Any]) -> tuple[int, int]:
    return ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, pa.Table, dict[str, Any], bytes]:
    ops, steps = make_ops(n_steps=3, n_layers=2, graph_steps=(2,))  # step 2 without host launches
    raw = write(tmp_path_factory.mktemp("run"), ops, steps)
    return ops, steps, load(raw), raw


def test_container_metadata_and_number_format(run: Any) -> None:
    _, _, doc, raw = run
    assert raw[:2] == b"\x1f\x8b" and raw[4:8] == b"\0\0\0\0"  # gzip with mtime 0
    assert doc["displayTimeUnit"] == "ns" and doc["otherData"]["run_name"] == "t"
    text = gzip.decompress(raw).decode()
    assert text.startswith('{"traceEvents":[\n{') and ",\n]" not in text
    times = re.findall(r'"(?:ts|dur)":([^,}]*)', text)
    assert times and all(re.fullmatch(r"\d+\.\d{3}", v) for v in times)
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    assert {e["args"]["name"] for e in meta if e["name"] == "process_name"} == {
        "CANN", "Ascend Hardware", "Overlap Analysis", "Model",
    }  # fmt: skip
    threads = {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "thread_name"}
    assert {(PID_DEVICE, "Stream 2"), (1, "Thread 7"), (3, "Computing"), (3, "Free"), (4, "Layers")} <= threads
    kinds = Counter(e["name"] for e in meta)
    assert kinds["process_labels"] == kinds["process_sort_index"] == 4
    assert kinds["thread_name"] == kinds["thread_sort_index"]


def test_slices_well_formed_and_nested(run: Any) -> None:
    events = run[2]["traceEvents"]
    assert all(e.get("tid", 1) != 0 for e in events)
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0
            tracks[e["pid"], e["tid"]].append(span(e))
    assert len(tracks) == 8  # launches, host steps, stream 2, computing, free, steps, layers, blocks
    for key, spans in tracks.items():
        stack: list[int] = []
        for a, z in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= a:
                stack.pop()
            assert not stack or z <= stack[-1], f"partial overlap on {key} at {a}"
            stack.append(z)


def test_device_host_and_flows(run: Any) -> None:
    ops, _, doc, _ = run
    events = doc["traceEvents"]
    dev = [e for e in events if e["ph"] == "X" and e["pid"] == PID_DEVICE]
    host = [e for e in events if e["ph"] == "X" and e["name"] == "Node@launch"]
    launched = ops.num_rows - ops["host_launch_start_ns"].null_count
    assert len(dev) == ops.num_rows and len(host) == launched < ops.num_rows
    for e, r in zip(dev, ops.to_pylist(), strict=True):
        assert e["name"] == r["op_name"] and e["tid"] == 2 and e["cat"] == "Task"
        assert span(e) == (r["task_start_ns"], r["task_start_ns"] + r["task_dur_ns"])
        a = e["args"]
        assert a["connection_id"] == r["op_index"] + 1 and a["Model Id"] == 4294967295
        assert (a["Task Type"], a["OP Type"], a["role"]) == (r["task_type"], r["op_type"], r["role"])
        assert (a["Physic Stream Id"], a["Task Id"], a["Block Dim"]) == (2, r["task_id"], r["block_dim"])
        assert a["hbm_bytes"] == r["hbm_read_bytes"] + r["hbm_write_bytes"] and a["flops"] == r["flops"]
        assert (a["layer"], a["step"], a["bound"]) == (r["layer"], r["step"], r["bound"])
        assert a["Input Shapes"] == r["input_shapes"] and a["Output Data Types"] == r["output_dtypes"]
        assert a["aic_mac_ratio"] == round(r["mac_ratio"], 3) and a["mte2_ratio"] == round(r["mte2_ratio"], 3)
        assert a.get("fused_from") == ("+".join(r["fused_from"]) or None)
    for e, r in zip(host, [r for r in ops.to_pylist() if r["host_launch_start_ns"] is not None], strict=True):
        assert span(e) == (r["host_launch_start_ns"], r["host_launch_start_ns"] + r["host_launch_dur_ns"])
        assert e["args"] == {"item_id": r["op_name"], "level": "node", "connection_id": r["op_index"] + 1}
    s_events = [e for e in events if e["ph"] == "s"]
    s = {e["id"]: e for e in s_events}
    f = [e for e in events if e["ph"] == "f"]
    assert len(s) == len(s_events) == len(f) == launched and {e["id"] for e in f} == set(s)
    launch_span = {e["args"]["connection_id"]: span(e) for e in host}
    dev_span = {e["args"]["connection_id"]: span(e) for e in dev}
    for e in f:
        src = s[e["id"]]
        assert e["bp"] == "e" and e["cat"] == src["cat"] == "HostToDevice" and e["name"] == src["name"]
        assert (src["pid"], src["tid"], e["pid"], e["tid"]) == (1, 7, PID_DEVICE, 2)
        assert launch_span[e["id"]][0] <= ns(src["ts"]) < launch_span[e["id"]][1]
        assert dev_span[e["id"]][0] <= ns(e["ts"]) < dev_span[e["id"]][1]


def test_overlap_analysis_covers_device_span(run: Any) -> None:
    ops, _, doc, _ = run
    spans = sorted((*span(e), e["name"]) for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 3)
    rows = ops.to_pylist()
    assert spans[0][0] == rows[0]["task_start_ns"]
    assert spans[-1][1] == max(r["task_start_ns"] + r["task_dur_ns"] for r in rows)
    assert all(a[1] == b[0] and a[2] != b[2] for a, b in itertools.pairwise(spans))  # alternate, no holes
    assert all(z > a for a, z, _ in spans)
    gaps = sum(1 for a, b in itertools.pairwise(rows) if b["task_start_ns"] > a["task_start_ns"] + a["task_dur_ns"])
    assert sum(1 for *_, name in spans if name == "Free") == gaps  # touching tasks coalesce


def test_model_tracks_counters_and_host_steps(run: Any) -> None:
    events = run[2]["traceEvents"]
    names = defaultdict(list)
    for e in events:
        if e["ph"] == "X" and e["pid"] in (1, 4):
            names[e["pid"], e["tid"]].append(e["name"])
    assert names[4, 1] == ["Step 0 (prefill)", "Step 1 (decode)", "Step 2 (decode)"]  # as the host step frames
    assert names[4, 2] == ["head", "layer 0", "layer 1", "head"] * 3
    assert names[4, 3] == ["head", *["attention", "ffn"] * 2, "head"] * 3
    host_steps = names[1, 8]
    assert host_steps.count("host overhead") == host_steps.count("sync (D2H token)") == 3
    assert [n for n in host_steps if n.startswith("Step")] == ["Step 0 (prefill)", "Step 1 (decode)", "Step 2 (decode)"]
    counters = [e for e in events if e["ph"] == "C"]
    assert all(e["pid"] == PID_DEVICE and "tid" not in e for e in counters)
    bw = [e["args"]["GB/s"] for e in counters if e["name"] == "HBM bandwidth"]
    util = [e["args"]["%"] for e in counters if e["name"] == "AI Core utilization"]
    assert len(bw) == len(util) == 18 + 3 and all(v >= 0 for v in bw + util)  # per block + 0 per step end
    assert bw.count(0) >= 3 and 0 < max(util) <= 100


def test_batching_and_chunking_do_not_change_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ops, steps = make_ops(n_steps=3, n_layers=3, graph_steps=(1,), seed=3)
    ref = write(tmp_path / "a", ops, steps)
    assert write(tmp_path / "b", ops, steps) == ref  # deterministic across runs
    for i, cuts in enumerate([(7, 40), (1, 2, 37, 38), (ops.num_rows - 1,)]):
        assert write(tmp_path / f"c{i}", ops, steps, cuts) == ref
    for chunk, group_chunk in ((4, 1 << 16), (3, 7), (1, 1)):  # groups and busy intervals cross many chunks
        monkeypatch.setattr(chrome, "_CHUNK", chunk)
        monkeypatch.setattr(chrome, "_GROUP_CHUNK", group_chunk)
        assert write(tmp_path / f"d{chunk}", ops, steps, (20,)) == ref
    monkeypatch.setattr(chrome, "_GZ_BLOCK", 1000)
    assert gzip.decompress(write(tmp_path / "e", ops, steps)) == gzip.decompress(ref)


def test_failure_leaves_nothing(tmp_path: Path) -> None:
    ops, _ = make_ops()
    w = ChromeTraceWriter()
    w.open(tmp_path, META)
    w.write_batch(ops.to_batches()[0])
    with pytest.raises(SchemaError):
        w.write_batch(ops.drop_columns(["flops"]).to_batches()[0])
    assert list(tmp_path.iterdir()) == []
    w = ChromeTraceWriter(compresslevel=3)
    w.open(tmp_path, META)
    w.write_batch(ops.to_batches()[0])
    w.abort()
    assert list(tmp_path.iterdir()) == []
    w.open(tmp_path, META)
    bad = replace(ops, "task_start_ns", [-5] * ops.num_rows)
    with pytest.raises(ValueError, match="negative"):
        w.write_batch(bad.to_batches()[0])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="compresslevel"):
        ChromeTraceWriter(compresslevel=0)


def test_stream_zero_graph_mode_odd_ratios_and_empty_run(tmp_path: Path) -> None:
    ops, steps = make_ops(n_steps=1, n_layers=1, graph_steps=(0,))
    ops = replace(ops, "stream_id", [0] * ops.num_rows)
    ops = replace(ops, "mac_ratio", [1.5, math.nan] + [0.25] * (ops.num_rows - 2))
    doc = load(write(tmp_path / "z", ops, steps))
    events = doc["traceEvents"]
    dev = [e for e in events if e["ph"] == "X" and e["pid"] == PID_DEVICE]
    assert {e["tid"] for e in dev} == {chrome.STREAM0_TID} and dev[0]["args"]["Physic Stream Id"] == 0
    assert [e["args"]["aic_mac_ratio"] for e in dev[:3]] == [1.5, 0.0, 0.25]
    assert not [e for e in events if e["ph"] in "sf" or e["name"] == "Node@launch"]
    assert any(e["name"] == "thread_name" and e["args"]["name"] == "Stream 0" for e in events)
    w = ChromeTraceWriter()
    w.open(tmp_path, META)
    w.close(steps.slice(0, 0))
    assert {e["ph"] for e in load((tmp_path / w.filename).read_bytes())["traceEvents"]} == {"M"}
