"""Real GPU traces of serving-era inference (shared/anchors/gpu, README there): the fused norms their stacks run are
recognised as fused, named by their kernel, in the counts the README's independent count gives."""

from __future__ import annotations

import pytest

from atbprof.analyze import analyze
from atbprof.importers import load_profile
from tests.importers.conftest import SHARED, shared

GPU = SHARED / "anchors" / "gpu"

FUSED = {
    # file: {kernel op type: count} (the README's facts)
    "tracelens_b200_vllm_moe_eager.json.gz": {"fused_add_rms_norm_kernel": 72, "rms_norm_kernel": 1},
    "tracelens_mi300_sglang_qwen3-8b_decode_hipgraph.json.gz": {"add_rmsnorm_quant_kernel": 145},
    "tracelens_vllm_prefilldecode_piecewise_graph.json.gz": {"Rmsnorm2dFwd": 49},
    "tracelens_mi300_torch_compile_llama_block.json.gz": {
        "triton_red_fused_add_mean_mul_pow_rsqrt": 1,
        "triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt": 1,
    },
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_norms_of_every_stack_are_found_as_fused(name: str) -> None:
    report = analyze(load_profile(shared(GPU / name)))
    fused = {}
    for f in report.findings:
        if f.kind == "fused_norm":
            fused[f.fused_as] = fused.get(f.fused_as, 0) + f.count
    assert fused == FUSED[name]
    assert not report.has_unfused


def test_the_full_kernel_name_stays_beside_its_short_type() -> None:
    ops = load_profile(shared(GPU / "tracelens_b200_vllm_moe_eager.json.gz")).ops.to_pydict()
    names = [n for n, t in zip(ops["op_name"], ops["op_type"], strict=True) if t == "fused_add_rms_norm_kernel"]
    assert len(names) == 72 and all(n.startswith("std::enable_if<") for n in names)


def test_a_graph_replayed_decode_charges_its_launch_once() -> None:
    """SGLang decode from one hipGraphLaunch of 1.573 ms: the 145 fused norms run 0.684 ms (README) and carry their
    share of the launch, not 145 launches (which read as 228.71 ms, 48 % of the span)."""
    report = analyze(load_profile(shared(GPU / "tracelens_mi300_sglang_qwen3-8b_decode_hipgraph.json.gz")))
    (phase,) = report.breakdown.phases
    assert phase.norm.ops == 145
    assert phase.norm.kernel_us == pytest.approx(684, abs=1)
    assert 0 < phase.norm.launch_us < 1573  # a share of the one launch
    assert any("replayed from 1 graph launch" in n for n in report.notes)
