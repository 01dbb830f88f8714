"""`atbprof report`: one self-contained HTML page of a run, a diff, a cluster, a sweep or a profile (summary,
figures inline, the tables of the terminal view), written whole (temp file + rename); --force replaces only a
report atbprof wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atbprof.render.html import Page
    from atbprof.render.sections import Section
    from atbprof.target import Target


@dataclass(frozen=True)
class WrittenReport:
    path: Path
    kind: str
    name: str
    figures: int
    bytes: int


def sections_of(target: Target) -> list[Section]:
    """The terminal view's sections of a target, as its report page shows them."""
    if target.kind == "run":
        from atbprof.render.analyze import sections as analysis_sections
        from atbprof.render.run_summary import run_section

        return [run_section(target.doc), *analysis_sections(target.analysis())]
    if target.kind == "diff":
        from atbprof.render.diff import sections as diff_sections

        return diff_sections(target.report.model_copy(update={"rows": target.report.rows[: target.top]}))
    if target.kind == "cluster":
        from atbprof.render.cluster import sections as cluster_sections

        return cluster_sections(target.report, target.top)
    if target.kind == "sweep":
        from atbprof.render.sweep import sections as sweep_sections

        return sweep_sections(target.result.report)
    from atbprof.target import ServingTarget

    if isinstance(target, ServingTarget):
        from atbprof.render.serving_diff import serving_diff_sections
        from atbprof.render.serving_summary import serving_sections

        out = [sec for side in target.sides for sec in serving_sections(side.summary, side.name)]
        return out + (serving_diff_sections(target.diff) if target.diff is not None else [])
    from atbprof.render.analyze import sections as analysis_sections

    return analysis_sections(target.report)


def page_of(target: Target, *, with_sections: bool = True) -> Page:
    from atbprof.plots.figures import figures
    from atbprof.render.html import Page

    sections = sections_of(target) if with_sections else []
    return Page(target.kind, target.name, target.paths, figures(target), sections)


def write_report(inputs: list[Path], out: Path, *, top: int = 10, force: bool = False) -> WrittenReport:
    from atbprof.errors import InputError
    from atbprof.outputs import check_output_file, staged_file
    from atbprof.render.html import report_page
    from atbprof.target import load_target

    if not str(out).endswith((".html", ".htm")):
        raise InputError(f"--out {out}: a report is an HTML file; give it a name ending in .html")
    final = check_output_file(out, "report", force=force, inputs=inputs, option="--out")
    page = page_of(load_target(inputs, top=top))
    html = report_page(page)

    def recheck() -> None:
        check_output_file(out, "report", force=force, inputs=inputs, option="--out")

    with staged_file(final, recheck) as tmp:
        tmp.write_bytes(html)
    return WrittenReport(final, page.kind, page.name, len(page.plots), len(html))
