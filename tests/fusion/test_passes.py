from collections import Counter
from pathlib import Path

import pytest

from atbprof.config.models import ModelSection
from atbprof.errors import ConfigError
from atbprof.fusion import FusionContext, apply_fusion, load_rules
from atbprof.graph.builder import build_graph
from atbprof.graph.dims import resolve_model

RULES = load_rules()


def fuse(rules: list[str], preset: str = "llama2-7b", phase: str = "decode", soc: str = "Ascend910B", **ctx: object):
    dims = resolve_model(ModelSection(preset=preset, architecture=ctx.pop("architecture", "llama")))  # type: ignore[arg-type]
    g = build_graph(dims)
    c = FusionContext(phase=phase, soc_version=soc, tokens=ctx.pop("tokens", 1), seq_len=ctx.pop("seq_len", 600), **ctx)  # type: ignore[arg-type]
    return apply_fusion(g, RULES.resolve("none", tuple(rules)), c)


def layer_types(res, layer: int = 1) -> list[str]:
    return [n.op_type for n in res.graph.nodes if n.layer == layer]


def test_norm_kernel_replaces_every_decomposed_rmsnorm() -> None:
    res = fuse(["norm_kernel"])
    assert res.fired == {"norm_kernel": 2 * 32 + 1}
    norm = next(n for n in res.graph.nodes if n.op_type == "RmsNorm")
    assert norm.fused_from == ("Cast", "Pows", "ReduceMean", "Add", "Rsqrt", "Mul", "Cast", "Mul")
    assert "Rsqrt" not in layer_types(res)


def test_layernorm_chain_becomes_layernormv3_and_add_layernorm() -> None:
    res = fuse(["norm_kernel", "add_norm"], architecture="gpt")
    types = Counter(n.op_type for n in res.graph.nodes)
    # GPT adds the position embedding before layer 0, so its first norm fuses too; the final norm does not
    # (the last-position Slice is interposed)
    assert types["AddLayerNorm"] == 2 * 32
    assert types["LayerNormV3"] == 1


def test_add_norm_needs_the_norm_kernel_first() -> None:
    res = fuse(["add_norm"])
    assert "add_norm" not in res.fired


def test_add_norm_near_miss_on_interposed_slice() -> None:
    res = fuse(["norm_kernel", "add_norm"])
    assert res.fired["add_norm"] == 2 * 32 - 1
    reasons = [nm.reason for nm in res.near_misses if nm.rule == "add_norm"]
    assert reasons == ["Slice (head.norm) is interposed between Add and RmsNorm"]


def test_norm_matmul_does_not_fire_on_separate_qkv_and_says_why() -> None:
    res = fuse(["norm_kernel", "norm_matmul"])
    # only the final norm feeds a single MatMul (the LM head); every layer norm feeds q/k/v or gate/up
    assert res.fired["norm_matmul"] == 1
    why = Counter(nm.reason for nm in res.near_misses if nm.rule == "norm_matmul")
    assert why == {
        "the output of RmsNorm (attn.norm) is also read by 2 op(s) outside the pattern; fusing would drop it": 32,
        "the output of RmsNorm (ffn.norm) is also read by 1 op(s) outside the pattern; fusing would drop it": 32,
    }


def test_norm_matmul_after_projection_merge() -> None:
    res = fuse(["norm_kernel", "qkv_merge", "gate_up_merge", "add_norm", "norm_matmul"])
    assert res.fired["norm_matmul"] == 2 * 32 + 1
    kinds = Counter(n.op_type for n in res.graph.nodes)
    assert kinds["FusedAddRmsNormMatMul"] == 2 * 32 - 1
    fused = next(n for n in res.graph.nodes if n.op_type == "FusedAddRmsNormMatMul")
    assert fused.fused_from[0] == "Add" and fused.fused_from[-1] == "MatMulV2"
    assert len(fused.outputs) == 2  # the residual sum stays visible


def test_merges_sum_the_weights() -> None:
    res = fuse(["qkv_merge", "gate_up_merge"], preset="llama2-70b")
    qkv = next(n for n in res.graph.nodes if n.role == "attn.qkv")
    assert qkv.params[0].shape[1].coef[0] == 8192 + 2 * 1024
    assert res.fired == {"qkv_merge": 80, "gate_up_merge": 80}


def test_rope_name_depends_on_the_soc() -> None:
    assert "RotaryMul" in layer_types(fuse(["rope"], soc="Ascend910"))
    assert "RotaryPositionEmbedding" in layer_types(fuse(["rope"], soc="Ascend910B"))


def test_flash_attention_by_phase_and_gqa_native() -> None:
    dec = fuse(["flash_attention"], preset="llama2-70b")
    pre = fuse(["flash_attention"], preset="llama2-70b", phase="prefill", tokens=512, seq_len=512)
    assert "IncreFlashAttention" in layer_types(dec) and "PromptFlashAttention" in layer_types(pre)
    assert "BroadcastTo" not in layer_types(dec)  # GQA-native: reads the KV cache directly
    fa = next(n for n in dec.graph.nodes if n.op_type == "IncreFlashAttention")
    assert fa.fused_from[-1] == "BroadcastTo" and len(fa.params) == 2


def test_softmax_fusion_switched_off_above_max_seq() -> None:
    short = fuse(["attention_softmax", "flash_attention"], seq_len=1000)
    long = fuse(["attention_softmax", "flash_attention"], seq_len=2048)
    assert short.fired.get("attention_softmax") == 32 and "flash_attention" not in short.fired
    assert "attention_softmax" not in long.fired and long.fired["flash_attention"] == 32
    assert "2048 > fusion.softmax_fusion_max_seq 1024" in long.disabled["attention_softmax"]


def test_static_shape_rules_fall_back_outside_the_buckets() -> None:
    rules = ["norm_kernel", "qkv_merge", "gate_up_merge", "swiglu", "norm_matmul", "ffn"]
    inside = fuse(rules, tokens=1, shape_buckets=(1, 8))
    outside = fuse(rules, phase="prefill", tokens=333, seq_len=333, shape_buckets=(1, 8))
    assert inside.fired["ffn"] == 32
    assert "ffn" not in outside.fired and "norm_matmul" not in outside.fired
    assert "333 tokens per step is outside the compiled shape buckets [1, 8]" in outside.disabled["ffn"]


def test_composite_fusions_pay_icache_library_kernels_do_not() -> None:
    res = fuse(RULES.strategies["aggressive"])
    by_type = {n.op_type: n for n in res.graph.nodes}
    assert by_type["FusedQKVAttention"].icache and by_type["FusedQKVAttention"].units > 5
    assert not by_type["RotaryPositionEmbedding"].icache if "RotaryPositionEmbedding" in by_type else True


def test_fusion_preserves_the_graph_is_topological() -> None:
    res = fuse(RULES.strategies["default"])
    seen: set[int] = set()
    for n in res.graph.nodes:
        assert all(e.producer < 0 or e.producer in seen for e in n.inputs), n.op_type
        seen.add(n.id)


def test_user_rules_file_extends_strategies(tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text(
        "rules:\n  swish_mul:\n    kind: chain\n    library: true\n    patterns:\n"
        "      - {ops: [Swish, Mul], fused: SiluMul}\nstrategies:\n  mine: [swish_mul]\n"
    )
    rules = load_rules(str(f))
    assert [r.name for r in rules.resolve("mine")] == ["swish_mul"]
    with pytest.raises(ConfigError, match=r"fusion\.strategy = 'nope': unknown strategy"):
        rules.resolve("nope")
    with pytest.raises(ConfigError, match="unknown rule"):
        rules.resolve("none", ("bogus",))


def test_swiglu_needs_adjacent_swish_and_mul() -> None:
    apart = fuse(["swiglu"])  # HF issues gate, Swish, up, Mul: the up projection sits in between
    assert "swiglu" not in apart.fired
    assert {nm.reason for nm in apart.near_misses} == {"MatMulV2 (ffn.up) is interposed between Swish and Mul"}
    res = fuse(["gate_up_merge", "swiglu"])
    swiglu = [n for n in res.graph.nodes if n.op_type == "SwiGlu"]
    assert len(swiglu) == 32 and swiglu[0].fused_from == ("Swish", "Mul")
    assert {e.tensor.shape[-1].coef[0] for e in swiglu[0].inputs} == {11008.0}  # the gate and up halves


def test_dtype_restricted_rule_records_a_near_miss(tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text(
        "rules:\n  swiglu:\n    kind: chain\n    library: true\n    dtypes: [fp16]\n    patterns:\n"
        "      - {ops: [Swish, Mul], fused: SwiGlu}\n"
    )
    rules = load_rules(str(f))
    g = build_graph(resolve_model(ModelSection(preset="llama2-7b", dtype="bf16")))
    ctx = FusionContext(phase="decode", soc_version="Ascend910B", tokens=1, seq_len=600, dtype="bf16")
    res = apply_fusion(g, rules.resolve("none", ("gate_up_merge", "swiglu")), ctx)
    assert "swiglu" not in res.fired
    assert res.disabled["swiglu"] == "the fused kernel supports fp16, not bf16"


def test_a_remembered_rule_prefix_gives_what_fusing_from_scratch_gives() -> None:
    """apply_fusion resumes from the graph after a remembered prefix of the rules (the what-if adds one rule at a
    time); the result must equal a from-scratch run: nodes, fired counts, near-misses, disabled rules."""
    from atbprof.fusion import passes

    dims = resolve_model(ModelSection(preset="llama2-7b"))
    g = build_graph(dims)
    c = FusionContext(phase="decode", soc_version="Ascend910", tokens=1, seq_len=600)
    base = RULES.resolve("seed000-baseline")
    more = RULES.resolve("seed000-baseline", ("add_norm", "norm_matmul"))
    assert [r.name for r in more[: len(base)]] == [r.name for r in base]  # the added rules come last
    passes.forget_prefixes()
    scratch = apply_fusion(g, more, c)
    passes.forget_prefixes()
    apply_fusion(g, base, c)
    assert len(passes._PREFIXES) == len(base)
    resumed = apply_fusion(g, more, c)
    assert list(map(repr, resumed.graph.nodes)) == list(map(repr, scratch.graph.nodes))  # tensors: eq by identity
    assert (resumed.fired, resumed.near_misses, resumed.disabled) == (
        scratch.fired,
        scratch.near_misses,
        scratch.disabled,
    )
    assert resumed.fired.get("add_norm", 0) > 0
    again = apply_fusion(g, base, c)  # the remembered result is not changed by the runs that resumed from it
    assert sum(again.fired.values()) == sum(v for k, v in resumed.fired.items() if k not in ("add_norm", "norm_matmul"))
