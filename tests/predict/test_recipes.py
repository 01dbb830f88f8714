"""The recipes are data, and where a run has the same kernel, the recipe prices it as the run does."""

from __future__ import annotations

import numpy as np
import pytest

from atbprof.fusion import FusionContext, apply_fusion, load_rules
from atbprof.graph.builder import GraphBuilder
from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import BASIS, Lin
from atbprof.graph.nodes import Graph
from atbprof.predict.recipes import load_recipes

ONE = np.eye(len(BASIS))[0]


def _run_norm_passes(layer_norm: bool) -> float:
    dims = ModelDims(
        name="t", architecture="gpt" if layer_norm else "llama", hidden=1024, inter=4096, heads=8, kv_heads=8,
        layers=1, vocab=1, eps=1e-6, dtype="bf16",
    )  # fmt: skip
    b = GraphBuilder(dims)
    tokens = Lin(one=4096)
    b.norm("x.norm", 0, (-1, b.act(1024, tokens=tokens)), tokens=tokens)
    ctx = FusionContext(phase="prefill", soc_version="Ascend910B3", tokens=4096, seq_len=4096, dtype="bf16")
    (fused,) = apply_fusion(Graph(b.nodes), [load_rules().rules["norm_kernel"]], ctx).graph.nodes
    biggest = max([e.tensor.nbytes.coef @ ONE for e in fused.inputs] + [t.nbytes.coef @ ONE for t in fused.outputs])
    return float(sum(w.vec_bytes.coef @ ONE for w in fused.work) / biggest)


def test_rms_norm_passes_are_the_runs_norm_kernel() -> None:
    assert load_recipes().op_types["RmsNorm"].passes == pytest.approx(_run_norm_passes(False), abs=0.05)


def test_layer_norm_passes_are_the_runs_norm_kernel() -> None:
    assert load_recipes().op_types["LayerNormV3"].passes == pytest.approx(_run_norm_passes(True), abs=0.1)


def test_communication_is_recognised_by_name_and_core() -> None:
    r = load_recipes()
    assert r.is_communication("hcom_allReduce_", "COMMUNICATION") and r.is_communication("anything", "HCCL")
    assert not r.is_communication("MatMulV3", "AI_CORE")
