"""What fusing would save on a device atbprof has no model of (a GPU, an MTIA), measured from the trace itself.

A framework-level finding is a chain of framework calls (aten::pow, mean, add, rsqrt, mul ...) that one fused call
(F.rms_norm, a fused add + RMSNorm) would replace. Fusing removes all but one of those host calls, and on the device
all but one of their kernels. What that saves the step depends on which side was the bottleneck while the chain ran:

- the host side: the chain's host time less the fused call's (about its longest member), plus the waits between
  its calls - what the profile's own host timeline says the calls cost;
- bounded by the device side: the step only gets shorter by host time the device spent waiting. During the
  chain's host span the device was idle for some time (measured from the union of every stream's kernels), and
  the chain's kernels beyond the longest (which the fused kernel is assumed to cost) are saved on the device.

- and the host side may lose time without the device noticing when it was ahead: the shortest wait of the
  chain's kernels in the queue between their launch call and their start.

So saving = min(host saving + host ahead, device idle during the chain + the chain's kernel time - the fused
kernel). The fused kernel is priced from the bytes it moves (the chain's input read and its output written, plus
the residual read and written for an Add + norm; 2-byte activations) over the GPU's peak HBM bandwidth
(data/gpus.yaml, each from its datasheet), at least the chain's shortest kernel (the device's floor for a small
kernel) and at most its longest; without the chain's shapes or a spec of the GPU it costs its longest kernel.
On a host-bound trace (Hugging Face eager decode) the host side decides; on a device-bound one (kernels queued
behind each other) the device side does.
The estimate is of the profiled run: the profiler's own per-call cost is part of the host time it removes, so an
unprofiled run saves less where it is host-bound (say so).

A kernel-level finding (a chain seen only as kernels: a decode replayed from a graph, a trace without framework
ops) is priced the same way from its kernels: the device gives the chain's kernels beyond its longest plus the idle
between them; the host gives the span from the chain's first launch to its last launch's end less one launch
call (the launches and the framework work between them), plus the time it was ahead of the device (the shortest
queue wait of the chain's kernels) - a graph replay launches the chain at once and is far ahead, so the device
side decides. The total counts framework-level chains where the profile has them (their host time is what a
host-bound eager run loses) and kernel-level ones otherwise. Pure: tables in, tables out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from atbprof.analyze.detect import first_tensor
from atbprof.analyze.intervals import covered, union
from atbprof.analyze.launched import LaunchIndex
from atbprof.analyze.patterns import OPPORTUNITY_KINDS
from atbprof.analyze.report import WhatIf
from atbprof.analyze.view import RowsOf
from atbprof.analyze.whatif import _with_estimates, counted, framework_savings, profile_whatif
from atbprof.device.gpus import GpuSpec

TRACE = (
    "measured from the trace (the device is {device}, which atbprof has no device model of): each framework-level "
    "chain becomes one fused call costing about its longest member, and its kernels one kernel costing {fused}; "
    "the step gets shorter by the smaller of what the host gives (the calls and waits removed, plus the "
    "time it was ahead of the device) and what the device gives (the kernels removed, plus the time it sat idle "
    "waiting for the host); this is the saving of the profiled run: the profiler's own per-call overhead is "
    "in the host time removed, so an unprofiled, host-bound run saves less; a chain seen only as kernels saves its "
    "kernels beyond the longest and the idle between them, capped by the host time between its launches"
)


def _counted(findings: pa.Table, framework: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Framework-level chains where there are any (the host time a host-bound eager run loses is theirs), else the
    kernel-level ones: one level, so a chain found at both is counted once."""
    return framework if framework.any() else kernel & counted(findings)


def _kernel_savings(findings: pa.Table, ops: pa.Table) -> np.ndarray:
    """Per kernel-level finding: min(device side, host side) as the module docstring says; NaN elsewhere."""
    device = framework_savings(findings, level="kernel")
    k = findings.num_rows
    ops_of = RowsOf(ops.column("op_index").to_numpy(zero_copy_only=False).astype(np.int64))
    start = ops.column("task_start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    launch = ops.column("host_launch_start_ns")
    known = np.asarray(launch.is_valid().to_numpy(zero_copy_only=False), bool)
    at = launch.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    cost = ops.column("host_launch_dur_ns").fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    queued = np.maximum(start - (at + cost), 0).astype(float)
    host = np.full(k, np.inf)  # no launch records: the device decides
    for i, members in enumerate(findings.column("op_indices").to_pylist()):
        if np.isnan(device[i]):
            continue
        pos = ops_of.rows(members)
        if not len(pos):
            continue
        if known[pos].all():
            # the host's time from the chain's first launch to its last launch's end: the calls and the framework
            # work between them (a graph replay launches them all at once: nothing)
            host_span = float((at[pos] + cost[pos]).max() - at[pos].min())
            host[i] = max(host_span - float(cost[pos].max()), 0.0) + float(queued[pos].min())
    return np.minimum(device, host)


FUSED_HBM = (
    "its bytes (input read, output written, the residual too for an Add + norm; 2-byte activations) over the "
    "{gpu}'s peak HBM bandwidth ({gbps:,.0f} GB/s: {source}), at least the chain's shortest kernel and at most its "
    "longest (the longest where the trace records no shapes)"
)
FUSED_LONGEST = "about their longest ({why})"


def fused_bytes(kind: str, shape: str | None) -> float:
    """Bytes one fused norm kernel moves for a chain whose first call read `shape`: its input read and output
    written (2-byte activations), the weight read, and for Add + norm the residual read and written too; NaN
    without a shape."""
    dims = first_tensor(shape)
    if not dims or dims[-1] <= 0:
        return float("nan")
    elements = float(np.prod(dims))
    tensors = 4 if kind == "add_norm" else 2
    return (tensors * elements + dims[-1]) * ACTIVATION_BYTES


ACTIVATION_BYTES = 2
"""fp16 / bf16, what LLM inference runs in: a Kineto trace's framework table keeps shapes, not dtypes."""


def whatif_from_trace(
    findings: pa.Table, ops: pa.Table, span_us: float, device: str, gpu: GpuSpec | None = None
) -> tuple[pa.Table, WhatIf]:
    k = findings.num_rows
    saving = np.full(k, np.nan)
    host = framework_savings(findings)  # NaN on kernel-level rows
    kinds = findings.column("kind").to_pylist()
    framework = np.array(
        [not np.isnan(h) and kinds[i] in OPPORTUNITY_KINDS for i, h in enumerate(host)] + [False], bool
    )[:k]
    if framework.any() and ops.num_rows:
        a = findings.column("start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        b = a + findings.column("time_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        start = ops.column("task_start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
        busy = union(start, start + ops.column("task_dur_ns").to_numpy(zero_copy_only=False).astype(np.int64))
        idle = (b - a) - covered(a, b, *busy)  # the device idle during the chain, over every stream
        launches = LaunchIndex.of(ops)
        if launches is None:
            chain_dev = longest_dev = shortest_dev = ahead = np.zeros(k)
        else:
            lo, hi = launches.within(a, b)
            chain_dev, longest_dev, ahead = launches.device_ns(lo, hi), launches.longest(lo, hi), launches.ahead(lo, hi)
            shortest_dev = launches.shortest(lo, hi)
        fused_dev = longest_dev
        if gpu is not None:
            shapes = findings.column("shape").to_pylist()
            hbm = np.array([fused_bytes(kinds[i], shapes[i]) for i in range(k)]) / gpu.hbm_bytes_per_ns
            fused_dev = np.where(np.isnan(hbm), longest_dev, np.clip(hbm, shortest_dev, longest_dev))
        # the step shortens by what both sides give: the host its removed calls plus the time it was ahead, the
        # device the kernels beyond the longest plus the time it sat idle waiting for the host
        host_side = host + ahead
        device_side = np.maximum(idle, 0) + np.maximum(chain_dev - fused_dev, 0)
        saving[framework] = np.minimum(host_side[framework], device_side[framework])
    elif framework.any():  # no device kernels (a CPU-only trace): the host decides
        saving[framework] = host[framework]
    levels = findings.column("level").to_pylist()
    kernel_rows = np.array([kinds[i] in OPPORTUNITY_KINDS and levels[i] == "kernel" for i in range(k)], bool)
    if kernel_rows.any() and ops.num_rows:
        saving[kernel_rows] = _kernel_savings(findings, ops)[kernel_rows]
    use = _counted(findings, framework, kernel_rows) & ~np.isnan(saving)
    total = float(np.nansum(saving[use])) / 1e3
    estimated = bool(use.any())
    fused = (
        FUSED_HBM.format(gpu=gpu.name, gbps=gpu.hbm_gbps, source=gpu.source)
        if gpu is not None
        else FUSED_LONGEST.format(why=f"no spec of {device} in atbprof/data/gpus.yaml")
    )
    assumption = TRACE.format(device=device, fused=fused)
    result = profile_whatif("trace" if estimated else "none", device, assumption, span_us, total)
    return _with_estimates(findings, np.full(k, np.nan), saving), result
