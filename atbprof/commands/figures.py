"""`atbprof plot` and `atbprof report`: figures and one HTML page of any target."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from atbprof.commands.common import guard, status


class FigureFormat(str, Enum):
    png = "png"
    svg = "svg"
    html = "html"


class FigureTheme(str, Enum):
    light = "light"
    dark = "dark"


def plot(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="A run, a sweep directory, a cluster, a profile, or two runs/profiles to compare."),
    ],
    out: Annotated[Path | None, typer.Option(help="Directory of the figures (default plots/<name>).")] = None,
    format_: Annotated[
        FigureFormat, typer.Option("--format", help="png, svg, or html (one page of the figures).")
    ] = FigureFormat.png,
    theme: Annotated[FigureTheme, typer.Option(help="light or dark (html pages carry both).")] = FigureTheme.light,
    force: Annotated[bool, typer.Option(help="Replace an existing plots directory (one atbprof wrote).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Draw a run, a diff, a cluster or a sweep: breakdown, step latency, roofline, waterfall, heatmaps, sweeps."""

    def body() -> None:
        from atbprof.hints import shown
        from atbprof.plot import write_plots

        with status(f"reading {' '.join(map(str, inputs))} and drawing", True):
            result = write_plots(list(inputs), out, format_.value, theme.value, force)
        typer.echo(f"wrote {len(result.files)} figure(s) of the {result.kind} {result.name} to {shown(result.out)}:")
        for f in result.files:
            typer.echo(f"  {shown(result.out / f)}")
        for n in result.notes:
            typer.echo(f"note: {n}")
        typer.echo(f"next: {result.next_step}")

    guard(body, verbose)


def report(
    inputs: Annotated[
        list[Path],
        typer.Argument(help="A run, a sweep directory, a cluster, a profile, or two runs/profiles to compare."),
    ],
    out: Annotated[Path, typer.Option(help="The HTML file to write, e.g. report.html.")],
    top: Annotated[int, typer.Option(min=1, help="Rows per table.")] = 10,
    force: Annotated[bool, typer.Option(help="Replace an existing report (one atbprof wrote).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """One self-contained HTML page: summary, the figures inline, the tables of the terminal view."""

    def body() -> None:
        from atbprof.hints import shown
        from atbprof.report import write_report

        with status(f"reading {' '.join(map(str, inputs))} and writing the page", True):
            written = write_report(list(inputs), out, top=top, force=force)
        typer.echo(
            f"wrote {shown(written.path)} ({written.kind} {written.name}: {written.figures} figures, "
            f"{written.bytes:,} bytes); open it in a browser"
        )

    guard(body, verbose)
