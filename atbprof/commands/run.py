"""`atbprof run`: simulate a config."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import orjson
import typer

from atbprof.commands.common import OutputFormat, console, guard, progress
from atbprof.errors import ConfigError


def run(
    config: Annotated[
        Path, typer.Option("--config", "-c", help="Run config YAML (see fixtures/), or a run directory to run again.")
    ],
    fusion: Annotated[str | None, typer.Option(help="Fusion strategy: none, default, aggressive, ...")] = None,
    trace_format: Annotated[
        str | None, typer.Option(help="Trace format: chrome (trace.json.gz), perfetto (trace.pftrace) or both.")
    ] = None,
    trace_steps: Annotated[
        str | None, typer.Option(help="Steps to put in the trace, e.g. 0-8,100 (default: all that fit the UI).")
    ] = None,
    trace_layers: Annotated[
        str | None, typer.Option(help="Decoder layers to put in the trace, e.g. 0-1,31 (model-level ops stay).")
    ] = None,
    trace_ranks: Annotated[
        str | None, typer.Option(help="Ranks in the trace besides rank 0, e.g. 1-3 (a multi-device run).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Output directory (default traces/<name>).")] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing output directory.")] = False,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config key: KEY.PATH=VALUE.")] = None,
    format_: Annotated[
        OutputFormat, typer.Option("--format", help="Summary as rich text or JSON.")
    ] = OutputFormat.rich,
    numerics: Annotated[
        bool, typer.Option("--numerics", help="Also execute the layers (numpy): fused vs unfused vs float64.")
    ] = False,
    weights: Annotated[
        Path | None, typer.Option("--weights", help="Hugging Face LLaMA .safetensors for --numerics (implies it).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Simulate LLaMA layers on a modelled Ascend NPU and write ops.parquet, run.json and trace.json.gz."""
    from atbprof.config import RunConfig, load_config
    from atbprof.render.run_summary import render_run
    from atbprof.run import RunResult, run_simulation

    def body() -> None:
        overrides = [f"fusion={fusion}"] if fusion is not None else []
        overrides += list(set_ or [])  # after --fusion, so --set fusion.enable=[...] refines the strategy
        if trace_format is not None:
            overrides.append(f"output.trace_format={trace_format}")
        from atbprof.writers.selection import parse_ranges

        for key, option, value in (
            ("output.trace_steps", "--trace-steps", trace_steps),
            ("output.trace_layers", "--trace-layers", trace_layers),
            ("output.trace_ranks", "--trace-ranks", trace_ranks),
        ):
            if value is not None:
                parse_ranges(value, option)  # the option's own message, not one about a --set
                overrides.append(f"{key}='{value}'")
        if numerics or weights is not None:
            overrides.append("numerics.enabled=true")
        if weights is not None:
            overrides.append(f"numerics.weights={orjson.dumps(str(weights)).decode()}")
        cfg = load_config(config, overrides)
        try:
            simulate_and_render(cfg)
        except ConfigError as exc:  # found while resolving presets/rules: name the config it came from
            if exc.source is not None:
                raise
            raise ConfigError(exc.problems, source=str(config)) from exc

    def simulate_and_render(cfg: RunConfig) -> None:
        with progress("simulating", format_ is OutputFormat.rich, "ops") as on_ops:
            result = run_simulation(cfg, out, force, on_ops)
        if format_ is OutputFormat.json:
            sys.stdout.write(orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
        elif isinstance(result, RunResult):
            render_run(result, console())
        else:
            from atbprof.render.serving_summary import render_serving

            render_serving(result, console())

    guard(body, verbose)
