"""The device model's duration of a fused norm kernel, from the shapes a profile records.

The estimate is built the way a run of ours builds it: the graph builder's unfused ops for that shape (residual
Add, the norm chain, the MatMul), the simulator's own fusion rules applied to them, and the kernel cost model
(atbprof/device/kernels.py) on the result - so a foreign chain is priced exactly like the same chain in a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from atbprof.device.kernels import evaluate_costs
from atbprof.device.spec import DeviceSpec, load_device
from atbprof.fusion import FusionContext, apply_fusion, load_rules
from atbprof.graph.builder import GraphBuilder
from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import Lin, basis_values
from atbprof.graph.nodes import Graph, Node


@dataclass(frozen=True)
class FusedEstimate:
    fused_ns: float  # the fused kernel
    members_ns: float  # the kernels it replaces, as the model prices them
    matmul_ns: float  # the MatMul alone (Norm+MatMul), else 0


def _cost(nodes: list[Node], spec: DeviceSpec) -> float:
    if not nodes:
        return 0.0
    values = basis_values(1, np.array([1]), np.array([1]))  # every size here is a constant
    return float(evaluate_costs(nodes, spec, values).dur[:, 0].sum())


@lru_cache(maxsize=256)
def estimate(
    kind: str,
    tokens: int,
    hidden: int,
    out_width: int,
    dtype: str,
    layer_norm: bool,
    with_add: bool,
    device: str,
    clock_mhz: float | None = None,
) -> FusedEstimate:
    """Model durations for one finding shape. `with_add`: the norm is an Add+Norm kernel (Norm+MatMul findings);
    `clock_mhz`: the AI Core clock the profile's counters show (predict/device.py), else the preset's."""
    spec = load_device(device).at_clock(clock_mhz)
    dims = ModelDims(
        name="estimate",
        architecture="gpt" if layer_norm else "llama",
        hidden=hidden,
        inter=max(out_width, 1),
        heads=1,
        kv_heads=1,
        layers=1,
        vocab=1,
        eps=1e-6,
        dtype=spec.model_dtype(dtype),
    )
    b = GraphBuilder(dims)
    tok = Lin(one=tokens)
    x = (-1, b.act(hidden, tokens=tok))
    residual = kind == "add_norm" or (kind == "norm_matmul" and with_add)
    if residual:
        x = b.out(b.vec("Add", "x.residual", 0, [x, (-1, b.act(hidden, tokens=tok))], b.act(hidden, tokens=tok)))
    y = b.norm("x.norm", 0, x, tokens=tok)
    if kind == "norm_matmul":
        y = b.out(b.matmul("x.matmul", 0, y, hidden, max(out_width, 1), tokens=tok))
    if residual:  # the residual sum is read again later: the fused kernel must still write it
        width = max(out_width, 1) if kind == "norm_matmul" else hidden
        b.vec("Add", "x.next", 0, [x, y], b.act(width, tokens=tok))
    rules = load_rules()
    ctx = FusionContext(phase="decode", soc_version=spec.soc_version, tokens=tokens, seq_len=1, dtype=dims.dtype)
    before = ["norm_kernel"] + (["add_norm"] if kind == "norm_matmul" and with_add else [])
    target = {"decomposed_rmsnorm": "norm_kernel", "decomposed_layernorm": "norm_kernel"}.get(kind, kind)
    base = Graph(b.nodes)
    if target != "norm_kernel":
        base = apply_fusion(base, [rules.rules[r] for r in before], ctx).graph
    fused = apply_fusion(base, [rules.rules[target]], ctx).graph
    new = [n for n in fused.nodes if n.rule == target]
    kept = {n.id for n in fused.nodes}
    replaced = [n for n in base.nodes if n.id not in kept]
    matmul = [n for n in base.nodes if n.op_type == "MatMulV2"]
    return FusedEstimate(_cost(new, spec), _cost(replaced, spec), _cost(matmul, spec))
