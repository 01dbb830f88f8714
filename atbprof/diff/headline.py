"""The first screen: per-token latency, TTFT and tokens/s (base -> new), and seed 000's rows per category."""

from __future__ import annotations

import numpy as np

from atbprof.analyze.categories import CATEGORY_NAMES
from atbprof.diff.measure import Side
from atbprof.diff.report import Category, Distribution, Figure, Headline
from atbprof.diff.stats import Comparison, compare, percentiles


def distribution(values: np.ndarray) -> Distribution:
    p10, p50, p90 = percentiles(values)
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    return Distribution(
        n=len(values),
        mean=round(float(np.mean(values)), 4) if len(values) else 0.0,
        sd=round(sd, 4),
        p10=round(p10, 4),
        p50=round(p50, 4),
        p90=round(p90, 4),
    )


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def figure(c: Comparison, unit: str, base: np.ndarray, new: np.ndarray) -> Figure:
    return Figure(
        unit=unit,
        base=round(c.base, 4),
        new=round(c.new, 4),
        delta=round(c.delta, 4),
        delta_pct=_r(c.delta_pct, 2),
        ci_low=_r(c.ci_low),
        ci_high=_r(c.ci_high),
        significant=c.significant,
        method=c.method,
        base_steps=distribution(base),
        new_steps=distribution(new),
    )


def noise(base: Side, new: Side, pairs: np.ndarray) -> float:
    """Relative SD of the paired per-step wall differences: how much a single step's figure moves by chance."""
    if len(pairs) < 3:
        return 0.0
    b, n = base.charges.wall[pairs[:, 0]], new.charges.wall[pairs[:, 1]]
    d = (n - b) - (n - b).mean()
    mean = float(b.mean())
    return float(d.std(ddof=1) / np.sqrt(2) / mean) if mean else 0.0


def headline(base: Side, new: Side, pairs: np.ndarray, scope: str, threshold: float) -> Headline:
    bp = np.array([base.frame_phase[i] for i in pairs[:, 0]], dtype=object)
    in_scope = pairs[(bp == scope)] if scope != "all" else pairs
    rel_noise = noise(base, new, in_scope)
    exact = base.exact and new.exact
    decode = ttft = tps = None
    if len(in_scope):
        b_ms, n_ms = base.charges.wall[in_scope[:, 0]] / 1e6, new.charges.wall[in_scope[:, 1]] / 1e6
        c = compare(b_ms, n_ms, paired=True, threshold_pct=threshold, exact=exact)
        decode = figure(c, "ms", b_ms, n_ms)
        tb = float(base.frame_tokens[in_scope[:, 0]].mean()) * 1e3
        tn = float(new.frame_tokens[in_scope[:, 1]].mean()) * 1e3
        c = compare(b_ms, n_ms, paired=True, threshold_pct=threshold, scale=(tb, tn), exact=exact)
        tps = figure(c, "tokens/s", tb / b_ms, tn / n_ms)
    pre = pairs[bp == "prefill"]
    if len(pre):
        b_ms, n_ms = base.charges.wall[pre[:, 0]] / 1e6, new.charges.wall[pre[:, 1]] / 1e6
        c = compare(b_ms, n_ms, paired=True, threshold_pct=threshold, noise_rel_sd=rel_noise, exact=exact)
        ttft = figure(c, "ms", b_ms, n_ms)
    return Headline(decode_ms_per_token=decode, ttft_ms=ttft, tokens_per_s=tps)


def categories(base: Side, new: Side, scope_pairs: np.ndarray, threshold: float) -> list[Category]:
    """Seed 000's table: each category's charged time per step (frame overhead in `other`), plus the total."""
    if not len(scope_pairs):
        return []
    b = base.frame_category_ns[scope_pairs[:, 0]] / 1e6
    n = new.frame_category_ns[scope_pairs[:, 1]] / 1e6
    rows = []
    columns = [(name, b[:, i], n[:, i]) for i, name in enumerate(CATEGORY_NAMES)]
    columns.append(("per-token total", b.sum(axis=1), n.sum(axis=1)))
    for name, cb, cn in columns:
        if name in ("communication", "memory") and not (cb.any() or cn.any()):
            continue
        c = compare(cb, cn, paired=True, threshold_pct=threshold, exact=base.exact and new.exact)
        rows.append(
            Category(
                name=name,
                base_ms=round(c.base, 4),
                new_ms=round(c.new, 4),
                saved_ms=round(-c.delta, 4),
                delta_pct=_r(c.delta_pct, 2),
                ci_low=_r(c.ci_low),
                ci_high=_r(c.ci_high),
                significant=c.significant,
                base_steps=distribution(cb),
                new_steps=distribution(cn),
            )
        )
    return rows
