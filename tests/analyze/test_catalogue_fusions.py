"""The catalogue's fusions beyond norms (RoPE, SwiGLU, attention, KV-cache write), end to end: the simulator makes
each unfused and fused, `analyze` finds the unfused one in the exported profile with its API, reports nothing on
the fused run, and prices it within 10 % of re-simulating the same config with the rule on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from atbprof import api
from atbprof.analyze.replay import replay_savings
from atbprof.analyze.view import OpView
from atbprof.config import load_config
from atbprof.run import simulate_latency
from tests.reliability.conftest import cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
RULES = {  # simulator rule -> (catalogue row, fused kernel, the API the finding names)
    "add_norm_quant": ("add_rms_norm", "AddRmsNormDynamicQuant", "torch_npu.npu_add_rms_norm_dynamic_quant"),
    "swiglu_quant": ("swiglu", "DequantSwigluQuant", "torch_npu.npu_dequant_swiglu_quant"),
    "rope": ("rope", "RotaryPositionEmbedding", "torch_npu.npu_rotary_mul"),
    "swiglu": ("swiglu", "SwiGlu", "torch_npu.npu_swiglu"),
    "flash_attention": ("attention", "FusedInferAttentionScore", "torch_npu.npu_fused_infer_attention_score"),
    "kv_cache_write": ("kv_cache_write", "ReshapeAndCache", "torch_npu.npu_scatter_pa_kv_cache"),
    "sampling": ("sampling", "ApplyTopKTopPWithSorted", "torch_npu.npu_top_k_top_p"),
    "qkv_norm_rope_cache": ("norm_rope_cache", "QkvRmsNormRopeCache", "torch_npu.npu_qkv_rms_norm_rope_cache"),
    "moe_gating": ("moe", "MoeGatingTopKSoftmax", "torch_npu.npu_moe_gating_top_k_softmax"),
    "moe_experts": ("moe", "GroupedMatmul", "torch_npu.npu_grouped_matmul"),
}
MOE = "tiny-mixtral.yaml"  # the MoE rules' model (the others run on tiny-llama)
MODEL = {  # the model settings a rule needs to fire
    "add_norm_quant": ["model.quant=w8a8"],
    "swiglu_quant": ["model.quant=w8a8"],
    "sampling": ["model.sampling=top_k_top_p"],
    "qkv_norm_rope_cache": ["model.qk_norm=true"],
}


def _exported(tmp: Path, name: str, overrides: list[str], fixture: str = "tiny-llama.yaml") -> Path:
    run = tmp / name
    api.simulate(FIXTURES / fixture, overrides=overrides, out=run)
    out = tmp / f"{name}-export"
    cli("export", str(run), "--to", "ascend-pt", "--out", str(out))
    return next(out.glob("*_ascend_pt"))


def _span_us(overrides: list[str], fixture: str = "tiny-llama.yaml") -> float:
    cfg = load_config(FIXTURES / fixture, overrides)
    s = simulate_latency(cfg)
    return (s.ttft_ms + s.decode_ms_per_token * cfg.workload.decode_tokens) * 1e3


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_is_found_in_the_unfused_export_and_priced_within_10_percent(tmp_path: Path, rule: str) -> None:
    quant = MODEL.get(rule, [])
    fixture = MOE if rule.startswith("moe_") else "tiny-llama.yaml"
    off = ["fusion.strategy=all", f"fusion.disable=[{rule}]", *quant]
    report = api.analyze(_exported(tmp_path, "off", off, fixture))
    fusion, fused_as, call = RULES[rule]
    found = [f for f in report.findings if f.kind == "unfused_op" and f.level == "kernel"]
    assert [(f.fusion, f.fused_as, f.rule) for f in found] == [(fusion, fused_as, rule)]
    assert call in (found[0].api or "")
    resimulated = _span_us(off, fixture) - _span_us(["fusion.strategy=all", *quant], fixture)
    assert resimulated > 0
    assert found[0].est_saving_us == pytest.approx(resimulated, rel=0.10)


def test_the_fullest_fused_w8a8_qk_norm_top_k_top_p_run_reports_no_missed_fusion(tmp_path: Path) -> None:
    overrides = ["fusion.strategy=all", "model.quant=w8a8", "model.sampling=top_k_top_p", "model.qk_norm=true"]
    report = api.analyze(_exported(tmp_path, "all-w8a8", overrides))
    assert not report.has_unfused and "no missed fusions" in report.summary
    fused = {f.fused_as for f in report.findings if f.level == "kernel" and not f.opportunity}
    assert {"AddRmsNormDynamicQuant", "DequantSwigluQuant", "ApplyTopKTopPWithSorted", "QkvRmsNormRopeCache"} <= fused


def test_the_fullest_fused_run_reports_no_missed_fusion_and_counts_the_fused_kernels(tmp_path: Path) -> None:
    report = api.analyze(_exported(tmp_path, "all", ["fusion.strategy=all"]))
    assert not report.has_unfused and "no missed fusions" in report.summary
    fused = {f.fused_as for f in report.findings if f.kind == "fused_op" and f.level == "kernel"}
    assert {"RotaryMul", "SwiGlu", "ReshapeAndCache"} <= fused  # RoPE is RotaryMul on the 910A
    assert fused & {"PromptFlashAttention", "IncreFlashAttention"}


def test_the_fullest_fused_moe_run_reports_no_missed_fusion_and_counts_its_grouped_kernels(tmp_path: Path) -> None:
    report = api.analyze(_exported(tmp_path, "moe-all", ["fusion.strategy=all"], MOE))
    assert not report.has_unfused and "no missed fusions" in report.summary
    fused = {f.fused_as for f in report.findings if f.kind == "fused_op" and f.level == "kernel"}
    assert {"MoeGatingTopKSoftmax", "MoeInitRouting", "GroupedMatmul", "MoeFinalizeRouting"} <= fused


def test_the_unfused_moe_layer_is_one_finding_per_layer_and_its_fused_form_keeps_five_launches(
    tmp_path: Path,
) -> None:
    report = api.analyze(_exported(tmp_path, "moe-none", ["fusion.strategy=none"], MOE))
    experts = [f for f in report.findings if f.rule == "moe_experts" and f.level == "kernel"]
    assert len(experts) == 1 and experts[0].count == 2 * 5  # 2 layers x 5 steps
    # 4 experts x (NonZero, GatherV2, 3 MatMul, Swish, Mul, Index, Mul, InplaceIndexAdd) + OneHot, Transpose, zeros
    assert len(experts[0].examples[0].op_types) == 4 * 10 + 3
    gating = [f for f in report.findings if f.rule == "moe_gating" and f.level == "kernel"]
    assert [e.op_types for e in gating[0].examples[:1]] == [["Cast", "SoftmaxV2", "TopKV2"]]


def test_the_unfused_run_of_ours_is_priced_by_re_simulation(tmp_path: Path) -> None:
    run = tmp_path / "run"
    api.simulate(FIXTURES / "tiny-llama.yaml", overrides=["fusion.strategy=all", "fusion.disable=[rope]"], out=run)
    report = api.analyze(run)
    assert report.whatif.method == "resimulated"
    assert [s.rules[-1] for s in report.whatif.steps] == ["rope"]
    expected = _span_us(["fusion.strategy=all", "fusion.disable=[rope]"]) - _span_us(["fusion.strategy=all"])
    assert report.whatif.total_saving_us == pytest.approx(expected, rel=1e-6)


def test_swiglu_tolerates_the_up_projection_between_and_leaves_it_out(tmp_path: Path) -> None:
    report = api.analyze(_exported(tmp_path, "none", ["fusion.strategy=none"]))
    swiglu = next(f for f in report.findings if f.fusion == "swiglu" and f.level == "kernel")
    assert swiglu.examples[0].op_types == ["Swish", "Mul"]
    ix = swiglu.examples[0].op_indices
    assert ix[1] - ix[0] == 2  # the up projection's MatMul ran between them


def _timeline(starts: list[int], durs: list[int], launch_at: list[int], launch_dur: int) -> pa.Table:
    n = len(starts)
    return pa.table(
        {
            "op_index": pa.array(range(n), pa.int64()),
            "step": pa.array([0] * n, pa.int32()),
            "stream_id": pa.array([1] * n, pa.int64()),
            "task_start_ns": pa.array(starts, pa.int64()),
            "task_dur_ns": pa.array(durs, pa.int64()),
            "op_type": pa.array(["X"] * n).dictionary_encode(),
            "host_launch_start_ns": pa.array(launch_at, pa.int64()),
            "host_launch_dur_ns": pa.array([launch_dur] * n, pa.int64()),
        }
    )


def test_the_replay_counts_launches_a_host_bound_step_loses_wherever_its_idle_shows() -> None:
    """A long kernel (100 us) lets the host run ahead: the chain's 3 kernels (launched during it) run back to back,
    idle shows after them. Fusing the chain removes 2 launches (2 x 10 us) from the host: the step is 20 us shorter,
    though the chain itself waited for nothing."""
    launch = [0, 10, 20, 30, 40, 150, 160]  # the host: 10 us per launch call, then 100 us of other work
    durs = [100, 2, 2, 2, 1, 5, 5]
    starts = [10]
    for i in range(1, len(durs)):
        starts.append(max(starts[-1] + durs[i - 1], launch[i] + 10))
    table = _timeline([s * 1000 for s in starts], [d * 1000 for d in durs], [t * 1000 for t in launch], 10_000)
    findings = pa.table({"op_indices": pa.array([[1, 2, 3]], pa.list_(pa.int64())), "step": pa.array([0], pa.int32())})
    saved = replay_savings(OpView.build(table), findings, np.array([True]), np.array([3000.0]))
    assert saved is not None
    # the chain's own waits are 0 (it ran back to back): the device-side estimate would say 6 - 3 = 3 us
    assert saved[0] == pytest.approx(20_000)
    assert pc.sum(table.column("task_dur_ns")).as_py() == 117_000


def test_a_kernel_launched_just_before_the_one_ahead_of_it_ended_still_waited_for_its_launch() -> None:
    """Host-bound: 45 us launch calls, a 5 us device delay after each. A 2 us kernel whose launch ended 2 us before
    the 43 us kernel in front of it finished starts 5 us after its launch - it waited for the launch, not for that
    kernel - so removing two earlier launches moves it too; the step is 2 x 45 us shorter."""
    durs = [2, 2, 2, 43, 2, 2]
    launch = [45 * i for i in range(len(durs))]
    starts: list[int] = []
    for i in range(len(durs)):
        starts.append(max(starts[-1] + durs[i - 1] if i else 0, launch[i] + 45 + 5))
    assert starts[4] - (starts[3] + durs[3]) == 2  # launched 2 us before the MatMul ended... waited 2 us
    table = _timeline([s * 1000 for s in starts], [d * 1000 for d in durs], [t * 1000 for t in launch], 45_000)
    findings = pa.table({"op_indices": pa.array([[0, 1, 2]], pa.list_(pa.int64())), "step": pa.array([0], pa.int32())})
    saved = replay_savings(OpView.build(table), findings, np.array([True]), np.array([2000.0]))
    assert saved is not None and saved[0] == pytest.approx(90_000)


TP2 = """name: tiny-tp2
seed: 0
model: {{hf_config: {hf}, dtype: fp16}}
device: {{preset: 910B2}}
parallel: {{tp: 2}}
workload: {{batch_size: 1, prompt_len: 16, decode_tokens: 4}}
execution: {{mode: eager}}
fusion: {{strategy: all}}
"""


def _mc2_off_and_on(tmp_path: Path, text: str) -> tuple[dict[str, Any], float]:
    """The config `text` exported with MC2 off and on, rank 0 of each analysed; and what MC2 saves re-simulated."""
    config = tmp_path / "tp2.yaml"
    config.write_text(text)

    def span_us(overrides: list[str]) -> float:
        cfg = load_config(config, overrides)
        s = simulate_latency(cfg)
        return (s.ttft_ms + s.decode_ms_per_token * cfg.workload.decode_tokens) * 1e3

    off = ["fusion.disable=[mc2]"]
    reports: dict[str, Any] = {}
    for name, overrides in (("off", off), ("on", [])):
        api.simulate(config, overrides=overrides, out=tmp_path / name)
        cli("export", str(tmp_path / name), "--to", "ascend-pt", "--out", str(tmp_path / f"{name}-export"))
        reports[name] = api.analyze(sorted((tmp_path / f"{name}-export").rglob("*rank0*_ascend_pt"))[0])
    return reports, span_us(off) - span_us([])


def test_mc2_is_found_across_the_compute_and_communication_streams_and_priced(tmp_path: Path) -> None:
    """A row-parallel MatMul on the compute stream and the AllReduce of its output on the communication stream."""
    reports, resimulated = _mc2_off_and_on(tmp_path, TP2.format(hf=FIXTURES / "hf" / "tiny-llama" / "config.json"))
    found = [f for f in reports["off"].findings if f.opportunity]
    assert [(f.fusion, f.fused_as, f.level) for f in found] == [("mc2", "MatmulAllReduce", "kernel")]
    assert found[0].examples[0].op_types == ["MatMulV2", "hcom_allReduce_"]
    assert "torch_npu.npu_mm_all_reduce_base" in (found[0].api or "")
    assert found[0].by_phase[found[0].examples[0].phase or "all"].per_step == 4  # 2 layers x (attn.o, ffn.down)
    assert found[0].est_saving_us == pytest.approx(resimulated, rel=0.10)
    assert not reports["on"].has_unfused
    assert "MatmulAllReduce" in {f.fused_as for f in reports["on"].findings if f.kind == "fused_op"}


def test_sequence_parallel_mc2_is_matmul_reduce_scatter_and_all_gather_matmul_found_and_priced(tmp_path: Path) -> None:
    """With sequence parallelism a row-parallel MatMul's output is reduce-scattered and a column-parallel one's
    input all-gathered: MatmulReduceScatter and AllGatherMatmul (the AllGather's launch is an HCCL one: the fused
    call costs an aclnn launch)."""
    text = TP2.format(hf=FIXTURES / "hf" / "tiny-llama" / "config.json")
    sp = text.replace("{tp: 2}", "{tp: 2, sequence_parallel: true}").replace("batch_size: 1", "batch_size: 2")
    reports, resimulated = _mc2_off_and_on(tmp_path, sp)
    found = {f.fused_as: f for f in reports["off"].findings if f.opportunity}
    assert set(found) == {"MatmulReduceScatter", "AllGatherMatmul"}
    assert found["AllGatherMatmul"].examples[0].op_types == ["hcom_allGather_", "MatMulV2"]
    assert "torch_npu.npu_all_gather_base_mm" in (found["AllGatherMatmul"].api or "")
    saving = sum(f.est_saving_us or 0.0 for f in found.values())
    assert saving == pytest.approx(resimulated, rel=0.10)
    assert not reports["on"].has_unfused
    assert {"MatmulReduceScatter", "AllGatherMatmul"} <= {f.fused_as for f in reports["on"].findings}


def test_the_aten_calls_of_the_unfused_sequences_are_found_too(tmp_path: Path) -> None:
    report = api.analyze(_exported(tmp_path, "none", ["fusion.strategy=none"]), top=50)
    framework = {f.fusion: f for f in report.findings if f.kind == "unfused_op" and f.level == "framework"}
    assert set(framework) == {"rope", "swiglu", "attention", "kv_cache_write"}
    assert framework["rope"].examples[0].op_types == [
        "aten::mul", "aten::slice", "aten::neg", "aten::slice", "aten::cat", "aten::mul", "aten::add",
    ]  # fmt: skip
    assert framework["swiglu"].fused_as == "torch_npu.npu_swiglu"
    kernel = {f.fusion: f.count for f in report.findings if f.kind == "unfused_op" and f.level == "kernel"}
    assert {k: f.count for k, f in framework.items()} == kernel  # one call per kernel sequence


def test_an_int8_kv_cache_is_quantised_written_dequantised_and_read_as_stored_by_fused_attention(
    tmp_path: Path,
) -> None:
    int8 = ["model.kv_cache_dtype=int8"]
    off = ["fusion.strategy=all", "fusion.disable=[flash_attention]", *int8]
    report = api.analyze(_exported(tmp_path, "off", off))
    (found,) = [f for f in report.findings if f.kind == "unfused_op" and f.level == "kernel"]
    assert found.fusion == "attention"
    assert found.examples[0].op_types[:2] == ["AscendAntiQuant", "AscendAntiQuant"]  # part of what it replaces
    resimulated = _span_us(off) - _span_us(["fusion.strategy=all", *int8])
    assert found.est_saving_us == pytest.approx(resimulated, rel=0.10)
    fused = api.analyze(_exported(tmp_path, "all", ["fusion.strategy=all", *int8]))
    assert not fused.has_unfused
    ops = api.load(_exported(tmp_path, "all2", ["fusion.strategy=all", *int8])).ops
    types = set(ops.column("op_type").to_pylist())
    assert "AscendQuant" in types and "AscendAntiQuant" not in types  # the fused kernel reads the int8 cache


def test_a_missed_fusion_is_named_as_the_profiles_cann_release_names_it(tmp_path: Path) -> None:
    import json

    profile = _exported(tmp_path, "no-fa", ["fusion.strategy=all", "fusion.disable=[flash_attention]"])

    def attention(report: object) -> object:
        return next(f for f in report.findings if f.rule == "flash_attention" and f.level == "kernel")

    today = api.analyze(profile)
    assert attention(today).fused_as == "FusedInferAttentionScore" and not any("CANN" in n for n in today.notes)
    old = api.analyze(profile, cann_version="7.0.0")
    assert attention(old).fused_as == "PromptFlashAttention / IncreFlashAttention"
    assert attention(old).api == "torch_npu.npu_prompt_flash_attention / torch_npu.npu_incre_flash_attention"
    assert "fused kernels named as CANN 7.0.0 names them" in old.notes
    assert attention(api.analyze(profile, cann_version="8.0.RC3")).fused_as == "FusedInferAttentionScore"
    # the release a capture recorded (torch_npu's prof.add_metadata("cann_version", ...))
    meta = profile / "profiler_metadata.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "cann_version": "7.0.RC1"}))
    recorded = api.analyze(profile)
    assert attention(recorded).fused_as == "PromptFlashAttention / IncreFlashAttention"
    assert "fused kernels named as CANN 7.0.RC1 (recorded in the profile) names them" in recorded.notes


def test_a_cann_version_that_is_not_one_is_refused_with_its_form(tmp_path: Path) -> None:
    profile = _exported(tmp_path, "all", ["fusion.strategy=all"])
    result = cli("analyze", str(profile), "--cann-version", "latest")
    assert result.exit_code == 2
    assert "--cann-version: 'latest' is not a CANN version (like 8.0.RC3, 8.1.RC1 or 8.5.0)" in result.output
    assert "Traceback" not in result.output


def test_cann_releases_compare_by_major_and_minor() -> None:
    from atbprof.fusion.versions import for_release, release

    assert [release(v) for v in ("8.0.RC3", "8.0.0", "8.5", "7.0.RC1", "8.3.RC2.alpha001")] == [
        (8, 0), (8, 0), (8, 5), (7, 0), (8, 3),
    ]  # fmt: skip
    assert release("eight") is None and release("8") is None and release("8." + "1" * 70) is None
    assert for_release("AddRmsNorm", "torch_npu.npu_add_rms_norm", (8, 5)) == (
        "AddRmsNormBias", "torch_npu.npu_add_rms_norm",
    )  # fmt: skip
    assert for_release("AddRmsNorm", "x", (8, 3)) == ("AddRmsNorm", "x")
    assert for_release("AddRmsNorm", "x", None) == ("AddRmsNorm", "x")


@pytest.mark.parametrize(
    ("parallel", "batch", "message"),
    [
        ("{tp: 1, sequence_parallel: true}", 2, "parallel.sequence_parallel splits the tokens over the tp ranks: set"),
        ("{tp: 2, sequence_parallel: true}", 3, "a decode step has workload.batch_size = 3 tokens; use a batch"),
    ],
)
def test_sequence_parallelism_it_can_not_split_is_refused(
    tmp_path: Path, parallel: str, batch: int, message: str
) -> None:
    config = tmp_path / "sp.yaml"
    text = TP2.format(hf=FIXTURES / "hf" / "tiny-llama" / "config.json")
    config.write_text(text.replace("{tp: 2}", parallel).replace("batch_size: 1", f"batch_size: {batch}"))
    result = cli("run", "--config", str(config), "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and message in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
