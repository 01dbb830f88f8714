"""Linear expressions over the per-step variables, so one graph describes every step.

A step processes `Sq` new tokens per sequence for `B` sequences against a KV cache of `Skv` tokens (including the
new ones). Eager attention attends over `L` cache positions: `Skv`, or the whole allocated cache when the cache
has a fixed size (TorchAir's fixed KV cache: decode attention runs over max_position_embeddings, masked);
FlashAttention kernels take the actual lengths and attend over `Skv`. Every size in the graph is a linear
combination of the monomials in `BASIS`; evaluating the graph for all steps at once is then one matrix product.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

BASIS = ("one", "B", "Sq", "Skv", "T", "BKV", "TKV", "L", "BL", "TL", "TQ", "A")
"""one, batch, query tokens per sequence, KV length, T = B*Sq, BKV = B*Skv, TKV = B*Sq*Skv, L = attended cache
length, BL = B*L, TL = B*Sq*L, TQ = B*Sq*Sq (causal attention's triangle), A = the experts of a MoE layer that
receive a token this step (in 1/EXPERT_SCALE)."""
EXPERT_SCALE = 1000
"""`A` counts active experts in thousandths, so that every basis value stays an exact int64."""
ACTUAL_LENGTHS = {
    BASIS.index("L"): BASIS.index("Skv"),
    BASIS.index("BL"): BASIS.index("BKV"),
    BASIS.index("TL"): BASIS.index("TKV"),
}
"""Attended-length monomials -> actual-length ones (a kernel given actual sequence lengths)."""


_SQ, _SKV, _T, _TKV, _TQ = (BASIS.index(n) for n in ("Sq", "Skv", "T", "TKV", "TQ"))


class Lin:
    """An immutable linear expression sum(c_k * BASIS[k])."""

    __slots__ = ("coef",)

    def __init__(self, coef: np.ndarray | None = None, **terms: float) -> None:
        c = np.zeros(len(BASIS)) if coef is None else np.asarray(coef, dtype=np.float64).copy()
        for name, value in terms.items():
            c[BASIS.index(name)] += value
        c.flags.writeable = False
        self.coef = c

    def __add__(self, other: Lin | float) -> Lin:
        if isinstance(other, Lin):
            return Lin(self.coef + other.coef)
        return Lin(self.coef + np.eye(len(BASIS))[0] * other)

    __radd__ = __add__

    def __mul__(self, k: float) -> Lin:
        return Lin(self.coef * k)

    __rmul__ = __mul__

    def key(self) -> tuple[float, ...]:
        return tuple(self.coef.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Lin) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        terms = [f"{c:g}*{n}" if n != "one" else f"{c:g}" for n, c in zip(BASIS, self.coef, strict=True) if c]
        return " + ".join(terms) or "0"

    def is_constant(self) -> bool:
        return not self.coef[1:].any()

    def at_actual_lengths(self) -> Lin:
        """This expression with the attended cache length replaced by the actual KV length."""
        c = self.coef.copy()
        for src, dst in ACTUAL_LENGTHS.items():
            c[dst] += c[src]
            c[src] = 0.0
        return Lin(c)

    def causal_length(self) -> Lin:
        """A dimension that is the KV length (a GEMM's N or K over the keys), attended causally: each of the Sq new
        tokens sees the Skv - Sq cached positions, itself and the new tokens before it, Skv - (Sq - 1) / 2
        positions on average (Skv in decode, where Sq is 1)."""
        c = self.coef.copy()
        kv = c[_SKV]
        c[_SQ] -= kv / 2
        c[0] += kv / 2
        return Lin(c)

    def causal_pairs(self) -> Lin:
        """A size counted per (new token, KV position) pair, B Sq Skv, over the causal pairs only: B Sq Skv -
        B Sq (Sq - 1) / 2."""
        c = self.coef.copy()
        pairs = c[_TKV]
        c[_TQ] -= pairs / 2
        c[_T] += pairs / 2
        return Lin(c)

    def at(self, env: Mapping[str, float]) -> float:
        return float(sum(c * env[n] for n, c in zip(BASIS, self.coef, strict=True) if c))


ONE = Lin(one=1)
ZERO = Lin()
B = Lin(B=1)
SQ = Lin(Sq=1)
SKV = Lin(Skv=1)
T = Lin(T=1)
BKV = Lin(BKV=1)
TKV = Lin(TKV=1)
KVL = Lin(L=1)
BL = Lin(BL=1)
TL = Lin(TL=1)


def active_experts(experts: int, per_token: int, tokens: np.ndarray) -> np.ndarray:
    """Expected experts of `experts` that at least one of `tokens` tokens is routed to, each token choosing
    `per_token` distinct experts uniformly: E (1 - (1 - k/E)^T). A router is not uniform; this is the balanced load
    MoE training aims for (an auxiliary load-balancing loss)."""
    if experts <= 0:
        return np.zeros(np.shape(tokens))
    miss = 1.0 - min(per_token, experts) / experts
    return experts * (1.0 - np.power(miss, np.asarray(tokens, dtype=np.float64)))


def basis_values(
    batch: int,
    sq: np.ndarray,
    skv: np.ndarray,
    attend: np.ndarray | None = None,
    experts: tuple[int, int] = (0, 0),
) -> np.ndarray:
    """Values of BASIS for each step: shape (len(BASIS), steps), int64 (sizes stay exact); `attend`: the cache
    length eager attention runs over (default: the KV length); `experts`: a MoE model's (experts, experts per
    token), for `A`."""
    sq = np.asarray(sq, dtype=np.int64)
    skv = np.asarray(skv, dtype=np.int64)
    att = skv if attend is None else np.asarray(attend, dtype=np.int64)
    one = np.ones_like(sq)
    active = np.rint(active_experts(experts[0], experts[1], batch * sq) * EXPERT_SCALE).astype(np.int64)
    return np.stack(
        [
            one,
            one * batch,
            sq,
            skv,
            batch * sq,
            batch * skv,
            batch * sq * skv,
            att,
            batch * att,
            batch * sq * att,
            batch * sq * sq,
            active,
        ]
    )


def evaluate(exprs: list[Lin], values: np.ndarray) -> np.ndarray:
    """(len(exprs), steps) float64 values of the expressions at each step."""
    if not exprs:
        return np.zeros((0, values.shape[1]))
    return np.stack([e.coef for e in exprs]) @ values.astype(np.float64)
