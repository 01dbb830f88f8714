"""Device model invariants over random shapes and devices (Hypothesis)."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.config.models import RunConfig
from atbprof.device.kernels import evaluate_costs
from atbprof.device.spec import PRESETS, load_device
from atbprof.graph.expr import ONE, SKV, SQ, B, Lin, T, basis_values
from atbprof.graph.nodes import Edge, Node, Tensor, Work
from atbprof.optable.schema import PIPES
from atbprof.sim.simulate import Simulation

DEVICES = {p: load_device(p) for p in PRESETS}


def act(width: int, size: int = 2) -> Tensor:
    return Tensor((B, SQ, Lin(one=width)), "DT_FLOAT16", T * (width * size))


def matmul(k: int, n: int, nd: bool = True) -> Node:
    w = Tensor((Lin(one=k), Lin(one=n)), "DT_FLOAT16", Lin(one=k * n * 2))
    work = Work("cube", mm=(ONE, T, Lin(one=k), Lin(one=n)), stream_bytes=w.nbytes, kind="MatMulV2" if nd else "BMM")
    return Node(0, "MatMulV2", "mm", "x", 0, [Edge(-1, act(k))], [act(n)], [w], [work])


def vector(width: int, passes: float) -> Node:
    t = act(width)
    work = Work("vector", vec_bytes=t.nbytes * passes, vec_flops=t.nbytes * passes, kind="Mul")
    return Node(0, "Mul", "mul", "x", 0, [Edge(-1, t)], [t], [], [work])


def attention(heads: int, hd: int) -> Node:
    cache = Tensor((B, Lin(one=heads), SKV, Lin(one=hd)), "DT_FLOAT16", Lin(BKV=heads * hd * 2))
    w1 = Work("cube", mm=(Lin(B=heads), SQ, Lin(one=hd), SKV), stream_bytes=cache.nbytes, kind="BatchMatMulV2")
    w2 = Work("vector", vec_bytes=Lin(TKV=heads * 4 * 3), kind="SoftmaxV2")
    w3 = Work("cube", mm=(Lin(B=heads), SQ, SKV, Lin(one=hd)), stream_bytes=cache.nbytes, kind="BatchMatMulV2")
    return Node(
        0,
        "IncreFlashAttention",
        "fa",
        "x",
        0,
        [Edge(-1, act(heads * hd))],
        [act(heads * hd)],
        [cache, cache],
        [w1, w2, w3],
        units=3,
        icache=True,
        handoff=[Lin(TKV=heads * 2)],
    )


@settings(max_examples=60, deadline=None)
@given(
    device=st.sampled_from(PRESETS),
    batch=st.integers(1, 64),
    sq=st.sampled_from([1, 1, 7, 128, 2048]),
    kv=st.integers(1, 32768),
    k=st.sampled_from([64, 256, 4096, 5120, 8192]),
    n=st.sampled_from([16, 1024, 11008, 28672, 32000]),
    width=st.sampled_from([1, 64, 4096, 11008]),
    passes=st.floats(0.5, 4.0),
    heads=st.sampled_from([8, 32, 64]),
    nz=st.booleans(),
)
def test_no_kernel_beats_the_roofline(device, batch, sq, kv, k, n, width, passes, heads, nz) -> None:
    spec = DEVICES[device]
    nodes = [matmul(k, n), matmul(k, n, nd=False), vector(width, passes), attention(heads, 128)]
    values = basis_values(batch, np.array([sq]), np.array([max(kv, sq)]))
    c = evaluate_costs(nodes, spec, values, weights_nz=nz)
    hbm_floor = (c.hbm_read + c.hbm_write) / (spec.hbm_bytes_per_s / 1e9)
    flops_floor = c.flops / (spec.peak_flops / 1e9)
    assert (c.dur > 0).all()
    assert (c.dur >= hbm_floor * (1 - 1e-9)).all()
    assert (c.dur >= flops_floor * (1 - 1e-9)).all()
    for p in PIPES:
        assert (c.pipes[p] >= 0).all() and (c.pipes[p] <= c.dur).all()
    assert (c.block_dim >= 1).all()
    assert (c.block_dim[:2] <= spec.cores.aic).all() and (c.block_dim[2] <= spec.cores.aiv).all()


def test_static_cost_makes_tiny_kernels_launch_bound() -> None:
    spec = DEVICES["910A"]
    c = evaluate_costs([vector(1, 1.0)], spec, basis_values(1, np.array([1]), np.array([1])))
    assert c.bound[0, 0] == 2  # launch
    assert abs(c.dur[0, 0] - spec.static_cost_us.vector * 1e3) < 200


def test_gemv_streams_weights_at_the_calibrated_fraction_of_hbm() -> None:
    spec = DEVICES["910A"]
    vals = basis_values(1, np.array([1]), np.array([1]))
    nd = evaluate_costs([matmul(4096, 11008)], spec, vals).dur[0, 0]
    nz = evaluate_costs([matmul(4096, 11008)], spec, vals, weights_nz=True).dur[0, 0]
    weight = 4096 * 11008 * 2
    assert nd > nz
    # ND weights: about weight / (gemv_nd * HBM); NZ: about weight / (hbm_stream * HBM)
    assert abs(nd - weight / (spec.efficiency.gemv_nd * 1200)) / nd < 0.15
    assert abs(nz - weight / (spec.efficiency.hbm_stream * 1200)) / nz < 0.15


def test_large_gemm_is_compute_bound_near_measured_peak() -> None:
    spec = DEVICES["910A"]
    vals = basis_values(1, np.array([4096]), np.array([4096]))
    c = evaluate_costs([matmul(8192, 8192, nd=False)], spec, vals)
    achieved = c.flops[0, 0] / c.dur[0, 0] * 1e9
    assert c.bound[0, 0] == 0
    assert 0.6 * 216e12 < achieved <= spec.peak_flops  # AIBench measured 216 TFLOPS


def test_split_cores_pay_the_l2_handoff() -> None:
    node = attention(32, 128)
    vals = basis_values(1, np.array([2048]), np.array([2048]))
    a2 = evaluate_costs([node], DEVICES["910B2"], vals)
    assert a2.task_type[0] == 2 and a2.mix_block_dim[0, 0] == 2 * a2.block_dim[0, 0]
    a1 = evaluate_costs([node], DEVICES["910A"], vals)
    assert a1.task_type[0] == 0 and a1.mix_block_dim[0, 0] == 0


def _gqa_config(preset: str, batch: int = 1, prompt: int = 32768) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": "gqa",
            "model": {"preset": preset, "rope_scaling_factor": 9},  # 32,768 tokens on 4,096 / 8,192 positions
            "device": {"preset": "910B2", "ignore_capacity": True},  # the MHA twin at batch 128 needs 166 GB
            "execution": {"mode": "graph"},
            "workload": {"batch_size": batch, "prompt_len": prompt, "decode_tokens": 2},
            "output": {"trace": False},
        }
    )


@pytest.mark.parametrize(("batch", "prompt"), [(1, 32768), (128, 2048)])
def test_gqa_decode_attention_streams_the_kv_cache_over_all_cores(batch: int, prompt: int) -> None:
    """Issue 12: a fused GQA decode attention (repeat_kv absorbed: no vector bytes, the whole KV cache streamed)
    got Block Dim 1 and pushed the cache through one core's GM port: LLaMA-3-8B at prompt 32768 took 87.8 ms/token
    (floor 12.07), 7.3x its floor and slower than LLaMA-2-7B with 4x the KV cache; at batch 128 / prompt 2048 it
    was 19.8x its floor. The streamed bytes are now tiled over the vector cores like vector work."""
    from atbprof.run import summarize

    gqa = summarize(_gqa_config("llama3-8b", batch, prompt))
    mha = summarize(_gqa_config("llama2-7b", batch, prompt))
    assert gqa.decode_ms_per_token < 1.5 * gqa.hbm_floor_ms_per_token
    assert gqa.decode_ms_per_token < mha.decode_ms_per_token  # a quarter of the KV cache: less time, not more
    sim = Simulation(_gqa_config("llama3-8b", batch, prompt))
    ops = pa.Table.from_batches(list(sim.batches()))
    attn = ops.filter(pc.equal(ops["op_type"].cast(pa.string()), "IncreFlashAttention"))
    assert attn.num_rows > 0 and pc.min(attn["block_dim"]).as_py() == sim.device.cores.aic  # every core, not 1


GRID = [
    (preset, device, mode, fusion, prompt)
    for preset in ("llama2-7b", "llama3-8b")
    for device in ("910A", "910B2")
    for mode in ("eager", "graph")
    for fusion in ("none", "default")
    for prompt in (512, 8192)
]


def _grid_config(preset: str, device: str, mode: str, fusion: str, prompt: int, **model: int) -> RunConfig:
    return RunConfig.model_validate(
        {
            # past LLaMA-2's 4,096 positions (and LLaMA-3's 8,192 with the decode tokens): RoPE stretched
            "model": {"preset": preset, "rope_scaling_factor": 4, **model},
            # kernel physics over the whole grid: unfused attention at 8192 on a 32 GB 910A does not fit (refused
            # in a real run); the cost model is checked on it anyway
            "device": {"preset": device, "ignore_capacity": True},
            "execution": {"mode": mode},
            "fusion": {"strategy": fusion},
            "workload": {"prompt_len": prompt, "decode_tokens": 2},
            "output": {"trace": False},
        }
    )


def _tensor_bytes(ops: pa.Table) -> np.ndarray:
    """Bytes of every input and output tensor of each row, from its recorded shapes (predict's parser)."""
    from atbprof.predict.shapes import parse_tensors

    cache: dict[tuple[object, ...], int] = {}
    out = np.zeros(ops.num_rows)
    cols = [ops[c].to_pylist() for c in ("input_shapes", "input_dtypes", "output_shapes", "output_dtypes")]
    for i, key in enumerate(zip(*cols, strict=True)):
        if key not in cache:
            tensors = parse_tensors(key[0], key[1]) + parse_tensors(key[2], key[3])
            cache[key] = sum(t.nbytes for t in tensors if t is not None)
        out[i] = cache[key]
    return out


@pytest.mark.parametrize(("preset", "device", "mode", "fusion", "prompt"), GRID)
def test_memory_bound_kernels_reach_a_sane_share_of_hbm(
    preset: str, device: str, mode: str, fusion: str, prompt: int
) -> None:
    """Issue 12's invariant: every kernel that moves more than 8 MB and is memory-bound by the roofline reaches at
    least a quarter of the HBM bandwidth. The slowest legitimate ones sit at 0.30-0.45 (eager ND weights stream at
    gemv_nd = 0.42, elementwise kernels at vector_hbm = 0.40, minus the static cost per task). Before Block Dim came
    from all the work a kernel does, a GQA decode attention reached 1.7 % and a narrow-N decode GEMV (LLaMA-3-8B's
    K/V projections on 8 of 24 cores) 22 %."""
    sim = Simulation(_grid_config(preset, device, mode, fusion, prompt))
    ops = pa.Table.from_batches(list(sim.batches()))
    moved = ops["hbm_read_bytes"].to_numpy() + ops["hbm_write_bytes"].to_numpy()
    # a vector kernel's rate (vector_hbm) bounds all it reads and writes, L2-resident tensors too: count them
    vector = ops["mac_time_ns"].to_numpy() == 0  # no cube work (910A's coupled cores say AI_CORE for both)
    moved = np.where(vector, np.maximum(moved, _tensor_bytes(ops)), moved)
    dur = ops["task_dur_ns"].to_numpy()
    bw, peak = sim.device.hbm_bytes_per_s / 1e9, sim.device.peak_flops / 1e9  # per ns
    bound = (moved > 8e6) & (ops["flops"].to_numpy() / peak <= moved / bw)
    assert bound.any()
    share = moved[bound] / dur[bound] / bw
    assert share.min() >= 0.25, (
        ops["op_type"].to_numpy()[bound][share.argmin()],
        share.min(),
    )


@pytest.mark.parametrize(("device", "mode", "prompt"), [("910B2", "graph", 8192), ("910A", "eager", 512)])
def test_a_gqa_model_is_never_slower_than_its_mha_twin(device: str, mode: str, prompt: int) -> None:
    """LLaMA-3-8B (8 KV heads) against the same model with 32 KV heads: more weights and 4x the KV cache can only
    cost time; in graph mode its decode is within 1.6x of its HBM floor (issue 12's target: 1.2-1.6x)."""
    from atbprof.run import summarize

    gqa = summarize(_grid_config("llama3-8b", device, mode, "default", prompt))
    mha = summarize(_grid_config("llama3-8b", device, mode, "default", prompt, num_key_value_heads=32))
    assert gqa.decode_ms_per_token <= mha.decode_ms_per_token
    assert gqa.ttft_ms <= mha.ttft_ms
    if mode == "graph":
        assert gqa.decode_ms_per_token <= 1.6 * gqa.hbm_floor_ms_per_token
