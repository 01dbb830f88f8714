"""Attention kernels at LLaMA-2-7B head dimensions: the fused softmax without a running max overflows in fp16
once a row sees enough keys (seed 002); FlashAttention's running max keeps it finite."""

from __future__ import annotations

import numpy as np
import pytest

from atbprof.numerics import attention as att
from atbprof.numerics.arith import REF, Arith
from atbprof.numerics.dtypes import store
from tests.numerics.helpers import scaled_err

F16 = Arith("fp16")
HEADS, D = 8, 128  # 7B's head_dim; a subset of its 32 heads


def _qkv(keys: int, rows: int, logit_std: float = 2.0) -> tuple[np.ndarray, ...]:
    """Gaussian logits q.k/sqrt(d) of std `logit_std`: the fp16 row sum of exp(s) averages keys x e^(std^2 / 2),
    ~60k at 8192 keys for std 2 (65504 is the fp16 maximum), ~7.6k at 1024."""
    rng = np.random.default_rng(7)
    s = np.sqrt(logit_std)
    q = store(s * rng.standard_normal((HEADS, rows, D), np.float32), "fp16")
    k = store(s * rng.standard_normal((HEADS, keys, D), np.float32), "fp16")
    v = store(rng.standard_normal((HEADS, keys, D), np.float32), "fp16")
    return q, k, v, np.linspace(0, keys - 1, rows).round().astype(np.int64)


@pytest.mark.parametrize("keys", [512, 1024])
def test_unguarded_softmax_is_aligned_below_the_limit(keys: int) -> None:
    q, k, v, pos = _qkv(keys, 32)
    ref = att.eager(q, k, v, pos, REF)["out"]
    fused = att.unguarded(q, k, v, pos, F16)
    eager = att.eager(q, k, v, pos, F16)["out"]
    assert np.isfinite(fused["out"]).all() and np.isfinite(fused["row_sum"]).all()
    assert scaled_err(fused["out"], ref) <= 2 * scaled_err(eager, ref)


def test_unguarded_softmax_breaks_beyond_the_limit_flash_does_not() -> None:
    q, k, v, pos = _qkv(8192, 16)
    fused = att.unguarded(q, k, v, pos, F16)
    long_rows = pos > 6000
    # the fp16 row sum of exp(s) passed 65504 on long rows: Inf, and the context collapsed to 0 (or NaN)
    assert np.isinf(fused["row_sum"][:, long_rows]).any()
    assert not np.isinf(fused["row_sum"][:, pos < 1024]).any()
    flash = att.flash(q, k, v, pos, F16)
    ref = att.eager(q, k, v, pos, REF)["out"]
    assert np.isfinite(flash["out"]).all() and np.isfinite(flash["row_sum"]).all()
    assert scaled_err(flash["out"], ref) < 4e-3


def test_flash_equals_eager_in_float64_with_gqa() -> None:
    rng = np.random.default_rng(8)
    q = rng.standard_normal((8, 5, 16))
    k, v = rng.standard_normal((2, 300, 16)), rng.standard_normal((2, 300, 16))
    pos = np.array([0, 10, 128, 200, 299])
    assert np.allclose(att.flash(q, k, v, pos, REF)["out"], att.eager(q, k, v, pos, REF)["out"], atol=1e-12)
