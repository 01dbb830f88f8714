"""Ascend timeline JSON: torch_npu `trace_view.json` and native msprof `msprof_*.json` (docs §1.4, §2.4).

Layers are found by their `process_name` metadata, never by pid (pids are bit-packed or decimal-concatenated):
  Ascend Hardware  X events, one thread per stream = device tasks -> op rows
  HCCL / Communication  X events on the "Group <n> Communication" threads = communication ops -> op rows
  CANN             host API events; the one with a task's `connection_id` (Node@launch) is its host launch
  Python           (torch_npu) cpu_op events -> framework table; cpu_op ProfilerStep#N -> step frames
Device tasks that are not kernels (memcpy, event record/wait, notify, SDMA, TASK_TIMEOUT_SET, ...: device_tasks.py's
allowlist) are left out, as kernel_details.csv and op_summary leave them out; meta["dropped_device_tasks"] counts
them by name. The op type comes from the kernel
name (the JSON has none). A task's step is the ProfilerStep#N its launch falls in: the framework op linked to it by
the `async_npu` flow, else its CANN launch, else its own start.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.importers.assemble import RawFramework, RawOps, RawSteps
from atbprof.importers.device_tasks import graph_task, is_kernel_task
from atbprof.importers.kineto_steps import iterations_of
from atbprof.importers.optypes import ascend_op_type, derive_types
from atbprof.importers.trace_events import TraceEvents, dims_texts, int_arg, str_arg, text_of
from atbprof.writers.ranks import FLOW_MARKER

ASCEND_LAYERS = frozenset({"Ascend Hardware", "CANN"})
COMM_TASK_TYPE = {"HCCL": "HCCL", "Communication": "COMMUNICATION"}
"""Communication layer -> the task type the op tables give its ops (torch_npu's HCCL layer: HCCL; msprof: ...)."""
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d{1,9})$")
_INT32_MAX = 2**31 - 1


RANK_SUFFIX = re.compile(r"^(.*) \(rank (\d{1,7})\)$")
"""atbprof's trace of several ranks names each process "<layer> (rank r)" (writers/ranks.py)."""


def layer_names(trace: TraceEvents) -> tuple[dict[Any, str], list[int]]:
    """pid -> layer name, and the ranks of a multi-rank trace ([] otherwise): of those, the lowest rank's
    processes only, under their plain layer names (the analysis reads one device)."""
    names = trace.process_names()
    ranked = {pid: m for pid, name in names.items() if (m := RANK_SUFFIX.match(name))}
    if not ranked:
        return names, []
    ranks = sorted({int(m.group(2)) for m in ranked.values()})
    return {pid: m.group(1) for pid, m in ranked.items() if int(m.group(2)) == ranks[0]}, ranks


def is_ascend_trace(trace: TraceEvents) -> bool:
    return bool(ASCEND_LAYERS & set(layer_names(trace)[0].values()))


@dataclass
class AscendTrace:
    ops: RawOps
    framework: RawFramework | None
    steps: RawSteps | None
    first_event_ns: int | None
    launches: pa.Table  # per kernel task: stream_id, task_start_ns (abs), host_launch_start_ns, host_launch_dur_ns
    meta: dict[str, object]


def read_ascend_trace(trace: TraceEvents) -> AscendTrace:
    layers: dict[str, set[Any]] = {}
    names, ranks = layer_names(trace)
    for pid, name in names.items():
        layers.setdefault(name, set()).add(pid)
    device = layers.get("Ascend Hardware", set())
    comm = {pid: kind for layer, kind in COMM_TASK_TYPE.items() for pid in layers.get(layer, set())}
    host, python = layers.get("CANN", set()), layers.get("Python", set())
    threads = trace.thread_names()
    kernels: list[int] = []
    comm_ops: list[int] = []
    launches_idx: list[int] = []
    python_x: list[int] = []
    marked_x: list[int] = []
    marker = layers.get("MsprofTx", set())
    dropped: Counter[str] = Counter()
    for i in np.flatnonzero(trace.where("ph", ("X",))).tolist():
        pid = trace.pid[i]
        if pid in device:
            name = text_of(trace.name[i])
            task_type = str_arg(trace.args[i], "Task Type")
            if task_type == FLOW_MARKER:  # atbprof's marker of a flow between ranks, not a task
                continue
            if not is_kernel_task(task_type, name):
                dropped[name] += 1
            else:
                kernels.append(i)
        elif pid in comm:
            if threads.get((pid, trace.tid[i]), "").endswith("Communication"):
                comm_ops.append(i)
        elif pid in host:
            launches_idx.append(i)
        elif pid in python:
            python_x.append(i)
        elif pid in marker:
            marked_x.append(i)
    _need_times(trace, kernels + comm_ops + launches_idx + python_x)
    launch = Launches(trace, launches_idx)
    ops = _ops(trace, kernels, comm_ops, comm, launch)
    framework, steps = _framework(trace, python_x)
    found_by = None
    if steps is not None:
        ops.step_time_ns = _step_times(trace, kernels, comm_ops, ops)
    elif kernels:
        # a serving capture (vllm-ascend, MindIE) records no ProfilerStep: its iterations (kineto_steps.py)
        marked = None
        if marked_x:  # mstx ranges (mstx.range_start / range_end): what the serving framework or the user marked
            at = np.array(marked_x, np.int64)
            at = at[trace.has_ts[at] & trace.has_dur[at]]
            marked = (trace.ts_ns[at], trace.ts_ns[at] + np.maximum(trace.dur_ns[at], 0), "mstx ranges (MsprofTx)")
        cut = iterations_of(trace, trace.ts_ns, ops, marked)
        if cut is not None:
            found, ops.step_time_ns = cut
            steps, found_by = found.frames, found.found_by
    timed = trace.timed
    meta: dict[str, object] = {
        "producer": "torch_npu" if python else "msprof",
        "processes": sorted(layers),
        "events": trace.count,
        "device_tasks": len(kernels),
        "communication_ops": len(comm_ops),
        "dropped_device_tasks": dict(sorted(dropped.items())),
    }
    if found_by is not None:
        meta["steps_from"] = found_by
    if len(ranks) > 1:
        meta["ranks_in_trace"] = ranks
        meta["warnings"] = [
            f"a trace of {len(ranks)} ranks ({', '.join(map(str, ranks))}): this analysis reads rank {ranks[0]}"
        ]
    launches = pa.table(
        {
            "stream_id": ops.columns["stream_id"].slice(0, len(kernels)),
            "task_start_ns": ops.columns["task_start_ns"].slice(0, len(kernels)),
            "host_launch_start_ns": ops.columns["host_launch_start_ns"].slice(0, len(kernels)),
            "host_launch_dur_ns": ops.columns["host_launch_dur_ns"].slice(0, len(kernels)),
        }
    )
    first = int(trace.ts_ns[timed].min()) if timed.any() else None
    return AscendTrace(ops, framework, steps, first, launches, meta)


def _need_times(trace: TraceEvents, indices: list[int]) -> None:
    for i in indices:
        if not trace.has_ts[i]:
            raise trace.fail(i, "a complete ('X') event without a 'ts'")
        if not trace.has_dur[i]:
            raise trace.fail(i, "a complete ('X') event without a 'dur'")


Launch = tuple[int, "int | None"]  # host launch (start, dur) of a device task
_Where = tuple[Any, Any, int]  # (pid, tid, ts) of an event


class Launches:
    """The host launch of each device task: the CANN event with the task's `connection_id` (Node@launch wins over
    API calls), else the start of the `HostToDevice` flow that ends on the task (older files, and Level0 where the
    CANN layer may lack a process_name: flows are found by category, not by pid)."""

    def __init__(self, trace: TraceEvents, host_x: list[int]) -> None:
        self.by_connection: dict[int, Launch] = {}
        node: set[int] = set()
        self.dur_at: dict[_Where, int] = {}
        for i in host_x:
            dur = max(int(trace.dur_ns[i]), 0)
            self.dur_at[(trace.pid[i], trace.tid[i], int(trace.ts_ns[i]))] = dur
            conn = int_arg(trace.args[i], "connection_id")
            if conn is None:
                continue
            is_node = text_of(trace.name[i]).endswith("@launch")
            if conn not in self.by_connection or (is_node and conn not in node):
                self.by_connection[conn] = (int(trace.ts_ns[i]), dur)
                if is_node:
                    node.add(conn)
        self.flow = flow_sources(trace, "HostToDevice")

    def of(self, trace: TraceEvents, i: int) -> Launch | None:
        conn = int_arg(trace.args[i], "connection_id")
        if conn is not None and conn in self.by_connection:
            return self.by_connection[conn]
        src = self.flow.get((trace.pid[i], trace.tid[i], int(trace.ts_ns[i])))
        return (src[2], self.dur_at.get(src)) if src is not None else None


def flow_sources(trace: TraceEvents, category: str) -> dict[_Where, _Where]:
    """Where each flow of `category` ends -> where it starts (flows pair an 's' and an 'f' event by `id`)."""
    starts: dict[Any, _Where] = {}
    ends: list[tuple[Any, _Where]] = []
    flows = trace.where("ph", ("s", "f")) & trace.where("cat", (category,)) & trace.has_ts
    for i in np.flatnonzero(flows).tolist():
        flow_id = trace.events[i].get("id")
        if not isinstance(flow_id, int | str):  # ids are opaque: numbers (old) or strings (HostToDevice)
            continue
        where = (trace.pid[i], trace.tid[i], int(trace.ts_ns[i]))
        if trace.ph[i] == "s":
            starts[flow_id] = where
        else:
            ends.append((flow_id, where))
    return {where: starts[fid] for fid, where in ends if fid in starts}


def _small_int(value: int | None) -> int | None:
    return value if value is not None and 0 <= value <= _INT32_MAX else None


def _ops(trace: TraceEvents, kernels: list[int], comm_ops: list[int], comm: dict[Any, str], launch: Launches) -> RawOps:
    rows = kernels + comm_ops
    args = [trace.args[i] for i in rows]
    names = pa.array([text_of(trace.name[i]) for i in rows], pa.string())
    stream = [_small_int(int_arg(a, "Physic Stream Id", "Stream Id")) for a in args[: len(kernels)]]
    stream = [s if s is not None else _tid_int(trace.tid[i]) for s, i in zip(stream, kernels, strict=True)]
    task_type = [str_arg(a, "Task Type") for a in args[: len(kernels)]] + [comm[trace.pid[i]] for i in comm_ops]
    hosts = [launch.of(trace, i) for i in rows]
    start = trace.ts_ns[rows] if rows else np.zeros(0, np.int64)
    dur = np.maximum(trace.dur_ns[rows], 0) if rows else np.zeros(0, np.int64)
    cols: dict[str, pa.Array] = {
        "op_name": names,
        "op_type": derive_types(names, ascend_op_type),
        "task_type": pa.array(task_type, pa.string()),
        "stream_id": pa.array(stream + [None] * len(comm_ops), pa.int64()),
        "task_id": pa.array([_small_int(int_arg(a, "Task Id")) for a in args], pa.int64()),
        "block_dim": pa.array([_small_int(int_arg(a, "Block Dim")) for a in args], pa.int64()),
        "task_start_ns": pa.array(start, pa.int64()),
        "task_dur_ns": pa.array(dur, pa.int64()),
        "task_wait_ns": pa.array(_waits(start, dur), pa.int64()),
        "host_launch_start_ns": pa.array([h[0] if h else None for h in hosts], pa.int64()),
        "host_launch_dur_ns": pa.array([h[1] if h else None for h in hosts], pa.int64()),
        "graph_launch": pa.array(
            [graph_task(int_arg(a, "Model Id")) for a in args[: len(kernels)]] + [None] * len(comm_ops), pa.bool_()
        ),
    }
    return RawOps(cols)


def _tid_int(tid: object) -> int | None:
    return tid if isinstance(tid, int) and not isinstance(tid, bool) and 0 <= tid <= _INT32_MAX else None


def _waits(start: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Task Wait Time as msprof computes it: per device, in start order, max(0, start - previous task's end)."""
    order = np.lexsort((np.arange(len(start)), start))
    s, e = start[order], start[order] + dur[order]
    wait_sorted = np.zeros(len(start), np.int64)
    wait_sorted[1:] = np.maximum(s[1:] - e[:-1], 0)
    out = np.empty_like(wait_sorted)
    out[order] = wait_sorted
    return out


def _framework(trace: TraceEvents, python_x: list[int]) -> tuple[RawFramework | None, RawSteps | None]:
    if not python_x:
        return None, None
    ops: list[int] = []
    step_idx: list[int] = []
    step_num: list[int] = []
    for i in python_x:
        name = trace.name[i]
        match = PROFILER_STEP.match(name) if isinstance(name, str) else None
        if match:
            step_idx.append(i)
            step_num.append(int(match.group(1)))
        elif trace.cat[i] == "cpu_op":
            ops.append(i)
    steps = None
    if step_idx:
        steps = RawSteps(np.array(step_num, np.int64), trace.ts_ns[step_idx], np.maximum(trace.dur_ns[step_idx], 0))
    framework = RawFramework(
        index=np.array(ops, np.int64),
        name=[text_of(trace.name[i]) for i in ops],
        start_ns=trace.ts_ns[ops] if ops else np.zeros(0, np.int64),
        dur_ns=trace.dur_ns[ops] if ops else np.zeros(0, np.int64),
        pid=[trace.pid[i] for i in ops],
        tid=[trace.tid[i] for i in ops],
        input_shapes=dims_texts([a.get("Input Dims") if isinstance(a := trace.args[i], dict) else None for i in ops]),
    )
    return framework, steps


def _step_times(trace: TraceEvents, kernels: list[int], comm_ops: list[int], ops: RawOps) -> np.ndarray:
    """Per op row: when it was launched on the host (async_npu flow start, else CANN launch, else its start)."""
    framework_call = flow_sources(trace, "async_npu")
    launched = pc.coalesce(ops.columns["host_launch_start_ns"], ops.columns["task_start_ns"])
    out = np.array(launched.to_numpy(zero_copy_only=False), np.int64)
    for row, i in enumerate(kernels + comm_ops):
        src = framework_call.get((trace.pid[i], trace.tid[i], int(trace.ts_ns[i])))
        if src is not None:
            out[row] = src[2]
    return out
