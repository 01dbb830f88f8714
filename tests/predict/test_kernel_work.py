"""A measured kernel's work as the device model sees it: GEMM dimensions, causal attention, in-place updates."""

from __future__ import annotations

import numpy as np
import pytest

from atbprof.device.kernels import evaluate_costs
from atbprof.device.spec import load_device
from atbprof.graph.expr import basis_values
from atbprof.predict.kernel_work import Unpriceable, gemm_dims, kernel_node
from atbprof.predict.recipes import load_recipes
from atbprof.predict.shapes import parse_tensors


@pytest.mark.parametrize(
    ("a", "b", "out", "expected"),
    [
        ((4096, 1024), (1024, 3072), (4096, 3072), (1, 4096, 1024, 3072, False)),
        ((4096, 1024), (6144, 1024), (4096, 6144), (1, 4096, 1024, 6144, False)),  # B transposed
        ((4096, 1024), (4096, 3072), (1024, 3072), (1, 1024, 4096, 3072, True)),  # A transposed (weight gradient)
        ((8, 128, 64), (8, 64, 256), (8, 128, 256), (8, 128, 64, 256, False)),  # batched
    ],
)
def test_gemm_dims_from_real_shapes(
    a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...], expected: tuple
) -> None:
    assert gemm_dims(a, b, out) == expected


def test_inconsistent_gemm_is_unpriceable() -> None:
    # the hand-edited mstt fixture: an operand with 81920 where the output says 8192
    with pytest.raises(Unpriceable, match="not K x N"):
        gemm_dims((4096, 81920), (8192, 4096), (4096, 4096))


def _node(op_type: str, shapes: str, types: str, out: str, out_types: str):  # type: ignore[no-untyped-def]
    recipe = load_recipes().op_types[op_type]
    return kernel_node(op_type, recipe, parse_tensors(shapes, types), parse_tensors(out, out_types))


def _macs(node) -> float:  # type: ignore[no-untyped-def]
    one = basis_values(1, np.array([1]), np.array([1]))[:, 0]
    return sum(float(np.prod([d.coef @ one for d in w.mm])) for w in node.work if w.mm)


def test_causal_flash_attention_skips_the_upper_blocks() -> None:
    types = "DT_BF16;DT_BF16;DT_BF16;DT_BF16;UINT8;DT_BF16;BOOL;INT64;INT64;INT64;INT64;INT64;FLOAT;FLOAT;FLOAT"
    outs, out_types = "1,16,4096,8;1,16,4096,8;;4096,1,2048", "FLOAT;FLOAT;DT_BF16;DT_BF16"
    causal = _node("FlashAttentionScore", "4096,1,2048;4096,1,1024;4096,1,1024;;;;2048,2048", types, outs, out_types)
    full = _node("FlashAttentionScore", "4096,1,2048;4096,1,1024;4096,1,1024", types, outs, out_types)
    full_macs = 2 * 16 * 4096 * 4096 * 128  # QK^T and PV, 16 heads of 128 (the softmax statistics say 16 heads)
    assert _macs(full) == pytest.approx(full_macs)
    blocks = 4096 // 128
    assert _macs(causal) == pytest.approx(full_macs * (blocks + 1) / (2 * blocks))


def test_backward_attention_does_five_products() -> None:
    types = "DT_BF16;DT_BF16;DT_BF16;DT_BF16;BOOL;FLOAT;FLOAT;DT_BF16;DT_BF16"
    grad = _node(
        "FlashAttentionScoreGrad",
        "4096,1,2048;4096,1,1024;4096,1,1024;4096,1,2048;2048,2048;1,16,4096,8;1,16,4096,8",
        types,
        "4096,1,2048",
        "DT_BF16",
    )
    fwd = _node(
        "FlashAttentionScore",
        "4096,1,2048;4096,1,1024;4096,1,1024;;;;2048,2048",
        "DT_BF16;DT_BF16;DT_BF16;;;;BOOL",
        "1,16,4096,8;1,16,4096,8;;4096,1,2048",
        "FLOAT;FLOAT;DT_BF16;DT_BF16",
    )
    assert _macs(grad) == pytest.approx(_macs(fwd) * 5 / 2)


def test_inplace_update_writes_what_it_updates() -> None:
    node = _node("ApplyAdamWV2", "1024;1024;1024;1024;1", "FLOAT;FLOAT;FLOAT;FLOAT;INT64", "N/A", "N/A")
    assert len(node.outputs) == 3  # param, m, v written back


def test_recorded_block_dim_limits_the_cores() -> None:
    spec = load_device("910B3")
    node = _node("Add", "4096,1024;4096,1024", "DT_BF16;DT_BF16", "4096,1024", "DT_BF16")
    values = basis_values(1, np.array([1]), np.array([1]))
    wide = evaluate_costs([node], spec, values)
    one_core = evaluate_costs([node], spec, values, block_caps=np.array([[20.0, 1.0]]))
    assert wide.block_dim[0, 0] == 40 and one_core.block_dim[0, 0] == 1
    assert one_core.dur[0, 0] > 5 * wide.dur[0, 0]


def test_flash_attention_block_bookkeeping_is_priced_from_the_spec() -> None:
    """The real Qwen3 FlashAttentionScore (held out: block_scalar_cycles comes from the mstt sample) took 883 us, its
    AIC scalar pipe busy 91 %; priced with the per-block scalar cost it lands within 15 %, without it over 20 % fast."""
    types = "DT_BF16;DT_BF16;DT_BF16;DT_BF16;UINT8;DT_BF16;BOOL;INT64;INT64;INT64;INT64;INT64;FLOAT;FLOAT;FLOAT"
    outs, out_types = "1,16,4096,8;1,16,4096,8;;4096,1,2048", "FLOAT;FLOAT;DT_BF16;DT_BF16"
    node = _node("FlashAttentionScore", "4096,1,2048;4096,1,1024;4096,1,1024;;;;2048,2048", types, outs, out_types)
    spec = load_device("910B3").model_copy(update={"clock_ghz": 1.65})  # the sample's cycle counters: 1650 MHz
    values = basis_values(1, np.array([1]), np.array([1]))
    caps = np.array([[20.0, 40.0]])
    with_blocks = evaluate_costs([node], spec, values, block_caps=caps)
    without = evaluate_costs([node], spec.model_copy(update={"block_scalar_cycles": {}}), values, block_caps=caps)
    assert abs(with_blocks.dur[0, 0] / 1e3 - 883.0) / 883.0 < 0.15
    assert without.dur[0, 0] / 1e3 < 0.8 * 883.0
