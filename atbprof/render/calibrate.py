"""`atbprof calibrate` output: what was fitted, the error before and after, and the JSON contract."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atbprof.predict.calibrate import Calibration
from atbprof.predict.report import PREDICT_SCHEMA_VERSION
from atbprof.render.predict import percent
from atbprof.render.sections import Section, render_sections

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_DISPATCH_US = 45.0
"""The eager host dispatch per kernel the simulator uses (atbprof/sim/simulate.py), beside the profile's."""


def sections(cal: Calibration, written: Path) -> list[Section]:
    b, a = cal.before, cal.after
    out = [
        Section(
            "summary",
            lines=[
                f"time-weighted error {percent(b.time_weighted_error)} -> {percent(a.time_weighted_error)} over "
                f"{cal.kernels:,} kernels ({cal.distinct} distinct); wrote {written}"
            ],
        ),
        Section(
            "source",
            lines=[f"profile: {cal.source}", f"started from: {cal.base.preset or cal.base.spec} ({cal.base.how})"],
        ),
    ]
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
    out.append(Section("next", lines=[f"atbprof predict {cal.source} --device {written}"]))
    return out


def render_calibration(cal: Calibration, written: Path, console: Console) -> None:
    render_sections(sections(cal, written), console)


def calibration_json(cal: Calibration, written: Path) -> dict[str, Any]:
    """The JSON contract: {schema_version, spec_path, fitted, op_time_scale, before, after, host_dispatch_us}."""
    return {
        "schema_version": PREDICT_SCHEMA_VERSION,
        "spec_path": str(written),
        "fitted": cal.fitted,
        "op_time_scale": cal.spec.op_time_scale,
        "before": asdict(cal.before),
        "after": asdict(cal.after),
        "kernels": cal.kernels,
        "host_dispatch_us": cal.host_dispatch.per_kernel_us if cal.host_dispatch else None,
    }
