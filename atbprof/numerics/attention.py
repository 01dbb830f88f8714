"""Attention, three ways: the eager op sequence, FlashAttention (running max, rescaling: guarded) and the fused
attention-softmax kernel without a running max (seed 002: NaN on long sequences).

Shapes: q (H, Sq, D), k and v (Hkv, Skv, D) (GQA: head h reads kv head h // (H / Hkv)); `q_pos` are the absolute
positions of the query rows (causal: a row sees keys 0..pos). Returns the context (H, Sq, D) and, for the fused
kernels, their row statistics (the softmax denominators they keep, in the dtype they keep them).
"""

from __future__ import annotations

import numpy as np

from atbprof.numerics.arith import Arith

KV_TILE = 128  # keys per tile of the fused kernels (seed 002: flash_attention_tile_size: 128)


def _expand(kv: np.ndarray, heads: int) -> np.ndarray:
    """repeat_kv: the GQA groups as views (no copy)."""
    group = heads // kv.shape[0]
    return np.repeat(kv, group, axis=0) if group > 1 else kv


def _allowed(q_pos: np.ndarray, skv: int) -> np.ndarray:
    return np.arange(skv)[None, :] <= q_pos[:, None]  # (Sq, Skv)


def eager(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, a: Arith) -> dict[str, np.ndarray]:
    """HF eager attention: BatchMatMul (stored), Mul by 1/sqrt(d) (stored), Add the mask (stored), Cast fp32,
    SoftmaxV2 (fp32, max-subtracted), Cast, BatchMatMul (stored), Transpose."""
    heads, skv, d = q.shape[0], k.shape[1], q.shape[2]
    k, v = _expand(k, heads), _expand(v, heads)
    allowed = _allowed(q_pos, skv)
    out = np.empty(q.shape, dtype=a.ft)
    scale = a.ft(d**-0.5)
    for h in range(heads):  # one head at a time keeps the (Sq, Skv) scores small
        s = a.st(a.c(q[h]) @ a.c(k[h]).T)
        s = a.st(s * scale)
        s = a.st(np.where(allowed, s, s + a.ft(a.mask_min)))
        s = s.astype(a.ft if a.ref else np.float32)
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p = a.st(p / p.sum(axis=-1, keepdims=True))
        out[h] = a.st(p @ a.c(v[h]))
    return {"out": out}


def flash(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, a: Arith) -> dict[str, np.ndarray]:
    """PromptFlashAttention / IncreFlashAttention: per KV tile, fp32 scores, running max m and sum l (fp32),
    P cast to the dtype for the second cube matmul, the accumulator rescaled by exp(m_old - m_new)."""
    heads, sq, d = q.shape
    skv = k.shape[1]
    ft = a.ft
    k, v = _expand(k, heads), _expand(v, heads)
    qc = a.c(q) * ft(d**-0.5)
    m = np.full((heads, sq, 1), -np.inf, ft)
    l_sum = np.zeros((heads, sq, 1), ft)
    acc = np.zeros((heads, sq, d), ft)
    for lo in range(0, int(min(skv, q_pos.max() + 1)), KV_TILE):
        hi = min(lo + KV_TILE, skv)
        s = qc @ a.c(k[:, lo:hi]).transpose(0, 2, 1)
        s = np.where(_allowed(q_pos, skv)[None, :, lo:hi], s, ft(-np.inf))
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        safe = np.where(np.isneginf(m_new), ft(0), m_new)  # rows with no visible key yet
        p = np.exp(s - safe)
        alpha = np.exp(m - safe)
        l_sum = l_sum * alpha + p.sum(axis=-1, keepdims=True, dtype=ft)
        acc = acc * alpha + a.st(p) @ a.c(v[:, lo:hi])
        m = m_new
    return {"out": a.st(acc / l_sum), "row_sum": l_sum}


def unguarded(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, a: Arith) -> dict[str, np.ndarray]:
    """FusedAttentionSoftmax (attention_softmax rule): the eager sequence in one kernel without the max
    subtraction and without the Cast to fp32: exp(s) in the dtype, the row sum kept in the dtype (a running sum
    over KV tiles), P = exp(s) * (1 / sum). In fp16 the sum passes 65504 once a row sees enough keys -> Inf,
    1/Inf = 0 and exp(s) * 0 = 0 (or NaN where exp(s) itself overflowed): the context collapses."""
    heads, sq, d = q.shape
    skv = k.shape[1]
    ft = a.ft
    k, v = _expand(k, heads), _expand(v, heads)
    allowed = _allowed(q_pos, skv)
    out = np.empty(q.shape, dtype=ft)
    row_sum = np.empty((heads, sq, 1), dtype=ft)
    scale = ft(d**-0.5)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for h in range(heads):
            s = a.st(a.c(q[h]) @ a.c(k[h]).T)
            s = a.st(s * scale)
            s = a.st(np.where(allowed, s, s + ft(a.mask_min)))
            e = a.st(np.exp(s))
            total = np.zeros((sq, 1), ft)
            for lo in range(0, skv, KV_TILE):
                total = a.st(total + a.st(e[:, lo : lo + KV_TILE].sum(axis=-1, keepdims=True, dtype=ft)))
            p = a.st(e * a.st(ft(1) / total))
            out[h] = a.st(p @ a.c(v[h]))
            row_sum[h] = total
    return {"out": out, "row_sum": row_sum}
