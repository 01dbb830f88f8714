"""Fused attention under a causal mask: the GEMMs and the softmax cover the causal pairs, as `predict` counts them;
eager attention computes the whole square and masks it."""

from __future__ import annotations

import numpy as np
import pytest

from atbprof.config.models import ModelSection
from atbprof.device.kernels import evaluate_costs
from atbprof.device.spec import load_device
from atbprof.fusion import FusionContext, apply_fusion, load_rules
from atbprof.graph.builder import build_graph
from atbprof.graph.dims import resolve_model
from atbprof.graph.expr import basis_values


def _attention(rule_names: list[str], sq: int, skv: int) -> tuple[str, float]:
    dims = resolve_model(ModelSection(preset="llama2-7b"))
    rules = load_rules()
    phase = "prefill" if sq > 1 else "decode"
    ctx = FusionContext(phase=phase, soc_version="Ascend910B2", tokens=sq, seq_len=skv, dtype="fp16")
    graph = apply_fusion(build_graph(dims), [rules.rules[r] for r in rule_names], ctx).graph
    layer = [n for n in graph.nodes if n.layer == 0]
    nodes = [n for n in layer if n.role in ("attn.score", "attn.softmax", "attn.context")]
    costs = evaluate_costs(nodes, load_device("910B2"), basis_values(1, np.array([sq]), np.array([skv])))
    gemm = sum(2 * np.prod([d.at(_env(sq, skv)) for d in w.mm]) for n in nodes for w in n.work if w.mm is not None)
    assert costs.flops[:, 0].sum() >= gemm
    return nodes[0].op_type if len(nodes) == 1 else "eager", float(gemm)


def _env(sq: int, skv: int) -> dict[str, float]:
    names = ("one", "B", "Sq", "Skv", "T", "BKV", "TKV", "L", "BL", "TL", "TQ", "A")
    return dict(zip(names, basis_values(1, np.array([sq]), np.array([skv]))[:, 0].astype(float), strict=True))


@pytest.mark.parametrize(("sq", "skv"), [(8192, 8192), (512, 2048), (1, 4096)])
def test_fused_attention_is_priced_over_the_causal_pairs(sq: int, skv: int) -> None:
    """QK^T and PV each take 2 x heads x head_dim FLOPs per (token, position) pair a causal step attends: the
    prefix in full and the new tokens up to themselves, Sq (Skv - (Sq - 1) / 2) pairs (a chunk of 512 after a
    1,536-token prefix; decode attends everything)."""
    kind, flops = _attention(["flash_attention"], sq, skv)
    assert kind == ("PromptFlashAttention" if sq > 1 else "IncreFlashAttention")
    pairs = sq * (skv - (sq - 1) / 2)
    assert flops == pytest.approx(2 * 2 * 32 * 128 * pairs)
    if (sq, skv) == (8192, 8192):
        assert flops == pytest.approx(5.498e11, rel=1e-3)  # half the 1.1e12 of the square


def test_eager_attention_computes_the_whole_square() -> None:
    kind, flops = _attention([], 512, 512)
    assert kind == "eager" and flops == pytest.approx(2 * 2 * 32 * 128 * 512 * 512)
