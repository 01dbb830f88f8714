"""Device memory of a run: weights, KV cache, peak activations and workspace against the HBM capacity (pure).

- weights: every parameter once (the whole embedding table, not the one row a decode step reads);
- KV cache: K and V of every layer at the largest context the run reaches (prompt + decode tokens);
- activations: the largest set of tensors one kernel reads and writes at once, over every phase at its largest
  step, plus the residual stream held across the layer (eager attention's fp32 scores are what makes long prompts
  run out of memory); with chunked prefill the largest prefill step is one chunk (as vLLM sizes its activations
  for max_num_batched_tokens);
- workspace: the largest cube<->vector hand-off a fused kernel keeps in global memory on split-core 910B (MIX
  kernels exchange tiles through GM: at most two UB-sized tiles per vector core in flight), 0 on 910A;
- communication: HCCL's send and receive buffers of each communicator a rank belongs to (its tensor-parallel group,
  its pipeline group).
Everything is per device: a tensor-parallel rank holds its share of the weights and KV heads (dims are sharded); a
pipeline stage holds its layers' weights and KV cache for the whole batch (the embedding on the first stage, the LM
head on the last), and the activations of one microbatch at a time.
A caching allocator holds more than this peak, so a run that fits here may still need headroom on a real card;
one that does not fit here cannot run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import BASIS, basis_values
from atbprof.graph.memo import NodeMemo
from atbprof.graph.nodes import Graph, Node
from atbprof.sim.steps import prefill_chunk

GB = 1e9


class MemoryEstimate(BaseModel):
    """summary.memory of run.json (GB = 10^9 bytes, as HBM capacities are quoted)."""

    weights_gb: float
    kv_cache_gb: float
    activations_gb: float
    workspace_gb: float
    communication_gb: float = 0.0
    total_gb: float
    capacity_gb: float
    fits: bool
    max_batch_that_fits: int
    max_context_that_fits: int
    devices_needed: int
    capacity_ignored: bool = False
    smallest_tp_that_fits: int | None = None  # None: none that the model's heads allow
    stage: int = 0  # the pipeline stage this is for: the one that needs the most


@dataclass(frozen=True)
class StageShare:
    """What one pipeline stage holds of the model: `layers` decoder layers, and the embedding / the LM head."""

    layers: int
    embedding: bool
    lm_head: bool


class _Working:
    """Per-phase (nodes x BASIS) coefficients of each kernel's working set and workspace, evaluated cheaply."""

    def __init__(self, graphs: dict[str, Graph], tile_bytes: float) -> None:
        self.tile_bytes = tile_bytes
        self.phases: dict[str, tuple[np.ndarray, np.ndarray]] = {
            phase: _coefficients(graph) for phase, graph in graphs.items()
        }

    def peak(self, phase: str, batch: int, sq: int, skv: int, attend: int) -> tuple[float, float]:
        values = basis_values(batch, np.array([sq]), np.array([skv]), np.array([attend])).astype(np.float64)[:, 0]
        work, space = self.phases[phase]
        # a fused kernel exchanges tiles, not whole tensors: at most `tile_bytes` in flight in its GM workspace
        space_max = float(np.minimum(space @ values, self.tile_bytes).max(initial=0.0))
        return float((work @ values).max(initial=0.0)), space_max


def _coefficients(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(working set, workspace) coefficients per node of `graph` (remembered per node sequence)."""
    return _COEFFICIENTS(graph.nodes)


def _node_coefficients(nodes: Sequence[Node]) -> tuple[np.ndarray, np.ndarray]:
    work = np.zeros((len(nodes), len(BASIS)))
    space = np.zeros((len(nodes), len(BASIS)))
    masks = [BASIS.index("TL"), BASIS.index("TKV")]
    for i, n in enumerate(nodes):
        for e in n.inputs:
            # a fused attention kernel takes a compressed causal mask, not the eager S x S one
            if not (n.rule and e.producer < 0 and e.tensor.nbytes.coef[masks].any()):
                work[i] += e.tensor.nbytes.coef
        for t in n.outputs:
            work[i] += t.nbytes.coef
        for h in n.handoff:
            space[i] += h.coef
    work.flags.writeable = False  # shared between runs
    space.flags.writeable = False
    return work, space


_COEFFICIENTS = NodeMemo(_node_coefficients)


def _kv_bytes(d: ModelDims, batch: int, context: int, share: StageShare | None = None) -> float:
    layers = d.layers if share is None else share.layers
    return 2.0 * layers * d.kv_local * d.head_dim * d.dsize * batch * context


def kv_bytes_per_token(d: ModelDims) -> float:
    """K and V of one token over every layer of one rank's share (the paged cache's unit)."""
    return _kv_bytes(d, 1, 1)


def _weights_bytes(d: ModelDims, share: StageShare | None = None) -> float:
    if share is None:
        return float(d.weight_bytes() + d.table_bytes())
    embedding = (d.table_bytes() + d.hidden * d.dsize) if share.embedding else 0
    head = d.vocab_local * d.hidden * d.dsize if share.lm_head else 0
    return float(share.layers * d.layer_weight_bytes() + embedding + head)


def _parts(
    w: _Working,
    d: ModelDims,
    split: bool,
    batch: int,
    prompt: int,
    decode: int,
    cache_len: int | None,
    share: StageShare | None = None,
    microbatches: int = 1,
    max_num_batched_tokens: int | None = None,
) -> tuple[float, ...]:
    context = prompt + decode
    act, space = 0.0, 0.0
    micro = -(-batch // microbatches)  # a stage runs one microbatch at a time
    # chunked prefill: the largest step is a chunk's tokens attending to the whole prompt (the last chunk)
    chunk = prefill_chunk(prompt, batch, max_num_batched_tokens)
    for phase, sq, skv, attend in (("prefill", chunk, prompt, prompt), ("decode", 1, context, cache_len or context)):
        if phase in w.phases and (phase == "prefill" or decode > 0):
            a, s = w.peak(phase, micro, sq, skv, attend)
            act, space = max(act, a + micro * sq * d.hidden * d.dsize), max(space, s)
    kv = _kv_bytes(d, batch, cache_len or context, share)
    return _weights_bytes(d, share), kv, act, space if split else 0.0


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
    cache_len: int | None = None,
    full_dims: ModelDims | None = None,
    buffer_bytes_per_communicator: float = 0.0,
    share: StageShare | None = None,
    microbatches: int = 1,
    communicators: int | None = None,
    stage: int = 0,
    max_num_batched_tokens: int | None = None,
) -> MemoryEstimate:
    """`cache_len`: a fixed KV cache's positions; `full_dims`: the unsharded model, to find the smallest
    tensor-parallel degree that fits; each of the rank's `communicators` (default: one with tensor parallelism)
    holds `buffer_bytes_per_communicator` of HCCL buffers; `share`: a pipeline stage's part of the model, whose
    kernels run `microbatches` at a time."""
    working = _Working(graphs, tile_bytes)
    if communicators is None:
        communicators = 1 if dims.tp > 1 else 0
    comm_buffer_bytes = buffer_bytes_per_communicator * communicators

    def parts(b: int, p: int, fixed: int | None) -> tuple[float, ...]:
        return _parts(working, dims, split_cores, b, p, decode, fixed, share, microbatches, max_num_batched_tokens)

    def total(b: int, p: int) -> float:
        fixed = max(cache_len, p + decode) if cache_len else None
        return (sum(parts(b, p, fixed)) + comm_buffer_bytes) / GB

    weights, kv, act, space = (x / GB for x in parts(batch, prompt, cache_len))
    comm = comm_buffer_bytes / GB
    need = weights + kv + act + space + comm
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
        communication_gb=round(comm, 4),
        total_gb=round(need, 4),
        capacity_gb=cap,
        fits=cap <= 0 or need <= cap,
        max_batch_that_fits=max_batch,
        max_context_that_fits=max_context,
        devices_needed=devices,
        capacity_ignored=capacity_ignored,
        smallest_tp_that_fits=_smallest_tp(
            full_dims or dims,
            cap,
            act + space,
            batch,
            prompt,
            decode,
            cache_len,
            buffer_bytes_per_communicator / GB,
            share,
            communicators - (1 if dims.tp > 1 else 0),
        )
        if cap > 0
        else None,
        stage=stage,
    )


def _smallest_tp(
    full: ModelDims,
    cap_gb: float,
    other_gb: float,
    batch: int,
    prompt: int,
    decode: int,
    cache_len: int | None,
    buffer_gb: float,
    share: StageShare | None = None,
    other_communicators: int = 0,
) -> int | None:
    """The smallest tp (a power of two the heads allow) whose per-device weights + KV cache + this run's
    activations, workspace and a communicator's buffers fit; activations only shrink with tp, so an upper bound."""
    from atbprof.errors import ConfigError

    tp = 1
    while tp <= full.heads:
        try:
            d = full.sharded(tp) if tp > 1 else full
        except ConfigError:
            tp *= 2
            continue
        buffers = buffer_gb * ((1 if tp > 1 else 0) + other_communicators)
        held = _weights_bytes(d, share) + _kv_bytes(d, batch, cache_len or prompt + decode, share)
        need = held / GB + other_gb + buffers
        if need <= cap_gb:
            return tp
        tp *= 2
    return None


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


def what_fits(max_batch: int, max_context: int, batch: int) -> str:
    """What would fit on the device instead: the largest batch at this context, the longest context at this batch
    (never "batch 0": when neither fits, it says so)."""
    fit = []
    if max_batch:
        fit.append(f"batch {max_batch} at this context")
    if max_context:
        fit.append(f"context {max_context:,} at batch {batch}")
    return "fits on this device: " + " or ".join(fit) if fit else "even batch 1 does not fit on this device"


def does_not_fit(m: MemoryEstimate, device: str, batch: int, context: int, tp: int = 1, pp: int = 1) -> str:
    """The refusal: the numbers, what would fit on this device, how many devices it needs, and the override."""
    what = "; " + what_fits(m.max_batch_that_fits, m.max_context_that_fits, batch)
    if m.smallest_tp_that_fits and m.smallest_tp_that_fits > tp:
        tp_hint = f"it fits with parallel.tp: {m.smallest_tp_that_fits} (weights and KV heads split over the cards)"
    elif m.smallest_tp_that_fits is None:
        tp_hint = "no tensor-parallel split the model's heads allow makes it fit"
    else:
        tp_hint = f"it needs at least {m.devices_needed} devices"
    where = "one" if tp * pp == 1 else "each"
    if pp > 1:
        where = f"each {device} of pipeline stage {m.stage} (the fullest)"
        tp_hint += "; or split the layers over more pipeline stages (parallel.pp)"
    else:
        where = f"{where} {device}"
    return (
        f"this run does not fit on {where}: it needs {m.total_gb:.1f} GB (weights {m.weights_gb:.1f}, "
        f"KV cache "
        f"{m.kv_cache_gb:.1f} at context {context:,}, activations {m.activations_gb:.1f}, workspace "
        f"{m.workspace_gb:.1f}, communication buffers {m.communication_gb:.1f}) and the device has "
        f"{m.capacity_gb:g} GB of HBM{what}; {tp_hint}. Reduce workload.batch_size or workload.prompt_len, "
        + (
            "chunk the prefill (workload.max_num_batched_tokens: activations sized for that many tokens), "
            if m.activations_gb >= 0.1 * m.total_gb
            else ""
        )
        + "pick a larger device, or set device.ignore_capacity: true to simulate it anyway"
    )
