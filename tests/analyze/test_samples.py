"""The analyzer on real Ascend profiles (anchors/ascend_samples): no roles, no data edges, no host launch records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from atbprof.analyze import AnalysisReport, analyze
from atbprof.importers.base import Profile
from atbprof.predict.device import infer_device
from tests.analyze.conftest import CNN, GPT_LAYERNORM, QWEN3, need, sample_loaders

Loader = Callable[[Path], Profile]
LOADERS = pytest.mark.parametrize("load", sample_loaders(), ids=lambda f: f.__module__.rsplit(".", 1)[-1])


def by_kind(report: AnalysisReport) -> dict[str, int]:
    return {f"{f.kind}:{f.fused_as}": f.count for f in report.findings}


@LOADERS
def test_qwen3_has_54_add_rmsnorm_pairs(load: Loader) -> None:
    report = analyze(load(need(QWEN3)))
    assert by_kind(report) == {
        "add_norm:AddRmsNorm": 54,  # aclnnAdd_AddAiCore_Add("4096,1,1024") -> RmsNorm("4096,1,1024;1024")
        "norm_matmul:FusedRmsNormMatMul": 56,  # the hidden-size norms feed MatMulV3 ("4096,1024": a view)
        "fused_norm:RmsNorm": 112,  # 56 hidden-size + 56 q/k norms
        # the catalogue's fusions the sample already runs (forward kernels; their Grad kernels are not counted)
        "fused_op:FlashAttentionScore": 28,
        "fused_op:RotaryPositionEmbedding": 56,
        "fused_op:SwiGlu": 28,
    }
    add = next(f for f in report.findings if f.kind == "add_norm")
    assert add.examples[0].op_types == ["Add", "RmsNorm"]
    # norm-related: the 112 norms and the 54 Adds in front of them, not the already-fused RoPE / SwiGLU / attention
    assert report.breakdown.phases[0].norm.ops == 166
    assert "no data edges" in add.evidence
    assert report.has_unfused
    # the device predict infers from the same profile: its Block Dims (24 cube cores) and cycle counters
    # (at the clock its cycle counters show, where the loader reads them)
    assert report.whatif.method == "device-model" and report.whatif.device in ("910B3", "910B3 at 1650 MHz")
    assert "910B3" in report.whatif.assumption and "assumed" not in report.whatif.assumption
    assert 0 < report.whatif.total_saving_us < add.time_us + report.findings[1].time_us


@pytest.mark.parametrize("path", CNN, ids=["level0", "level1"])
def test_cnn_samples_have_no_norm_findings(path: Path) -> None:
    for load in sample_loaders():
        report = analyze(load(need(path)))
        assert report.findings == []
        assert not report.has_unfused
        assert "no missed fusions" in report.summary
        assert report.whatif.total_saving_us == 0


@LOADERS
def test_gpt_layernorm_sample_reports_fused_layernorms_and_add_layernorm(load: Loader) -> None:
    report = analyze(load(need(GPT_LAYERNORM)))
    assert by_kind(report) == {
        "add_norm:AddLayerNorm": 4,  # Add22 -> LayerNorm90 on "1024,4,12288"; the 5th follows a DropOutDoMask
        "norm_matmul:FusedLayerNormV3MatMul": 5,
        "fused_norm:LayerNormV3": 5,
        # Megatron's tensor-parallel forward: a row-parallel MatMul (4096 x 12288 out: tokens x hidden) and the
        # hcom_allReduce_ of its output right after it, on the communication stream - what MC2 fuses
        "unfused_op:MatmulAllReduce": 3,
    }
    assert not any(f.kind.startswith("decomposed") for f in report.findings)


@LOADERS
def test_foreign_attribution_adds_up_to_the_span(load: Loader) -> None:
    report = analyze(load(need(QWEN3)))
    b = report.breakdown
    (phase,) = b.phases
    assert phase.phase == "all" and b.scope == "all"
    assert sum(r.charged_us for r in phase.categories) == pytest.approx(phase.span_us, abs=0.01)
    names = [r.name for r in phase.categories]
    assert names[:3] == ["attention", "ffn", "other"] and "communication" in names
    assert "hidden width (1024" in b.categories_heuristic
    assert phase.norm.launch_source == "device wait before the op"
    assert phase.norm.kernel_share + phase.norm.launch_share == pytest.approx(1, abs=1e-3)
    assert b.by_bound[0].name == "unknown"  # kernel_details has no bound; the reader fills no pipe ratios


def _device_for(meta: dict[str, object]) -> tuple[str, str]:
    preset, _, why = infer_device(NO_KERNELS, meta)
    return preset, why


NO_KERNELS = pa.table(
    {
        "task_type": pa.array([], pa.string()),
        "block_dim": pa.array([], pa.int64()),
        "mix_block_dim": pa.array([], pa.int64()),
    }
)


def test_device_variant_comes_from_the_metadata() -> None:
    assert _device_for({"soc_version": "Ascend910B3"}) == ("910B3", "from the profile's metadata (Ascend910B3)")
    assert _device_for({"device": {"name": "910A"}})[0] == "910A"
    assert _device_for({"soc_version": "Ascend910"})[0] == "910A"
    assert _device_for({})[0] == "910B2"
    # the db export's NPU_INFO names the second-generation family only: not the first-generation 910A
    assert _device_for({"chip": "Ascend910B"})[0] == "910B2"
    assert "does not say which 910" in _device_for({"chip": "Ascend910B"})[1]


def test_analyze_and_predict_infer_the_same_device_and_clock() -> None:
    """One inference for both: the Qwen3 sample names no device; its Block Dims and cycle counters say which."""
    from atbprof.importers import load_profile
    from atbprof.predict import predict_profile

    profile = load_profile(need(QWEN3), framework=False)
    predicted = predict_profile(profile)
    report = analyze(load_profile(need(QWEN3)))
    assert predicted.device.preset == "910B3"
    assert report.whatif.device.startswith(predicted.device.preset)
    assert f"{predicted.device.clock_mhz:g} MHz" in report.whatif.device


def test_device_model_estimate_follows_the_meta_device() -> None:
    profile = sample_loaders()[0](need(QWEN3))
    on_b3 = analyze(Profile(profile.kind, profile.source, profile.ops, None, None, {"soc_version": "Ascend910B3"}))
    assert on_b3.whatif.device == "910B3"
    assert "from the profile's metadata" in on_b3.whatif.assumption
