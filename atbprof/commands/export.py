"""`atbprof export`: a run in the layouts of Ascend's tools."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import orjson
import typer

from atbprof.commands.common import OutputFormat, console, guard, status


class ExportTo(str, Enum):
    ascend_pt = "ascend-pt"
    msprof = "msprof"


def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `atbprof run`.")],
    to: Annotated[ExportTo, typer.Option("--to", help="ascend-pt (torch_npu profiler) or msprof (native PROF_*).")],
    out: Annotated[Path, typer.Option(help="Directory to write the profile directory into.")],
    force: Annotated[bool, typer.Option(help="Replace an existing export (one atbprof wrote).")] = False,
    trace_steps: Annotated[
        str | None, typer.Option(help="Steps in the timeline JSON, e.g. 0-8,100 (default: the run's, capped).")
    ] = None,
    trace_layers: Annotated[str | None, typer.Option(help="Decoder layers in the timeline JSON, e.g. 0-1,31.")] = None,
    trace_max_mb: Annotated[
        float | None,
        typer.Option(min=1, help="Keep the whole steps that fit in this much timeline JSON (default: the run's, 600)."),
    ] = None,
    kernel_ranks: Annotated[
        str | None,
        typer.Option(help="Multi-device ascend-pt: only these ranks get kernel tables, e.g. 0,8 (others partial)."),
    ] = None,
    format_: Annotated[OutputFormat, typer.Option("--format", help="Result as rich text or JSON.")] = OutputFormat.rich,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Write a run in the layouts Ascend's tools read (msprof-analyze, MindStudio Insight)."""
    from atbprof.export import TraceChoice, export_run
    from atbprof.render.export import export_json, render_export

    def body() -> None:
        choice = TraceChoice(trace_steps, trace_layers, trace_max_mb)
        with status(f"exporting {run_dir}", format_ is OutputFormat.rich):
            result = export_run(run_dir, to.value, out, force, choice, kernel_ranks)
        if format_ is OutputFormat.json:
            sys.stdout.write(orjson.dumps(export_json(result), option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            render_export(result, console())

    guard(body, verbose)
