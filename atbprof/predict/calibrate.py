"""`atbprof calibrate`: fit a device spec's efficiencies and static costs to the kernels of a real profile.

Least squares on log(predicted / measured) over the distinct kernels, each weighted by its share of measured time
(the error the report quotes is time-weighted), every parameter bounded to a physical range; deterministic (no
random start). Pure: profile in, `Calibration` out; writing the YAML is `write_spec`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atbprof.arrays import distinct
from atbprof.device.spec import DeviceSpec
from atbprof.importers.base import Profile
from atbprof.inputs import read_text
from atbprof.predict.api import check_priceable
from atbprof.predict.device import choose_device
from atbprof.predict.passes import PASSES, kernel_passes
from atbprof.predict.price import KernelSet, build_kernel_set, node_durations, row_predictions
from atbprof.predict.report import Accuracy, Breakdown, Calibration, HostDispatch, accuracy, breakdown

FITTED: tuple[tuple[str, str, float, float], ...] = (
    # (section, field, low, high): the physical range a fit may move in
    ("efficiency", "cube", 0.30, 1.0),
    ("efficiency", "hbm_stream", 0.30, 1.0),
    ("efficiency", "vector", 0.05, 1.0),
    ("efficiency", "vector_hbm", 0.05, 1.0),
    ("efficiency", "mix_overlap", 0.0, 1.0),
    ("efficiency", "mac_mte2_overlap", 0.0, 1.0),
    ("static_cost_us", "cube", 0.5, 50.0),
    ("static_cost_us", "vector", 0.5, 50.0),
    ("static_cost_us", "mix", 0.5, 50.0),
)


def _with(spec: DeviceSpec, x: np.ndarray) -> DeviceSpec:
    doc = spec.model_dump()
    for (section, name, _, _), value in zip(FITTED, x, strict=True):
        doc[section][name] = float(value)
    return DeviceSpec.model_validate(doc)


CV_FOLDS = 5
"""k of the k-fold cross-validation over distinct kernels (each held out once, assigned round-robin in their
order of first appearance: deterministic, no random split)."""


@dataclass(frozen=True)
class _Points:
    """The fit's data: per model node (a distinct kernel), its measured median, weight and op type."""

    kernels: KernelSet
    med: np.ndarray
    weight: np.ndarray
    use: np.ndarray  # nodes with a measured duration
    op_type: np.ndarray  # per node


def _fit(
    points: _Points, base: DeviceSpec, nodes: np.ndarray, x0: np.ndarray | None = None
) -> tuple[DeviceSpec, np.ndarray]:
    """Fit the shared efficiencies and static costs (stage 1), then one time scale per op type (stage 2), on the
    nodes where `nodes` is true; op types with no such node keep the base spec's scale."""
    from scipy.optimize import least_squares

    lo = np.array([b[2] for b in FITTED])
    hi = np.array([b[3] for b in FITTED])
    start = np.array([getattr(getattr(base, s), f) for s, f, _, _ in FITTED]) if x0 is None else x0
    start = np.clip(start, lo + 1e-9, hi - 1e-9)
    fit_on = points.use & nodes

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = node_durations(points.kernels, _with(base, x))
        return (points.weight * np.log(np.maximum(pred, 1.0) / points.med))[fit_on]

    fit = least_squares(residuals, start, bounds=(lo, hi), x_scale=hi - lo, diff_step=1e-3, max_nfev=200)
    x = np.round(fit.x, 4)
    spec = _with(base, x)
    # stage 2: what the shared efficiencies leave per op type, as one time scale each (weighted log mean)
    pred = node_durations(points.kernels, spec)
    log_gap: dict[str, list[float]] = {}
    for n in np.flatnonzero(fit_on):
        entry = log_gap.setdefault(str(points.op_type[n]), [0.0, 0.0])
        entry[0] += points.weight[n] ** 2 * np.log(points.med[n] / max(pred[n], 1.0))
        entry[1] += points.weight[n] ** 2
    scales = {t: round(float(np.clip(np.exp(a / w), 0.05, 20)), 4) for t, (a, w) in sorted(log_gap.items()) if w > 0}
    doc = spec.model_dump()
    doc["op_time_scale"] = {**base.op_time_scale, **{t: v for t, v in scales.items() if abs(v - 1) >= 0.005}}
    return DeviceSpec.model_validate(doc), x


def _calibrated_provenance(spec: DeviceSpec, source: str) -> DeviceSpec:
    """The fitted parameters (and every op_time_scale) marked as calibrated on `source`."""
    doc = spec.model_dump()
    names = [f"{s}.{f}" for s, f, _, _ in FITTED] + [f"op_time_scale.{t}" for t in spec.op_time_scale]
    what = f"atbprof calibrate on {source}"
    doc["provenance"] = {**doc["provenance"], **{n: {"kind": "calibrated", "source": what} for n in names}}
    return DeviceSpec.model_validate(doc)


LOTO_SHARE = 0.9
"""Leave-one-op-type-out holds out, one at a time, the op types that carry this share of the measured time (the
heaviest first); the remaining small types are held out together, as one more fold. Each fold is a full fit
(~1 s on a 2,400-kernel profile): one per op type of a long tail would cost minutes and move the error little."""


def _type_folds(points: _Points, node_rows: list[list[int]], measured: np.ndarray) -> np.ndarray:
    """A fold id per node: its op type's, for the heaviest types; one shared id for the rest."""
    time_of: dict[str, float] = {}
    for n, rows in enumerate(node_rows):
        time_of[str(points.op_type[n])] = time_of.get(str(points.op_type[n]), 0.0) + float(measured[rows].sum())
    total = sum(time_of.values()) or 1.0
    own: dict[str, int] = {}
    covered = 0.0
    for name, t in sorted(time_of.items(), key=lambda kv: (-kv[1], kv[0])):
        if covered >= LOTO_SHARE * total:
            break
        own[name] = len(own)
        covered += t
    return np.array([own.get(str(t), len(own)) for t in points.op_type], dtype=np.int64)


def _held_out(
    points: _Points, base: DeviceSpec, folds: np.ndarray, x0: np.ndarray, fitted: Callable[[], None]
) -> np.ndarray:
    """Per node, its duration predicted by a spec fitted without its fold (`folds`: a fold id per node)."""
    pred = np.full(len(points.med), np.nan)
    for fold in distinct(folds[points.use]):
        test = folds == fold
        spec, _ = _fit(points, base, ~test, x0)
        pred[test] = node_durations(points.kernels, spec)[test]
        fitted()
    return pred


def calibrate_profile(
    profile: Profile,
    device: str | None = None,
    cross_validate: bool = True,
    on_fit: Callable[[int, int], None] | None = None,
) -> Calibration:
    """Fit on every priced kernel (the spec written), and report its error in-sample and cross-validated: k-fold
    over distinct kernels and leave-one-op-type-out (a held-out op type gets no scale of its own), each fold
    fitted afresh. In-sample error flatters a fit of 8 efficiencies and one scale per op type: the cross-validated
    figures are what a calibrated spec can be expected to do on kernels it has not seen."""
    check_priceable(profile)
    base, how = choose_device(profile.ops, profile.meta, device)
    kernels = build_kernel_set(profile.ops, base)
    measured = profile.ops.column("task_dur_ns").to_numpy().astype(np.float64)
    priced_sig = kernels.node_of >= 0
    # each node's measured time: the median of its rows (a repeated kernel is one point), its weight their total
    node_rows: list[list[int]] = [[] for _ in kernels.nodes]
    for row, sig in enumerate(kernels.keys):
        n = kernels.node_of[sig]
        if n >= 0 and measured[row] > 0:
            node_rows[n].append(row)
    use = np.array([bool(r) for r in node_rows])
    if not use.any():
        from atbprof.errors import InputError

        raise InputError(f"{profile.source}: no priced kernel with a measured duration: nothing to fit")
    med = np.array([np.median(measured[r]) if r else 1.0 for r in node_rows])
    weight = np.array([measured[r].sum() if r else 0.0 for r in node_rows])
    weight = np.sqrt(weight / max(weight.sum(), 1.0))
    op_type = np.array([node.op_type for node in kernels.nodes], dtype=object)
    points = _Points(kernels, med, weight, use, op_type)
    kfold = np.where(use, (np.cumsum(use) - 1) % CV_FOLDS, -1)  # round-robin, in order of first appearance
    by_type = _type_folds(points, node_rows, measured)
    total = 1 + (len(distinct(kfold[use])) + len(distinct(by_type[use])) if cross_validate else 0)
    fits = [0]

    def fitted() -> None:
        fits[0] += 1
        if on_fit is not None:
            on_fit(fits[0], total)

    spec, x = _fit(points, base, np.ones(len(med), dtype=bool))
    spec = _calibrated_provenance(spec, profile.source)
    fitted()
    compute = ~kernels.communication[kernels.keys]

    passes = (kernel_passes(profile.ops)[compute], list(PASSES))
    family_names = sorted(set(kernels.family))
    family_code = np.array([family_names.index(f) for f in kernels.family], dtype=np.int64)
    families = (family_code[kernels.keys][compute], family_names)
    splits: dict[str, Breakdown] = {}

    def rows_error(node_pred: np.ndarray, name: str) -> Accuracy:
        pred = row_predictions(kernels, node_pred)[compute]
        splits[name] = breakdown(measured[compute], pred, passes, families)
        return accuracy(measured[compute], pred)

    before = rows_error(node_durations(kernels, base), "before")
    after = rows_error(node_durations(kernels, spec), "in_sample")
    cross: dict[str, Accuracy] = {}
    if cross_validate:
        for name, folds in ((f"{CV_FOLDS}-fold over kernels", kfold), ("leave-one-op-type-out", by_type)):
            cross[name] = rows_error(_held_out(points, base, folds, x, fitted), name)
    return Calibration(
        base=how,
        spec=spec,
        fitted={f"{s}.{f}": float(v) for (s, f, _, _), v in zip(FITTED, x, strict=True)},
        before=before,
        after=after,
        kernels=int(sum(len(r) for r in node_rows)),
        distinct=int(priced_sig.sum()),
        source=profile.source,
        host_dispatch=host_dispatch(Path(profile.source)),
        cross_validated=cross,
        splits=splits,
    )


def host_dispatch(path: Path) -> HostDispatch | None:
    """From the profile's api_statistic.csv, when it has one: aclnn* API time over node launches."""
    if path.is_dir():
        found = sorted(path.glob("ASCEND_PROFILER_OUTPUT/api_statistic*.csv")) + sorted(
            path.glob("mindstudio_profiler_output/api_statistic*.csv")
        )
    else:  # a kernel_details / op_summary file: its siblings
        found = sorted(path.parent.glob("api_statistic*.csv"))
    if not found:
        return None
    aclnn_us, launches = 0.0, 0
    try:
        for row in csv.DictReader(io.StringIO(read_text(found[0]))):
            name, level = row.get("API Name", ""), row.get("Level", "")
            if level == "acl" and name.startswith("aclnn"):
                aclnn_us += float(row.get("Time(us)") or 0)
            elif level == "node" and name == "launch":
                launches += int(float(row.get("Count") or 0))
    except (ValueError, KeyError):
        return None
    if not launches:
        return None
    return HostDispatch(aclnn_us / launches, launches, str(found[0]))


def spec_yaml(cal: Calibration) -> str:
    """The fitted spec as YAML: the signature line first (so --force may replace only a spec atbprof wrote), then
    the provenance, then every field (deterministic: the same profile gives the same bytes)."""
    import yaml

    doc = cal.spec.model_dump(mode="json")
    doc["name"] = f"{cal.spec.name}-calibrated"
    doc["calibration"] = {
        "profile": cal.source,
        "base": cal.base.preset or cal.base.spec or "",
        "kernels": cal.kernels,
        "distinct_kernels": cal.distinct,
        "fitted": ", ".join(cal.fitted) + ", op_time_scale",
        "time_weighted_error_before": round(cal.before.time_weighted_error or 0.0, 4),
        "time_weighted_error_after": round(cal.after.time_weighted_error or 0.0, 4),
    }
    head = '# {"generator":"atbprof","what":"device spec fitted by atbprof calibrate"}\n'
    note = (
        "# Use it with `device: {spec: <this file>}` in a run config, or `atbprof predict --device <this file>`.\n"
        "# Fitted values hold for the profiled hardware and software stack; re-run calibrate after a CANN upgrade.\n"
    )
    return head + note + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def write_spec(cal: Calibration, out: Path, *, force: bool, inputs: tuple[Path, ...] = ()) -> Path:
    """Write the fitted spec to `out` (temp file, then rename; an existing file only with --force and only if
    atbprof wrote it)."""
    from atbprof.outputs import check_output_file, staged_file

    target = check_output_file(out, "device-spec", force=force, inputs=inputs, option="--out")
    with staged_file(
        target, lambda: check_output_file(out, "device-spec", force=force, inputs=inputs, option="--out")
    ) as tmp:
        tmp.write_text(spec_yaml(cal), encoding="utf-8")
    return target
