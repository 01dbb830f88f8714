"""The command line. Each command parses options, calls one library function, hands the result to a renderer."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import traceback
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import orjson
import typer

if TYPE_CHECKING:  # rich loads where a command renders with it (`--format json` does not)
    from rich.console import Console

from atbprof import __version__
from atbprof.errors import AtbprofError, ConfigError, InputError, Terminated

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="atbprof: see what operator fusion buys LLaMA inference on (simulated) Ascend NPUs.",
)


class OutputFormat(str, Enum):
    rich = "rich"
    json = "json"


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


@app.command()
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
    from atbprof.render.run_summary import render_run, run_json
    from atbprof.run import run_simulation

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
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        err = Console(stderr=True)
        if format_ is OutputFormat.rich and err.is_terminal:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("ops"),
                TimeRemainingColumn(),
                console=err,
                transient=True,
            ) as bar:
                task = bar.add_task("building the model graph and applying fusion", total=None)
                result = run_simulation(
                    cfg,
                    out,
                    force,
                    lambda done, total: bar.update(task, completed=done, total=total, description="simulating"),
                )
        else:
            result = run_simulation(cfg, out, force)
        if format_ is OutputFormat.json:
            sys.stdout.write(orjson.dumps(run_json(result, config), option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            render_run(result, _console(), config)

    _guard(body, verbose)


class ExportTo(str, Enum):
    ascend_pt = "ascend-pt"
    msprof = "msprof"


@app.command()
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
        result = export_run(run_dir, to.value, out, force, choice, kernel_ranks)
        if format_ is OutputFormat.json:
            sys.stdout.write(orjson.dumps(export_json(result), option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            render_export(result, _console())

    _guard(body, verbose)


@app.command()
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
        report = validate_trace(trace)
        loses = report.loses_data
        if format_ is OutputFormat.json:
            sys.stdout.write(orjson.dumps(validation_json(report), option=orjson.OPT_INDENT_2).decode() + "\n")
        else:
            render_validation(report, _console())

    _guard(body, verbose)
    if loses:
        raise typer.Exit(1)


@app.command("open")
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
        console = _console()
        result = serve_trace(
            run_or_trace,
            port=port,
            open_browser=browser,
            timeout=timeout,
            ui=ui,
            on_ready=lambda url: console.print(
                f"Open in Perfetto: {url}\n(serving until the trace is fetched; Ctrl-C stops)"
            ),
            on_notice=lambda msg: console.print(f"[yellow]note:[/yellow] {msg}"),
        )
        others = f", {result.other_fetches} without the UI's origin" if result.other_fetches else ""
        console.print(f"stopped: {result.reason} ({result.fetches} fetch(es) of {result.trace} by the UI{others})")
        unfetched = result.reason
        if result.reason == "fetched" or (result.reason == "interrupted" and result.fetches):
            unfetched = ""

    _guard(body, verbose)
    if unfetched == "timeout":
        typer.echo("error: the Perfetto UI never fetched the trace", err=True)
        raise typer.Exit(1)
    if unfetched == "interrupted":
        raise typer.Exit(128 + signal.SIGINT)


class AnalyzeFormat(str, Enum):
    rich = "rich"
    json = "json"
    md = "md"


@app.command()
def analyze(
    path: Annotated[
        Path,
        typer.Argument(
            help="A run directory, a torch_npu / msprof profile, a trace file, or a cluster: a directory of "
            "*_ascend_pt rank profiles."
        ),
    ],
    format_: Annotated[
        AnalyzeFormat, typer.Option("--format", help="rich, json or md: the same report.")
    ] = AnalyzeFormat.rich,
    top: Annotated[int, typer.Option(min=1, help="Rows per list (findings, op types, layers, waits, examples).")] = 10,
    patterns: Annotated[
        Path | None, typer.Option("--patterns", help="Detection patterns YAML extending the built-in ones.")
    ] = None,
    fail_on_unfused: Annotated[
        bool, typer.Option("--fail-on-unfused", help="Exit 1 when unfused-norm opportunities exist (for CI).")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(help="Cluster: processes reading ranks (default one per core from 8 ranks; 0 = this process)."),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option("--ray", help="Cluster: read ranks as Ray tasks: 'auto' or a head's address (atbprof[ray])."),
    ] = None,
    tables: Annotated[
        Path | None,
        typer.Option("--tables", help="Cluster: keep the per-rank Parquet tables (<table>/rank=N/) in this directory."),
    ] = None,
    trace: Annotated[
        Path | None,
        typer.Option("--trace", help="Cluster: write its ranks' steps, aligned, as a Perfetto trace (.json[.gz])."),
    ] = None,
    trace_ranks: Annotated[
        str | None, typer.Option(help="Cluster: the ranks of --trace, e.g. 0-7,12 (default all, at most 64).")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Replace an existing --tables directory or --trace file (one atbprof wrote).")
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Find unfused LayerNorm/RMSNorm, attribute every microsecond of latency, estimate what fusing would save."""
    from atbprof.analyze import analyze as analyze_profile
    from atbprof.importers.detect import load_profile
    from atbprof.render.analyze import analysis_json, analysis_markdown, render_analysis

    unfused = False

    def body() -> None:
        nonlocal unfused
        from atbprof.importers.cluster import is_cluster

        pattern_file = str(patterns) if patterns else None
        if is_cluster(path):  # a directory of rank profiles
            from atbprof.analyze.cluster_job import analyze_cluster_path
            from atbprof.render.cluster import cluster_json, cluster_markdown, render_cluster

            with _status(f"reading and analyzing the cluster {path}", format_ is AnalyzeFormat.rich):
                cluster = analyze_cluster_path(
                    path,
                    top=top,
                    patterns_file=pattern_file,
                    workers=workers,
                    ray=ray,
                    tables=tables,
                    force=force,
                    trace=trace,
                    trace_ranks=trace_ranks,
                )
            unfused = cluster.has_unfused
            _emit(format_, lambda: cluster_json(cluster), lambda: cluster_markdown(cluster), render_cluster, cluster)
            return
        options = (("--ray", ray), ("--tables", tables), ("--workers", workers), ("--trace", trace))
        given = [o for o, v in (*options, ("--trace-ranks", trace_ranks)) if v is not None]
        if given:
            raise InputError(f"{', '.join(given)}: for a cluster (a directory of rank profiles); {path} is one profile")
        with _status(f"reading and analyzing {path}", format_ is AnalyzeFormat.rich):
            report = analyze_profile(load_profile(path), patterns_file=pattern_file, top=top)
        unfused = report.has_unfused
        _emit(format_, lambda: analysis_json(report), lambda: analysis_markdown(report), render_analysis, report)

    _guard(body, verbose)
    if fail_on_unfused and unfused:
        raise typer.Exit(1)


@app.command()
def predict(
    path: Annotated[
        Path, typer.Argument(help="A real profile with shapes: kernel_details.csv, op_summary, *_ascend_pt.")
    ],
    device: Annotated[
        str | None, typer.Option("--device", help="A device preset (910B3, ...) or a spec YAML; else inferred.")
    ] = None,
    format_: Annotated[
        AnalyzeFormat, typer.Option("--format", help="rich, json or md: the same report.")
    ] = AnalyzeFormat.rich,
    top: Annotated[int, typer.Option(min=1, help="Op types to show (json shows all).")] = 20,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Price every kernel of a real profile with the device model: measured vs predicted, per op type."""
    from atbprof.importers.detect import load_profile
    from atbprof.predict import predict_profile
    from atbprof.render.predict import predict_json, predict_markdown, render_predict

    def body() -> None:
        with _status(f"reading and pricing {path}", format_ is AnalyzeFormat.rich):
            report = predict_profile(load_profile(path, framework=False), device=device)
        _emit(
            format_,
            lambda: predict_json(report),
            lambda: predict_markdown(report, top),
            lambda r, console: render_predict(r, console, top),
            report,
        )

    _guard(body, verbose)


@app.command()
def calibrate(
    path: Annotated[Path, typer.Argument(help="A real profile with shapes (as for predict).")],
    out: Annotated[Path, typer.Option("--out", help="The device spec YAML to write.")],
    device: Annotated[
        str | None, typer.Option("--device", help="The preset (or spec YAML) to start from; else inferred.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite a spec atbprof wrote before.")] = False,
    format_: Annotated[OutputFormat, typer.Option("--format", help="rich or json.")] = OutputFormat.rich,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Fit a device spec's efficiencies and static costs to a real profile's kernels; write it as a YAML."""
    from atbprof.importers.detect import load_profile
    from atbprof.predict.calibrate import calibrate_profile, write_spec
    from atbprof.render.calibrate import calibration_json, render_calibration

    def body() -> None:
        with _status(f"reading and fitting {path}", format_ is OutputFormat.rich):
            result = calibrate_profile(load_profile(path, framework=False), device=device)
            written = write_spec(result, out, force=force, inputs=(path,))
        if format_ is OutputFormat.json:
            sys.stdout.write(
                orjson.dumps(calibration_json(result, written), option=orjson.OPT_INDENT_2).decode() + "\n"
            )
        else:
            render_calibration(result, written, _console())

    _guard(body, verbose)


class DiffBy(str, Enum):
    op_type = "op-type"
    category = "category"
    layer = "layer"
    role = "role"
    shape = "shape"


@app.command()
def diff(
    base: Annotated[Path, typer.Argument(help="The base: a run directory, a profile or a trace (as for analyze).")],
    new: Annotated[Path, typer.Argument(help="The new input, compared against the base.")],
    format_: Annotated[
        AnalyzeFormat, typer.Option("--format", help="rich, json or md: the same report.")
    ] = AnalyzeFormat.rich,
    by: Annotated[DiffBy, typer.Option("--by", help="Group the rows by op-type, category, layer, role or shape.")] = (
        DiffBy.op_type
    ),
    top: Annotated[int, typer.Option(min=1, help="Rows to show.")] = 20,
    threshold: Annotated[
        str, typer.Option("--threshold", help="Noise threshold: smaller changes are unchanged (e.g. 1%).")
    ] = "1%",
    fail_if_slower: Annotated[
        str | None,
        typer.Option("--fail-if-slower", help="Exit 1 if decode/token or TTFT is significantly slower by more (2%)."),
    ] = None,
    name_map: Annotated[
        list[str] | None, typer.Option("--map", help="OLD=NEW: a base kernel renamed in the new input (repeatable).")
    ] = None,
    trace: Annotated[
        Path | None, typer.Option("--trace", help="Write both inputs side by side, aligned per step (.json[.gz]).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --trace file.")] = False,
    patterns: Annotated[
        Path | None, typer.Option("--patterns", help="Detection patterns YAML (categories of foreign profiles).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show tracebacks on errors.")] = False,
) -> None:
    """Compare two runs or profiles op by op: what fusion replaced, what got faster, and whether it is significant."""
    from atbprof.diff.api import diff_paths, parse_name_map, parse_percent
    from atbprof.render.diff import diff_json, diff_markdown, render_diff

    regression = False
    untested: list[str] = []

    def body() -> None:
        nonlocal regression, untested
        from atbprof.importers.cluster import is_cluster

        if is_cluster(base) or is_cluster(new):  # ranks paired by id, stages by index
            from atbprof.diff.clusters import diff_cluster_paths
            from atbprof.render.cluster_diff import cluster_diff_json, cluster_diff_markdown, render_cluster_diff

            with _status(f"reading and comparing the clusters {base} and {new}", format_ is AnalyzeFormat.rich):
                d = diff_cluster_paths(base, new, parse_percent(threshold, "--threshold"))
            _emit(format_, lambda: cluster_diff_json(d), lambda: cluster_diff_markdown(d), render_cluster_diff, d)
            return
        with _status(f"reading and comparing {base} and {new}", format_ is AnalyzeFormat.rich):
            result = diff_paths(
                base,
                new,
                trace=trace,
                force=force,
                by=by.value,
                top=top,
                threshold_pct=parse_percent(threshold, "--threshold"),
                fail_if_slower_pct=parse_percent(fail_if_slower, "--fail-if-slower") if fail_if_slower else None,
                name_map=parse_name_map(name_map or []),
                patterns_file=str(patterns) if patterns else None,
            )
        report = result.report
        regression = report.regression
        untested = report.regression_check.not_tested if report.regression_check else []
        _emit(format_, lambda: diff_json(report), lambda: diff_markdown(report), render_diff, report)

    _guard(body, verbose)
    if untested:
        typer.echo(
            f"note: --fail-if-slower {fail_if_slower} could not test {', '.join(untested)} (one step a side and no "
            "noise estimate): not failed on it",
            err=True,
        )
    if regression:
        typer.echo(f"error: significant regression beyond --fail-if-slower {fail_if_slower}", err=True)
        raise typer.Exit(1)


@app.command()
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
        typer.Option("--ray", help="Run the points as Ray tasks: 'auto' or a head's address (atbprof[ray])."),
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
        from rich.console import Console

        from atbprof.render.sweep import render_sweep, sweep_json, sweep_markdown
        from atbprof.sweep.api import run_sweep

        err = Console(stderr=True)
        show = format_ is AnalyzeFormat.rich and err.is_terminal
        with contextlib.ExitStack() as stack:
            on_point = None
            if show:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

                bar = stack.enter_context(
                    Progress(
                        TextColumn("points"),
                        BarColumn(),
                        MofNCompleteColumn(),
                        TimeRemainingColumn(),
                        console=err,
                        transient=True,
                    )
                )
                task = bar.add_task("points", total=None)
                on_point = lambda done, total: bar.update(task, completed=done, total=total)  # noqa: E731
            result = run_sweep(
                config=config,
                spec_file=spec,
                grid=list(grid or []),
                sets=list(set_ or []),
                out=out,
                compare=compare,
                workers=workers,
                ray=ray,
                keep_runs=keep_runs,
                force=force,
                on_point=on_point,
            )
        report = result.report
        internal = any(e.internal for e in report.errors)
        _emit(format_, lambda: sweep_json(report), lambda: sweep_markdown(report), render_sweep, report)

    _guard(body, verbose)
    if internal:
        typer.echo("internal error: some points failed inside atbprof (their rows say how); a bug to report", err=True)
        raise typer.Exit(70)


class FigureFormat(str, Enum):
    png = "png"
    svg = "svg"
    html = "html"


class FigureTheme(str, Enum):
    light = "light"
    dark = "dark"


@app.command()
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
        from atbprof.plots.api import write_plots

        result = write_plots(list(inputs), out, format_.value, theme.value, force)
        typer.echo(f"wrote {len(result.files)} figure(s) of the {result.kind} {result.name} to {result.out}:")
        for f in result.files:
            typer.echo(f"  {result.out / f}")
        for n in result.notes:
            typer.echo(f"note: {n}")
        typer.echo(f"next: atbprof report {' '.join(map(str, inputs))} --out {result.out}.html")

    _guard(body, verbose)


@app.command()
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
        from atbprof.report import write_report

        written = write_report(list(inputs), out, top=top, force=force)
        typer.echo(
            f"wrote {written.path} ({written.kind} {written.name}: {written.figures} figures, "
            f"{written.bytes:,} bytes); open it in a browser"
        )

    _guard(body, verbose)


def _emit(
    format_: AnalyzeFormat,
    as_json: Callable[[], object],
    as_markdown: Callable[[], str],
    render: Callable[[Any, Console], None],
    report: object,
) -> None:
    """A report to stdout in the chosen form (the JSON and Markdown twins carry the same content)."""
    if format_ is AnalyzeFormat.json:
        sys.stdout.write(orjson.dumps(as_json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif format_ is AnalyzeFormat.md:
        sys.stdout.write(as_markdown() + "\n")
    else:
        render(report, _console())


def _status(what: str, rich_output: bool) -> contextlib.AbstractContextManager[object]:
    """A spinner on stderr while a long step runs (a terminal and rich output only)."""
    from rich.console import Console

    err = Console(stderr=True)
    return err.status(what) if rich_output and err.is_terminal else contextlib.nullcontext()


def _console() -> Console:
    """Reports to stdout; when it is not a terminal (a pipe, a file, CI) use a width the tables fit in."""
    from rich.console import Console

    console = Console(highlight=False)  # a terminal: prose wraps at words, tables fit its width
    return console if console.is_terminal else Console(highlight=False, soft_wrap=True, width=160)


_USER_ERRNOS = {
    errno.ENOSPC: "free some space, or write elsewhere (--out)",
    errno.EDQUOT: "free some of your quota, or write elsewhere (--out)",
    errno.ENAMETOOLONG: "use a shorter name or path",
    errno.EACCES: "check the permissions, or write elsewhere (--out)",
    errno.EPERM: "check the permissions, or write elsewhere (--out)",
    errno.EROFS: "the file system is read-only: write elsewhere (--out)",
    errno.ENOTDIR: "a part of the path is a file, not a directory: check the path",
    errno.EISDIR: "the path is a directory: give a file",
    errno.ELOOP: "the path has a symbolic-link loop: check the path",
    errno.EMFILE: "too many open files: raise `ulimit -n`",
    errno.ENFILE: "too many open files on the system: close some programs",
    errno.EIO: "the disk reported an I/O error: check the device",
    errno.ENOENT: "a file or directory vanished while atbprof used it: check the path",
}
"""Operating-system errors a user fixes (a full disk, a long name, permissions): exit 2 with the fix."""


def _os_error(err: OSError) -> str:
    if err.filename is None:
        return f"cannot write to standard output: {err.strerror or err}; redirect it somewhere that takes it"
    return f"{err.filename}: {err.strerror or err}; {_USER_ERRNOS.get(err.errno or 0, '')}"


def _guard(body: object, verbose: bool) -> None:
    """The one error handler: AtbprofError -> its message and exit code; OS errors a user can fix -> exit 2;
    anything else -> exit 70 (an atbprof bug)."""
    try:
        body()  # type: ignore[operator]
        sys.stdout.flush()  # a full disk or a closed pipe on stdout shows here, not at interpreter exit
    except BrokenPipeError:  # `atbprof ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(128 + signal.SIGPIPE) from None
    except OSError as err:
        if err.errno not in _USER_ERRNOS:
            _internal(err, verbose)
        if verbose:
            traceback.print_exc()
        if err.filename is None:  # stdout: drop what could not be written, or exit would try again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        typer.echo(f"error: {_os_error(err)}", err=True)
        raise typer.Exit(2) from None
    except AtbprofError as err:
        if verbose:
            traceback.print_exc()
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Terminated) else signal.SIGINT
        kept = getattr(err, "kept", None)  # a sweep keeps the points it finished
        typer.echo(f"interrupted ({signal.Signals(signum).name}); {kept or 'nothing was written'}", err=True)
        raise typer.Exit(128 + signum) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as err:  # an atbprof bug, not a user error
        _internal(err, verbose)


def _internal(err: BaseException, verbose: bool) -> NoReturn:
    if verbose:
        traceback.print_exc()
    typer.echo(f"internal error: {type(err).__name__}: {err} (run with --verbose for the traceback)", err=True)
    raise typer.Exit(70) from None


def main() -> None:
    from atbprof.startup import fewer_collections, skip_pyarrow_pandas_probe

    fewer_collections()
    skip_pyarrow_pandas_probe()
    for signum in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: staged writes remove their temp paths
        signal.signal(signum, _terminate)
    app()


def _terminate(signum: int, frame: object) -> None:
    raise Terminated(signum)


if __name__ == "__main__":
    main()
