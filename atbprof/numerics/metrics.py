"""Error metrics of one output against another and the verdict rule.

`scaled error` = max over elements of |out - ref| / max(|ref|, rms(ref)): the relative error, with the tensor's
RMS as the floor so values near zero (where any rounding is a huge relative error) do not dominate. Storage
rounding alone gives at most half an ULP: 2^-11 = 4.9e-4 in fp16, 2^-8 = 3.9e-3 in bf16.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from atbprof.numerics.dtypes import EPS, Dtype, ulp_distance

Verdict = Literal["aligned", "degraded", "broken"]
RANK = {"aligned": 0, "degraded": 1, "broken": 2}


class ErrorStats(BaseModel):
    """Errors of `out` against `ref` over every compared element (all output tensors together)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    elements: int
    max_abs_err: float
    max_rel_err: float  # |out - ref| / |ref| over elements with |ref| >= 0.1 rms(ref)
    scaled_err: float
    ulp_mean: float  # ULP distance in the storage dtype (finite elements)
    ulp_p99: float
    ulp_max: int
    nan: int  # NaN / Inf in `out` where `ref` is finite
    inf: int


def _finite_max(x: np.ndarray) -> float:
    return float(x.max()) if x.size else 0.0


def compare(outs: Iterable[np.ndarray], refs: Iterable[np.ndarray], dtype: Dtype) -> ErrorStats:
    """Compare paired tensors (same shapes); float64 reference values are rounded to `dtype` for the ULPs."""
    n = nan = inf = 0
    max_abs = max_rel = scaled = 0.0
    ulps: list[np.ndarray] = []
    for out, ref in zip(outs, refs, strict=True):
        o = np.asarray(out, dtype=np.float64).ravel()
        r = np.asarray(ref, dtype=np.float64).ravel()
        ok_ref = np.isfinite(r)
        nan += int(np.count_nonzero(np.isnan(o) & ok_ref))
        inf += int(np.count_nonzero(np.isinf(o) & ok_ref))
        both = ok_ref & np.isfinite(o)
        o, r = o[both], r[both]
        n += int(o.size)
        if not o.size:
            continue
        d = np.abs(o - r)
        rms = float(np.sqrt(np.mean(np.square(r))))
        max_abs = max(max_abs, _finite_max(d))
        big = np.abs(r) >= 0.1 * rms
        if big.any():
            max_rel = max(max_rel, _finite_max(d[big] / np.abs(r[big])))
        if rms > 0:
            scaled = max(scaled, _finite_max(d / np.maximum(np.abs(r), rms)))
        elif max_abs > 0:
            scaled = float("inf")
        ulps.append(ulp_distance(o.astype(np.float32), r.astype(np.float32), dtype))
    u = np.concatenate(ulps) if ulps else np.zeros(0, np.int64)
    return ErrorStats(
        elements=n,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        scaled_err=scaled,
        ulp_mean=float(u.mean()) if u.size else 0.0,
        ulp_p99=float(np.percentile(u, 99)) if u.size else 0.0,
        ulp_max=int(u.max()) if u.size else 0,
        nan=nan,
        inf=inf,
    )


def nonfinite(arrays: Mapping[str, np.ndarray]) -> int:
    return sum(int(np.count_nonzero(~np.isfinite(a))) for a in arrays.values())


class Tolerance(BaseModel):
    """aligned: finite, and the fused scaled error vs float64 <= max(ratio x the unfused one, floor_ulp x eps/2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ratio: float
    floor_ulp: float
    floor: float  # floor_ulp half-ULPs of the dtype, as a scaled error

    @classmethod
    def of(cls, ratio: float, floor_ulp: float, dtype: Dtype) -> Tolerance:
        return cls(ratio=ratio, floor_ulp=floor_ulp, floor=floor_ulp * EPS[dtype] / 2)

    def limit(self, unfused_err: float) -> float:
        return max(self.ratio * unfused_err, self.floor)

    def describe(self) -> str:
        return (
            f"aligned = no NaN/Inf and scaled error vs float64 <= max({self.ratio:g} x the unfused sequence's, "
            f"{self.floor:.2e} = {self.floor_ulp:g} half-ULPs); degraded = finite but above; broken = NaN/Inf"
        )


def verdict(fused: ErrorStats, unfused: ErrorStats, extra_nonfinite: int, tol: Tolerance) -> tuple[Verdict, str]:
    """The verdict and why, in words a user can act on."""
    bad = fused.nan + fused.inf + extra_nonfinite
    if bad:
        return "broken", f"{bad} NaN/Inf values in the fused kernel's outputs (the unfused sequence is finite)"
    limit = tol.limit(unfused.scaled_err)
    if fused.scaled_err <= limit:
        return "aligned", f"scaled error {fused.scaled_err:.2e} <= {limit:.2e}"
    return "degraded", f"scaled error {fused.scaled_err:.2e} > {limit:.2e} (unfused: {unfused.scaled_err:.2e})"


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    return max(verdicts, key=lambda v: RANK[v], default="aligned")
