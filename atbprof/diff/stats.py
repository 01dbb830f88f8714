"""Is a change real? Steps are repeated measurements; a difference gets a confidence interval and a verdict.

- Paired (both sides have the same steps, e.g. two runs of one workload: step k of A and step k of B see the same
  KV length): a t interval on the mean of the per-step differences. Pairing removes the step-to-step trend (the
  KV cache grows every decode step) that would otherwise swamp the noise.
- Unpaired (different step counts, foreign profiles): Welch's t interval on the difference of the means.
- A change is *significant* when the interval excludes zero AND the change is at least the noise threshold
  (relative, default 1 %): deterministic runs have zero-width intervals, so without the threshold a 0.01 %
  difference would count.
- A single measurement per side (TTFT: one prefill step) has no interval; it is significant when it exceeds the
  threshold and three times the per-step noise (relative SD of the paired decode differences). Without such a
  noise estimate one measurement a side is *untestable*: never significant, whatever its size (two ranks of one
  step differ by chance), unless both sides are exact (atbprof runs without jitter: no measurement noise).
- Rows of a diff with one step a side use the repeated instances inside the step: every kernel of a group is a
  sample (layers repeat), compared by Welch's t on the per-instance times (`instances`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95


def t_quantile(df: float, q: float = 0.5 + CONFIDENCE / 2) -> float:
    """Student t quantile (scipy is imported only when a diff needs it: it costs ~0.25 s)."""
    from scipy.special import stdtrit

    return float(stdtrit(df, q))


@dataclass(frozen=True)
class Comparison:
    base: float  # mean of the base samples
    new: float
    delta: float  # new - base (negative = less time)
    delta_pct: float | None  # delta / base, percent; None when base is 0
    ci_low: float | None  # CONFIDENCE interval of delta; None with one sample a side
    ci_high: float | None
    significant: bool
    method: str  # paired-t | welch-t | single | exact | untestable

    @property
    def testable(self) -> bool:
        return self.method != "untestable"

    n_base: int
    n_new: int
    sd_base: float
    sd_new: float


def _pct(delta: float, base: float) -> float | None:
    return 100.0 * delta / base if base else None


def verdict(delta: float, base: float, lo: float | None, hi: float | None, threshold_pct: float) -> bool:
    big = abs(delta) >= abs(base) * threshold_pct / 100.0 and delta != 0.0
    if lo is None or hi is None:
        return big
    return big and (lo > 0.0 or hi < 0.0)


def compare(
    base: np.ndarray,
    new: np.ndarray,
    *,
    paired: bool,
    threshold_pct: float,
    noise_rel_sd: float = 0.0,
    scale: tuple[float, float] | None = None,
    exact: bool = False,
) -> Comparison:
    """Compare two samples (one value per step). `scale=(s_base, s_new)` reports s / mean instead of the mean
    (tokens/s from ms per step) with the interval by the delta method. `noise_rel_sd` judges single samples;
    `exact`: the samples carry no measurement noise (deterministic simulations), so one a side is a fact."""
    base = np.asarray(base, dtype=np.float64)
    new = np.asarray(new, dtype=np.float64)
    nb, nn = len(base), len(new)
    if nb == 0 or nn == 0:
        raise ValueError("compare needs at least one sample a side")
    mb, mn = float(base.mean()), float(new.mean())
    sdb = float(base.std(ddof=1)) if nb > 1 else 0.0
    sdn = float(new.std(ddof=1)) if nn > 1 else 0.0
    if scale is not None:
        sb, sn = scale
        fb, fn = (sb / mb if mb else 0.0), (sn / mn if mn else 0.0)
        # delta method: the influence of each step on f(mean) is f'(mean) * (x - mean)
        gb, gn = (-sb / mb**2 if mb else 0.0), (-sn / mn**2 if mn else 0.0)
        value_b, value_n = fb, fn
        lin_b, lin_n = gb * (base - mb), gn * (new - mn)
        sd_b = float(np.abs(gb) * sdb)
        sd_n = float(np.abs(gn) * sdn)
    else:
        value_b, value_n = mb, mn
        lin_b, lin_n = base - mb, new - mn
        sd_b, sd_n = sdb, sdn
    delta = value_n - value_b
    lo = hi = None
    if paired and nb == nn and nb > 1:
        d = lin_n - lin_b
        se = float(d.std(ddof=1)) / math.sqrt(nb)
        half = t_quantile(nb - 1) * se if se > 0 else 0.0
        lo, hi, method = delta - half, delta + half, "paired-t" if se > 0 else "exact"
    elif nb > 1 and nn > 1:
        vb, vn = float(lin_b.var(ddof=1)) / nb, float(lin_n.var(ddof=1)) / nn
        se = math.sqrt(vb + vn)
        if se > 0:
            df = (vb + vn) ** 2 / ((vb**2 / (nb - 1) if vb else 0.0) + (vn**2 / (nn - 1) if vn else 0.0))
            half = t_quantile(df) * se
            method = "welch-t"
        else:
            half, method = 0.0, "exact"
        lo, hi = delta - half, delta + half
    elif exact:
        method = "exact"
    elif noise_rel_sd > 0:
        method = "single"
    else:
        method = "untestable"
    threshold = threshold_pct
    if method == "single":
        threshold = max(threshold_pct, 300.0 * noise_rel_sd)
    return Comparison(
        base=value_b,
        new=value_n,
        delta=delta,
        delta_pct=_pct(delta, value_b),
        ci_low=lo,
        ci_high=hi,
        significant=method != "untestable" and verdict(delta, value_b, lo, hi, threshold),
        method=method,
        n_base=nb,
        n_new=nn,
        sd_base=sd_b,
        sd_new=sd_n,
    )


def percentiles(values: np.ndarray) -> tuple[float, float, float]:
    """(p10, median, p90) of a per-step distribution."""
    if not len(values):
        return (0.0, 0.0, 0.0)
    p10, p50, p90 = np.percentile(np.asarray(values, dtype=np.float64), [10, 50, 90])
    return float(p10), float(p50), float(p90)
