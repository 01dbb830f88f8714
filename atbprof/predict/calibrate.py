"""`atbprof calibrate`: fit a device spec's efficiencies and static costs to the kernels of a real profile.

Least squares on log(predicted / measured) over the distinct kernels, each weighted by its share of measured time
(the error the report quotes is time-weighted), every parameter bounded to a physical range; deterministic (no
random start). Pure: profile in, `Calibration` out; writing the YAML is `write_spec`.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atbprof.device.spec import DeviceSpec
from atbprof.importers.base import Profile
from atbprof.inputs import read_text
from atbprof.predict import check_priceable
from atbprof.predict.device import choose_device
from atbprof.predict.price import build_kernel_set, node_durations, row_predictions
from atbprof.predict.report import Accuracy, DeviceChoice, accuracy

FITTED: tuple[tuple[str, str, float, float], ...] = (
    # (section, field, low, high): the physical range a fit may move in
    ("efficiency", "cube", 0.30, 1.0),
    ("efficiency", "hbm_stream", 0.30, 1.0),
    ("efficiency", "vector", 0.05, 1.0),
    ("efficiency", "vector_hbm", 0.05, 1.0),
    ("efficiency", "mix_overlap", 0.0, 1.0),
    ("static_cost_us", "cube", 0.5, 50.0),
    ("static_cost_us", "vector", 0.5, 50.0),
    ("static_cost_us", "mix", 0.5, 50.0),
)


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


def _with(spec: DeviceSpec, x: np.ndarray) -> DeviceSpec:
    doc = spec.model_dump()
    for (section, name, _, _), value in zip(FITTED, x, strict=True):
        doc[section][name] = float(value)
    return DeviceSpec.model_validate(doc)


def calibrate_profile(profile: Profile, device: str | None = None) -> Calibration:
    from scipy.optimize import least_squares

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
    med = np.array([np.median(measured[r]) if r else 1.0 for r in node_rows])
    weight = np.array([measured[r].sum() if r else 0.0 for r in node_rows])
    weight = np.sqrt(weight / max(weight.sum(), 1.0))
    if not use.any():
        from atbprof.errors import InputError

        raise InputError(f"{profile.source}: no priced kernel with a measured duration: nothing to fit")
    x0 = np.array([getattr(getattr(base, s), f) for s, f, _, _ in FITTED])
    lo = np.array([b[2] for b in FITTED])
    hi = np.array([b[3] for b in FITTED])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)

    def residuals(x: np.ndarray) -> np.ndarray:
        pred = node_durations(kernels, _with(base, x))
        return (weight * np.log(np.maximum(pred, 1.0) / med))[use]

    fit = least_squares(residuals, x0, bounds=(lo, hi), x_scale=hi - lo, diff_step=1e-3, max_nfev=200)
    x = np.round(fit.x, 4)
    spec = _with(base, x)
    # second stage: what the shared efficiencies leave per op type, as one time scale each (weighted log mean)
    pred = node_durations(kernels, spec)
    log_gap: dict[str, list[float]] = {}
    for n, node in enumerate(kernels.nodes):
        if use[n]:
            entry = log_gap.setdefault(node.op_type, [0.0, 0.0])
            entry[0] += weight[n] ** 2 * np.log(med[n] / max(pred[n], 1.0))
            entry[1] += weight[n] ** 2
    scales = {t: round(float(np.clip(np.exp(a / w), 0.05, 20)), 4) for t, (a, w) in sorted(log_gap.items()) if w > 0}
    doc = spec.model_dump()
    doc["op_time_scale"] = {**base.op_time_scale, **{t: v for t, v in scales.items() if abs(v - 1) >= 0.005}}
    spec = DeviceSpec.model_validate(doc)
    compute = ~kernels.communication[kernels.keys]
    before = accuracy(measured[compute], row_predictions(kernels, node_durations(kernels, base))[compute])
    after = accuracy(measured[compute], row_predictions(kernels, node_durations(kernels, spec))[compute])
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
