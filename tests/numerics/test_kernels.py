"""Op kernels: storage rounding, ULP distances, fused vs unfused norms, AddLayerNorm's one-pass statistics."""

from __future__ import annotations

import numpy as np
import pytest

from atbprof.numerics import kernels as k
from atbprof.numerics.arith import REF, Arith
from atbprof.numerics.dtypes import store, to_bf16, ulp_distance
from tests.numerics.helpers import scaled_err

F16 = Arith("fp16")


def test_bf16_rounding_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(200_000).astype(np.float32) * 1e3
    x[:4] = [np.inf, -np.inf, 3.0e38, -0.0]
    assert np.array_equal(to_bf16(x), torch.from_numpy(x).bfloat16().float().numpy())


def test_fp16_overflow_and_ulps() -> None:
    assert np.isinf(store(np.float32([70000.0]), "fp16"))[0]
    a = np.float32([1.0, -1.0, 0.0, 65504.0])
    b = np.float32([1.0 + 2**-10, 1.0, -0.0, 65504.0])
    # adjacent values 1 apart; -1 to 1 crosses 2 x 15360 representable values; -0 == +0
    assert ulp_distance(a, b, "fp16").tolist() == [1, 30720, 0, 0]
    assert ulp_distance(np.float32([1.0]), np.float32([1.0 + 2**-7]), "bf16").tolist() == [1]


def test_fused_rms_norm_rounds_once() -> None:
    rng = np.random.default_rng(3)
    x = store(rng.standard_normal((64, 4096), np.float32), "fp16")
    g = store(1 + 0.1 * rng.standard_normal(4096, np.float32), "fp16")
    ref = k.rms_norm_fused(x, g, 1e-5, REF)
    fused, unfused = k.rms_norm_fused(x, g, 1e-5, F16), k.rms_norm_unfused(x, g, 1e-5, F16)
    assert scaled_err(fused, ref) <= 2**-11 * 1.01  # one rounding: half an ULP
    assert scaled_err(unfused, ref) > scaled_err(fused, ref)  # the Cast before the weight Mul rounds twice


def _large_mean(mean: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    x1 = store(mean + rng.standard_normal((32, 4096), np.float32), "fp16")
    x2 = store(0.25 * rng.standard_normal((32, 4096), np.float32), "fp16")
    return x1, x2


def test_add_layer_norm_one_pass_fp16_loses_accuracy_on_a_large_mean() -> None:
    """Seed 000's AddLayerNorm gathers sum and sum of squares while it adds. With fp16 accumulators,
    var = E[x^2] - E[x]^2 cancels catastrophically when |mean| >> std; fp32 accumulators and Welford do not."""
    x1, x2 = _large_mean(40.0)
    g, b = np.ones(4096, np.float32), np.zeros(4096, np.float32)
    ref, _ = k.add_layer_norm_fused(x1, x2, g, b, 1e-5, REF)
    err = {
        s: scaled_err(k.add_layer_norm_fused(x1, x2, g, b, 1e-5, F16, s)[0], ref) for s in ("fp16", "fp32", "welford")
    }
    assert err["fp32"] < 2e-3 and err["welford"] < 2e-3  # a few half-ULPs of fp16
    assert err["fp16"] > 0.1  # the variance lost: outputs off by more than 10 %
    # zero-mean input: the naive fp16 statistics are fine, the failure is the cancellation
    y1, y2 = _large_mean(0.0)
    ref0, _ = k.add_layer_norm_fused(y1, y2, g, b, 1e-5, REF)
    assert scaled_err(k.add_layer_norm_fused(y1, y2, g, b, 1e-5, F16, "fp16")[0], ref0) < 0.05


def test_unfused_and_fused_swiglu_rope_agree_with_float64() -> None:
    rng = np.random.default_rng(5)
    gate, up = (store(rng.standard_normal((16, 512), np.float32) * 3, "fp16") for _ in range(2))
    ref = k.swiglu_fused(gate, up, REF)
    assert scaled_err(k.swiglu_fused(gate, up, F16), ref) <= 2**-11 * 1.01
    assert scaled_err(k.swiglu_unfused(gate, up, F16), ref) <= 2 * 2**-11 * 1.01
    x = store(rng.standard_normal((4, 16, 128), np.float32), "fp16")
    ang = np.arange(16)[:, None] * 0.1 * np.arange(1, 129)[None, :]
    cos, sin = store(np.cos(ang), "fp16"), store(np.sin(ang), "fp16")
    ref = k.rope_fused(x, cos, sin, REF)
    assert scaled_err(k.rope_fused(x, cos, sin, F16), ref) < scaled_err(k.rope_unfused(x, cos, sin, F16), ref)
