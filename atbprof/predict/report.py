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


def breakdown(measured_ns: np.ndarray, predicted_ns: np.ndarray, passes: np.ndarray, families: np.ndarray) -> Breakdown:
    """`passes` and `families` per kernel (strings); NaN predictions are unpriced kernels."""
    from atbprof.predict.passes import PASSES
    from atbprof.predict.recipes import FAMILIES

    by_pass = {name: accuracy(measured_ns[passes == name], predicted_ns[passes == name]) for name in PASSES}
    present = set(families.tolist())
    fams = [(f, accuracy(measured_ns[families == f], predicted_ns[families == f])) for f in FAMILIES if f in present]
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
    op_types = np.asarray(prices.column("op_type").to_pylist(), dtype=object)
    measured = prices.column("measured_ns").to_numpy().astype(np.float64)
    predicted = prices.column("predicted_ns").to_numpy(zero_copy_only=False).astype(np.float64)
    comm = prices.column("communication").to_numpy(zero_copy_only=False).astype(bool)
    whys = np.asarray(prices.column("why").to_pylist(), dtype=object)
    passes = np.asarray(prices.column("pass").to_pylist(), dtype=object)
    families = np.asarray(prices.column("family").to_pylist(), dtype=object)
    kinds = np.asarray(prices.column("provenance").to_pylist(), dtype=object)
    params = np.asarray(prices.column("parameters").to_pylist(), dtype=object)
    compute = ~comm
    overall = accuracy(measured[compute], predicted[compute])
    rows: list[OpTypeAccuracy] = []
    unpriced: dict[tuple[str, str], list[float]] = {}
    for op_type in sorted(set(op_types.tolist())):
        sel = op_types == op_type
        acc = accuracy(measured[sel & compute], predicted[sel & compute])
        if acc.priced_kernels:
            priced = sel & compute & ~np.isnan(predicted)
            rows.append(
                OpTypeAccuracy(
                    op_type,
                    acc,
                    str(families[priced][0]),
                    _heaviest(kinds[priced], predicted[priced]),
                    _heaviest(params[priced], predicted[priced]),
                )
            )
        for i in np.flatnonzero(sel & np.isnan(predicted)):
            entry = unpriced.setdefault((op_type, str(whys[i])), [0, 0.0])
            entry[0] += 1
            entry[1] += measured[i] / 1e3
    rows.sort(key=lambda r: (-r.accuracy.priced_measured_us, r.op_type))
    lost = [Unpriced(t, int(n), float(us), why) for (t, why), (n, us) in unpriced.items()]
    lost.sort(key=lambda u: (-u.measured_us, u.op_type))
    compute_us = overall.measured_us
    by_kind: dict[str, float] = {}
    for kind in sorted({k for k in kinds.tolist() if k is not None}):
        by_kind[str(kind)] = float(predicted[kinds == kind].sum()) / 1e3
    return PredictReport(
        source=source,
        device=device,
        overall=overall,
        priced_fraction=overall.priced_measured_us / compute_us if compute_us else 0.0,
        communication_us=float(measured[comm].sum()) / 1e3,
        op_types=rows,
        unpriced=lost,
        split=breakdown(measured[compute], predicted[compute], passes[compute], families[compute]),
        provenance_us=by_kind,
    )


def _heaviest(labels: np.ndarray, weights: np.ndarray) -> str | None:
    """The label carrying the most weight (ties: the first in sorted order)."""
    totals: dict[str, float] = {}
    for label, w in zip(labels.tolist(), weights.tolist(), strict=True):
        if label is not None:
            totals[label] = totals.get(label, 0.0) + w
    return min(totals, key=lambda k: (-totals[k], k)) if totals else None


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
