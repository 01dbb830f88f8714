"""`atbprof open`: serve a trace to the Perfetto UI."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated

import typer

from atbprof.commands.common import console, guard
from atbprof.hints import shown


def open_(
    run_or_trace: Annotated[Path, typer.Argument(help="A run directory or a trace file.")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (the Perfetto UI expects 9001).")] = 9001,
    browser: Annotated[bool, typer.Option("--browser/--no-browser", help="Open the link in a web browser.")] = False,
    timeout: Annotated[
        float | None, typer.Option(min=0.01, help="Stop after this many seconds if nobody fetched it (exit 1).")
    ] = None,
    ui: Annotated[
        str,
        typer.Option("--ui", help="The Perfetto UI to open it in (a self-hosted or offline one: its URL)."),
    ] = "https://ui.perfetto.dev",
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Serve a run's trace on 127.0.0.1 and print the Perfetto UI link that loads it."""
    from atbprof.serve import serve_trace

    unfetched = ""  # why the UI has not got the trace: "timeout" / "interrupted"; "" once it has

    def body() -> None:
        nonlocal unfetched
        out = console()
        result = serve_trace(
            run_or_trace,
            port=port,
            open_browser=browser,
            timeout=timeout,
            ui=ui,
            on_ready=lambda url: out.print(
                f"Open in Perfetto: {url}\n(serving until the trace is fetched; Ctrl-C stops)"
            ),
            on_notice=lambda msg: out.print(f"[yellow]note:[/yellow] {msg}"),
        )
        others = f", {result.other_fetches} without the UI's origin" if result.other_fetches else ""
        out.print(f"stopped: {result.reason} ({result.fetches} fetch(es) of {shown(result.trace)} by the UI{others})")
        unfetched = result.reason
        if result.reason == "fetched" or (result.reason == "interrupted" and result.fetches):
            unfetched = ""

    guard(body, verbose)
    if unfetched == "timeout":
        typer.echo("error: the Perfetto UI never fetched the trace", err=True)
        raise typer.Exit(1)
    if unfetched == "interrupted":
        raise typer.Exit(128 + signal.SIGINT)
