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

from atbprof.numerics.dtypes import EPS, Dtype, ordered

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


class Prepared:
    """Tensors flattened to float64 once, with their ordered storage-dtype encodings (ULPs) made on first use:
    a probe compares fused, unfused and float64 outputs pairwise and converts each only once."""

    def __init__(self, arrays: Iterable[np.ndarray], dtype: Dtype) -> None:
        self.vals = [np.asarray(a, dtype=np.float64).ravel() for a in arrays]
        self.dtype = dtype
        self._ords: list[np.ndarray] | None = None

    @property
    def ords(self) -> list[np.ndarray]:
        if self._ords is None:
            self._ords = [ordered(v, self.dtype) for v in self.vals]
        return self._ords


def compare(outs: Prepared | Iterable[np.ndarray], refs: Prepared | Iterable[np.ndarray], dtype: Dtype) -> ErrorStats:
    """Compare paired tensors (same shapes); float64 reference values are rounded to `dtype` for the ULPs."""
    po = outs if isinstance(outs, Prepared) else Prepared(outs, dtype)
    pr = refs if isinstance(refs, Prepared) else Prepared(refs, dtype)
    n = nan = inf = 0
    max_abs = max_rel = scaled = 0.0
    ulps: list[np.ndarray] = []
    for o, r, oo, orr in zip(po.vals, pr.vals, po.ords, pr.ords, strict=True):
        u = np.abs(oo - orr)
        ok_o, ok_r = np.isfinite(o), np.isfinite(r)
        if not (ok_o.all() and ok_r.all()):
            nan += int(np.count_nonzero(np.isnan(o) & ok_r))
            inf += int(np.count_nonzero(np.isinf(o) & ok_r))
            both = ok_r & ok_o
            o, r, u = o[both], r[both], u[both]
        n += int(o.size)
        if not o.size:
            continue
        d = np.abs(o - r)
        ar = np.abs(r)
        rms = float(np.sqrt(np.mean(np.square(r))))
        max_abs = max(max_abs, _finite_max(d))
        big = ar >= 0.1 * rms
        if big.any():
            max_rel = max(max_rel, _finite_max(d[big] / ar[big]))
        if rms > 0:
            scaled = max(scaled, _finite_max(d / np.maximum(ar, rms)))
        elif max_abs > 0:
            scaled = float("inf")
        ulps.append(u)
    u = np.concatenate(ulps) if ulps else np.zeros(0, np.int64)
    k = min(u.size - 1, int(np.ceil(0.99 * (u.size - 1)))) if u.size else 0
    return ErrorStats(
        elements=n,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        scaled_err=scaled,
        ulp_mean=float(u.mean()) if u.size else 0.0,
        ulp_p99=float(np.partition(u, k)[k]) if u.size else 0.0,  # the nearest-rank 99th percentile
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
