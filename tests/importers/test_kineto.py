"""Kineto / torch.profiler traces: HTA's real fixtures and small hand-made traces."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from atbprof.importers import load_profile
from atbprof.importers.optypes import gpu_op_type, kernel_functor
from tests.importers.conftest import TRACES, shared

HTA = sorted(p.name for p in TRACES.glob("*.json.gz")) if TRACES.exists() else ["(no shared folder)"]


def _events(path: Path) -> list[dict[str, Any]]:
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    return doc["traceEvents"] if isinstance(doc, dict) else doc


@pytest.mark.parametrize("name", HTA)
def test_counts_match_an_independent_read(name: str) -> None:
    """Op rows = X events of cat kernel/Kernel and the device copies and fills (gpu_memcpy / gpu_memset, old schema
    Memcpy / Memset); framework rows = cpu_op/Operator X events but ProfilerStep#N."""
    path = shared(TRACES / name)
    events = _events(path)
    device = ("kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset", "mtia_ccp_events")
    mtia_sync = ("event_record", "event_wait")
    kernels = [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") in device
        and not (e["cat"] == "mtia_ccp_events" and e.get("name") in mtia_sync)
    ]
    cpu_ops = [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") in ("cpu_op", "Operator")
        and not str(e.get("name")).startswith("ProfilerStep#")
    ]
    profile = load_profile(path)
    assert profile.ops.num_rows == len(kernels)
    assert profile.framework is not None and profile.framework.num_rows == len(cpu_ops)
    assert sum(profile.ops["task_dur_ns"].to_pylist()) == sum(round(e["dur"] * 1000) for e in kernels)
    assert set(profile.ops["task_type"].to_pylist()) <= {"GPU", "MEMCPY", "MEMSET", "MTIA"}
    copies = [e for e in kernels if e["cat"] in ("gpu_memcpy", "Memcpy") or e.get("name") == "dma_request"]
    assert profile.ops["task_type"].to_pylist().count("MEMCPY") == len(copies)
    assert sorted(profile.ops["op_name"].to_pylist()) == sorted(e["name"] for e in kernels)


def test_ns_digits_of_float_timestamps_are_kept() -> None:
    """`"ts": 1712195495519689.047` is epoch µs with ns digits: float64 would read ...689.0."""
    profile = load_profile(shared(TRACES / "hta_ns_resolution_rank0.pt.trace.json.gz"))
    fw = profile.framework
    assert fw is not None
    origin = profile.meta["origin_ns"]
    assert origin == 1712195495406752797  # the "Trace" span, "ts": 1712195495406752.797
    first = next(r for r in fw.to_pylist() if r["index"] == 0)
    assert first["name"] == "autograd::engine::evaluate_function: DivBackward1"
    assert origin + first["start_ns"] == 1712195495519689047
    assert int(float("1712195495519689.047") * 1000) != 1712195495519689047


def test_base_time_nanoseconds_is_respected() -> None:
    """New schema: ts = µs since baseTimeNanoseconds (here 1735632360000000000)."""
    profile = load_profile(shared(TRACES / "hta_amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    assert profile.meta["baseTimeNanoseconds"] == 1735632360000000000
    assert profile.meta["origin_ns"] == 1735632360000000000 + 4203669603018756  # "ts": 4203669603018.756
    fw = profile.framework
    assert fw is not None
    first = next(r for r in fw.to_pylist() if r["index"] == 0)  # "ts": 4203669604595.407, "dur": 340.024
    assert profile.meta["origin_ns"] + first["start_ns"] == 1735632360000000000 + 4203669604595407
    assert first["dur_ns"] == 340_024


def test_kernels_get_launch_stream_and_step() -> None:
    path = shared(TRACES / "hta_trace_diff_control.json.gz")
    device = ("kernel", "gpu_memcpy", "gpu_memset")
    streams = {int(e["args"]["stream"]) for e in _events(path) if e.get("cat") in device}
    profile = load_profile(path)
    ops = profile.ops.to_pylist()
    launched = [r for r in ops if r["host_launch_start_ns"] is not None]
    assert len(launched) == len(ops)  # every kernel has its cudaLaunchKernel (same correlation id)
    assert all(r["host_launch_start_ns"] <= r["task_start_ns"] for r in launched)
    assert {r["stream_id"] for r in ops} == streams == {7, 20, 21, 22}  # 22: copies only
    assert {r["step"] for r in ops} == set(range(1009, 1015))
    frames = profile.step_frames
    assert frames is not None and set(frames["frame"].to_pylist()) == {"ProfilerStep"}
    assert sum(frames["op_count"].to_pylist()) == len(ops)


def test_old_schema_string_ids() -> None:
    """PyTorch 1.9 Kineto: cats Operator / Kernel / Runtime, tids and args as strings ("25738", "stream 7")."""
    profile = load_profile(shared(TRACES / "kineto_tbplugin_resnet50_worker0.pt.trace.json.gz"))
    fw = profile.framework
    assert fw is not None
    assert fw["tid"].null_count == 0 and 25738 in set(fw["tid"].to_pylist())
    assert profile.ops["stream_id"].null_count == 0
    assert profile.ops["host_launch_start_ns"].null_count == 0  # correlation "34441" matched as a number
    first = next(r for r in fw.to_pylist() if r["index"] == 0)  # aten::empty, "Input Dims": "[[], [], [], [], [], []]"
    assert (first["name"], first["input_shapes"]) == ("aten::empty", ";;;;;")  # six scalar inputs


def test_the_mtia_trace_keeps_its_framework_table() -> None:
    profile = load_profile(shared(TRACES / "hta_mtia_inference_rank_0.json.gz"))
    assert profile.ops.num_rows == 974  # its device events (test_mtia_device_events_are_ops)
    assert profile.framework is not None and profile.framework.num_rows == 10_346


def _kineto(events: list[dict[str, Any]], **top: Any) -> bytes:
    return orjson.dumps({"schemaVersion": 1, **top, "traceEvents": events})


def _x(
    name: str, cat: str, ts: float, dur: float, tid: int = 1, pid: int = 10, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args or {}}


def test_synthetic_trace_nesting_steps_and_launches(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        _x("ProfilerStep#7", "user_annotation", 100.000, 50.0),
        _x("aten::linear", "cpu_op", 101.5, 20.0, args={"Input Dims": [[16, 4096], [1024, 4096], [1024]]}),
        _x("aten::matmul", "cpu_op", 102.25, 10.0),
        _x("aten::mm", "cpu_op", 103.0, 5.0),
        _x("cudaLaunchKernel", "cuda_runtime", 104.0, 1.0, args={"correlation": 42}),
        _x("aten::add", "cpu_op", 130.0, 2.0, tid=2),  # another thread: its own nesting
        _x("aten::zeros", "cpu_op", 200.0, 1.0),  # after the step
        _x("void at::native::vectorized_elementwise_kernel<4, X>(int, X)", "kernel", 160.0, 3.5, tid=7, pid=0,
           args={"correlation": 42, "stream": 7}),
        {"ph": "s", "id": 42, "pid": 10, "tid": 1, "ts": 104.0, "cat": "ac2g", "name": "ac2g"},
    ]  # fmt: skip
    path = tmp_path / "trace.bin"  # the name does not matter
    path.write_bytes(gzip.compress(_kineto(events, baseTimeNanoseconds=1_700_000_000_000_000_000)))
    profile = load_profile(path)
    assert profile.kind == "kineto"
    assert profile.meta["origin_ns"] == 1_700_000_000_000_100_000
    (kernel,) = profile.ops.to_pylist()
    assert kernel["op_type"] == "vectorized_elementwise_kernel"
    assert (kernel["task_start_ns"], kernel["task_dur_ns"], kernel["stream_id"]) == (60_000, 3_500, 7)
    assert (kernel["host_launch_start_ns"], kernel["host_launch_dur_ns"]) == (4_000, 1_000)
    assert kernel["step"] == 7  # launched inside ProfilerStep#7 although it runs after it
    fw = {r["name"]: r for r in profile.framework.to_pylist()}  # type: ignore[union-attr]
    assert [fw[n]["depth"] for n in ("aten::linear", "aten::matmul", "aten::mm", "aten::add")] == [0, 1, 2, 0]
    assert fw["aten::mm"]["parent"] == fw["aten::matmul"]["index"] == 3
    assert fw["aten::linear"]["input_shapes"] == "16,4096;1024,4096;1024"
    assert fw["aten::matmul"]["start_ns"] == 2_250
    assert (fw["aten::linear"]["step"], fw["aten::zeros"]["step"]) == (7, None)
    assert "ProfilerStep#7" not in fw
    (frame,) = profile.step_frames.to_pylist()  # type: ignore[union-attr]
    assert frame == {"step": 7, "start_ns": 0, "dur_ns": 50_000, "op_count": 1, "first_op_index": 0,
                     "frame": "ProfilerStep"}  # fmt: skip


def test_partial_overlap_closes_the_open_op(tmp_path: Path) -> None:
    """Rounding artefacts: an op that starts inside another but ends after it is not its child."""
    events = [
        _x("a", "cpu_op", 0.0, 10.0),
        _x("b", "cpu_op", 5.0, 10.0),  # overlaps a partly
        _x("c", "cpu_op", 6.0, 1.0),  # inside b (and a)
    ]
    path = tmp_path / "t.json"
    path.write_bytes(_kineto(events))
    fw = {r["name"]: r for r in load_profile(path).framework.to_pylist()}  # type: ignore[union-attr]
    assert (fw["a"]["depth"], fw["b"]["depth"], fw["c"]["depth"]) == (0, 0, 1)
    assert fw["c"]["parent"] == fw["b"]["index"]


def test_a_first_launch_that_loads_the_kernel_is_warm_up(tmp_path: Path) -> None:
    """ROCm's first hipLaunchKernel of a kernel can take 100-330 ms (its code object loads): warm-up, not launch
    overhead. A slow copy, or a slow launch that is not the kernel's first, is left as measured."""
    launches = [("k", 150_000.0), ("k", 5.0), ("k", 5.0), ("m", 5.0), ("m", 4_000.0), ("m", 5.0), ("m", 5.0)]
    events = []
    t = 0.0
    for i, (name, cost) in enumerate(launches):
        events.append(_x("hipLaunchKernel", "cuda_runtime", t, cost, args={"correlation": i}))
        events.append(_x(name, "kernel", t + cost + 1, 1.0, tid=7, pid=0, args={"correlation": i, "stream": 7}))
        t += cost + 10
    events.append(_x("hipMemcpy", "cuda_runtime", t, 463_000.0, args={"correlation": 99}))
    events.append(
        _x("Memcpy DtoH", "gpu_memcpy", t + 463_000, 2.0, tid=7, pid=0, args={"correlation": 99, "stream": 7})
    )
    path = tmp_path / "warm.json"
    path.write_bytes(_kineto(events))
    profile = load_profile(path)
    costs = [(r["op_name"], r["host_launch_dur_ns"]) for r in profile.ops.to_pylist()]
    assert costs[0] == ("k", 5_000)  # the code-object load: counted as a usual launch
    assert costs[4] == ("m", 4_000_000)  # slow, but not m's first launch: as measured
    assert costs[-1] == ("Memcpy DtoH", 463_000_000)  # a blocking copy is not a kernel load
    assert profile.meta["warmup_launches"] == {"kernels": 1, "host_ns": 150_000_000 - 5_000}


def test_a_graph_launch_is_one_host_cost_shared_by_its_kernels(tmp_path: Path) -> None:
    """cudaGraphLaunch replays three kernels: each carries a third of the launch, not the whole call; a kernel
    launched on its own keeps its launch."""
    events = [
        _x("cudaGraphLaunch", "cuda_runtime", 10.0, 3.0, args={"correlation": 5}),
        _x("cudaLaunchKernel", "cuda_runtime", 20.0, 1.0, args={"correlation": 6}),
        *(_x(f"k{i}", "kernel", 14.0 + i, 0.5, tid=7, pid=0, args={"correlation": 5, "stream": 7}) for i in range(3)),
        _x("alone", "kernel", 22.0, 0.5, tid=7, pid=0, args={"correlation": 6, "stream": 7}),
    ]
    path = tmp_path / "graph.json"
    path.write_bytes(_kineto(events))
    profile = load_profile(path)
    launched = {r["op_name"]: r["host_launch_dur_ns"] for r in profile.ops.to_pylist()}
    assert launched == {"k0": 1_000, "k1": 1_000, "k2": 1_000, "alone": 1_000}
    assert profile.meta["graph_launches"] == {"launches": 1, "kernels": 3, "host_ns": 3_000}
    assert sum(v for k, v in launched.items() if k != "alone") == 3_000  # the call counted once


@pytest.mark.parametrize(
    ("kernel", "op_type"),
    [
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(Params)",
         "cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4"),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float>(int)", "CatArrayBatchedCopy"),
        ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin"),
        ("volta_sgemm_128x64_nn", "volta_sgemm_128x64_nn"),
        ("cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)", "computeOffsetsKernel"),
        # a return type before the name, with a `>` inside parentheses (vLLM's fused norm on a B200)
        ("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
         "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*)",
         "fused_add_rms_norm_kernel"),
        # mangled names, as ROCm traces keep them; a generic wrapper names its first template argument
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb1ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib",
         "add_rmsnorm_quant_kernel"),
        ("_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwd",
         "Rmsnorm2dFwd"),
        ("_Z8attn_fwdPv", "attn_fwd"),
        ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 2>(c10::BFloat16*, long)", "rms_norm_kernel"),
    ],
)  # fmt: skip
def test_gpu_op_type_from_kernel_name(kernel: str, op_type: str) -> None:
    assert gpu_op_type(kernel) == op_type


def test_nested_ts_key_and_mixed_spellings_stay_exact(tmp_path: Path) -> None:
    """A numeric "ts" inside args and a string ts elsewhere: the digits still come from the text."""
    path = tmp_path / "t.json"
    path.write_bytes(
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
        b'"ts": 1712195495519689.047, "dur": 2, "args": {"ts": 5}}, {"ph": "X", "cat": "cpu_op", "name": "b", '
        b'"pid": 1, "tid": 1, "ts": "1712195495519690.001", "dur": 0.5}]}'
    )
    profile = load_profile(path)
    assert profile.meta["origin_ns"] == 1712195495519689047
    assert [r["start_ns"] for r in profile.framework.to_pylist()] == [0, 954]  # type: ignore[union-attr]


def test_mtia_device_events_are_ops() -> None:
    """The MTIA sample's command-processor events, as HTA reads them: work (pe_exe, merge, remote) and DMA copies
    named by direction; its event_record / event_wait synchronisation is left out."""
    path = shared(TRACES / "hta_mtia_inference_rank_0.json.gz")
    events = [e for e in _events(path) if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events"]
    work = [e for e in events if e["name"] not in ("event_record", "event_wait")]
    ops = load_profile(path).ops
    assert ops.num_rows == len(work) == 974
    kinds = dict(zip(ops["op_type"].to_pylist(), ops["task_type"].to_pylist(), strict=True))
    assert kinds == {"pe_exe": "MTIA", "merge": "MTIA", "remote": "MTIA", "Memcpy": "MEMCPY"}
    assert ops["op_type"].to_pylist().count("Memcpy") == sum(e["name"] == "dma_request" for e in work)


@pytest.mark.parametrize(
    ("name", "functor"),
    [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
            "pow_tensor_scalar_kernel_impl<float, float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, "
            "std::array<char*, 2ul> >(int, at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, "
            "float>(at::TensorIteratorBase&, float)::{lambda(float)#1}, std::array<char*, 2ul>)",
            "pow_tensor_scalar_kernel_impl",
        ),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
            "float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, "
            "float, float, float>, unsigned int, float, 4, 4>)",
            "MeanOps",
        ),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
            "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::"
            "TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
            "MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<…>)",
            "MulFunctor",
        ),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
            "std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)",
            "CUDAFunctorOnSelf_add",
        ),
        ("nvjet_sm90_hsh_128x8_64x12_4x1_v_bz_splitK_TNT", None),  # not a generic elementwise kernel
        ("void at::native::vectorized_elementwise_kernel<4>(int)", None),  # a cut name: no functor to read
    ],
)
def test_the_functor_of_a_generic_pytorch_kernel(name: str, functor: str | None) -> None:
    """(H200 eager trace names.) PyTorch runs every elementwise aten op as one of a few generic kernels; the op is
    the functor in the template arguments."""
    assert kernel_functor(name) == functor


def test_aicore_suffixed_types_are_their_base_type(tmp_path: Path) -> None:
    """CANN names some Types after their core (`AddAiCore`, `CastAiCore`): read as the base Type, so an Add in front
    of a RmsNorm is still the Add -> Norm fusion."""
    from atbprof.analyze import analyze
    from atbprof.importers.optypes import ascend_op_type, base_ascend_types

    assert ascend_op_type("aclnnAdd_AddAiCore_Add") == "Add" and ascend_op_type("CastAiCore") == "Cast"
    assert base_ascend_types(pa.array(["AddAiCore", "AiCore", "RmsNorm", None])).to_pylist() == [
        "Add", "AiCore", "RmsNorm", None,
    ]  # fmt: skip
    header = "Step Id,Model ID,Task ID,Stream ID,Name,Type,Accelerator Core,Start Time(us),Duration(us),"
    header += "Wait Time(us),Block Dim,Input Shapes,Output Shapes"
    rows = [
        '1,4294967295,1,2,aclnnAdd_AddAiCore_Add,AddAiCore,AI_VECTOR_CORE,1000.000\t,5.000,0,40,"""1,4096;1,4096""","""1,4096"""',
        '1,4294967295,2,2,aclnnRmsNorm_RmsNorm_RmsNorm,RmsNorm,AI_VECTOR_CORE,1006.000\t,7.000,1.000,40,"""1,4096;4096""","""1,4096"""',
    ]
    path = tmp_path / "kernel_details.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    profile = load_profile(path)
    assert profile.ops["op_type"].to_pylist() == ["Add", "RmsNorm"]
    assert [f.kind for f in analyze(profile, whatif=False).findings if f.opportunity] == ["add_norm"]
