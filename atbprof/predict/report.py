"""Measured vs predicted, per op type and overall: the figures of `atbprof predict` (pure: prices in, report out)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from atbprof.device.spec import DeviceSpec

PREDICT_SCHEMA_VERSION = "1"


@dataclass(frozen=True)
class Accuracy:
    """Error figures over a set of kernels. Times in µs; errors as fractions (0.12 = 12 %)."""

    kernels: int
    priced_kernels: int
    measured_us: float  # all kernels of the set
    priced_measured_us: float  # the priced ones
    predicted_us: float  # the priced ones
    time_weighted_error: float | None  # sum |pred - meas| / sum meas over priced kernels
    signed_error: float | None  # (sum pred - sum meas) / sum meas: negative = the model is too fast
    median_abs_pct_error: float | None
    p90_abs_pct_error: float | None


@dataclass(frozen=True)
class OpTypeAccuracy:
    op_type: str
    accuracy: Accuracy
    family: str = "other"
    provenance: str | None = None  # the kind that priced most of its predicted time (published, fitted, ...)
    parameters: str | None = None  # the parameters of those kernels, ';'-separated


@dataclass(frozen=True)
class Breakdown:
    """Error figures of one set of predictions per training pass (forward, backward, optimizer: all three, empty
    ones with no kernels) and per kernel family (those with kernels, in FAMILIES order)."""

    by_pass: dict[str, Accuracy]
    families: list[tuple[str, Accuracy]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "by_pass": {name: asdict(acc) for name, acc in self.by_pass.items()},
            "families": [{"family": name, **asdict(acc)} for name, acc in self.families],
        }


Labels = tuple[np.ndarray, list[str]]
"""A string column as (code per row, -1 for null; the distinct values): analyze/view.py `dict_codes`."""


def _rows_of(labels: Labels, name: str) -> np.ndarray:
    codes, names = labels
    return codes == names.index(name) if name in names else np.zeros(len(codes), dtype=bool)


def breakdown(measured_ns: np.ndarray, predicted_ns: np.ndarray, passes: Labels, families: Labels) -> Breakdown:
    """`passes` and `families` per kernel; NaN predictions are unpriced kernels."""
    from atbprof.predict.passes import PASSES
    from atbprof.predict.recipes import FAMILIES

    def of(rows: np.ndarray) -> Accuracy:
        return accuracy(measured_ns[rows], predicted_ns[rows])

    by_pass = {name: of(_rows_of(passes, name)) for name in PASSES}
    fams = [(f, of(rows)) for f in FAMILIES if (rows := _rows_of(families, f)).any()]
    return Breakdown(by_pass, fams)


@dataclass(frozen=True)
class Unpriced:
    op_type: str
    count: int
    measured_us: float
    why: str


@dataclass(frozen=True)
class DeviceChoice:
    preset: str | None
    spec: str | None
    how: str
    clock_mhz: float | None = None  # the AI Core clock the kernels were priced at
    clock_from: str | None = None  # "profile cycle counters" or "device spec"


@dataclass(frozen=True)
class PredictReport:
    source: str
    device: DeviceChoice
    overall: Accuracy
    priced_fraction: float  # of non-communication device time
    communication_us: float
    op_types: list[OpTypeAccuracy]  # priced op types, most measured time first
    unpriced: list[Unpriced]  # most measured time first (communication included, said so in `why`)
    split: Breakdown | None = None  # the compute kernels per pass and family
    provenance_us: dict[str, float] = field(default_factory=dict)  # predicted µs per provenance kind

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof predict --format json` (schema_version 1): every figure of the report,
        all op types (no --top cut)."""
        overall: dict[str, Any] = asdict(self.overall)
        overall["priced_fraction"] = self.priced_fraction
        overall["communication_us"] = self.communication_us
        split = self.split.to_dict() if self.split else {"by_pass": {}, "families": []}
        overall["by_pass"] = split["by_pass"]
        overall["predicted_us_by_provenance"] = self.provenance_us
        return {
            "schema_version": PREDICT_SCHEMA_VERSION,
            "source": self.source,
            "device": {
                "preset": self.device.preset,
                "spec": self.device.spec,
                "how": self.device.how,
                "clock_mhz": self.device.clock_mhz,
                "clock_from": self.device.clock_from,
            },
            "overall": overall,
            "families": split["families"],
            "op_types": [_op_type_dict(r) for r in self.op_types],
            "unpriced": [asdict(u) for u in self.unpriced],
        }

    def to_arrow(self) -> pa.Table:
        """One row per priced op type: the `op_types` list as a table."""
        return pa.Table.from_pylist([_op_type_dict(r) for r in self.op_types])


def _op_type_dict(r: OpTypeAccuracy) -> dict[str, Any]:
    return {
        "op_type": r.op_type,
        "family": r.family,
        "provenance": r.provenance,
        "parameters": r.parameters,
        **asdict(r.accuracy),
    }


def accuracy(measured_ns: np.ndarray, predicted_ns: np.ndarray) -> Accuracy:
    """`predicted_ns` is NaN where a kernel is unpriced."""
    priced = ~np.isnan(predicted_ns)
    meas, pred = measured_ns[priced].astype(np.float64), predicted_ns[priced]
    total = float(meas.sum())
    errors: tuple[float | None, ...] = (None, None, None, None)
    if priced.any() and total > 0:
        nonzero = meas > 0
        pct = np.abs(pred[nonzero] - meas[nonzero]) / meas[nonzero]
        errors = (
            float(np.abs(pred - meas).sum() / total),
            float((pred.sum() - total) / total),
            float(np.median(pct)) if pct.size else None,
            float(np.percentile(pct, 90)) if pct.size else None,
        )
    return Accuracy(
        kernels=int(measured_ns.size),
        priced_kernels=int(priced.sum()),
        measured_us=float(measured_ns.sum()) / 1e3,
        priced_measured_us=total / 1e3,
        predicted_us=float(pred.sum()) / 1e3,
        time_weighted_error=errors[0],
        signed_error=errors[1],
        median_abs_pct_error=errors[2],
        p90_abs_pct_error=errors[3],
    )


def summarize(prices: pa.Table, source: str, device: DeviceChoice) -> PredictReport:
    """The report of a prices table (atbprof/predict/price.py PRICES_SCHEMA)."""
    from atbprof.analyze.view import dict_codes

    measured = prices.column("measured_ns").to_numpy().astype(np.float64)
    predicted = prices.column("predicted_ns").to_numpy(zero_copy_only=False).astype(np.float64)
    comm = prices.column("communication").to_numpy(zero_copy_only=False).astype(bool)
    types, whys, passes, families, kinds, params = (
        dict_codes(prices.column(c)) for c in ("op_type", "why", "pass", "family", "provenance", "parameters")
    )
    compute = ~comm
    unpriced_rows = np.isnan(predicted)
    overall = accuracy(measured[compute], predicted[compute])
    rows: list[OpTypeAccuracy] = []
    lost: list[Unpriced] = []
    for op_type in sorted(types[1]):
        sel = _rows_of(types, op_type)
        acc = accuracy(measured[sel & compute], predicted[sel & compute])
        if acc.priced_kernels:
            priced = sel & compute & ~unpriced_rows
            family = families[1][families[0][np.argmax(priced)]]
            heaviest = (_heaviest(labels, priced, predicted) for labels in (kinds, params))
            rows.append(OpTypeAccuracy(op_type, acc, family, *heaviest))
        missing = np.flatnonzero(sel & unpriced_rows)
        codes, first = np.unique(whys[0][missing], return_index=True)
        for code in codes[np.argsort(first)]:  # the reasons in the order they first appear
            at = missing[whys[0][missing] == code]
            why = whys[1][code] if code >= 0 else "None"
            lost.append(Unpriced(op_type, len(at), sum((measured[at] / 1e3).tolist()), why))  # summed in row order
    rows.sort(key=lambda r: (-r.accuracy.priced_measured_us, r.op_type))
    lost.sort(key=lambda u: (-u.measured_us, u.op_type))
    compute_us = overall.measured_us
    by_kind = {name: float(predicted[_rows_of(kinds, name)].sum()) / 1e3 for name in sorted(kinds[1])}
    return PredictReport(
        source=source,
        device=device,
        overall=overall,
        priced_fraction=overall.priced_measured_us / compute_us if compute_us else 0.0,
        communication_us=float(measured[comm].sum()) / 1e3,
        op_types=rows,
        unpriced=lost,
        split=breakdown(
            measured[compute],
            predicted[compute],
            (passes[0][compute], passes[1]),
            (families[0][compute], families[1]),
        ),
        provenance_us=by_kind,
    )


def _heaviest(labels: Labels, rows: np.ndarray, weights: np.ndarray) -> str | None:
    """The label of `rows` carrying the most weight (ties: the first in sorted order)."""
    codes, names = labels
    codes, weights = codes[rows], weights[rows]
    named = codes >= 0
    if not named.any():
        return None
    totals = np.bincount(codes[named], weights[named], minlength=len(names))
    present = np.flatnonzero(np.bincount(codes[named], minlength=len(names)))
    return names[min(present, key=lambda i: (-totals[i], names[i]))]


@dataclass(frozen=True)
class HostDispatch:
    """Host time per kernel launch read from api_statistic.csv (aclnn* API time / kernel launches)."""

    per_kernel_us: float
    launches: int
    source: str


@dataclass(frozen=True)
class Calibration:
    base: DeviceChoice
    spec: DeviceSpec  # the fitted spec
    fitted: dict[str, float]  # "section.field" -> value
    before: Accuracy
    after: Accuracy
    kernels: int  # priced kernels the fit used
    distinct: int  # distinct kernel signatures
    source: str
    host_dispatch: HostDispatch | None
    cross_validated: dict[str, Accuracy] = field(default_factory=dict)
    """Held-out error per scheme (k-fold over kernels, leave-one-op-type-out): each kernel predicted by a spec
    fitted without it. `after` is in-sample: the same kernels the spec was fitted on."""
    splits: dict[str, Breakdown] = field(default_factory=dict)
    """Per figure ("before", "in_sample" and each cross-validation scheme): its errors per pass and family."""
