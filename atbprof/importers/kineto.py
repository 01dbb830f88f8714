"""Kineto / torch.profiler traces (`*.pt.trace.json[.gz]`, HTA's inputs; docs/perfetto_and_traces.md §5).

  kernel (old schema: Kernel)              GPU kernels -> op rows: op type from the kernel name (optypes.py),
                                           task_type "GPU", stream from args.stream
  cpu_op (old schema: Operator)            framework ops -> framework table (Input Dims -> input_shapes)
  user_annotation / cpu_op ProfilerStep#N  step frames; a kernel's step is the one its launch falls in
                                           (none: a serving loop's iterations, kineto_steps.py)
  cuda_runtime / cuda_driver (Runtime)     the launch of a kernel, matched by args.correlation -> host_launch_*;
                                           every call -> the host_calls table (sync calls: host_calls.yaml)
  python_function                          the host_calls table (Python the host ran: why the device idled)
  gpu_memcpy / gpu_memset (Memcpy/Memset)  device copies and fills -> op rows too, task_type MEMCPY / MEMSET, op type
                                           Memcpy HtoD, Memcpy DtoH, Memcpy DtoD, Memset (their own row, not idle)
  mtia_ccp_events                          MTIA device work (pe_exe, merge, remote: task_type MTIA) and dma_request
                                           copies (MEMCPY, op type Memcpy); its event_record / event_wait sync tasks
                                           are left out
Other device categories (gpu_user_annotation, ...) stay out of the op table. A CPU-only trace
has an empty op table and a full framework table. Times: `ts` is µs since `baseTimeNanoseconds` when the trace has
one (new schema), else epoch µs; `ts` digits are kept exactly (see trace_events.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from atbprof.arrays import distinct
from atbprof.importers.ascend_json import PROFILER_STEP
from atbprof.importers.assemble import RawFramework, RawHostCalls, RawOps, RawSteps
from atbprof.importers.kineto_steps import iterations_of
from atbprof.importers.optypes import derive_types, gpu_op_type
from atbprof.importers.trace_events import TraceEvents, int_arg

KERNEL_CATS = frozenset({"kernel", "Kernel"})
MEMORY_CATS = {"gpu_memcpy": "MEMCPY", "Memcpy": "MEMCPY", "gpu_memset": "MEMSET", "Memset": "MEMSET"}
TASK_TYPES = ["GPU", "MTIA", "MEMCPY", "MEMSET"]  # a kernel's, an MTIA task's, a copy's (MTIA's DMA too), a fill's
MTIA_CATS = frozenset({"mtia_ccp_events"})
MTIA_RUNTIME_TASKS = frozenset({"event_record", "event_wait"})  # the command processor's own sync, not work
CPU_OP_CATS = frozenset({"cpu_op", "Operator"})
STEP_CATS = frozenset({"user_annotation", "cpu_op", "Operator"})  # not gpu_user_annotation: the device copy
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "Driver"})
_INT32_MAX = 2**31 - 1


def read_kineto(
    trace: TraceEvents, framework: bool = True
) -> tuple[RawOps, RawFramework | None, RawSteps | None, int | None, dict[str, object], RawHostCalls | None]:
    """(ops, framework, ProfilerStep frames, first event, meta, host runtime calls), absolute ns.
    `framework=False`: no framework table when the trace has kernels (None), for callers that compare kernels
    only."""
    top = trace.top or {}
    base = top.get("baseTimeNanoseconds")
    base_ns = base if isinstance(base, int) and not isinstance(base, bool) and 0 <= base < 2**62 else 0
    if base_ns and len(trace.ts_ns) and int(np.abs(trace.ts_ns).max()) > 2**61:
        i = int(np.argmax(np.abs(trace.ts_ns)))
        raise trace.fail(i, "'ts' is too large to be µs since baseTimeNanoseconds")
    ts = trace.ts_ns + base_ns
    complete = trace.where("ph", ("X",))
    device = trace.where("cat", KERNEL_CATS | set(MEMORY_CATS))
    # MTIA (HTA reads these as its device events): pe_exe / merge / remote work and dma_request copies; the event
    # record / wait tasks are the command processor's synchronisation
    device |= trace.where("cat", MTIA_CATS) & ~trace.where("name", MTIA_RUNTIME_TASKS)
    # row numbers as arrays: the readers index their columns with them (a list would be converted at each call)
    kernels = np.flatnonzero(complete & device)
    launches = np.flatnonzero(complete & trace.where("cat", LAUNCH_CATS))
    is_step = complete & trace.where("cat", STEP_CATS)
    is_step &= trace.where_prefix("name", "ProfilerStep#")
    steps: list[tuple[int, int]] = []
    for i in np.flatnonzero(is_step).tolist():
        match = PROFILER_STEP.match(trace.name[i])
        if match:
            steps.append((i, int(match.group(1))))
        else:
            is_step[i] = False
    cpu_ops = np.flatnonzero(complete & trace.where("cat", CPU_OP_CATS) & ~is_step)
    timed_rows = np.concatenate([kernels, cpu_ops, np.array([s for s, _ in steps], np.int64)])
    untimed = timed_rows[~(trace.has_ts[timed_rows] & trace.has_dur[timed_rows])]
    if len(untimed):
        raise trace.fail(int(untimed[0]), "a complete ('X') event needs a 'ts' and a 'dur'")
    ops, launch_meta = _ops(trace, kernels, ts, _launches_by_correlation(trace, launches, ts))
    cpu = (
        None
        if not framework and len(kernels)
        else RawFramework(
            index=cpu_ops.astype(np.int64),
            name=trace.texts("name", cpu_ops),
            start_ns=ts[cpu_ops],
            dur_ns=trace.dur_ns[cpu_ops],
            pid=trace.ids("pid", cpu_ops),
            tid=trace.ids("tid", cpu_ops),
            input_shapes=trace.arg_dims("Input Dims", cpu_ops),
        )
    )
    frames = None
    if steps:
        idx = [i for i, _ in steps]
        frames = RawSteps(np.array([n for _, n in steps], np.int64), ts[idx], trace.dur_ns[idx])
    elif len(kernels) and (cut := iterations_of(trace, ts, ops)) is not None:
        # a serving loop records no ProfilerStep: its iterations, cut on the device timeline (kineto_steps.py)
        found, device_start = cut
        frames = found.frames
        ops = RawOps(ops.columns, device_start)
        launch_meta["steps_from"] = found.found_by
    timed = trace.timed
    first = int(ts[timed].min()) if timed.any() else None
    meta: dict[str, object] = {
        "events": trace.count,
        "kernel_events": len(kernels),
        "cpu_op_events": len(cpu_ops),
        "profiler_steps": len(steps),
    }
    meta.update(launch_meta)
    for key in ("schemaVersion", "displayTimeUnit", "baseTimeNanoseconds", "distributedInfo", "traceName"):
        if key in top:
            meta[key] = top[key]
    devices = top.get("deviceProperties")
    if isinstance(devices, list):
        meta["devices"] = [d.get("name") for d in devices if isinstance(d, dict)]
        memory = [d.get("totalGlobalMem") for d in devices if isinstance(d, dict)]
        meta["device_memory_bytes"] = [m for m in memory if isinstance(m, int) and not isinstance(m, bool) and m > 0]
    calls = None
    python = np.flatnonzero(complete & trace.where("cat", ("python_function",)) & trace.has_ts & trace.has_dur)
    if len(launches) or len(python):
        rows = np.concatenate([launches, python])
        names = trace.texts("name", rows)
        sync = pc.is_in(names.slice(0, len(launches)), pa.array(sorted(sync_calls()))).to_numpy(zero_copy_only=False)
        kinds = [*np.where(np.asarray(sync, bool), "sync", "runtime").tolist(), *(["python"] * len(python))]
        calls = RawHostCalls(kinds, names, ts[rows], np.maximum(trace.dur_ns[rows], 0))
    return ops, cpu, frames, first, meta, calls


@cache
def sync_calls() -> frozenset[str]:
    """host_calls.yaml: the runtime calls during which the host waits for the device."""
    text = resources.files("atbprof.importers").joinpath("host_calls.yaml").read_text(encoding="utf-8")
    return frozenset(yaml.safe_load(text)["sync_calls"])


def _launches_by_correlation(trace: TraceEvents, launches: np.ndarray, ts: np.ndarray) -> Launches:
    """The runtime launches sorted by correlation id (the last one wins on duplicates); args.correlation is a
    number, or digits as text in the old schema."""
    corr = trace.nonneg_int_args("correlation", launches)
    keep = corr >= 0
    rows = np.array(launches, np.int64)[keep]
    corr = corr[keep]
    order = np.argsort(corr, kind="stable")
    corr, rows = corr[order], rows[order]
    last = np.append(corr[1:] != corr[:-1], True) if len(corr) else np.zeros(0, bool)
    corr, rows = corr[last], rows[last]
    return Launches(corr, ts[rows], np.maximum(trace.dur_ns[rows], 0))


@dataclass(frozen=True)
class Launches:
    correlation: np.ndarray  # sorted, unique
    start_ns: np.ndarray
    dur_ns: np.ndarray

    def of(self, correlation: np.ndarray) -> np.ndarray:
        """Row of the launch with each correlation id, -1 if none."""
        if len(self.correlation) == 0:
            return np.full(len(correlation), -1, np.int64)
        at = np.clip(np.searchsorted(self.correlation, correlation), 0, len(self.correlation) - 1)
        return np.where((self.correlation[at] == correlation) & (correlation >= 0), at, -1)


def _ops(
    trace: TraceEvents, kernels: np.ndarray, ts: np.ndarray, launches: Launches
) -> tuple[RawOps, dict[str, object]]:
    """The kernels as op rows, and what their launches were besides plain launches (meta: `graph_launches`,
    `warmup_launches`).

    One runtime call that launches several kernels (cudaGraphLaunch, hipGraphLaunch: CUDA graphs, HIP graphs,
    torch.compile's reduce-overhead mode, vLLM's and SGLang's decode) is one host cost for all of them: each kernel's
    `host_launch_dur_ns` is its even share of the call, so a graph's launch counts once in every total (not once per
    kernel it replays) and the share that falls on the norms is what norm-related time counts."""
    if not len(kernels):
        return RawOps.empty(), {}
    encoded = trace.coded("name", kernels)  # the names' text work once per distinct name (a few hundred)
    mtia = trace.where("cat", MTIA_CATS)[kernels]
    dma = mtia & trace.where("name", ("dma_request",))[kernels]
    memory = trace.where("cat", MEMORY_CATS)[kernels] | dma
    memset = trace.where("cat", [c for c, kind in MEMORY_CATS.items() if kind == "MEMSET"])[kernels]
    launch = launches.of(trace.nonneg_int_args("correlation", kernels))
    found = launch >= 0
    none = np.zeros(len(kernels), np.int64)
    host_start = launches.start_ns[np.clip(launch, 0, None)] if found.any() else none
    host_dur = launches.dur_ns[np.clip(launch, 0, None)] if found.any() else none
    extra: dict[str, object] = {}
    replayed = np.zeros(len(kernels), bool)
    if found.any():
        per_launch = np.bincount(launch[found], minlength=len(launches.correlation))
        shared = np.where(found, per_launch[np.clip(launch, 0, None)], 1)
        replayed = shared > 1
        if replayed.any():
            host_dur = host_dur // np.maximum(shared, 1)
            calls = distinct(launch[replayed])
            extra["graph_launches"] = {
                "launches": len(calls),
                "kernels": int(replayed.sum()),
                "host_ns": int(launches.dur_ns[calls].sum()),
            }
        host_dur, warmup = _warmup_launches(encoded, memory, found, host_start, host_dur)
        if warmup:
            extra["warmup_launches"] = warmup
    start = ts[kernels]
    short = pc.utf8_trim_whitespace(pc.replace_substring_regex(encoded.dictionary, r"\s*\(.*$", ""))
    cols: dict[str, pa.Array] = {
        "op_name": encoded,
        # a copy is named by its direction ("Memcpy HtoD (Pinned -> Device)" -> Memcpy HtoD), a fill is a Memset
        "op_type": pc.if_else(
            pa.array(dma),
            "Memcpy",  # the native scanner reads no args.direction: one name for MTIA's DMA copies
            pc.if_else(
                pa.array(memory),
                short.take(encoded.indices),
                derive_types(encoded, gpu_op_type),
            ),
        ),
        "task_type": pa.array(TASK_TYPES).take(pa.array(np.where(memory, 2 + memset, mtia.astype(np.int64)))),
        "stream_id": _streams(trace, kernels),
        "task_start_ns": pa.array(start, pa.int64()),
        "task_dur_ns": pa.array(trace.dur_ns[kernels], pa.int64()),
        "host_launch_start_ns": pa.array(host_start, pa.int64(), mask=~found),
        "host_launch_dur_ns": pa.array(host_dur, pa.int64(), mask=~found),
        "graph_launch": pa.array(replayed, pa.bool_(), mask=~found),
    }
    return RawOps(cols, np.where(found, host_start, start)), extra


WARMUP_MIN_NS = 1_000_000
"""A kernel launch call costs microseconds (the anchors' medians: 2.6-7.2 us); the first launch of a kernel that
takes over a millisecond, and 50 times the trace's median, loaded its code object (ROCm's first hipLaunchKernel of a
kernel: 100-330 ms seen). That is warm-up, not launch overhead a fusion would remove."""


def _warmup_launches(
    names: pa.DictionaryArray, memory: np.ndarray, found: np.ndarray, host_start: np.ndarray, host_dur: np.ndarray
) -> tuple[np.ndarray, dict[str, int] | None]:
    """The launches that loaded a kernel (first launch of its name, far slower than any launch): their cost is
    set to the trace's median launch and what they took beyond it is reported apart."""
    kernel = found & ~memory
    if not kernel.any():
        return host_dur, None
    median = float(np.median(host_dur[kernel]))
    slow = kernel & (host_dur > max(WARMUP_MIN_NS, 50 * median))
    if not slow.any():
        return host_dur, None
    # each name's first launch: the earliest start, the first row among equal starts
    code = np.asarray(names.indices.to_numpy(zero_copy_only=False), np.int64)
    rows = np.flatnonzero(kernel)
    order = rows[np.lexsort((rows, host_start[rows], code[rows]))]
    head = np.ones(len(order), bool)
    head[1:] = code[order[1:]] != code[order[:-1]]
    firsts = np.zeros(len(host_dur), bool)
    firsts[order[head]] = True
    warm = slow & firsts
    if not warm.any():
        return host_dur, None
    out = host_dur.copy()
    out[warm] = int(median)
    return out, {"kernels": int(warm.sum()), "host_ns": int((host_dur[warm] - int(median)).sum())}


def _streams(trace: TraceEvents, kernels: np.ndarray) -> pa.Array:
    """args.stream per kernel; the old schema's tid ("stream 7", or a number) where the arg is missing or odd."""
    stream = trace.nonneg_int_args("stream", kernels)
    odd = np.flatnonzero((stream < 0) | (stream > _INT32_MAX)).tolist()
    if not odd:
        return pa.array(stream, pa.int64())
    rows = kernels[odd].tolist()
    out: list[int | None] = stream.tolist()
    for j, s, t in zip(odd, trace.arg_values("stream", rows), trace.take("tid", rows), strict=True):
        out[j] = _stream(s, t)
    return pa.array(out, pa.int64())


def _stream(value: Any, tid: Any) -> int | None:
    stream = int_arg({"s": value}, "s")
    if stream is None and isinstance(tid, str) and tid.startswith("stream "):  # old schema: tid "stream 7"
        stream = int_arg({"s": tid[7:]}, "s")
    if stream is None and isinstance(tid, int) and not isinstance(tid, bool):
        stream = tid
    return stream if stream is not None and 0 <= stream <= _INT32_MAX else None
