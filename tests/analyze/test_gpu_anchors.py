"""Real GPU traces of serving-era inference (shared/anchors/gpu, README there): the fused norms their stacks run are
recognised as fused, named by their kernel, in the counts the README's independent count gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from atbprof.analyze import analyze
from atbprof.importers import load_profile
from tests.importers.conftest import SHARED, shared

GPU = SHARED / "anchors" / "gpu"

FUSED = {
    # file: {kernel op type: count} (the README's facts)
    "tracelens_b200_vllm_moe_eager.json.gz": {  # the kernels, and the vLLM custom ops that launched them
        "fused_add_rms_norm_kernel": 72,
        "rms_norm_kernel": 1,
        "_C::fused_add_rms_norm": 72,
        "_C::rms_norm": 1,
    },
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


def test_the_h200_what_if_is_within_30_percent_of_the_measured_saving() -> None:
    """The same model and inputs profiled with the stock eager RMSNorm and with F.rms_norm (README): the estimate
    from the eager trace alone against the measured difference of the profiled steps."""
    eager = load_profile(shared(GPU / "h200_llama2-7b_L4_eager.pt.trace.json.gz"))
    fused = load_profile(shared(GPU / "h200_llama2-7b_L4_frms.pt.trace.json.gz"))
    steps = [p.step_frames.column("dur_ns").to_pylist() for p in (eager, fused)]  # type: ignore[union-attr]
    measured_us = (sum(steps[0]) - sum(steps[1])) / 1e3
    assert 0.20 < measured_us / (sum(steps[0]) / 1e3) < 0.26  # the README's -23 %
    report = analyze(eager)
    assert report.whatif.method == "trace"
    assert abs(report.whatif.total_saving_us - measured_us) <= 0.30 * measured_us
    assert "profiled run" in report.whatif.assumption  # which saving it is, said


def test_a_device_bound_chain_saves_what_the_device_gives(tmp_path: Path) -> None:
    """Kernels queued behind a long one (the device is the bottleneck): the saving is the kernels removed, not the
    host calls; a host-bound chain (kernels start as launched) saves its host calls, capped by the device."""
    from tests.importers.test_kineto import _kineto, _x

    chain = ["aten::to", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::to", "aten::mul"]

    def trace(queued: bool) -> Path:
        events = [_x("ProfilerStep#1", "user_annotation", 0.0, 2000.0)]
        if queued:
            events.append(_x("long", "kernel", 0.0, 1000.0, tid=7, pid=0, args={"correlation": 99, "stream": 7}))
        t_dev = 1000.0 if queued else 0.0
        for i, name in enumerate(chain):
            t = 10.0 + 10 * i
            events.append(_x(name, "cpu_op", t, 9.0, args={"Input Dims": [[1, 8, 64]]}))
            events.append(_x("cudaLaunchKernel", "cuda_runtime", t + 1, 2.0, args={"correlation": i}))
            start = max(t_dev, t + 3.0)
            events.append(_x(f"k{i}", "kernel", start, 20.0, tid=7, pid=0, args={"correlation": i, "stream": 7}))
            t_dev = start + 20.0
        path = tmp_path / f"{'queued' if queued else 'starved'}.json"
        path.write_bytes(_kineto(events, deviceProperties=[{"name": "NVIDIA H200"}]))
        return path

    device_bound = analyze(load_profile(trace(queued=True)))
    host_bound = analyze(load_profile(trace(queued=False)))
    for report in (device_bound, host_bound):
        assert report.whatif.method == "trace" and report.has_unfused
    kernels_removed_us = 7 * 20.0  # eight 20 us kernels become one
    assert device_bound.whatif.total_saving_us == pytest.approx(kernels_removed_us, abs=1.0)
    assert 30.0 < host_bound.whatif.total_saving_us <= 80.0  # its host calls, at most the chain's host span


def test_a_device_bound_fused_kernel_is_priced_from_its_bytes(tmp_path: Path) -> None:
    """A device-bound RMSNorm chain over 9,000 x 4,000 fp16 on an H200: the fused kernel reads x and writes y
    (144.0 MB) at 4,800 GB/s = 30.0 us, between the chain's shortest (20 us) and longest (40 us) kernels; on a GPU
    with no spec it costs the longest."""
    from tests.importers.test_kineto import _kineto, _x

    chain = ["aten::to", "aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::to", "aten::mul"]
    durations = [20.0, 40.0, 40.0, 20.0, 20.0, 40.0, 20.0, 40.0]

    def trace(device: str) -> Path:
        events = [_x("ProfilerStep#1", "user_annotation", 0.0, 2000.0)]
        events.append(_x("long", "kernel", 0.0, 1000.0, tid=7, pid=0, args={"correlation": 99, "stream": 7}))
        t_dev = 1000.0
        for i, name in enumerate(chain):
            t = 10.0 + 10 * i
            events.append(_x(name, "cpu_op", t, 9.0, args={"Input Dims": [[1, 9000, 4000]]}))
            events.append(_x("cudaLaunchKernel", "cuda_runtime", t + 1, 2.0, args={"correlation": i}))
            events.append(
                _x(f"k{i}", "kernel", t_dev, durations[i], tid=7, pid=0, args={"correlation": i, "stream": 7})
            )
            t_dev += durations[i]
        path = tmp_path / f"{device.replace(' ', '_')}.json"
        path.write_bytes(_kineto(events, deviceProperties=[{"name": device}]))
        return path

    h200 = analyze(load_profile(trace("NVIDIA H200")))
    unknown = analyze(load_profile(trace("NVIDIA RTX 9999")))
    fused_us = (2 * 9000 * 4000 + 4000) * 2 / 4800 / 1e3
    assert h200.whatif.total_saving_us == pytest.approx(sum(durations) - fused_us, abs=0.5)
    assert "4,800 GB/s" in h200.whatif.assumption and "H200 Tensor Core GPU datasheet" in h200.whatif.assumption
    assert unknown.whatif.total_saving_us == pytest.approx(sum(durations) - max(durations), abs=0.5)
    assert "no spec of" in unknown.whatif.assumption


def _every_anchor() -> list[Path]:
    anchors = SHARED / "anchors"
    found = sorted((anchors / "gpu").glob("*.json.gz")) + sorted((anchors / "traces").glob("*.json*"))
    found += sorted(p for p in (anchors / "ascend_samples").glob("msinsight_*") if p.is_dir())
    return found


@pytest.mark.parametrize("path", _every_anchor(), ids=lambda p: p.name)
def test_every_nanosecond_of_the_span_is_in_one_category(path: Path) -> None:
    """With ProfilerStep frames or without (serving loops), the categories add up to each phase's span: device idle
    that no launch explains is the step's `other`, not lost."""
    from atbprof.importers.cluster import is_cluster

    if is_cluster(path):
        pytest.skip("a cluster: its ranks are analysed one by one elsewhere")
    report = analyze(load_profile(path))
    b = report.breakdown
    for phase in b.phases:
        total_us = sum(c.per_step_ms for c in phase.categories) * 1e3 * max(phase.steps, 1)
        assert total_us == pytest.approx(phase.span_us, rel=2e-3, abs=5.0), (path.name, phase.phase)
    scope = next(p for p in b.phases if p.phase == b.scope)
    for table in (b.by_op_type, b.by_bound, b.by_layer):
        if table:  # op types, layers and bound end with the same idle rows: each adds up to the scope's span
            assert sum(r.charged_us for r in table) == pytest.approx(scope.span_us, rel=2e-3, abs=5.0), path.name


LLM = [p.name for p in sorted(GPU.glob("*.json.gz"))]


@pytest.mark.parametrize("name", LLM)
def test_attention_and_ffn_come_from_what_the_model_ran(name: str) -> None:
    """Every LLM trace in shared/anchors/gpu has attention and FFN time, whether its roles come from module calls
    (Hugging Face and vLLM eager with modules recorded), framework-level norm chains (the H200 eager traces) or
    recognised kernels (graph replays, compiled blocks)."""
    b = analyze(load_profile(shared(GPU / name)), whatif=False).breakdown
    cats = {c.name: c for p in b.phases for c in p.categories}
    assert cats["attention"].device_us > 0 and cats["ffn"].device_us > 0, name


def test_module_calls_give_the_roles_where_recorded() -> None:
    """H100 Qwen (Hugging Face eager, with modules): the 33 flash_fwd kernels (3.70 ms, README) are in Attention."""
    profile = load_profile(shared(GPU / "tracelens_h100_qwen1.5_hf_eager.json.gz"))
    b = analyze(profile, whatif=False).breakdown
    assert b.categories_heuristic.startswith("roles from the module calls")
    cats = {c.name: c for c in b.phases[0].categories}
    assert cats["attention"].device_us > 3700 and cats["ffn"].device_us > 0
    assert cats["other"].device_us < cats["attention"].device_us


def test_a_serving_loop_gets_its_iterations_and_its_sync_named() -> None:
    """SGLang decode: no ProfilerStep; the step is its execute_… range; the 463 ms blocking hipMemcpyWithStream
    before the graph (README) is synchronisation, not kernel or launch time."""
    b = analyze(
        load_profile(shared(GPU / "tracelens_mi300_sglang_qwen3-8b_decode_hipgraph.json.gz")), whatif=False
    ).breakdown
    assert (b.steps_from, b.steps) == ("iteration", 1)
    causes = {r.name: r.charged_us for r in b.idle.causes}
    assert causes["idle: synchronisation"] == pytest.approx(463_000, rel=0.01)


def test_framework_findings_say_their_device_time_apart_from_their_host_time() -> None:
    """H100 Hugging Face eager Qwen: the 49 decomposed RMSNorm chains' 392 kernels run 7.378 ms on the GPU (README);
    the aten calls took 4.53 ms on the host - two different figures, in two fields."""
    report = analyze(load_profile(shared(GPU / "tracelens_h100_qwen1.5_hf_eager.json.gz")))
    rms = next(f for f in report.findings if f.kind == "decomposed_rmsnorm" and f.level == "framework")
    assert rms.count == 49 and rms.device_kernels == 392
    assert rms.kernel_us == pytest.approx(7378.0, abs=1.0)
    assert rms.host_us is not None and rms.host_us == pytest.approx(4532.5, abs=1.0)
    assert report.to_arrow().column("device_kernels").to_pylist().count(None) < report.to_arrow().num_rows


def test_a_norm_seen_only_as_kernels_is_found_from_their_functors() -> None:
    """The H200 eager trace without its framework ops (as a decode replayed from a CUDA graph shows it): the stock
    LlamaRMSNorm is 9 chains of generic PyTorch kernels per forward (direct_copy, pow, MeanOps, add, rsqrt, mul,
    float16_copy, mul), found from the functors their names carry; the what-if from the kernels alone is within
    30 % of the measured saving too (README: 11.51 -> 8.86 ms per profiled step)."""
    import dataclasses

    eager = load_profile(shared(GPU / "h200_llama2-7b_L4_eager.pt.trace.json.gz"))
    report = analyze(dataclasses.replace(eager, framework=None))
    kinds = {(f.kind, f.level): f for f in report.findings}
    rms = kinds[("decomposed_rmsnorm", "kernel")]
    assert rms.count == 81 and rms.by_phase["all"].per_step == 9
    assert kinds[("add_norm", "kernel")].count == 72
    measured_ms = (11.51 - 8.86) * 9
    assert report.whatif.method == "trace"
    assert abs(report.whatif.total_saving_us / 1e3 - measured_ms) / measured_ms < 0.30


def test_a_gradient_accumulation_add_is_not_an_add_norm() -> None:
    """A100 training trace: AccumulateGrad's add kernel right before layer_norm_grad_input_kernel is not a fusion;
    the forward residual add before vectorized_layer_norm_kernel is (1 per step at both levels)."""
    report = analyze(load_profile(shared(SHARED / "anchors" / "traces" / "hta_trace_diff_control.json.gz")))
    add_norm = {f.level: f.count for f in report.findings if f.kind == "add_norm"}
    assert add_norm.get("kernel", 0) == add_norm.get("framework", 0) == 6


@pytest.mark.parametrize(
    ("name", "types", "category", "device_ms"),
    [
        # README: kernel_unified_attention_2d/3d = 5.73 ms of attention (with the KV-cache writes)
        (
            "tracelens_vllm_prefilldecode_piecewise_graph.json.gz",
            ("kernel_unified_attention_2d", "reshape_and_cache_flash_kernel"),
            "attention",
            5.73,
        ),
        # README: 73 multimem_all_reduce_kernel + 1 NCCL AllGather = 2.14 ms
        ("tracelens_b200_vllm_moe_eager.json.gz", None, "communication", 2.14),
        # README: 33 flash_fwd_kernel = 3.70 ms; their durations sum to 3.74 ms, 3.70 ms of it advancing the timeline
        ("tracelens_h100_qwen1.5_hf_eager.json.gz", ("flash_fwd_kernel",), "attention", 3.74),
    ],
)
def test_the_readme_kernel_time_of_a_class_is_reproduced(
    name: str, types: tuple[str, ...] | None, category: str, device_ms: float
) -> None:
    """The README's kernel times, from the op-type rows, each kernel in the class patterns.yaml gives it."""
    from atbprof.analyze.patterns import load_patterns

    patterns = load_patterns()
    report = analyze(load_profile(shared(GPU / name)), top=1000, whatif=False)
    rows = [r for r in report.breakdown.by_op_type if patterns.category_of(r.name) == category]
    if types is not None:
        assert {r.name for r in rows} >= set(types)
        rows = [r for r in rows if r.name in types]
    assert sum(r.device_us for r in rows) / 1e3 == pytest.approx(device_ms, abs=0.006)
