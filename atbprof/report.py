"""`atbprof report`: one self-contained HTML page of a run, a diff, a cluster, a sweep or a profile (summary,
figures inline, the tables of the terminal view), written whole (temp file + rename); --force replaces only a
report atbprof wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WrittenReport:
    path: Path
    kind: str
    name: str
    figures: int
    bytes: int


def write_report(inputs: list[Path], out: Path, *, top: int = 10, force: bool = False) -> WrittenReport:
    from atbprof.errors import InputError
    from atbprof.outputs import check_output_file, staged_file
    from atbprof.plots.targets import load_target
    from atbprof.render.html import report_page

    if not str(out).endswith((".html", ".htm")):
        raise InputError(f"--out {out}: a report is an HTML file; give it a name ending in .html")
    final = check_output_file(out, "report", force=force, inputs=inputs, option="--out")
    target = load_target(inputs, top=top)
    page = report_page(target)

    def recheck() -> None:
        check_output_file(out, "report", force=force, inputs=inputs, option="--out")

    with staged_file(final, recheck) as tmp:
        tmp.write_bytes(page)
    return WrittenReport(final, target.kind, target.name, len(target.plots), len(page))
