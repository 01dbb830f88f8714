from collections import Counter

from atbprof.config.models import ModelSection
from atbprof.graph.builder import build_graph, kernel_name
from atbprof.graph.dims import resolve_model
from atbprof.graph.expr import basis_values

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
