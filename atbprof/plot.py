"""`atbprof plot`: a target's figures written as PNG or SVG files (or one HTML page of them) into a directory of
its own (`--out`, default plots/<name>): staged, then renamed in; --force replaces only plots atbprof wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PlotFormat = Literal["png", "svg", "html"]


@dataclass(frozen=True)
class PlotResult:
    out: Path
    kind: str
    name: str
    files: list[str]
    notes: list[str]
    inputs: tuple[Path, ...] = ()

    @property
    def next_step(self) -> str:
        """The report page of the same inputs (a sweep has one already: where it is)."""
        from atbprof.hints import command, shown

        if self.kind == "sweep":
            return f"{shown(self.inputs[0] / 'report.html')}: the sweep's page, with these figures and its tables"
        page = self.out.with_name(self.out.name + ".html")
        return command("atbprof", "report", *self.inputs, "--out", page, why="one page: figures and tables")


def write_plots(
    paths: list[Path], out: Path | None, fmt: PlotFormat = "png", theme: str = "light", force: bool = False
) -> PlotResult:
    from atbprof.errors import InputError
    from atbprof.hints import file_name
    from atbprof.outputs.paths import check_output_dir
    from atbprof.outputs.staging import staged_dir
    from atbprof.plots.base import THEMES, figure_files
    from atbprof.render.html import figures_page
    from atbprof.report import page_of
    from atbprof.target import load_target

    if theme not in THEMES:
        raise InputError(f"--theme {theme}: expected one of {', '.join(THEMES)}")
    page = page_of(load_target(paths), with_sections=False)
    if not page.plots:
        raise InputError(f"{paths[0]}: nothing to draw (no steps or categories in it)")
    dest = Path(out) if out is not None else Path("plots") / file_name(page.name)
    final = check_output_dir(dest, "plots", force=force, inputs=paths)

    def recheck() -> None:
        check_output_dir(dest, "plots", force=force, inputs=paths)

    with staged_dir(final, "plots", recheck) as tmp:
        if fmt == "html":
            (tmp / "figures.html").write_bytes(figures_page(page))
        else:
            for name, data in figure_files(page.plots, fmt, theme).items():
                (tmp / name).write_bytes(data)
        files = sorted(p.name for p in tmp.iterdir())
    notes = [n for p in page.plots for n in p.notes]
    return PlotResult(final, page.kind, page.name, files, notes, tuple(Path(p) for p in paths))
