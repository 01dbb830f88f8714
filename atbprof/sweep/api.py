"""`atbprof sweep`: every point of a sweep simulated (summary-only unless --keep-runs) in a local process pool or
on Ray, each kept as it finishes (sweep/progress.py) so an interrupted sweep resumes, then the results written
as one directory: sweep.parquet, sweep.json (the spec and the report), the plots and report.html.

Output directory (`--out`, default `sweeps/<name>`): replaced only when it is a sweep atbprof wrote and --force
is given, by rename-aside then rename-in; it appears only complete."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from atbprof.errors import InputError
from atbprof.sweep.capacity import capacity
from atbprof.sweep.compare import claims, gains
from atbprof.sweep.report import (
    PREVIEW_COLUMNS,
    SERVING_PREVIEW_COLUMNS,
    PointError,
    SweepReport,
    SweepResult,
    is_sweep_dir,
)
from atbprof.sweep.spec import SweepSpec, build_spec
from atbprof.sweep.table import sweep_table

__all__ = ["SweepReport", "SweepResult", "read_sweep", "run_sweep", "write_sweep"]


def run_sweep(
    *,
    config: Path | None,
    spec_file: Path | None,
    grid: list[str],
    sets: list[str],
    out: Path | None,
    compare: str | None = None,
    workers: int | None = None,
    ray: str | None = None,
    keep_runs: bool = False,
    force: bool = False,
    on_point: Callable[[int, int], None] | None = None,
) -> SweepResult:
    """Build the sweep, run its points (resuming an interrupted run of it), write its directory."""
    from atbprof.hints import shown
    from atbprof.outputs.paths import check_output_dir
    from atbprof.outputs.staging import staged_dir
    from atbprof.scale.pool import check_workers, map_ordered
    from atbprof.sweep.point import PointTask, run_points
    from atbprof.sweep.progress import open_progress

    check_workers(workers)
    spec = build_spec(config, spec_file, grid, sets, compare, Path(out).name if out is not None else None)
    out = Path(out) if out is not None else Path("sweeps") / spec.name
    inputs = [Path(spec.base), *([spec_file] if spec_file else [])]
    digest = spec.digest()
    done_before = _finished(out, digest, force, keep_runs)
    if done_before is not None:
        return done_before
    target = check_output_dir(out, "sweep", force=force, inputs=inputs)
    n = len(spec.points)
    # kept runs are part of the work: a sweep resumed with --keep-runs must not lack the runs of its earlier points
    with open_progress(target, digest + ("+runs" if keep_runs else ""), n, force) as progress:
        done = progress.done(with_runs=keep_runs)
        resumed = len(done)
        todo = [
            PointTask(
                i,
                spec.base,
                tuple(spec.overrides(i)),
                str(progress.run_dir(i)) if keep_runs else None,
                None if ray is not None else str(progress.point_file(i)),
            )
            for i in range(n)
            if i not in done
        ]
        try:
            for outcomes in map_ordered(run_points, chunks(spec, todo, workers), workers=workers, ray=ray):
                for outcome in outcomes:
                    if ray is not None:  # a Ray task may run where the progress directory is not: kept here
                        progress.record(outcome)
                    done[outcome["point"]] = outcome
                if on_point is not None:
                    on_point(len(done), n)
        except KeyboardInterrupt as err:
            kept = len(progress.done(with_runs=keep_runs))  # the workers keep their points as they finish
            err.kept = (  # type: ignore[attr-defined]
                f"{kept} of {n} points are kept in {progress.root}; run the same command again to go on"
            )
            raise
        outcomes = [done[i] for i in range(n)]
        table = sweep_table(spec, outcomes)
        report = _report(spec, table, outcomes, shown(target), digest, resumed)
        result = SweepResult(spec, report, table)

        def recheck() -> None:
            check_output_dir(out, "sweep", force=force, inputs=inputs)

        try:
            with staged_dir(target, "sweep", recheck) as tmp:
                files = write_sweep(tmp, result, keep_runs and progress.root / "runs", shown_as=target)
        except KeyboardInterrupt as err:
            err.kept = (  # type: ignore[attr-defined]
                f"all {n} points are kept in {progress.root} (the sweep's directory was not written); run the "
                "same command again to write it"
            )
            raise
        report.files = files
        progress.remove()  # only now: the output holds everything it had
    return result


CHUNK_MAX = 64
"""Points of one chunk at most: a worker reuses its model graph within a chunk (a summary-only point takes ~20 ms),
and each point is kept as it finishes (sweep/point.py), so the chunk size bounds only the balance of the pool."""

STRUCTURE_FREE = ("workload.", "seed", "execution.jitter", "output.")
"""Keys that change no model graph, fusion or device: points differing only in them share a chunk."""


def chunks(spec: SweepSpec, todo: list[Any], workers: int | None) -> list[tuple[Any, ...]]:
    """The points to run, grouped so that points sharing a model graph, fusion and device run in one worker (it
    builds them once), each group cut to at most a quarter of the points per worker (the pool stays balanced)."""
    from atbprof.scale.pool import default_workers

    n = max(1, default_workers() if workers is None else workers)  # --workers 0: this process, one worker
    cap = min(CHUNK_MAX, max(8, -(-len(todo) // (4 * n))))
    groups: dict[tuple[tuple[str, str], ...], list[Any]] = {}
    for task in todo:
        point = spec.points[task.index]
        key = tuple((k, orjson.dumps(v).decode()) for k, v in point.items() if not k.startswith(STRUCTURE_FREE))
        groups.setdefault(key, []).append(task)
    return [tuple(g[i : i + cap]) for g in groups.values() for i in range(0, len(g), cap)]


def _finished(out: Path, digest: str, force: bool, keep_runs: bool = False) -> SweepResult | None:
    """A finished sweep of the same digest at `out` (nothing to run: its result); another sweep there, or this one
    without the runs --keep-runs asks for: exit 2 unless --force (then it is replaced, as any output of ours)."""
    from atbprof.outputs.ownership import read_marker

    marker = read_marker(out) if out.is_dir() else None
    if force or marker is None or marker.get("kind") != "sweep" or not is_sweep_dir(out):
        return None
    done = read_sweep(out)
    if done.report.digest == digest and keep_runs and not (out / "runs").is_dir():
        raise InputError(
            f"--out {out} holds this sweep, finished without its runs; --keep-runs needs every point run again: "
            "pass --force to replace it, or choose another --out"
        )
    if done.report.digest == digest:
        done.report.notes.append(f"{out} already holds this sweep, complete: nothing was run (--force runs it again)")
        return done
    keys = ", ".join(done.spec.swept_keys())
    raise InputError(
        f"--out {out} holds another sweep ({done.report.points} points over {keys}, base {done.spec.base}); its "
        "base config, fixed overrides or points differ from this one's: pass --force to replace it, or choose "
        "another --out"
    )


def _report(
    spec: SweepSpec, table: pa.Table, outcomes: list[dict[str, Any]], out: str, digest: str, resumed: int
) -> SweepReport:
    g = gains(spec, table)
    errors = [
        PointError(point=o["point"], at=spec.points[o["point"]], error=o["error"], internal=bool(o.get("internal")))
        for o in outcomes
        if o.get("error")
    ]
    fits = table.column("fits").to_pylist()
    errs = table.column("error").to_pylist()
    serving = "serving.requests_per_s" in table.column_names
    wanted = [*spec.swept_keys(), *(SERVING_PREVIEW_COLUMNS if serving else PREVIEW_COLUMNS)]
    rows = table.select([c for c in wanted if c in table.column_names]).to_pylist()
    return SweepReport(
        name=spec.name,
        out=out,
        base=spec.base,
        digest=digest,
        points=len(outcomes),
        ran=sum(1 for e in errs if e is None),
        not_fitting=sum(1 for f in fits if f is False),
        failed=sum(1 for f, e in zip(fits, errs, strict=True) if e is not None and f is not False),
        resumed=resumed,
        axes=spec.axes,
        compare=spec.compare,
        gains=g,
        claims=claims(spec, g),
        capacity=capacity(spec, table),
        errors=errors,
        rows=[{"point": i, **r} for i, r in enumerate(rows)],
        files=[],
    )


def write_sweep(root: Path, result: SweepResult, runs: Path | bool, shown_as: Path | None = None) -> list[str]:
    """sweep.parquet, sweep.json, the plots and report.html into `root` (and the kept runs); the report names the
    sweep's directory as `shown_as` (where `root` is renamed to)."""
    import shutil

    import pyarrow.parquet as pq

    from atbprof.plots.base import figure_files
    from atbprof.plots.sweep_figures import sweep_plots
    from atbprof.render.html import Page, report_page
    from atbprof.render.sweep import sections

    pq.write_table(result.table, root / "sweep.parquet", compression="zstd")
    doc = {
        "generator": "atbprof",
        "kind": "sweep",
        "spec": result.spec.model_dump(mode="json"),
        "report": result.report.dump(exclude={"out", "files", "resumed", "notes"}),
    }
    (root / "sweep.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
    plots = sweep_plots(result.spec, result.report, result.table)
    (root / "plots").mkdir()
    for name, data in figure_files(plots, "png").items():
        (root / "plots" / name).write_bytes(data)
    shown = Path((shown_as or root).name)  # the page lives in the directory: its name, not where it was made
    page_report = result.report.model_copy(update={"resumed": 0})  # how it got done is not in the files
    page = Page("sweep", result.spec.name, [shown], plots, sections(page_report))
    (root / "report.html").write_bytes(report_page(page))
    if isinstance(runs, Path) and runs.is_dir():
        # linked, not moved: the progress directory keeps its runs until the new output is in place, so an
        # interrupt while this directory is staged (and then removed) loses none of them
        shutil.copytree(runs, root / "runs", copy_function=_link_or_copy)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _link_or_copy(src: str, dst: str) -> None:
    import os
    import shutil

    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed: a copy
        shutil.copy2(src, dst)


def read_sweep(path: Path) -> SweepResult:
    """A sweep directory atbprof wrote (for plot and report)."""
    import pyarrow.parquet as pq

    from atbprof.inputs import read_bytes

    try:
        doc = orjson.loads(read_bytes(path / "sweep.json", 1 << 28))
        spec = SweepSpec.model_validate(doc["spec"])
        report = SweepReport.model_validate({**doc["report"], "out": str(path), "files": [], "resumed": 0})
        report.files = sorted(
            p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file() and p.name[0] != "."
        )
        table = pq.read_table(path / "sweep.parquet", page_checksum_verification=True)
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, pa.ArrowException) as err:
        raise InputError(f"{path}: not a sweep directory atbprof wrote ({err}); run `atbprof sweep` again") from None
    from atbprof.sweep.table import check_sweep_table

    check_sweep_table(table, spec, str(path / "sweep.parquet"))
    # what sweep.json says of the table (counts, gains, claims, rows) is derived data: taken from the checked table
    # and spec, not trusted from the file
    outcomes = [{"point": i, "error": e} for i, e in enumerate(table.column("error").to_pylist())]
    derived = _report(spec, table, outcomes, str(path), report.digest, 0)
    internal = {e.point for e in report.errors if e.internal}
    errors = [e.model_copy(update={"internal": e.point in internal}) for e in derived.errors]
    report = derived.model_copy(update={"files": report.files, "errors": errors, "notes": report.notes})
    return SweepResult(spec, report, table)
