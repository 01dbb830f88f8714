"""`atbprof plot`: a target's figures written as PNG or SVG files (or one HTML page of them) into a directory of
its own (`--out`, default plots/<name>): staged, then renamed in; --force replaces only plots atbprof wrote."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from atbprof.plots.base import THEMES, Plot, render

PlotFormat = Literal["png", "svg", "html"]


@dataclass(frozen=True)
class PlotResult:
    out: Path
    kind: str
    name: str
    files: list[str]
    notes: list[str]


def figure_files(plots: list[Plot], fmt: Literal["png", "svg"], theme: str = "light") -> dict[str, bytes]:
    """File name -> bytes of each plot."""
    return {f"{p.name}.{fmt}": render(p, THEMES[theme], fmt) for p in plots}


def write_plots(
    paths: list[Path], out: Path | None, fmt: PlotFormat = "png", theme: str = "light", force: bool = False
) -> PlotResult:
    from atbprof.errors import InputError
    from atbprof.outputs.paths import check_output_dir
    from atbprof.outputs.staging import staged_dir
    from atbprof.plots.targets import load_target
    from atbprof.render.html import figures_page

    if theme not in THEMES:
        raise InputError(f"--theme {theme}: expected one of {', '.join(THEMES)}")
    target = load_target(paths)
    if not target.plots:
        raise InputError(f"{paths[0]}: nothing to draw (no steps or categories in it)")
    dest = Path(out) if out is not None else Path("plots") / target.name
    final = check_output_dir(dest, "plots", force=force, inputs=paths)

    def recheck() -> None:
        check_output_dir(dest, "plots", force=force, inputs=paths)

    with staged_dir(final, "plots", recheck) as tmp:
        if fmt == "html":
            (tmp / "figures.html").write_bytes(figures_page(target))
        else:
            for name, data in figure_files(target.plots, fmt, theme).items():
                (tmp / name).write_bytes(data)
        files = sorted(p.name for p in tmp.iterdir())
    notes = [n for p in target.plots for n in p.notes]
    return PlotResult(final, target.kind, target.name, files, notes)
