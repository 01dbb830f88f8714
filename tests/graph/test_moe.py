"""A MoE layer: Hugging Face's eager expert loop, balanced routing in expectation, its fused form and its sharding."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from atbprof.config.models import ModelSection
from atbprof.errors import ConfigError
from atbprof.fusion import FusionContext, apply_fusion, load_rules
from atbprof.graph.builder import build_graph
from atbprof.graph.dims import resolve_model
from atbprof.graph.expr import EXPERT_SCALE, active_experts, basis_values
from atbprof.parallel.collectives import insert_collectives

PER_EXPERT = [
    "NonZero",
    "GatherV2",
    "MatMulV2",
    "Swish",
    "MatMulV2",
    "Mul",
    "MatMulV2",
    "Index",
    "Mul",
    "InplaceIndexAdd",
]


def _mixtral(**kw: object) -> object:
    return resolve_model(ModelSection(preset="mixtral-8x7b", **kw))


def test_expected_active_experts_is_the_balanced_routing_closed_form() -> None:
    assert active_experts(8, 2, np.array([1]))[0] == pytest.approx(2.0)  # one token: its k experts
    assert active_experts(8, 2, np.array([8]))[0] == pytest.approx(8 * (1 - 0.75**8))  # 7.2
    assert active_experts(8, 2, np.array([4096]))[0] == pytest.approx(8.0)
    assert active_experts(0, 0, np.array([3]))[0] == 0.0
    values = basis_values(2, np.array([1, 4]), np.array([5, 9]), experts=(8, 2))
    assert values[-1].tolist() == [round(EXPERT_SCALE * 8 * (1 - 0.75**t)) for t in (2, 8)]
    assert values.dtype == np.int64


def test_the_eager_moe_layer_loops_over_every_expert() -> None:
    dims = _mixtral()
    assert (dims.experts, dims.experts_per_token, dims.expert_inter) == (8, 2, 14336)
    layer = [n for n in build_graph(dims).nodes if n.layer == 0 and n.role.startswith("moe.")]
    types = [n.op_type for n in layer]
    assert types[:11] == [
        "MatMulV2", "Cast", "SoftmaxV2", "TopKV2", "ReduceSum", "RealDiv", "Cast", "OneHot", "Transpose",
        "ZerosLike", "NonZero",
    ]  # fmt: skip
    assert types[10:] == PER_EXPERT * 8
    assert [n.role for n in layer][-1] == "moe.output"
    gate = next(n for n in layer if n.role == "moe.gate")
    # each expert gets T k / E rows and streams its 4096 x 14336 weight in A / E of the steps
    assert gate.work[0].mm is not None and gate.work[0].mm[1].coef[4] == pytest.approx(2 / 8)
    assert gate.work[0].stream_bytes.coef[-1] * 8 * EXPERT_SCALE == pytest.approx(4096 * 14336 * 2)
    assert gate.params[0].nbytes.coef[0] == 4096 * 14336 * 2  # held whole (memory)


def test_fusion_makes_the_gating_one_kernel_and_the_loop_five() -> None:
    dims = _mixtral()
    rules = load_rules()
    ctx = FusionContext(phase="decode", soc_version="Ascend910B2", tokens=8, seq_len=512, dtype="fp16")
    fused = apply_fusion(build_graph(dims), [rules.rules["moe_gating"], rules.rules["moe_experts"]], ctx)
    layer = [n.op_type for n in fused.graph.nodes if n.layer == 0 and n.role.startswith("moe.")]
    assert layer == [
        "MatMulV2", "MoeGatingTopKSoftmax", "ReduceSum", "RealDiv", "Cast", "MoeInitRouting", "GroupedMatmul",
        "SwiGlu", "GroupedMatmul", "MoeFinalizeRouting",
    ]  # fmt: skip
    assert fused.fired == {"moe_gating": 32, "moe_experts": 32}
    gmm = next(n for n in fused.graph.nodes if n.layer == 0 and n.op_type == "GroupedMatmul")
    assert len(gmm.work) == 16 and len(gmm.params) == 16  # every expert's gate and up GEMM, in one launch
    order = [n.id for n in fused.graph.nodes]
    producers = {e.producer for n in fused.graph.nodes for e in n.inputs if e.producer >= 0}
    assert producers <= set(order)
    position = {nid: i for i, nid in enumerate(order)}
    for n in fused.graph.nodes:  # still issued in a topological order
        assert all(position[e.producer] < position[n.id] for e in n.inputs if e.producer >= 0)


def test_tensor_parallel_experts_split_each_ffn_and_reduce_after_the_layer() -> None:
    dims = _mixtral().sharded(2)
    g = insert_collectives(build_graph(dims), dims)
    layer = [n for n in g.nodes if n.layer == 0]
    gate = next(n for n in layer if n.role == "moe.gate")
    assert gate.params[0].shape[1].coef[0] == 14336 / 2
    after = [n.role for n in layer][[n.role for n in layer].index("moe.output") + 1]
    assert after == "ffn.allreduce"
    assert Counter(n.op_type for n in layer)["hcom_allReduce_"] == 2  # attention's and the experts'


def test_the_hbm_floor_reads_the_experts_a_step_reaches() -> None:
    dims = _mixtral()
    dense_part = dims.weight_bytes(1) - dims.layers * 2 * 3 * 4096 * 14336 * 2
    assert dims.weight_bytes(1) < dims.weight_bytes(8) < dims.weight_bytes()
    assert dense_part > 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"num_local_experts": 8, "num_experts_per_tok": 9}, "num_experts_per_tok from 1 to that"),
        ({"num_experts": 0, "num_experts_per_tok": 1}, r"num_local_experts \(or num_experts\) from 1 to 1024"),
        ({"num_experts": 8, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 5632}, "shared experts"),
        ({"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": "x"}, "moe_intermediate_size"),
    ],
)
def test_a_moe_config_it_can_not_model_is_refused(tmp_path: Path, extra: dict, message: str) -> None:
    cfg = {"model_type": "qwen2_moe", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
           "num_key_value_heads": 4, "num_hidden_layers": 2, "rms_norm_eps": 1e-6, "vocab_size": 1024}  # fmt: skip
    cfg.update(extra)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=message):
        resolve_model(ModelSection(hf_config=str(path)))


def test_w8a8_experts_are_refused() -> None:
    with pytest.raises(ConfigError, match="quant w8a8 of a MoE model's experts is not modelled"):
        _mixtral(quant="w8a8")
