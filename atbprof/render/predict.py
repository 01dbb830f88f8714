"""`atbprof predict` output: a rich report, its Markdown twin, and the JSON contract (docs: README "predict")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atbprof.predict.report import Accuracy, PredictReport
from atbprof.render.sections import Section, render_sections, sections_markdown

if TYPE_CHECKING:
    from rich.console import Console


def percent(x: float | None, signed: bool = False) -> str:
    """A fraction as a percentage, '-' when there is none (shared with the calibrate renderer)."""
    if x is None:
        return "-"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def _ms(us: float) -> str:
    return f"{us / 1e3:,.3f}"


def _row(name: str, a: Accuracy) -> list[str]:
    return [
        name,
        f"{a.priced_kernels:,}",
        _ms(a.priced_measured_us),
        _ms(a.predicted_us),
        percent(a.time_weighted_error),
        percent(a.signed_error, signed=True),
        percent(a.median_abs_pct_error),
        percent(a.p90_abs_pct_error),
    ]


HEADERS = ["", "kernels", "measured ms", "predicted ms", "error", "bias", "median", "p90"]


def _headline(report: PredictReport) -> str:
    """The forward kernels' error first (what inference runs); the other passes beside it when there are any."""
    o = report.overall
    passes = report.split.by_pass if report.split else {}
    fwd = passes.get("forward")
    others = [(n, a) for n, a in passes.items() if n != "forward" and a.priced_kernels]
    head = (
        f"{o.priced_kernels:,} of {o.kernels:,} compute kernels priced ({report.priced_fraction:.1%} of "
        f"their {_ms(o.measured_us)} ms)"
    )
    if fwd is None or not others:
        return (
            f"{head}: time-weighted error {percent(o.time_weighted_error)}, "
            f"model {percent(o.signed_error, signed=True)} vs measured"
        )
    rest = ", ".join(f"{name} {percent(a.time_weighted_error)}" for name, a in others)
    return (
        f"{head}: forward kernels' time-weighted error {percent(fwd.time_weighted_error)} "
        f"(model {percent(fwd.signed_error, signed=True)}); {rest}; all {percent(o.time_weighted_error)}"
    )


def sections(report: PredictReport, top: int = 20) -> list[Section]:
    o = report.overall
    out = [
        Section("summary", lines=[_headline(report)]),
        Section(
            "source",
            lines=[
                f"profile: {report.source}",
                f"device: {report.device.preset or report.device.spec} ({report.device.how})",
            ],
        ),
    ]
    if report.split:
        passes = Section("by pass", HEADERS, numeric={1, 2, 3, 4, 5, 6, 7})
        passes.rows = [_row(name, a) for name, a in report.split.by_pass.items() if a.kernels]
        out.append(passes)
        families = Section("by kernel family", HEADERS, numeric={1, 2, 3, 4, 5, 6, 7})
        families.rows = [_row(name, a) for name, a in report.split.families]
        out.append(families)
    table = Section("by op type (priced kernels)", [*HEADERS, "provenance"], numeric={1, 2, 3, 4, 5, 6, 7})
    table.rows = [[*_row(r.op_type, r.accuracy), r.provenance or "-"] for r in report.op_types[:top]]
    if len(report.op_types) > top:
        table.lines.append(f"... {len(report.op_types) - top} more op types (--top, or --format json for all)")
    table.rows.append([*_row("all priced", o), ""])
    out.append(table)
    if report.unpriced:
        lost = Section("not priced", ["op type", "kernels", "measured ms", "why"], numeric={1, 2})
        lost.rows = [[u.op_type, f"{u.count:,}", _ms(u.measured_us), u.why] for u in report.unpriced[:top]]
        out.append(lost)
    out.append(
        Section(
            "notes",
            lines=[
                "error = sum |predicted - measured| / sum measured; bias = (sum predicted - sum measured) / sum "
                "measured (negative: the model is faster than the device); median / p90 of |error| per kernel",
                f"communication kernels ({_ms(report.communication_us)} ms) are listed, not priced",
                "pass: forward, backward or optimizer, from the step's kernels (an inference profile is all "
                "forward); provenance: where the device parameters that priced the kernel came from - published "
                "(a spec sheet or published measurement), fitted (on a named real sample), calibrated (atbprof "
                "calibrate on your profile); --kernels writes every kernel with its parameters",
            ],
        )
    )
    return out


def render_predict(report: PredictReport, console: Console, top: int = 20) -> None:
    render_sections(sections(report, top), console)


def predict_markdown(report: PredictReport, top: int = 20) -> str:
    return sections_markdown(sections(report, top), "atbprof predict")


def predict_json(report: PredictReport) -> dict[str, Any]:
    """The JSON contract (PredictReport.to_dict)."""
    return report.to_dict()
