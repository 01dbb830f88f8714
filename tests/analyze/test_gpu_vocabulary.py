"""GPU traces in atbprof's vocabulary (issue 13 item 5): NCCL is communication, flash-attention kernels are
attention, the GPU stacks' fused norms are fused norms, and no Ascend device model prices a GPU trace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from atbprof.analyze import analyze
from atbprof.importers import load_profile
from tests.importers.conftest import TRACES, shared


def test_the_a100_trace_diff_sample_in_our_vocabulary() -> None:
    report = analyze(load_profile(shared(TRACES / "hta_trace_diff_control.json.gz")))
    cats = {r.name: r for r in report.breakdown.phases[0].categories}
    assert cats["communication"].share > 0.3  # ncclKernel_AllReduce / SendRecv: 34 % of the steps
    assert cats["memory"].share > 0.05 and cats["memory"].count == 882  # 228 copies + 654 fills: not idle
    fused = {f.fused_as for f in report.findings if f.kind == "fused_norm" and f.level == "kernel"}
    assert "vectorized_layer_norm_kernel" in fused  # PyTorch's own fused LayerNorm kernel
    wi = report.whatif
    # measured from the trace itself, not priced with an Ascend model: the six Add -> aten::layer_norm chains
    assert wi.method == "trace" and "NVIDIA A100-PG509-200" in wi.assumption and "910B2" not in wi.assumption
    assert 0 < wi.total_saving_us < 0.001 * wi.span_us
    assert "1 Add->Norm" in report.summary  # the summary counts what has_unfused counts


def _trace(tmp_path: Path, kernels: list[str], frames: list[str] = (), device: str = "NVIDIA H800") -> Path:  # type: ignore[assignment]
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10_000}
    ]
    for i, name in enumerate(frames):
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": 10 + i * 50, "dur": 40})
    for i, name in enumerate(kernels):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": 5 + i * 100, "dur": 2, "args": {"correlation": i + 1}})  # fmt: skip
        events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 20 + i * 100, "dur": 60,
                       "args": {"correlation": i + 1, "stream": 7}})  # fmt: skip
    path = tmp_path / "trace.json"
    doc = {"schemaVersion": 1, "deviceProperties": [{"name": device}], "traceEvents": events}
    path.write_bytes(orjson.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("kernel", "category"),
    [
        ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64>>(Flash_fwd_params)", "attention"),
        ("void flash_bwd_dq_dk_dv_loop_kernel<X>(Flash_bwd_params)", "attention"),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "communication"),
        ("void ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, ncclWork*)", "communication"),
    ],
)
def test_gpu_kernels_land_in_their_category(tmp_path: Path, kernel: str, category: str) -> None:
    """A layer as the block heuristic sees it: a (fused) norm, then the kernel; a backward kernel (training step)
    then its norm's gradient, which closes the block it differentiates."""
    norm = "void at::native::vectorized_layer_norm_kernel<float, float>(int, float, float const*)"
    norm_grad = "void at::native::layer_norm_grad_input_kernel<float, float>(float const*, int)"
    layer = [norm, kernel] if "bwd" not in kernel else [norm, "void forward_kernel<1>()", kernel, norm_grad]
    report = analyze(load_profile(_trace(tmp_path, layer)))
    cats = {r.name: r for r in report.breakdown.phases[0].categories}
    assert category in cats and cats[category].count >= 1


@pytest.mark.parametrize(
    "kernel",
    [
        "void layer_norm::ln_fwd_kernel<layer_norm::Kernel_traits<float>>(layer_norm::FwdParams)",
        "void transformer_engine::rmsnorm::rmsnorm_fwd_tuned_kernel<X>(Y)",
        "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_rms_norm_0",
        "void cuApplyLayerNorm<float, float, float>(float*, float*, float*, float const*, int, int, float)",
    ],
)
def test_the_gpu_stacks_fused_norms_are_fused_norms(tmp_path: Path, kernel: str) -> None:
    report = analyze(load_profile(_trace(tmp_path, [kernel])))
    assert [f.kind for f in report.findings if f.level == "kernel"] == ["fused_norm"]


@pytest.mark.parametrize(
    ("op", "kind"),
    [("FusedRMSNormAffineFunction", "fused_norm"), ("DropoutAddLayerNormFn", "fused_norm")],
)
def test_fused_norm_autograd_functions_of_apex_and_flash_attn(tmp_path: Path, op: str, kind: str) -> None:
    report = analyze(load_profile(_trace(tmp_path, ["void at::native::vectorized_elementwise_kernel<4>()"], [op])))
    assert kind in {f.kind for f in report.findings if f.level == "framework"}
