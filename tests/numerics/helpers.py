"""Tiny model dimensions and a one-layer runner for the numerics tests."""

from __future__ import annotations

import numpy as np

from atbprof.graph.dims import ModelDims
from atbprof.numerics.arith import REF, Arith
from atbprof.numerics.dtypes import Dtype
from atbprof.numerics.executor import SEGMENTS, LayerContext, State, Variants, run_segments
from atbprof.numerics.runner import run_out
from atbprof.numerics.weights import LayerWeights


def tiny_dims(kv_heads: int = 4, arch: str = "llama") -> ModelDims:
    return ModelDims("tiny", arch, 64, 160, 4, kv_heads, 1, 256, 1e-5, "fp16")


def run_layer(
    d: ModelDims, w: LayerWeights, x: np.ndarray, x_dec: np.ndarray, a: Arith, variants: Variants | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Prefill over x (tokens, hidden), then one decode step of x_dec (1, hidden) over the prefill's KV cache."""
    variants = variants or {}
    p = len(x)
    ctx = LayerContext(d, w, np.arange(p), np.arange(p))
    pre = run_segments({"h_in": a.st(x)}, SEGMENTS, variants, ctx, a, "path")
    past: dict[str, State] = {"path": {"k_cache": pre["k_cache"], "v_cache": pre["v_cache"]}}
    dctx = LayerContext(d, w, np.arange(1), np.array([p]), past=past)
    dec = run_segments({"h_in": a.st(x_dec)}, SEGMENTS, variants, dctx, a, "path")
    return run_out(pre, a), run_out(dec, a)


def ref_layer(d: ModelDims, w: LayerWeights, x: np.ndarray, x_dec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return run_layer(d, w, x, x_dec, REF)


def scaled_err(out: np.ndarray, ref: np.ndarray) -> float:
    o, r = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    rms = np.sqrt(np.mean(r**2))
    return float(np.max(np.abs(o - r) / np.maximum(np.abs(r), rms)))


__all__ = ["Dtype", "ref_layer", "run_layer", "scaled_err", "tiny_dims"]
