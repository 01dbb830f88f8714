"""W8A8: int8 GEMMs on the cube's int8 rate, one byte per weight element, and the graph that runs them."""

from __future__ import annotations

import numpy as np
import pytest

from atbprof.device.kernels import evaluate_costs
from atbprof.device.spec import load_device
from atbprof.graph.builder import GraphBuilder, build_graph
from atbprof.graph.dims import ModelDims
from atbprof.graph.expr import Lin, basis_values


def _dims(quant: str) -> ModelDims:
    return ModelDims("t", "llama", 4096, 11008, 32, 32, 2, 32000, 1e-6, "fp16", quant=quant)


def _gemm(quant: str, tokens: int) -> tuple[float, float]:
    """(duration, mac pipe) of a 4096 x 4096 projection over `tokens` tokens."""
    b = GraphBuilder(_dims(quant))
    x = (-1, b.act(4096, tokens=Lin(one=tokens)))
    node = b.nodes[b.matmul("attn.o", 0, x, 4096, 4096, tokens=Lin(one=tokens))]
    costs = evaluate_costs([node], load_device("910B2"), basis_values(1, np.array([1]), np.array([1])))
    return float(costs.dur[0, 0]), float(costs.pipes["mac"][0, 0])


def test_every_preset_states_its_int8_rate() -> None:
    for name in ("910A", "910B1", "910B2", "910B3", "910B4"):
        spec = load_device(name)
        assert spec.cube_int8_macs_per_cycle == 2 * spec.cube_macs_per_cycle  # 16x32x16 vs 16x16x16 fractals


def test_a_compute_bound_int8_gemm_runs_at_twice_the_mac_rate() -> None:
    _, fp16 = _gemm("none", 8192)
    _, int8 = _gemm("w8a8", 8192)
    assert int8 == pytest.approx(fp16 / 2, rel=1e-9)


def test_a_decode_int8_gemm_streams_half_the_weight_bytes_in_nz() -> None:
    """Half the bytes, and streamed at the NZ rate (vllm-ascend casts W8A8 weights to FRACTAL_NZ) where eager
    fp16 weights stay ND (the calibrated gemv_nd efficiency, 0.42 against 0.82): 0.5 x 0.42 / 0.82 = 0.26 of the
    stream, plus the fixed per-task cost both pay."""
    fp16, _ = _gemm("none", 1)
    int8, _ = _gemm("w8a8", 1)
    assert 0.26 < int8 / fp16 < 0.40


def test_the_w8a8_graph_quantises_each_input_once_and_keeps_the_lm_head() -> None:
    graph = build_graph(_dims("w8a8"))
    types = [n.op_type for n in graph.nodes]
    # per layer: the attention input (shared by Q, K, V), the O input, the FFN input (gate, up), the down input
    assert types.count("DynamicQuant") == 4 * 2
    assert types.count("QuantBatchMatmulV3") == 7 * 2
    head = next(n for n in graph.nodes if n.role == "head.lm_head")
    assert head.op_type == "MatMulV2"
    q = next(n for n in graph.nodes if n.op_type == "QuantBatchMatmulV3")
    assert q.params[0].dtype == "DT_INT8" and q.params[0].nbytes.coef[0] == 4096 * 4096


def test_an_int8_kv_cache_is_one_byte_per_element() -> None:
    from dataclasses import replace

    plain = build_graph(_dims("none"))
    int8 = build_graph(replace(_dims("none"), kv_int8=True))
    writes = [n for n in int8.nodes if n.op_type == "ScatterUpdate"]
    assert all(n.params == [] and n.writes_params.coef.sum() > 0 for n in writes)
    before = next(n for n in plain.nodes if n.op_type == "ScatterUpdate").writes_params
    assert writes[0].writes_params.coef.sum() * 2 == before.coef.sum()
    kinds = [n.op_type for n in int8.nodes]
    assert kinds.count("AscendQuant") == kinds.count("AscendAntiQuant") == 2 * 2  # K and V, 2 layers
