"""The sweep report: terminal and Markdown (one list of sections) and its JSON twin (sweep/api.py SweepReport)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from atbprof.hints import command, shown
from atbprof.render.sections import Section, render_sections, sections_markdown
from atbprof.sweep.report import SweepReport

if TYPE_CHECKING:
    from rich.console import Console

PREVIEW_ROWS = 40


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3f}"
    return str(v)


def sections(report: SweepReport) -> list[Section]:
    parts = [f"{report.points} points: {report.ran} ran"]
    if report.not_fitting:
        parts.append(f"{report.not_fitting} do not fit")
    if report.failed:
        parts.append(f"{report.failed} failed")
    if report.resumed:
        parts.append(f"{report.resumed} taken from the interrupted run")
    out = [Section("summary", lines=[f"sweep {report.name}: " + ", ".join(parts)])]
    axes = Section("axes", headers=["key", "values"])
    for a in report.axes:
        axes.rows.append([a.key, ", ".join(_cell(v) for v in a.values)])
    out.append(axes)
    if report.compare is not None and report.gains:
        c = report.compare
        keys = [a.key for a in report.axes if a.key != c.axis]
        sec = Section(
            f"gain of {c.figure}: {c.axis} {c.base} -> {c.new}",
            headers=[*keys, f"{c.base}", f"{c.new}", "gain %"],
            numeric=set(range(len(keys) + 3)),
        )
        for g in report.gains:
            gain = "-" if g.gain_pct is None else f"{g.gain_pct:+.1f}"
            sec.rows.append([*(_cell(g.at.get(k)) for k in keys), _cell(g.base), _cell(g.new), gain])
        out.append(sec)
    if report.capacity:
        keys = [a.key for a in report.axes if a.key != "workload.rate_qps"]
        sec = Section(
            "capacity under the SLO (p99): the highest swept rate meeting it",
            headers=[*keys, "SLO", "requests/s", "first missing", "TTFT p99 ms", "TPOT p99 ms"],
            numeric=set(range(len(keys) + 1, len(keys) + 5)),
        )
        for row in report.capacity:
            slo = ", ".join(
                f"{k} <= {v:g} ms" for k, v in (("TTFT", row.slo_ttft_ms), ("TPOT", row.slo_tpot_ms)) if v is not None
            )
            sec.rows.append(
                [
                    *(_cell(row.at.get(k)) for k in keys),
                    slo,
                    _cell(row.rate_qps),
                    _cell(row.first_missing_qps),
                    _cell(row.ttft_p99_ms),
                    _cell(row.tpot_p99_ms),
                ]
            )
        out.append(sec)
    if report.claims:
        sec = Section("claims beside the model", headers=["claim", "claimed %", "model %", "difference (points)"])
        sec.numeric = {1, 2, 3}
        for cl in report.claims:
            lo, hi = cl.claimed_pct
            claimed = f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"
            model = "-" if cl.model_pct is None else f"{cl.model_pct:.1f}"
            diff = "-" if cl.difference_pct is None else f"{cl.difference_pct:+.1f}"
            sec.rows.append([cl.label, claimed, model, diff])
        out.append(sec)
    keys = [a.key for a in report.axes]
    serving = any("serving.tpot_ms.p99" in r for r in report.rows)
    if serving:
        cols = ["fits", "serving.ttft_ms.p99", "serving.tpot_ms.p99", "serving.requests_per_s"]
        heads = ["fits", "TTFT p99 ms", "TPOT p99 ms", "requests/s"]
    else:
        cols = ["fits", "decode_ms_per_token", "ttft_ms", "tokens_per_s"]
        heads = ["fits", "decode ms/token", "TTFT ms", "tokens/s"]
    table = Section(
        "points"
        + (
            f" (the first {PREVIEW_ROWS} of {report.points}; all in sweep.parquet)"
            if report.points > PREVIEW_ROWS
            else ""
        ),
        headers=["point", *keys, *heads],
        numeric={0, *range(len(keys) + 2, len(keys) + 5)},
    )
    for r in report.rows[:PREVIEW_ROWS]:
        table.rows.append([str(r["point"]), *(_cell(r.get(k)) for k in keys), *(_cell(r.get(c)) for c in cols)])
        table.row_styles.append("red" if r.get("error") else "")
    out.append(table)
    if report.errors:
        sec = Section("points without figures", headers=["point", "why"], numeric={0})
        for e in report.errors[:PREVIEW_ROWS]:
            sec.rows.append([str(e.point), e.error.splitlines()[0][:300]])
        out.append(sec)
    if report.notes:
        out.append(Section("notes", lines=report.notes))
    if report.files:
        listed = [f for f in report.files if not f.startswith("runs/")]
        runs = len(report.files) - len(listed)
        where = shown(Path(report.out))
        lines = [f"{where}: {', '.join(listed)}" + (f" and {runs} files of the kept runs" if runs else "")]
        out.append(Section("files", lines=lines))
        page = Path(report.out) / "report.html"
        nxt = (
            [f"{shown(page)}: the sweep's page, already written (open it in a browser)"]
            if "report.html" in listed
            else []
        )
        nxt.append(command("atbprof", "plot", Path(report.out), "--format", "svg", why="the figures as SVG"))
        out.append(Section("next", lines=nxt))
    return out


def render_sweep(report: SweepReport, console: Console) -> None:
    render_sections(sections(report), console, quiet_titles=("files",))


def sweep_markdown(report: SweepReport) -> str:
    return sections_markdown(sections(report), f"sweep {report.name}")


def sweep_json(report: SweepReport) -> dict[str, Any]:
    """The documented JSON contract (the result's to_dict)."""
    return report.to_dict()
