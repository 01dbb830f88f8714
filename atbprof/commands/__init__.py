"""The command line: one module per command group (parse options, call one library function, hand its typed result
to a renderer); this module builds the Typer app from them. Only the modules of this package import typer."""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from atbprof.commands import analyze, diff, export, figures, fusions, open, predict, run, sweep, validate
from atbprof.errors import Terminated
from atbprof.version import __version__

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="atbprof: see what operator fusion buys LLaMA inference on (simulated) Ascend NPUs.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"atbprof {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
    max_input_mb: Annotated[
        float | None,
        typer.Option(
            "--max-input-mb",
            min=1,
            max=1e9,
            help="Refuse input files (as inflated, for gzip) larger than this (default 4096, or ATBPROF_MAX_INPUT_MB).",
        ),
    ] = None,
) -> None:
    """Simulate, trace and compare fused vs unfused LLaMA inference on Ascend."""
    from atbprof.inputs import set_max_input_mb

    set_max_input_mb(max_input_mb)  # None: the environment / default (also for the next in-process invocation)


app.command()(run.run)
app.command()(export.export)
app.command()(validate.validate)
app.command("open")(open.open_)
app.command()(analyze.analyze)
app.command()(predict.predict)
app.command()(predict.calibrate)
app.command()(diff.diff)
app.command()(sweep.sweep)
app.command()(figures.plot)
app.command()(figures.report)
app.command()(fusions.fusions)


def main() -> None:
    from atbprof.startup import fewer_collections, skip_pyarrow_pandas_probe, system_allocator

    fewer_collections()
    system_allocator()
    skip_pyarrow_pandas_probe()
    for signum in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: staged writes remove their temp paths
        signal.signal(signum, _terminate)
    signal.signal(signal.SIGINT, _interrupt)
    app()


def _held_back(signum: int) -> bool:
    """A staged write is between creating a temp path and covering it by its cleanup: the signal is delivered when
    it is (outputs/staging.py; not loaded yet: no write has begun)."""
    staging = sys.modules.get("atbprof.outputs.staging")
    return staging is not None and bool(staging.defer_signal(signum))


def _terminate(signum: int, frame: object) -> None:
    if not _held_back(signum):
        raise Terminated(signum)


def _interrupt(signum: int, frame: object) -> None:
    if not _held_back(signum):
        raise KeyboardInterrupt


if __name__ == "__main__":
    main()
