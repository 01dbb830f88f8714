"""`atbprof sweep`: a design space simulated."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from atbprof.commands.common import AnalyzeFormat, emit, guard, progress, ray_address


def sweep(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="The base run config (or `base:` in the --spec file).")
    ] = None,
    spec: Annotated[
        Path | None, typer.Option("--spec", help="A sweep YAML: base, set, grid, zip, points, compare, reference.")
    ] = None,
    grid: Annotated[
        list[str] | None, typer.Option("--grid", help="A swept key and its values: KEY=V1,V2,... (repeatable).")
    ] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config key in every point.")] = None,
    compare: Annotated[
        str | None,
        typer.Option(help="The gain to report: KEY=BASE,NEW (default: a fusion key swept over two values)."),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Output directory (default sweeps/<name>).")] = None,
    workers: Annotated[
        int | None, typer.Option(help="Processes running points (default one per core from 8 points; 0 = this one).")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Run the points as Ray tasks: a head's address, or 'auto': Ray only where it pays (several nodes),"
            " else the local pool, said on stderr (atbprof[ray]).",
        ),
    ] = None,
    keep_runs: Annotated[
        bool, typer.Option("--keep-runs", help="Also write every point's whole run (ops, steps, trace) under runs/.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            help="Replace an existing sweep directory (one atbprof wrote), or discard another sweep's "
            "unfinished points."
        ),
    ] = False,
    format_: Annotated[
        AnalyzeFormat, typer.Option("--format", help="rich, json or md: the same report.")
    ] = AnalyzeFormat.rich,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Simulate a design space: every point of a grid of config keys, as a table, plots and an HTML report."""
    internal = False

    def body() -> None:
        nonlocal internal
        from atbprof.render.sweep import render_sweep, sweep_json, sweep_markdown
        from atbprof.sweep.api import run_sweep

        with progress("sweeping", format_ is AnalyzeFormat.rich, "points") as on_point:
            result = run_sweep(
                config=config,
                spec_file=spec,
                grid=list(grid or []),
                sets=list(set_ or []),
                out=out,
                compare=compare,
                workers=workers,
                ray=ray_address(ray),
                keep_runs=keep_runs,
                force=force,
                on_point=on_point,
            )
        report = result.report
        internal = any(e.internal for e in report.errors)
        emit(format_, lambda: sweep_json(report), lambda: sweep_markdown(report), render_sweep, report)

    guard(body, verbose)
    if internal:
        typer.echo("internal error: some points failed inside atbprof (their rows say how); a bug to report", err=True)
        raise typer.Exit(70)
