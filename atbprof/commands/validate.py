"""`atbprof validate`: a trace against the Perfetto JSON importer's rules."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from atbprof.commands.common import OutputFormat, console, guard, status


def validate(
    trace: Annotated[Path, typer.Argument(help="A Chrome/Perfetto JSON trace (.json, .json.gz) or a run directory.")],
    format_: Annotated[OutputFormat, typer.Option("--format", help="Report as rich text or JSON.")] = OutputFormat.rich,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Check any trace against the Perfetto JSON importer's rules; exit 1 if Perfetto would lose data."""
    from atbprof.validate import render_validation, validate_trace, validation_json

    loses = False

    def body() -> None:
        nonlocal loses
        with status(f"checking {trace}", format_ is OutputFormat.rich):
            report = validate_trace(trace)
        loses = report.loses_data
        if format_ is OutputFormat.json:
            sys.stdout.write(orjson.dumps(validation_json(report), option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            render_validation(report, console())

    guard(body, verbose)
    if loses:
        raise typer.Exit(1)
