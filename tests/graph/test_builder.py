from collections import Counter

from atbprof.config.models import ModelSection
from atbprof.graph.builder import build_graph, kernel_name
from atbprof.graph.dims import resolve_model
from atbprof.graph.expr import T, basis_values

RMSNORM = ["Cast", "Pows", "ReduceMean", "Add", "Rsqrt", "Mul", "Cast", "Mul"]
ROPE = ["Mul", "Slice", "Neg", "Slice", "ConcatD", "Mul", "Add"]


def layer_ops(preset: str, layer: int = 0, **kw: object) -> list:
    g = build_graph(resolve_model(ModelSection(preset=preset, **kw)))
    return [n for n in g.nodes if n.layer == layer]


def test_llama_layer_is_the_unfused_eager_graph() -> None:
    ops = layer_ops("llama2-7b")
    types = [n.op_type for n in ops]
    assert types[:8] == RMSNORM
    assert [n.role for n in ops[8:11]] == ["attn.q", "attn.k", "attn.v"]
    assert types[11:18] == ROPE and types[18:25] == ROPE
    assert types[25:27] == ["ScatterUpdate", "ScatterUpdate"]
    attention = ["BatchMatMulV2", "Mul", "Add", "Cast", "SoftmaxV2", "Cast", "BatchMatMulV2", "Transpose"]
    assert types[27:35] == attention
    assert [n.role for n in ops[35:37]] == ["attn.o", "attn.residual"]
    assert types[37:45] == RMSNORM
    assert [n.op_type for n in ops[45:]] == ["MatMulV2", "Swish", "MatMulV2", "Mul", "MatMulV2", "Add"]
    assert len(ops) == 51


def test_gqa_materialises_repeat_kv() -> None:
    counts = Counter(n.op_type for n in layer_ops("llama2-70b"))
    assert counts["BroadcastTo"] == 2
    assert len(layer_ops("llama2-70b")) == 53


def test_gpt_layer_has_layernorm_and_no_rope() -> None:
    ops = layer_ops("llama2-7b", architecture="gpt")
    types = [n.op_type for n in ops]
    assert "Neg" not in types and "ConcatD" not in types
    assert types[:11] == [
        "Cast",
        "ReduceMean",
        "Sub",
        "Pows",
        "ReduceMean",
        "Add",
        "Rsqrt",
        "Mul",
        "Cast",
        "Mul",
        "Add",
    ]
    assert "Gelu" in types and "Swish" not in types


def test_model_level_ops_and_counts() -> None:
    dims = resolve_model(ModelSection(preset="llama2-7b"))
    g = build_graph(dims)
    head = [n.role for n in g.nodes if n.layer == -1]
    assert head[0] == "head.embed" and head[-1] == "head.sample"
    assert "head.lm_head" in head
    assert len(g.nodes) == 32 * 51 + len(head)


def test_sizes_follow_the_step() -> None:
    dims = resolve_model(ModelSection(preset="llama2-7b"))
    g = build_graph(dims)
    score = next(n for n in g.nodes if n.role == "attn.score" and n.op_type == "BatchMatMulV2")
    vals = basis_values(1, [1, 1], [513, 600])
    # the QK^T scores of one decode step: heads x 1 x kv_len fp16 values
    out = score.outputs[0].nbytes.coef @ vals
    assert list(out) == [32 * 513 * 2, 32 * 600 * 2]


def test_weight_bytes_match_the_physics_doc() -> None:
    dims = resolve_model(ModelSection(preset="llama2-7b"))
    assert abs(dims.weight_bytes() / 1e9 - 13.21) < 0.05  # device_model_facts.md section 4


def test_kernel_names_follow_aclnn_convention() -> None:
    assert kernel_name("MatMulV2") == "aclnnMatmul_MatMulCommon_MatMulV2"
    assert kernel_name("ReduceMean") == "aclnnMean_ReduceMeanAiCore_ReduceMean"
    assert kernel_name("Adds") == "aclnnAdds_AddAiCore_Add"


def test_qwen3_normalises_each_query_and_key_head_before_rope() -> None:
    ops = layer_ops("qwen3-8b")
    types = [n.op_type for n in ops]
    assert [n.role for n in ops if n.role.startswith("attn.") and n.op_type == "MatMulV2"][:3] == [
        "attn.q", "attn.k", "attn.v",
    ]  # fmt: skip
    q_norm = [n for n in ops if n.role == "attn.q_norm"]
    k_norm = [n for n in ops if n.role == "attn.k_norm"]
    assert [n.op_type for n in q_norm] == RMSNORM and [n.op_type for n in k_norm] == RMSNORM
    # q_proj -> q_norm -> k_proj -> k_norm -> v_proj, then RoPE reads the normalised heads
    assert types[8:18] == ["MatMulV2", *RMSNORM, "MatMulV2"]
    rope_q = next(n for n in ops if n.role == "attn.rope")
    assert rope_q.inputs[0].producer == q_norm[-1].id
    # the norm runs over head_dim (128) for every head of every token: [T * heads, 128] in fp32
    assert q_norm[0].outputs[0].nbytes == T * (32 * 128 * 4)
    assert k_norm[0].outputs[0].nbytes == T * (8 * 128 * 4)
    assert not any(n.role.endswith("_norm") for n in layer_ops("llama3-8b") if n.role.startswith("attn.q"))


def test_top_k_top_p_sampling_is_vllms_pytorch_filter_then_a_random_draw() -> None:
    head = [n.op_type for n in layer_ops("llama3-8b", layer=-1, sampling="top_k_top_p") if n.role == "head.sample"]
    assert head == [
        "Cast", "Sort", "GatherElements", "Less", "MaskedFill", "SoftmaxV2", "Cumsum", "LessEqual", "MaskedFill",
        "ScatterElements", "SoftmaxV2", "RealDiv", "ArgMaxV2",
    ]  # fmt: skip
    assert [n.op_type for n in layer_ops("llama3-8b", layer=-1) if n.role == "head.sample"] == ["Cast", "ArgMaxV2"]


def test_a_head_dim_other_than_hidden_over_heads_is_refused(tmp_path) -> None:
    import json

    import pytest

    from atbprof.errors import ConfigError

    cfg = {"model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36, "rms_norm_eps": 1e-6,
           "vocab_size": 151936}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="head_dim = 128 differs from hidden_size / num_attention_heads = 80"):
        resolve_model(ModelSection(hf_config=str(path)))
    cfg["head_dim"] = 80
    path.write_text(json.dumps(cfg))
    dims = resolve_model(ModelSection(hf_config=str(path)))
    assert dims.qk_norm and dims.head_dim == 80
    assert not resolve_model(ModelSection(hf_config=str(path), qk_norm=False)).qk_norm


def test_sequence_parallelism_splits_the_residual_stream_and_moves_the_collectives() -> None:
    from atbprof.parallel.collectives import insert_collectives

    dims = resolve_model(ModelSection(preset="llama3-8b")).sharded(2, sequence_parallel=True)
    g = insert_collectives(build_graph(dims), dims)
    layer = [n for n in g.nodes if n.layer == 0]
    roles = [n.role for n in layer]
    # the AllGather follows the norm's last kernel and feeds the projections; a ReduceScatter ends attn.o / ffn.down
    at = roles.index("attn.allgather")
    assert roles[at - 1] == "attn.norm" and roles[at - 8 : at] == ["attn.norm"] * 8 and roles[at + 1] == "attn.q"
    assert [n.op_type for n in layer if n.role.endswith(("allgather", "reducescatter"))] == [
        "hcom_allGather_", "hcom_reduceScatter_", "hcom_allGather_", "hcom_reduceScatter_",
    ]  # fmt: skip
    half = T * (1 / 2)
    norm = next(n for n in layer if n.role == "attn.norm")
    assert norm.outputs[0].nbytes == half * (4096 * 4)  # fp32 cast of this rank's half of the tokens
    gather = next(n for n in layer if n.role == "attn.allgather")
    assert gather.outputs[0].nbytes == T * (4096 * 2)  # every token again
    scatter = next(n for n in layer if n.role == "attn.reducescatter")
    assert scatter.outputs[0].nbytes == half * (4096 * 2)
    residual = next(n for n in layer if n.role == "attn.residual")
    assert residual.inputs[1].producer == scatter.id and residual.outputs[0].nbytes == half * (4096 * 2)
    head = [n.role for n in g.nodes if n.layer == -1]
    assert "head.embed_reducescatter" in head and "head.allgather" in head and "head.logits_allgather" in head
