"""`atbprof calibrate` output: what was fitted, the error before and after, and the JSON contract."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atbprof.hints import command, shown
from atbprof.predict.report import PREDICT_SCHEMA_VERSION, Accuracy, Calibration
from atbprof.render.predict import percent
from atbprof.render.sections import Section, render_sections

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_DISPATCH_US = 45.0
"""The eager host dispatch per kernel the simulator uses (atbprof/sim/simulate.py), beside the profile's."""


def sections(cal: Calibration, written: Path) -> list[Section]:
    b, a = cal.before, cal.after
    held = "; ".join(f"{percent(acc.time_weighted_error)} {name}" for name, acc in cal.cross_validated.items())
    verdict = (
        f"; on kernels held out of the fit: {held}"
        if held
        else " (in-sample only: --cross-validate tells the error on kernels the fit has not seen)"
    )
    out = [
        Section(
            "summary",
            lines=[
                f"time-weighted error {percent(b.time_weighted_error)} (the preset) -> {percent(a.time_weighted_error)}"
                f" in-sample (fitted and scored on the same {cal.kernels:,} kernels, {cal.distinct} distinct)"
                f"{verdict}; wrote {shown(written)}"
            ],
        ),
        Section(
            "source",
            lines=[f"profile: {cal.source}", f"started from: {cal.base.preset or cal.base.spec} ({cal.base.how})"],
        ),
    ]
    errors = Section(
        "error (time-weighted, median, P90 per kernel)", ["", "time-weighted", "median", "P90"], numeric={1, 2, 3}
    )
    rows = [("preset, before the fit", b), ("in-sample (the kernels it was fitted on)", a)]
    rows += [(f"cross-validated: {name}", acc) for name, acc in cal.cross_validated.items()]
    errors.rows = [
        [label, percent(acc.time_weighted_error), percent(acc.median_abs_pct_error), percent(acc.p90_abs_pct_error)]
        for label, acc in rows
    ]
    out.append(errors)
    fitted = Section("fitted", ["field", "value"], numeric={1})
    fitted.rows = [[k, f"{v:g}"] for k, v in cal.fitted.items()]
    fitted.rows += [[f"op_time_scale.{k}", f"{v:g}"] for k, v in cal.spec.op_time_scale.items()]
    out.append(fitted)
    if cal.host_dispatch:
        h = cal.host_dispatch
        out.append(
            Section(
                "host dispatch",
                lines=[
                    f"{h.per_kernel_us:.1f} us per kernel launch (aclnn* API time / {h.launches:,} launches, "
                    f"{h.source}); the simulator's eager dispatch is {DEFAULT_DISPATCH_US:g} us (it also counts "
                    "the framework's own per-op work)"
                ],
            )
        )
    out.append(Section("next", lines=[command("atbprof", "predict", Path(cal.source), "--device", Path(written))]))
    return out


def render_calibration(cal: Calibration, written: Path, console: Console) -> None:
    render_sections(sections(cal, written), console)


def _figures(cal: Calibration, name: str, acc: Accuracy) -> dict[str, Any]:
    """One figure's errors, with its split per pass and family where it was computed."""
    split = cal.splits.get(name)
    return {**asdict(acc), **(split.to_dict() if split else {})}


def calibration_json(cal: Calibration, written: Path) -> dict[str, Any]:
    """The JSON contract: {schema_version, spec_path, fitted, op_time_scale, before, in_sample (= after, kept for
    older readers), cross_validated {scheme: figures} (empty with --no-cross-validate), kernels, host_dispatch_us}."""
    return {
        "schema_version": PREDICT_SCHEMA_VERSION,
        "spec_path": shown(written),
        "fitted": cal.fitted,
        "op_time_scale": cal.spec.op_time_scale,
        "before": _figures(cal, "before", cal.before),
        "in_sample": _figures(cal, "in_sample", cal.after),
        "cross_validated": {name: _figures(cal, name, acc) for name, acc in cal.cross_validated.items()},
        "after": asdict(cal.after),
        "kernels": cal.kernels,
        "host_dispatch_us": cal.host_dispatch.per_kernel_us if cal.host_dispatch else None,
    }
