"""Device memory of a run: weights, KV cache, peak activations and workspace against the HBM capacity (pure).

- weights: every parameter once (the whole embedding table, not the one row a decode step reads);
- KV cache: K and V of every layer at the largest context the run reaches (prompt + decode tokens);
- activations: the largest set of tensors one kernel reads and writes at once, over every phase at its largest
  step, plus the residual stream held across the layer (eager attention's fp32 scores are what makes long prompts
  run out of memory);
- workspace: the largest cube<->vector hand-off a fused kernel keeps in global memory on split-core 910B (MIX
  kernels exchange tiles through GM: at most two UB-sized tiles per vector core in flight), 0 on 910A.
A caching allocator holds more than this peak, so a run that fits here may still need headroom on a real card;
one that does not fit here cannot run.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel

from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import BASIS, basis_values
from atbprof.graph.nodes import Graph

GB = 1e9


class MemoryEstimate(BaseModel):
    """summary.memory of run.json (GB = 10^9 bytes, as HBM capacities are quoted)."""

    weights_gb: float
    kv_cache_gb: float
    activations_gb: float
    workspace_gb: float
    total_gb: float
    capacity_gb: float
    fits: bool
    max_batch_that_fits: int
    max_context_that_fits: int
    devices_needed: int
    capacity_ignored: bool = False


class _Working:
    """Per-phase (nodes x BASIS) coefficients of each kernel's working set and workspace, evaluated cheaply."""

    def __init__(self, graphs: dict[str, Graph], tile_bytes: float) -> None:
        self.tile_bytes = tile_bytes
        self.phases: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for phase, graph in graphs.items():
            work = np.zeros((len(graph.nodes), len(BASIS)))
            space = np.zeros((len(graph.nodes), len(BASIS)))
            tkv = BASIS.index("TKV")
            for i, n in enumerate(graph.nodes):
                for e in n.inputs:
                    # a fused attention kernel takes a compressed causal mask, not the eager S x S one
                    if not (n.rule and e.producer < 0 and e.tensor.nbytes.coef[tkv]):
                        work[i] += e.tensor.nbytes.coef
                for t in n.outputs:
                    work[i] += t.nbytes.coef
                for h in n.handoff:
                    space[i] += h.coef
            self.phases[phase] = (work, space)

    def peak(self, phase: str, batch: int, sq: int, skv: int) -> tuple[float, float]:
        values = basis_values(batch, np.array([sq]), np.array([skv])).astype(np.float64)[:, 0]
        work, space = self.phases[phase]
        # a fused kernel exchanges tiles, not whole tensors: at most `tile_bytes` in flight in its GM workspace
        space_max = float(np.minimum(space @ values, self.tile_bytes).max(initial=0.0))
        return float((work @ values).max(initial=0.0)), space_max


def _kv_bytes(d: ModelDims, batch: int, context: int) -> float:
    return 2.0 * d.layers * d.kv_heads * d.head_dim * d.dsize * batch * context


def _weights_bytes(d: ModelDims) -> float:
    return float(d.weight_bytes() + (d.vocab - 1) * d.hidden * d.dsize)


def _parts(w: _Working, d: ModelDims, split: bool, batch: int, prompt: int, decode: int) -> tuple[float, ...]:
    context = prompt + decode
    act, space = 0.0, 0.0
    for phase, sq, skv in (("prefill", prompt, prompt), ("decode", 1, context)):
        if phase in w.phases and (phase == "prefill" or decode > 0):
            a, s = w.peak(phase, batch, sq, skv)
            act, space = max(act, a + batch * sq * d.hidden * d.dsize), max(space, s)
    return _weights_bytes(d), _kv_bytes(d, batch, context), act, space if split else 0.0


def estimate_memory(
    graphs: dict[str, Graph],
    dims: ModelDims,
    split_cores: bool,
    capacity_gb: float,
    tile_bytes: float,
    batch: int,
    prompt: int,
    decode: int,
    capacity_ignored: bool = False,
) -> MemoryEstimate:
    working = _Working(graphs, tile_bytes)

    def total(b: int, p: int) -> float:
        return sum(_parts(working, dims, split_cores, b, p, decode)) / GB

    weights, kv, act, space = (x / GB for x in _parts(working, dims, split_cores, batch, prompt, decode))
    need = weights + kv + act + space
    cap = capacity_gb
    if cap <= 0:  # a spec without a capacity: nothing to check against
        max_batch, max_context, devices = 0, 0, 1
    else:
        per_sequence = total(1, prompt) - weights  # everything but the weights grows with the batch
        max_batch = max(0, math.floor((cap - weights) / per_sequence)) if per_sequence > 0 else 0
        fits_at = total(batch, 1) <= cap
        max_context = _longest(lambda p: total(batch, p) <= cap, prompt + decode) + decode if fits_at else 0
        devices = max(1, math.ceil(need / cap))
    return MemoryEstimate(
        weights_gb=round(weights, 4),
        kv_cache_gb=round(kv, 4),
        activations_gb=round(act, 4),
        workspace_gb=round(space, 4),
        total_gb=round(need, 4),
        capacity_gb=cap,
        fits=cap <= 0 or need <= cap,
        max_batch_that_fits=max_batch,
        max_context_that_fits=max_context,
        devices_needed=devices,
        capacity_ignored=capacity_ignored,
    )


def _longest(fits: Callable[[int], bool], start: int) -> int:
    """The largest prompt length p >= 1 with fits(p), by doubling then bisection (fits is monotone in p)."""
    lo, hi = 1, max(2, start)
    while fits(hi) and hi < 1 << 31:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def does_not_fit(m: MemoryEstimate, device: str, batch: int, context: int) -> str:
    """The refusal: the numbers, what would fit on this device, how many devices it needs, and the override."""
    fit = []
    if m.max_batch_that_fits:
        fit.append(f"batch {m.max_batch_that_fits} at this context")
    if m.max_context_that_fits:
        fit.append(f"context {m.max_context_that_fits:,} at batch {batch}")
    what = "; fits on this device: " + " or ".join(fit) if fit else "; even batch 1 does not fit on this device"
    return (
        f"this run does not fit on one {device}: it needs {m.total_gb:.1f} GB (weights {m.weights_gb:.1f}, KV cache "
        f"{m.kv_cache_gb:.1f} at context {context:,}, activations {m.activations_gb:.1f}, workspace "
        f"{m.workspace_gb:.1f}) and the device has {m.capacity_gb:g} GB of HBM{what}; it needs at least "
        f"{m.devices_needed} devices (tensor parallelism is not modelled yet). Reduce workload.batch_size or "
        "workload.prompt_len, pick a larger device, or set device.ignore_capacity: true to simulate it anyway"
    )
