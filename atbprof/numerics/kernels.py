"""Op kernels in numpy, unfused (the eager op sequence, every op rounding its output) and fused (one kernel:
fp32 inside, one rounding at the end), with the dtype behaviour of the NPU kernels.

Every function takes stored tensors (float32 arrays holding storage-dtype values, float64 for the reference) and
returns stored tensors. Weights of MatMuls are (in, out).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from atbprof.numerics.arith import Arith

Stats = Literal["fp32", "fp16", "welford"]
_STAT_CHUNK = 64  # elements a vector repeat reduces before its partial joins the running statistics


def matmul(x: np.ndarray, w: np.ndarray, a: Arith) -> np.ndarray:
    """MatMulV2: storage-dtype inputs on the cube, fp32 accumulation (float64 for the reference), stored output."""
    return a.st(a.c(x) @ a.c(w))


def add(x: np.ndarray, y: np.ndarray, a: Arith) -> np.ndarray:
    return a.st(a.c(x) + a.c(y))


def _rstd(x: np.ndarray, eps: float, a: Arith) -> np.ndarray:
    ft = a.ft
    var = np.mean(np.square(x, dtype=ft), axis=-1, keepdims=True, dtype=ft)
    return (1.0 / np.sqrt(var + ft(eps))).astype(ft)


def rms_norm_unfused(x: np.ndarray, g: np.ndarray, eps: float, a: Arith) -> np.ndarray:
    """HF LlamaRMSNorm: Cast fp32, Pows, ReduceMean, Adds, Rsqrt, Mul (fp32), Cast to the dtype, Mul by the weight
    in the dtype (two roundings)."""
    x32 = a.c(x)
    y = a.st(x32 * _rstd(x32, eps, a))
    return a.st(y * a.c(g))


def rms_norm_fused(x: np.ndarray, g: np.ndarray, eps: float, a: Arith) -> np.ndarray:
    """RmsNorm kernel (npu_rms_norm): everything in fp32, one rounding."""
    x32 = a.c(x)
    return a.st(x32 * _rstd(x32, eps, a) * a.c(g))


def add_rms_norm_fused(x1: np.ndarray, x2: np.ndarray, g: np.ndarray, eps: float, a: Arith) -> tuple[np.ndarray, ...]:
    """AddRmsNorm (npu_add_rms_norm): the sum stays fp32 for the statistics; outputs (normalised, residual sum)."""
    s = a.c(x1) + a.c(x2)
    return a.st(s * _rstd(s, eps, a) * a.c(g)), a.st(s)


def layer_norm_unfused(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float, a: Arith) -> np.ndarray:
    """Decomposed LayerNorm: Cast, ReduceMean, Sub, Pows, ReduceMean, Adds, Rsqrt, Mul (fp32, two passes), Cast,
    Mul weight, Add bias (in the dtype)."""
    ft = a.ft
    x32 = a.c(x)
    d = x32 - np.mean(x32, axis=-1, keepdims=True, dtype=ft)
    var = np.mean(np.square(d), axis=-1, keepdims=True, dtype=ft)
    y = a.st(d / np.sqrt(var + ft(eps)))
    return a.st(a.st(y * a.c(g)) + a.c(b))


def one_pass_stats(x: np.ndarray, stats: Stats, a: Arith) -> tuple[np.ndarray, np.ndarray]:
    """Mean and variance in one pass over the row, as AddLayerNorm gathers them while it adds (seed 000).

    fp32: sum and sum of squares in fp32 accumulators, var = E[x^2] - E[x]^2 (fine unless |mean| >> std by ~1e3).
    fp16: the same with fp16 accumulators (each chunk's partial of x/n and x^2/n rounded into an fp16 running
    value): E[x^2] - E[x]^2 cancels catastrophically once the mean is large against the spread.
    welford: per-chunk mean and M2 merged with Chan's update in fp32 (no cancellation)."""
    ft = a.ft
    x = a.c(x)
    n = x.shape[-1]
    if a.ref:
        return np.mean(x, axis=-1, keepdims=True), np.var(x, axis=-1, keepdims=True)
    if stats == "fp32":
        mean = np.sum(x, axis=-1, keepdims=True, dtype=ft) / ft(n)
        sq = np.sum(np.square(x), axis=-1, keepdims=True, dtype=ft) / ft(n)
        return mean, np.maximum(sq - np.square(mean), ft(0))
    if stats == "fp16":
        h = Arith("fp16")
        s1 = np.zeros((*x.shape[:-1], 1), ft)
        s2 = np.zeros_like(s1)
        for lo in range(0, n, _STAT_CHUNK):
            chunk = x[..., lo : lo + _STAT_CHUNK] / ft(n)
            s1 = h.st(s1 + h.st(np.sum(chunk, axis=-1, keepdims=True)))
            s2 = h.st(s2 + h.st(np.sum(h.st(chunk * x[..., lo : lo + _STAT_CHUNK]), axis=-1, keepdims=True)))
        return s1, np.maximum(h.st(s2 - h.st(np.square(s1))), ft(0))
    count = np.zeros((*x.shape[:-1], 1), ft)
    mean = np.zeros_like(count)
    m2 = np.zeros_like(count)
    for lo in range(0, n, _STAT_CHUNK):
        chunk = x[..., lo : lo + _STAT_CHUNK]
        k = ft(chunk.shape[-1])
        c_mean = np.mean(chunk, axis=-1, keepdims=True, dtype=ft)
        c_m2 = np.sum(np.square(chunk - c_mean), axis=-1, keepdims=True, dtype=ft)
        total = count + k
        delta = c_mean - mean
        mean = mean + delta * (k / total)
        m2 = m2 + c_m2 + np.square(delta) * (count * k / total)
        count = total
    return mean, m2 / count


def layer_norm_fused(
    x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float, a: Arith, stats: Stats = "fp32"
) -> np.ndarray:
    """LayerNormV3 kernel: one-pass statistics, fp32 inside, one rounding."""
    mean, var = one_pass_stats(x, stats, a)
    ft = a.ft
    return a.st((a.c(x) - mean) / np.sqrt(var + ft(eps)) * a.c(g) + a.c(b))


def add_layer_norm_fused(
    x1: np.ndarray, x2: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float, a: Arith, stats: Stats = "fp32"
) -> tuple[np.ndarray, ...]:
    """AddLayerNorm: statistics gathered in one pass while adding (seed 000); outputs (normalised, residual sum)."""
    s = a.c(x1) + a.c(x2)
    mean, var = one_pass_stats(s, stats, a)
    ft = a.ft
    return a.st((s - mean) / np.sqrt(var + ft(eps)) * a.c(g) + a.c(b)), a.st(s)


def rotate_half(x: np.ndarray) -> np.ndarray:
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope_unfused(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, a: Arith) -> np.ndarray:
    """HF apply_rotary_pos_emb in the dtype: Mul, Slice, Neg, Slice, ConcatD (exact), Mul, Add (three roundings)."""
    return a.st(a.st(a.c(x) * a.c(cos)) + a.st(a.c(rotate_half(x)) * a.c(sin)))


def rope_fused(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, a: Arith) -> np.ndarray:
    """RotaryPositionEmbedding / RotaryMul: fp32 inside, one rounding."""
    return a.st(a.c(x) * a.c(cos) + a.c(rotate_half(x)) * a.c(sin))


def _silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp(-x) -> inf for very negative x gives silu -> -0, as on the device
        return x / (1.0 + np.exp(-x))


def swiglu_unfused(gate: np.ndarray, up: np.ndarray, a: Arith) -> np.ndarray:
    """Swish (fp32 inside, stored) then Mul in the dtype."""
    return a.st(a.st(_silu(a.c(gate))) * a.c(up))


def swiglu_fused(gate: np.ndarray, up: np.ndarray, a: Arith) -> np.ndarray:
    """SwiGlu kernel: silu(gate) * up in fp32, one rounding."""
    return a.st(_silu(a.c(gate)) * a.c(up))


def gelu(x: np.ndarray, a: Arith) -> np.ndarray:
    """Gelu (tanh approximation, fp32 inside) for the GPT architecture."""
    v = a.c(x)
    return a.st(0.5 * v * (1.0 + np.tanh(0.7978845608028654 * (v + 0.044715 * v**3))))
