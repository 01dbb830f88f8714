"""`atbprof analyze`: a run, a profile or a cluster analysed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from atbprof.commands.common import AnalyzeFormat, emit, guard, ray_address, status
from atbprof.errors import InputError


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
    cann_version: Annotated[
        str | None,
        typer.Option(
            "--cann-version",
            help="Name the fused kernels as this CANN release does, e.g. 7.0.0 or 8.5.0 (default: the one the "
            "profile records, else today's names).",
        ),
    ] = None,
    fail_on_unfused: Annotated[
        bool, typer.Option("--fail-on-unfused", help="Exit 1 when fusion opportunities exist (for CI).")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            help="Cluster: processes reading ranks (default: one per core from 8 ranks, from 256 on fewer than 4 "
            "cores; 0 = this process). A multi-device run: processes analysing its ranks (default: this process; "
            "each worker holds a rank's analysis, ~0.85 GB at 2.5 M ops)."
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            help="Cluster: read ranks as Ray tasks: a head's address, or 'auto': Ray only where it pays (several "
            "nodes), else the local pool, said on stderr (atbprof[ray]).",
        ),
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
    from atbprof.analyze.chunked import analyze_input
    from atbprof.analyze.columns import ANALYZE_COLUMNS
    from atbprof.render.analyze import analysis_json, analysis_markdown, render_analysis

    unfused = False

    def body() -> None:
        nonlocal unfused
        from atbprof.importers.cluster import is_cluster

        pattern_file = str(patterns) if patterns else None
        if is_cluster(path):  # a directory of rank profiles
            from atbprof.analyze.cluster_job import analyze_cluster_path
            from atbprof.importers.ours import is_run_dir
            from atbprof.render.cluster import cluster_json, cluster_markdown, render_cluster
            from atbprof.startup import rank_by_rank_allocator

            if is_run_dir(path):  # a multi-device run: its ranks' tables are analysed one after the other
                rank_by_rank_allocator()

            with status(f"reading and analyzing the cluster {path}", format_ is AnalyzeFormat.rich):
                cluster = analyze_cluster_path(
                    path,
                    top=top,
                    patterns_file=pattern_file,
                    cann_version=cann_version,
                    workers=workers,
                    ray=ray_address(ray),
                    tables=tables,
                    force=force,
                    trace=trace,
                    trace_ranks=trace_ranks,
                )
            unfused = cluster.has_unfused
            emit(format_, lambda: cluster_json(cluster), lambda: cluster_markdown(cluster), render_cluster, cluster)
            return
        options = (("--ray", ray), ("--tables", tables), ("--workers", workers), ("--trace", trace))
        given = [o for o, v in (*options, ("--trace-ranks", trace_ranks)) if v is not None]
        if given:
            raise InputError(f"{', '.join(given)}: for a cluster (a directory of rank profiles); {path} is one profile")
        with status(f"reading and analyzing {path}", format_ is AnalyzeFormat.rich):
            report = analyze_input(
                path, columns=ANALYZE_COLUMNS, patterns_file=pattern_file, top=top, cann_version=cann_version
            )
        unfused = report.has_unfused
        emit(format_, lambda: analysis_json(report), lambda: analysis_markdown(report), render_analysis, report)

    guard(body, verbose)
    if fail_on_unfused and unfused:
        raise typer.Exit(1)
