"""The LLaMA (or GPT) decoder layer as a sequence of segments, each run unfused, fused or in float64.

A segment is the part of the layer one unfused op group computes (the residual Add, a norm, the Q/K/V
projections, RoPE, the KV-cache write, attention, ...). A path chooses a variant per segment (`Variants`): the
unfused path the eager op sequence everywhere, the fused path what the run's fusion rules put there, the reference
the same algebra in float64. A fused kernel covers a span of segments; comparing its span run fused, unfused and
in float64 from the same inputs gives its error (`probe`). Segment results are memoised by input identity, so
a probe that starts from the inputs a whole-path pass already saw costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from atbprof.graph.dims import ModelDims
from atbprof.numerics import attention as att
from atbprof.numerics import kernels as k
from atbprof.numerics.arith import Arith
from atbprof.numerics.weights import LayerWeights

SEGMENTS = (
    "in_add",
    "attn_norm",
    "qkv",
    "rope",
    "kv_write",
    "attn",
    "o_proj",
    "attn_add",
    "ffn_norm",
    "gate_up",
    "act",
    "down",
)
WRITES = {
    "in_add": ("h",),
    "attn_norm": ("xn",),
    "qkv": ("q", "k", "v"),
    "rope": ("q", "k"),
    "kv_write": ("k_cache", "v_cache"),
    "attn": ("ctx",),
    "o_proj": ("attn_out",),
    "attn_add": ("h1",),
    "ffn_norm": ("fn",),
    "gate_up": ("gate", "up"),
    "act": ("act",),
    "down": ("mlp",),
}
Variants = Mapping[str, str]
"""segment -> variant: "fused" (norms, RoPE, SwiGlu, an Add folded into the next norm), "merged" (QKV, gate/up),
attention "eager" | "flash" | "unguarded"; absent = unfused."""
State = dict[str, np.ndarray]


def span_outputs(span: tuple[str, ...]) -> tuple[str, ...]:
    """What a kernel covering `span` leaves visible: the last segment's outputs, the residual sum of a folded
    Add, the KV cache it writes and the row statistics of fused attention."""
    out = list(WRITES[span[-1]])
    if "in_add" in span:
        out.append("h")
    if "attn_add" in span:
        out.append("h1")
    if "kv_write" in span and span[-1] != "kv_write":
        out += ["k_cache", "v_cache"]
    if "attn" in span:
        out.append("row_sum")
    return tuple(out)


@dataclass
class LayerContext:
    """What a layer needs besides its state: dims, weights, positions, RoPE tables, the rows to evaluate."""

    dims: ModelDims
    weights: LayerWeights
    q_rows: np.ndarray  # rows of this step's tokens whose outputs are computed (all rows feed K and V)
    positions: np.ndarray  # absolute position of every token of this step
    rope_theta: float = 10000.0
    past: Mapping[str, State] = field(default_factory=dict)  # path name -> the KV cache before this step
    add_norm_stats: k.Stats = "fp32"
    memo: dict[tuple[object, ...], State] = field(default_factory=dict)
    keep: list[State] = field(default_factory=list)

    def rope_tables(self, a: Arith, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """HF LlamaRotaryEmbedding: inv_freq and angles in fp32 (float64 for the reference), cast to the dtype."""
        ft = a.ft
        hd = self.dims.head_dim
        inv = (1.0 / (ft(self.rope_theta) ** (np.arange(0, hd, 2, dtype=ft) / ft(hd)))).astype(ft)
        ang = pos.astype(ft)[:, None] * inv[None, :]
        emb = np.concatenate([ang, ang], axis=-1)
        return a.st(np.cos(emb)), a.st(np.sin(emb))


def _norm(x: np.ndarray, which: str, fused: bool, ctx: LayerContext, a: Arith) -> np.ndarray:
    w, eps = ctx.weights.norms, ctx.dims.eps
    if ctx.dims.architecture == "gpt":
        fn = k.layer_norm_fused if fused else k.layer_norm_unfused
        return fn(x, w[which], w[f"{which}_bias"], eps, a)
    return (k.rms_norm_fused if fused else k.rms_norm_unfused)(x, w[which], eps, a)


def _add_norm(x1: np.ndarray, x2: np.ndarray, which: str, ctx: LayerContext, a: Arith) -> tuple[np.ndarray, ...]:
    w, eps = ctx.weights.norms, ctx.dims.eps
    if ctx.dims.architecture == "gpt":
        return k.add_layer_norm_fused(x1, x2, w[which], w[f"{which}_bias"], eps, a, ctx.add_norm_stats)
    return k.add_rms_norm_fused(x1, x2, w[which], eps, a)


def _heads(x: np.ndarray, n: int) -> np.ndarray:
    return x.reshape(x.shape[0], n, -1).transpose(1, 0, 2)


def seg_in_add(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    if "h_in" in s:
        return {"h": s["h_in"]}
    if v == "fused":
        return {}  # folded into the norm (AddRmsNorm)
    return {"h": k.add(s["resid"], s["delta"], a)}


def seg_attn_norm(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    if "h" not in s:
        xn, h = _add_norm(s["resid"], s["delta"], "attn_norm", ctx, a)
        return {"xn": xn, "h": h}
    return {"xn": _norm(s["h"], "attn_norm", v == "fused", ctx, a)}


def seg_qkv(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    w, xn, rows = ctx.weights, s["xn"], ctx.q_rows
    nq = ctx.dims.heads * ctx.dims.head_dim
    if v == "merged":
        q = k.matmul(xn[rows], w.cat(("q", "k", "v"), a), a)[:, :nq]
        kv = k.matmul(xn, w.cat(("k", "v"), a), a)
        key, val = np.split(kv, 2, axis=1)
    else:
        q = k.matmul(xn[rows], w.w("q", a), a)
        key, val = k.matmul(xn, w.w("k", a), a), k.matmul(xn, w.w("v", a), a)
    d = ctx.dims
    return {"q": _heads(q, d.heads), "k": _heads(key, d.kv_heads), "v": _heads(val, d.kv_heads)}


def seg_rope(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    if ctx.dims.architecture == "gpt":
        return {}
    cos, sin = ctx.rope_tables(a, ctx.positions)
    fn = k.rope_fused if v == "fused" else k.rope_unfused
    qr = ctx.q_rows
    return {"q": fn(s["q"], cos[qr], sin[qr], a), "k": fn(s["k"], cos, sin, a)}


def seg_kv_write(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    past = ctx.past.get(v)  # v: the path whose cache this step extends
    if not past:
        return {"k_cache": s["k"], "v_cache": s["v"]}
    return {
        "k_cache": np.concatenate([past["k_cache"], a.c(s["k"])], axis=1),
        "v_cache": np.concatenate([past["v_cache"], a.c(s["v"])], axis=1),
    }


def seg_attn(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    fn = {"eager": att.eager, "flash": att.flash, "unguarded": att.unguarded}[v or "eager"]
    q_pos = ctx.positions[ctx.q_rows]
    out = fn(s["q"], s["k_cache"], s["v_cache"], q_pos, a)
    ctx_rows = out["out"].transpose(1, 0, 2).reshape(len(q_pos), -1)
    return {"ctx": ctx_rows, **({"row_sum": out["row_sum"]} if "row_sum" in out else {})}


def seg_o_proj(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    return {"attn_out": k.matmul(s["ctx"], ctx.weights.w("o", a), a)}


def seg_attn_add(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    if v == "fused":
        return {}
    return {"h1": k.add(s["h"][ctx.q_rows], s["attn_out"], a)}


def seg_ffn_norm(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    if "h1" not in s:
        fn, h1 = _add_norm(s["h"][ctx.q_rows], s["attn_out"], "ffn_norm", ctx, a)
        return {"fn": fn, "h1": h1}
    return {"fn": _norm(s["h1"], "ffn_norm", v == "fused", ctx, a)}


def seg_gate_up(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    w, x = ctx.weights, s["fn"]
    if ctx.dims.architecture == "gpt":
        return {"up": k.matmul(x, w.w("up", a), a)}
    if v == "merged":
        gate, up = np.split(k.matmul(x, w.cat(("gate", "up"), a), a), 2, axis=1)
        return {"gate": gate, "up": up}
    return {"gate": k.matmul(x, w.w("gate", a), a), "up": k.matmul(x, w.w("up", a), a)}


def seg_act(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    if ctx.dims.architecture == "gpt":
        return {"act": k.gelu(s["up"], a)}
    fn = k.swiglu_fused if v == "fused" else k.swiglu_unfused
    return {"act": fn(s["gate"], s["up"], a)}


def seg_down(s: State, v: str, ctx: LayerContext, a: Arith) -> State:
    return {"mlp": k.matmul(s["act"], ctx.weights.w("down", a), a)}


RUN: dict[str, Callable[[State, str, LayerContext, Arith], State]] = {
    "in_add": seg_in_add,
    "attn_norm": seg_attn_norm,
    "qkv": seg_qkv,
    "rope": seg_rope,
    "kv_write": seg_kv_write,
    "attn": seg_attn,
    "o_proj": seg_o_proj,
    "attn_add": seg_attn_add,
    "ffn_norm": seg_ffn_norm,
    "gate_up": seg_gate_up,
    "act": seg_act,
    "down": seg_down,
}


def run_segments(
    state: State,
    segments: tuple[str, ...],
    variants: Variants,
    ctx: LayerContext,
    a: Arith,
    path: str,
    store: bool = True,
) -> State:
    """Run `segments` from `state` (not modified); returns the new state. `path` names whose KV cache to extend.
    `store=False`: look results up but do not keep new ones (a probe's one-off runs)."""
    s = dict(state)
    for seg in segments:
        v = variants.get(seg, "")
        key = (seg, v, a.name, path, tuple(sorted((name, id(arr)) for name, arr in s.items())))
        out = ctx.memo.get(key)
        if out is None:
            out = RUN[seg](s, path if seg == "kv_write" else v, ctx, a)
            if store:
                ctx.memo[key] = out
                ctx.keep.append(dict(s))  # keep the inputs alive: the key holds their ids
        s.update(out)
    return s


ROW_AXIS = {"h_in": 0, "resid": 0, "delta": 0, "h": 0, "xn": 0, "k": 1, "v": 1}
"""Tensors that hold every token of the step (K and V need them all); the others hold the query rows only."""
CACHES = ("k_cache", "v_cache")


def query_rows_of(name: str, arr: np.ndarray, ctx: LayerContext) -> np.ndarray:
    """The query rows of an output (errors are measured where the layer's outputs are computed)."""
    if name in CACHES:
        return arr[:, ctx.positions[ctx.q_rows]]
    axis = ROW_AXIS.get(name)
    if axis is None or arr.shape[axis] == len(ctx.q_rows):
        return arr
    return arr[ctx.q_rows] if axis == 0 else arr[:, ctx.q_rows]


def narrow(state: State, ctx: LayerContext) -> tuple[State, LayerContext]:
    """State and context restricted to the query rows, for spans that do not need every row's K and V."""
    small = LayerContext(
        ctx.dims,
        ctx.weights,
        np.arange(len(ctx.q_rows)),
        ctx.positions[ctx.q_rows],
        ctx.rope_theta,
        add_norm_stats=ctx.add_norm_stats,
    )
    out = {n: query_rows_of(n, arr, ctx) for n, arr in state.items() if n not in CACHES}
    return out, small
