"""Ascend timelines (trace_view.json / msprof_*.json): layers by process_name, never by pid value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from atbprof.importers import load_profile

EPOCH_US = 1_764_246_877_000_000


def _meta(pid: int, name: str) -> dict[str, Any]:
    return {"name": "process_name", "pid": pid, "tid": 0, "ph": "M", "args": {"name": name}}


def _thread(pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": "thread_name", "pid": pid, "tid": tid, "ph": "M", "args": {"name": name}}


def _ts(us: float) -> str:
    ns = EPOCH_US * 1000 + round(us * 1000)  # exact text, as the Ascend tools write it
    return f"{ns // 1000}.{ns % 1000:03d}"


def _x(
    name: str, pid: int, tid: int, us: float, dur: float, cat: str | None = None, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    event: dict[str, Any] = {"name": name, "pid": pid, "tid": tid, "ts": _ts(us), "dur": dur, "ph": "X"}
    event["args"] = args or {}
    if cat:
        event["cat"] = cat
    return event


def _flow(ph: str, name: str, cat: str, flow_id: Any, pid: int, tid: int, us: float) -> dict[str, Any]:
    return {"ph": ph, "name": name, "cat": cat, "id": flow_id, "pid": pid, "tid": tid, "ts": _ts(us), "bp": "e"}


# deliberately confusing pids: the device layer has the smallest, a decoy layer has the classic "800"
DEVICE, HOST, PYTHON, DECOY, HCCL = 7, 3_170_820_512, 437_675, 800, 3_170_820_576


def _trace() -> list[dict[str, Any]]:
    return [
        _meta(DEVICE, "Ascend Hardware"),
        _meta(HOST, "CANN"),
        _meta(PYTHON, "Python"),
        _meta(DECOY, "Overlap Analysis"),
        _meta(HCCL, "HCCL"),
        _thread(HCCL, 0, "Group 0 Communication"),
        _thread(HCCL, 1, "Plane 0"),
        _x("ProfilerStep#3", PYTHON, 1, 0.0, 1000.0, "cpu_op"),
        _x("aten::add", PYTHON, 1, 10.0, 20.0, "cpu_op", {"Input Dims": "4096,1;\r\n4096,1"}),
        _x("Node@launch", HOST, 2, 15.0, 5.0,
           args={"level": "node", "item_id": "aclnnAdd_AddAiCore_Add", "connection_id": 11}),
        _x("aclnnAdd_AddAiCore_Add", DEVICE, 2, 40.380, 3.0,
           args={"Task Type": "AI_VECTOR_CORE", "Physic Stream Id": 2, "Task Id": 5, "connection_id": 11}),
        _x("MEMCPY_ASYNC", DEVICE, 2, 50.0, 1.0, args={"Task Type": "PCIE_DMA_SQE", "Task Id": 6}),
        _x("RmsNorm", DEVICE, 2, 60.0, 4.0, args={"Task Type": "AI_VECTOR_CORE", "Stream Id": 2, "Task Id": 7}),
        _x("Computing", DECOY, 0, 40.0, 30.0),
        _x("hcom_allReduce__1_0_1", HCCL, 0, 80.0, 10.0, args={"connection_id": 99}),
        _x("Notify Wait", HCCL, 1, 81.0, 2.0),
        _flow("s", "torch_to_npu", "async_npu", 1, PYTHON, 1, 10.0),
        _flow("f", "torch_to_npu", "async_npu", 1, DEVICE, 2, 40.380),
        _flow("s", "HostToDevice9", "HostToDevice", "9", 4_242, 2, 55.0),  # a CANN pid without process_name
        _flow("f", "HostToDevice9", "HostToDevice", "9", DEVICE, 2, 60.0),
    ]  # fmt: skip


def test_layers_are_found_by_process_name(tmp_path: Path) -> None:
    path = tmp_path / "anything.log"
    path.write_bytes(orjson.dumps(_trace()))
    profile = load_profile(path)
    assert profile.kind == "trace_view"
    assert profile.meta["producer"] == "torch_npu"
    assert profile.meta["origin_ns"] == EPOCH_US * 1000  # ProfilerStep#3 starts first
    ops = profile.ops.to_pylist()
    assert [r["op_name"] for r in ops] == ["aclnnAdd_AddAiCore_Add", "RmsNorm", "hcom_allReduce__1_0_1"]
    add, norm, comm = ops
    assert (add["op_type"], norm["op_type"], comm["op_type"]) == ("Add", "RmsNorm", "hcom_allReduce_")
    assert (add["task_start_ns"], add["task_dur_ns"]) == (40_380, 3_000)  # "…040.380": ns digits kept
    assert (add["stream_id"], add["task_id"], add["task_type"]) == (2, 5, "AI_VECTOR_CORE")
    assert (norm["stream_id"], norm["task_id"]) == (2, 7)  # older "Stream Id" spelling
    assert (comm["task_type"], comm["stream_id"]) == ("HCCL", None)
    assert (add["host_launch_start_ns"], add["host_launch_dur_ns"]) == (15_000, 5_000)  # CANN Node@launch
    assert (norm["host_launch_start_ns"], norm["host_launch_dur_ns"]) == (55_000, None)  # HostToDevice flow
    assert norm["task_wait_ns"] == 60_000 - 43_380  # gap since the previous kernel ended (memcpy left out)
    assert {r["step"] for r in ops} == {3}
    assert profile.meta["dropped_device_tasks"] == {"MEMCPY_ASYNC": 1}
    (fw,) = profile.framework.to_pylist()  # type: ignore[union-attr]
    assert (fw["name"], fw["pid"], fw["step"], fw["input_shapes"]) == ("aten::add", PYTHON, 3, "4096,1;4096,1")


def test_native_msprof_timeline_without_python_layer(tmp_path: Path) -> None:
    events = [e for e in _trace() if e.get("pid") != PYTHON]
    path = tmp_path / "msprof_20260606121514.json"
    path.write_bytes(orjson.dumps(events))
    profile = load_profile(path)
    assert profile.meta["producer"] == "msprof"
    assert profile.framework is None and profile.step_frames is None
    assert profile.ops.num_rows == 3


def test_pid_numbers_mean_nothing(tmp_path: Path) -> None:
    """The same trace with the device and decoy pids swapped gives the same op table."""
    swap = {DEVICE: DECOY, DECOY: DEVICE}
    events = [{**e, "pid": swap.get(e["pid"], e["pid"])} for e in _trace()]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(orjson.dumps(_trace()))
    b.write_bytes(orjson.dumps(events))
    assert load_profile(a).ops.equals(load_profile(b).ops)


@pytest.mark.parametrize("wrapped", [False, True])
def test_trace_view_inside_a_trace_events_object(tmp_path: Path, wrapped: bool) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": _trace()} if wrapped else _trace()))
    assert load_profile(path).ops.num_rows == 3


def test_a_runtime_task_at_start_up_is_not_a_kernel(tmp_path: Path) -> None:
    """Native msprof: TASK_TIMEOUT_SET is issued at start-up, long before the kernels; taken for a kernel it
    stretched a 0.093 ms profile to 15 s. Runtime tasks are left out by an allowlist of kernel task types; an old
    timeline's generic `Other` type leaves the decision to the name (runtime tasks are named in upper snake case)."""
    events = [e for e in _trace() if e.get("pid") != PYTHON]
    events += [
        _x("TASK_TIMEOUT_SET", DEVICE, 2, -15_000_000.0, 1.0, args={"Task Type": "TASK_TIMEOUT_SET"}),
        _x("MODEL_MAINTAINCE", DEVICE, 2, -14_000_000.0, 1.0, args={"Task Type": "Other"}),
        _x("STARS_COMMON", DEVICE, 2, 70.0, 1.0),  # no Task Type at all
        _x("Conv2D1", DEVICE, 2, 72.0, 2.0, args={"Task Type": "Other"}),  # an older file's kernel
    ]
    path = tmp_path / "msprof_20260606121514.json"
    path.write_bytes(orjson.dumps(events))
    profile = load_profile(path)
    names = profile.ops.column("op_name").to_pylist()
    assert names == ["aclnnAdd_AddAiCore_Add", "RmsNorm", "Conv2D1", "hcom_allReduce__1_0_1"]
    assert profile.meta["dropped_device_tasks"] == {
        "MEMCPY_ASYNC": 1,
        "MODEL_MAINTAINCE": 1,
        "STARS_COMMON": 1,
        "TASK_TIMEOUT_SET": 1,
    }
    starts = profile.ops.column("task_start_ns").to_numpy()
    ends = starts + profile.ops.column("task_dur_ns").to_numpy()
    assert ends.max() - starts.min() < 100_000  # the kernels' 0.05 ms, not 15 s
