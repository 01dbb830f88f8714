"""trace_view.json / msprof_*.json: Ascend conventions (bit-packed pids named by metadata, string ts, flows)."""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from atbprof.export import ExportResult, ExportTarget
from atbprof.export.framework import framework_call
from atbprof.export.timeline import SORT_INDEX
from tests.export.helpers import load_json, processes, rel_ns, rows, us_to_ns

Exported = Callable[[str, ExportTarget], ExportResult]
TRACE = Path("ASCEND_PROFILER_OUTPUT") / "trace_view.json"


def _msprof_json(result: ExportResult) -> Path:
    return next(p for p in result.files if re.fullmatch(r"msprof_\d{14}\.json", p.name))


def _by_pid(events: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        out[e["pid"]].append(e)
    return out


def _check_pids(events: list[dict[str, Any]], layers: set[str], host_device: int) -> int:
    """Every pid is (os_pid << 10) | (sort_index << 5) | device_id, with the sort index from the metadata."""
    procs = processes(events)
    assert set(procs) == layers
    sort = {e["pid"]: e["args"]["sort_index"] for e in events if e.get("name") == "process_sort_index"}
    os_pids = {pid >> 10 for name, pid in procs.items() if name != "Python"}
    assert len(os_pids) == 1
    os_pid = os_pids.pop()
    for name, pid in procs.items():
        assert sort[pid] == SORT_INDEX[name]
        if name == "Python":  # torch_npu's own layer uses the raw os pid
            assert pid == os_pid
        else:
            device = host_device if name == "CANN" else 0
            assert pid == (os_pid << 10) | (SORT_INDEX[name] << 5) | device
    assert {e["pid"] for e in events} <= set(procs.values()), "every pid is named by process_name metadata"
    return os_pid


def test_trace_view_conventions(exported: Exported, make_run: Callable[[str], Path]) -> None:
    result = exported("tiny-none", "ascend-pt")
    raw = (result.root / TRACE).read_bytes()
    assert raw.startswith(b'[{"ph": "M", "name": "process_name"') and raw.endswith(b"}]") and b"\n" not in raw
    events = load_json(result.root / TRACE)
    assert isinstance(events, list) and len(events) == result.trace_events
    layers = {"Python", "CANN", "Ascend Hardware", "AI Core Freq", "Overlap Analysis"}
    os_pid = _check_pids(events, layers, host_device=0)
    for e in events:
        if "ts" in e:
            assert isinstance(e["ts"], str) and re.fullmatch(r"\d{16}\.\d{3}", e["ts"]), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], float | int) and e["dur"] >= 0
    procs, by_pid = processes(events), _by_pid(events)
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    tasks = [e for e in by_pid[procs["Ascend Hardware"]] if e["ph"] == "X"]
    kernels = rows(result.root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv")
    assert len(tasks) == len(kernels) == result.op_rows
    for t, k in zip(tasks, kernels, strict=True):
        assert t["name"] == k["Name"] and t["ts"] == k["Start Time(us)"].strip()
        assert us_to_ns(str(t["dur"])) == us_to_ns(k["Duration(us)"])
        assert threads[t["pid"], t["tid"]] == f"Stream {k['Stream ID']}"
        args = t["args"]
        assert list(args) == [
            "Model Id",
            "Task Type",
            "Physic Stream Id",
            "Task Id",
            "Batch Id",
            "Subtask Id",
            "connection_id",
        ]
        assert (args["Task Type"], args["Physic Stream Id"], args["Task Id"]) == (
            k["Accelerator Core"],
            t["tid"],
            int(k["Task ID"]),
        )
    assert threads[procs["Python"], os_pid] == f"Thread {os_pid}"
    overlap = {threads[procs["Overlap Analysis"], tid] for tid in range(4)}
    assert overlap == {"Computing", "Communication", "Communication(Not Overlapped)", "Free"}


def test_trace_view_flows_link_launches_to_tasks(exported: Exported) -> None:
    result = exported("tiny-none", "ascend-pt")
    events = load_json(result.root / TRACE)
    procs = processes(events)
    tasks = {e["args"]["connection_id"]: e for e in events if e["pid"] == procs["Ascend Hardware"] and e["ph"] == "X"}
    launches = {e["args"]["connection_id"]: e for e in events if e.get("name") == "Node@launch"}
    assert launches.keys() == tasks.keys()
    for conn, launch in launches.items():
        assert launch["pid"] == procs["CANN"] and launch["args"]["item_id"] == tasks[conn]["name"]
        assert launch["args"]["level"] == "node"
    for cat, start_layer in (("HostToDevice", "CANN"), ("async_npu", "Python")):
        starts = {str(e["id"]): e for e in events if e.get("cat") == cat and e["ph"] == "s"}
        ends = {str(e["id"]): e for e in events if e.get("cat") == cat and e["ph"] == "f"}
        assert starts.keys() == ends.keys() == {str(c) for c in tasks}, cat
        for ident, f in ends.items():
            task = tasks[int(ident)]
            assert (
                f["bp"] == "e"
                and f["pid"] == procs["Ascend Hardware"]
                and (f["tid"], f["ts"])
                == (
                    task["tid"],
                    task["ts"],
                )
            )
            assert starts[ident]["pid"] == procs[start_layer]
            assert rel_ns(starts[ident]["ts"]) <= rel_ns(f["ts"])
    hd = [e for e in events if e.get("cat") == "HostToDevice"]
    assert all(e["name"] == f"HostToDevice{e['id']}" and isinstance(e["id"], str) for e in hd)


def test_python_layer_has_steps_and_aten_calls(exported: Exported, make_run: Callable[[str], Path]) -> None:
    for key, fused in (("tiny-none", False), ("tiny-default", True)):
        result = exported(key, "ascend-pt")
        events = load_json(result.root / TRACE)
        python = processes(events)["Python"]
        cpu_ops = [e for e in events if e.get("cat") == "cpu_op"]
        assert all(e["pid"] == python and e["args"] == {"Sequence number": -1, "Fwd thread id": 0} for e in cpu_ops)
        steps = pq.read_table(make_run(key) / "steps.parquet").to_pylist()
        markers = [e for e in cpu_ops if e["name"].startswith("ProfilerStep#")]
        assert [e["name"] for e in markers] == [f"ProfilerStep#{s['step']}" for s in steps]
        assert [rel_ns(e["ts"]) for e in markers] == [s["host_start_ns"] for s in steps]
        calls = [e["name"] for e in cpu_ops if not e["name"].startswith("ProfilerStep#")]
        types = pq.read_table(make_run(key) / "ops.parquet", columns=["op_type"]).column(0).to_pylist()
        assert calls == [framework_call(t) for t in types]
        names = Counter(calls)
        if fused:
            assert names["aten::rsqrt"] == 0 and names["atb::FusedRmsNormMatMul"] > 0
        else:  # the decomposed RMSNorm as HF LLaMA code calls it
            assert names["aten::rsqrt"] > 0 and names["aten::pow"] == names["aten::rsqrt"]
            assert "-aten::pow-aten::mean-aten::add-aten::rsqrt-aten::mul-" in "-" + "-".join(calls) + "-"


def test_overlap_analysis_matches_step_trace(exported: Exported) -> None:
    result = exported("tiny-none", "ascend-pt")
    events = load_json(result.root / TRACE)
    overlap = processes(events)["Overlap Analysis"]
    spans = sorted(
        (rel_ns(e["ts"]), us_to_ns(str(e["dur"])), e["name"]) for e in events if e["pid"] == overlap and e["ph"] == "X"
    )
    names = [s[2] for s in spans]
    assert names[0] == names[-1] == "Computing" and all(a != b for a, b in itertools.pairwise(names))
    for (s0, d0, _), (s1, _, _) in itertools.pairwise(spans):
        assert s0 + d0 == s1, "Computing and Free tile the device timeline"
    computing = sum(d for _, d, n in spans if n == "Computing")
    steps = rows(result.root / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv")
    assert computing == sum(us_to_ns(r["Computing"]) for r in steps)


def test_msprof_json_is_compact_and_native(exported: Exported) -> None:
    result = exported("tiny-none", "msprof")
    path = _msprof_json(result)
    raw = path.read_bytes()
    assert raw.startswith(b'[{"name":"process_name","pid":') and b'", "' not in raw
    events = load_json(path)
    assert len(events) == result.trace_events
    _check_pids(events, {"CANN", "Ascend Hardware", "AI Core Freq", "Overlap Analysis"}, host_device=31)
    procs = processes(events)
    task = next(e for e in events if e["pid"] == procs["Ascend Hardware"] and e["ph"] == "X")
    assert list(task) == ["name", "pid", "tid", "ts", "dur", "ph", "args"]
    overlap = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e.get("name") == "thread_name" and e["pid"] == procs["Overlap Analysis"]
    }
    assert overlap == {0: "Communication", 1: "Communication(Not Overlapped)", 2: "Computing", 3: "Free"}
    assert not any(e.get("cat") == "cpu_op" for e in events), "native msprof has no framework layer"


def test_graph_mode_has_no_launch_events(exported: Exported) -> None:
    result = exported("tiny-graph", "ascend-pt")
    events = load_json(result.root / TRACE)
    assert not any(e.get("name") == "Node@launch" or e.get("cat") in ("HostToDevice", "async_npu") for e in events)
    procs = processes(events)
    assert sum(e["pid"] == procs["Ascend Hardware"] and e["ph"] == "X" for e in events) == result.op_rows
