"""The device model's duration of a catalogue fusion's kernel (RoPE, SwiGLU, attention, KV-cache write, MC2, the W8A8
quant fusions) from the shapes a profile records for the unfused sequence it would replace.

As for the norms (estimate.py), the estimate is built the way a run of ours builds it: the graph builder's one-layer
LLaMA graph with the dimensions the members' shapes give, the simulator's own fusion rule applied to it, and the
kernel cost model on the fused kernel - so a profile's sequence is priced exactly like the same sequence in a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from atbprof.analyze.detect import first_tensor
from atbprof.device.kernels import evaluate_costs
from atbprof.device.spec import load_device
from atbprof.fusion import FusionContext, apply_fusion, load_rules
from atbprof.graph.builder import GraphBuilder
from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import Lin, basis_values
from atbprof.graph.nodes import Node
from atbprof.importers.optypes import is_hccl_type

# rules that must run first for the target to see its pattern as the simulator does (SwiGlu fuses Swish and Mul
# once the up projection is merged into the gate's MatMul, which then no longer sits between them)
_BEFORE = {
    "swiglu": ("gate_up_merge",),
    "swiglu_quant": ("gate_up_merge", "swiglu"),
    "add_norm_quant": ("norm_kernel",),
    "qkv_norm_rope_cache": ("norm_kernel", "qkv_merge", "rope", "kv_cache_write"),
}
_QUANT = frozenset({"swiglu_quant", "add_norm_quant"})  # rules of a W8A8 model: priced on its graph


@dataclass(frozen=True)
class Shape:
    """What the unfused sequence's shapes say about the model step it ran in."""

    batch: int
    q_len: int  # query tokens per sequence (1: decode)
    kv_len: int  # positions attention runs over
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    kv_int8: bool = False  # the KV cache holds int8 (eager attention dequantised it first)
    vocab: int = 16  # the logits' width (the sampler's rows)
    experts: int = 0  # a MoE layer's experts (its FFN width is `inter`)
    experts_per_token: int = 0


@dataclass(frozen=True)
class OpEstimate:
    fused_ns: float  # one fused kernel (a grouped rule's kernels together)
    members_ns: float | None  # the kernels one fused kernel replaces, as the model prices them (None: not modelled)
    calls: int = 1  # kernels the fused form launches (a MoE layer's experts: five)


def _dims4(text: str | None) -> tuple[int, ...] | None:
    """The first tensor of a shapes string, when it is 4-D (batch, heads, tokens, head_dim)."""
    dims = first_tensor(text)
    return dims if dims is not None and len(dims) == 4 and min(dims) > 0 else None


def _rows(text: str | None) -> tuple[int, int, int] | None:
    """(batch, tokens per sequence, width) of an activation's first tensor ([B, S, W] or [T, W])."""
    dims = first_tensor(text)
    if not dims or len(dims) < 2 or min(dims) <= 0:
        return None
    tokens = int(np.prod(dims)) // dims[-1]
    batch = dims[0] if len(dims) >= 3 else tokens
    return batch, max(tokens // batch, 1), dims[-1]


def shape_of(rule: str, types: Sequence[str], inputs: Sequence[str | None]) -> Shape | None:
    """The step dimensions a finding's member kernels (their Types and input shapes) give, or None when the shapes
    do not say."""
    if rule in ("rope", "kv_cache_write"):
        x = next((d for d in (_dims4(s) for s in inputs) if d), None)
        if x is None:
            return None
        b, n, s, hd = x
        return Shape(b, s, s, n, n, hd, 16)
    if rule == "qkv_norm_rope_cache":  # the query heads' RoPE input, then the key heads' (one RoPE: both alike)
        heads = [d for d in (_dims4(s) for s in inputs) if d]
        if not heads:
            return None
        b, nh, s, hd = heads[0]
        nkv = heads[1][1] if len(heads) > 1 and heads[1][1] > 0 and nh % heads[1][1] == 0 else nh
        return Shape(b, s, s, nh, nkv, hd, 16)
    rows = _rows(inputs[0]) if inputs else None
    if rule == "add_norm_quant" and rows:
        return Shape(rows[0], rows[1], 1, 1, 1, rows[2], 16)
    if rule == "moe_gating" and rows:  # the router's [tokens, experts] logits
        return Shape(rows[0] * rows[1], 1, 1, 1, 1, 128, 16, experts=rows[2], experts_per_token=1)
    if rule == "moe_experts":
        return _expert_loop(types, inputs)
    if rule == "sampling" and rows:  # [batch, vocab] logits rows, one per sequence
        return Shape(rows[0] * rows[1], 1, 1, 1, 1, 128, 16, vocab=rows[2])
    if rule in ("swiglu", "swiglu_quant") and rows:
        return Shape(rows[0], rows[1], 1, 1, 1, 128, rows[2])
    if rule == "flash_attention":
        bmm = [i for i, t in enumerate(types) if t.startswith("BatchMatMul")]
        if len(bmm) < 2:
            return None
        q, probs = _dims4(inputs[bmm[0]]), _dims4(inputs[bmm[-1]])
        if q is None or probs is None:
            return None
        b, nh, s, hd = q
        copies = [_dims4(inputs[i]) for i, t in enumerate(types) if t.startswith(("BroadcastTo", "Expand"))]
        nkv = copies[0][1] if copies and copies[0] else nh
        if nkv <= 0 or nh % nkv:
            nkv = nh
        int8 = any(t.startswith(("AscendAntiQuant", "AntiQuant")) for t in types)
        return Shape(b, s, probs[-1], nh, nkv, hd, 16, int8)
    return None


def _expert_loop(types: Sequence[str], inputs: Sequence[str | None]) -> Shape | None:
    """A loop over the experts (gate, up and down MatMuls per expert): the experts it ran, the rows routed to them
    in all and one expert's width. Priced as balanced routing of those rows (one expert per row: the rows are the
    routed copies of the tokens). The rows are the expert mask's (NonZero reads [k, tokens] of it, or the whole
    [experts, k, tokens] mask), else the gate MatMuls' rows summed (an expert's share may round to none)."""
    gates = [j for j, t in enumerate(types) if _is_matmul(t)][0::3]
    weights = [_weight(inputs[j]) for j in gates]
    if not gates or any(w is None for w in weights) or len(gates) * 3 != sum(_is_matmul(t) for t in types):
        return None
    hidden, width = weights[0] or (0, 0)
    mask = next((first_tensor(inputs[j]) for j, t in enumerate(types) if t.startswith("NonZero")), None)
    routed = int(np.prod(mask[-2:])) if mask and len(mask) >= 2 and min(mask) > 0 else 0
    if not routed:
        rows = [first_tensor(inputs[j]) for j in gates]
        routed = sum(int(np.prod(r[:-1])) for r in rows if r and len(r) >= 2)
    if routed <= 0 or hidden <= 0 or width <= 0:
        return None
    return Shape(routed, 1, 1, 1, 1, hidden, width, experts=len(gates), experts_per_token=1)


def _weight(inputs: str | None) -> tuple[int, int] | None:
    """(K, N) of a MatMul's weight, its second input (the first may have no rows)."""
    parts = (inputs or "").strip('"').split(";")
    w = first_tensor(parts[1]) if len(parts) >= 2 else None
    return (w[0], w[1]) if w and len(w) == 2 and min(w) > 0 else None


def _is_matmul(op_type: str) -> bool:
    return op_type.startswith(("MatMul", "Matmul"))


def fused_op(
    rule: str,
    types: Sequence[str],
    inputs: Sequence[str | None],
    durs: Sequence[float],
    dtype: str,
    device: str,
    clock_mhz: float | None,
) -> OpEstimate | None:
    """The fused kernel of a finding of `rule` from its member kernels (Types, input shapes, measured durations),
    or None when the shapes do not say; MC2 builds on the measured MatMul and collective (the replaced kernels
    are not modelled then)."""
    if rule == "mc2":
        mm = [j for j, t in enumerate(types) if _is_matmul(t)]  # not a MemSet / TransData tolerated between
        comm = [j for j, t in enumerate(types) if is_hccl_type(t)]
        dims = matmul_dims(inputs[mm[0]]) if mm and comm else None
        if dims is None:
            return None
        fused = mc2_fused_ns(durs[mm[0]], durs[comm[0]], dims, dtype, device, clock_mhz)
        return OpEstimate(fused, None)
    shape = shape_of(rule, types, inputs)
    return estimate_op(rule, shape, dtype, device, clock_mhz) if shape else None


def matmul_dims(inputs: str | None) -> tuple[int, int, int] | None:
    """(tokens, K, N) of a MatMul from its input shapes ('1,16,4096;4096,11008'; a weight stored N x K too)."""
    parts = (inputs or "").strip('"').split(";")
    if len(parts) < 2:
        return None
    x, w = first_tensor(parts[0]), first_tensor(parts[1])
    if not x or not w or len(w) != 2 or min(x) <= 0 or min(w) <= 0:
        return None
    k = x[-1]
    n = w[1] if w[0] == k else w[0] if w[1] == k else 0
    return (int(np.prod(x)) // k, k, n) if n else None


@lru_cache(maxsize=512)
def mc2_fused_ns(
    matmul_ns: float, comm_ns: float, dims: tuple[int, int, int], dtype: str, device: str, clock_mhz: float | None
) -> float:
    """MC2: the MatMul and its collective in one kernel, as the simulator prices it (device/kernels.py): each
    finished tile is sent while the next is computed, so the longer side shows in full and the shorter one for one
    tile iteration of the MatMul (its iterations from the cost model at these dimensions). The measured kernels
    give both sides, less their fixed per-task costs (the device spec's)."""
    spec = load_device(device).at_clock(clock_mhz)
    tokens, k, n = dims
    b = GraphBuilder(ModelDims("estimate", "llama", k, 16, 1, 1, 1, 16, 1e-6, spec.model_dtype(dtype)))
    x = (-1, b.act(k, tokens=Lin(one=tokens)))
    node = b.nodes[b.matmul("x.matmul", 0, x, k, n, tokens=Lin(one=tokens))]
    costs = evaluate_costs([node], spec, basis_values(1, np.array([1]), np.array([1])))
    iters = float(costs.iters[0, 0]) if costs.iters is not None else 1.0
    static = spec.static_cost_us.cube * 1e3
    collective = spec.topology.collective_static_us * 1e3 if spec.topology else 0.0
    mm, comm = max(matmul_ns - static, 0.0), max(comm_ns - collective, 0.0)
    return static + max(mm, comm) + min(mm, comm) / max(iters, 1.0)


@lru_cache(maxsize=512)
def estimate_op(rule: str, shape: Shape, dtype: str, device: str, clock_mhz: float | None = None) -> OpEstimate | None:
    """Model durations of the kernel `rule` fuses, for one occurrence at `shape` (None: the rule does not fire
    on the graph these dimensions give)."""
    spec = load_device(device).at_clock(clock_mhz)
    dims = ModelDims(
        name="estimate",
        architecture="llama",
        hidden=shape.heads * shape.head_dim,
        inter=shape.inter,
        heads=shape.heads,
        kv_heads=shape.kv_heads,
        layers=1,
        vocab=shape.vocab,
        eps=1e-6,
        dtype=spec.model_dtype(dtype),
        quant="w8a8" if rule in _QUANT else "none",
        kv_int8=shape.kv_int8,
        sampling="top_k_top_p" if rule == "sampling" else "greedy",
        qk_norm=rule == "qkv_norm_rope_cache",
        experts=shape.experts,
        experts_per_token=shape.experts_per_token,
        expert_inter=shape.inter if shape.experts else 0,
    )
    rules = load_rules()
    if rule not in rules.rules:
        return None
    phase = "decode" if shape.q_len == 1 else "prefill"
    ctx = FusionContext(
        phase=phase,
        soc_version=spec.soc_version,
        tokens=shape.batch * shape.q_len,
        seq_len=shape.kv_len,
        dtype=dims.dtype,
    )
    graph = GraphBuilder(dims).build()
    before = [rules.rules[r] for r in _BEFORE.get(rule, ())]
    base = apply_fusion(graph, before, ctx).graph if before else graph
    fused = apply_fusion(base, [rules.rules[rule]], ctx).graph
    new = [n for n in fused.nodes if n.rule == rule]
    if not new:
        return None
    kept = {n.id for n in fused.nodes}
    replaced = [n for n in base.nodes if n.id not in kept]
    values = basis_values(shape.batch, np.array([shape.q_len]), np.array([shape.kv_len]), experts=dims.moe)

    def cost(nodes: list[Node]) -> float:
        return float(evaluate_costs(nodes, spec, values).dur[:, 0].sum()) if nodes else 0.0

    groups = len(rules.rules[rule].groups) or 1  # a grouped rule makes one kernel per group in each occurrence
    occurrences = max(len(new) // groups, 1)
    return OpEstimate(cost(new) / occurrences, cost(replaced) / occurrences, groups)
