"""`atbprof diff`: two runs, profiles or clusters compared."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from atbprof.commands.common import AnalyzeFormat, emit, guard, status


class DiffBy(str, Enum):
    op_type = "op-type"
    category = "category"
    layer = "layer"
    role = "role"
    shape = "shape"


def diff(
    base: Annotated[Path, typer.Argument(help="The base: a run directory, a profile or a trace (as for analyze).")],
    new: Annotated[Path, typer.Argument(help="The new input, compared against the base.")],
    format_: Annotated[
        AnalyzeFormat, typer.Option("--format", help="rich, json or md: the same report.")
    ] = AnalyzeFormat.rich,
    by: Annotated[
        DiffBy | None,
        typer.Option(
            "--by",
            help="Group the rows by op-type, category, layer, role or shape "
            "[default: op-type; category when the inputs ran on different vendors' devices].",
            show_default=False,
        ),
    ] = None,
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
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Overwrite the --trace file; compare unlike inputs (inference vs training, other models)."
        ),
    ] = False,
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
        from atbprof.diff.serving import is_serving_run
        from atbprof.importers.cluster import is_cluster

        if is_serving_run(base) or is_serving_run(new):  # request by request, at the percentile level
            from atbprof.diff.serving import diff_serving_paths
            from atbprof.render.serving_diff import render_serving_diff, serving_diff_json, serving_diff_markdown

            slower = parse_percent(fail_if_slower, "--fail-if-slower") if fail_if_slower else None
            s = diff_serving_paths(base, new, parse_percent(threshold, "--threshold"), slower)
            emit(format_, lambda: serving_diff_json(s), lambda: serving_diff_markdown(s), render_serving_diff, s)
            regression = bool(s.regression)
            return
        if is_cluster(base) or is_cluster(new):  # ranks paired by id, stages by index
            from atbprof.diff.clusters import diff_cluster_paths
            from atbprof.render.cluster_diff import cluster_diff_json, cluster_diff_markdown, render_cluster_diff

            with status(f"reading and comparing the clusters {base} and {new}", format_ is AnalyzeFormat.rich):
                d = diff_cluster_paths(base, new, parse_percent(threshold, "--threshold"))
            emit(format_, lambda: cluster_diff_json(d), lambda: cluster_diff_markdown(d), render_cluster_diff, d)
            return
        with status(f"reading and comparing {base} and {new}", format_ is AnalyzeFormat.rich):
            result = diff_paths(
                base,
                new,
                trace=trace,
                force=force,
                by=by.value if by is not None else None,
                top=top,
                threshold_pct=parse_percent(threshold, "--threshold"),
                fail_if_slower_pct=parse_percent(fail_if_slower, "--fail-if-slower") if fail_if_slower else None,
                name_map=parse_name_map(name_map or []),
                patterns_file=str(patterns) if patterns else None,
            )
        report = result.report
        regression = report.regression
        untested = report.regression_check.not_tested if report.regression_check else []
        emit(format_, lambda: diff_json(report), lambda: diff_markdown(report), render_diff, report)

    guard(body, verbose)
    if untested:
        typer.echo(
            f"note: --fail-if-slower {fail_if_slower} could not test {', '.join(untested)} (one step a side and no "
            "noise estimate): not failed on it",
            err=True,
        )
    if regression:
        typer.echo(f"error: significant regression beyond --fail-if-slower {fail_if_slower}", err=True)
        raise typer.Exit(1)
