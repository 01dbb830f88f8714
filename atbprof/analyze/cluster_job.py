"""`atbprof analyze CLUSTER`, rank by rank: each rank directory is read and (when it has kernel tables) given the
single-profile analysis in one task - in this process, a local process pool, or on Ray - and its tables streamed to
per-rank Parquet (`<table>/rank=N/part-0.parquet`: steps, ops, bandwidth, links, findings; matrix after the
reduce), from which the cluster report is reduced. `tables` keeps those files (an output directory of its own,
written staged and replaced only with --force when atbprof wrote it); otherwise they live in a temp directory."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from atbprof.analyze.cluster_report import ClusterReport, ClusterTrace, RankFinding, analyze_cluster
from atbprof.analyze.cluster_steps import DEFAULT_THRESHOLD
from atbprof.importers.base import Profile
from atbprof.importers.cluster import IN_MEMORY_RANKS, discover, gather, is_run_dir, load_cluster, write_part
from atbprof.importers.cluster_rank import RankPart, read_rank
from atbprof.importers.cluster_tables import Cluster, RankProfile

FINDINGS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("kind", pa.string()),
        pa.field("pattern", pa.string()),
        pa.field("fused_as", pa.string()),
        pa.field("opportunity", pa.bool_()),
        pa.field("count", pa.int64()),
        pa.field("time_us", pa.float64()),
        pa.field("est_saving_us", pa.float64()),
        pa.field("finding_json", pa.string()),  # the whole finding, as analyze --format json gives it
    ]
)


@dataclass(frozen=True)
class RankTask:
    path: Path
    findings: bool
    top: int
    patterns_file: str | None
    cann_version: str | None = None


@dataclass
class RankResult:
    part: RankPart
    findings: list[dict[str, Any]]
    saving_us: float | None


def run_rank(task: RankTask) -> RankResult:
    """One rank: its tables, and its findings with what they save per step (a module-level function: it is
    pickled to a worker process or a Ray task)."""
    from atbprof.analyze.api import analyze
    from atbprof.errors import InputError
    from atbprof.importers.detect import load_profile

    part = read_rank(task.path)
    if not task.findings or part.profile is None or not part.profile.complete:
        return RankResult(part, [], None)
    try:
        report = analyze(
            load_profile(task.path), patterns_file=task.patterns_file, top=task.top, cann_version=task.cann_version
        )
    except InputError as err:
        part.warnings.append(f"rank {part.profile.rank}: kernel tables not analysed ({err}): step split only")
        return RankResult(part, [], None)
    steps = max(1, report.source.steps)  # a finding's saving is over the profile: per step, as the split
    saving = round(sum(f.est_saving_us or 0.0 for f in report.findings if f.opportunity) / steps, 3)
    return RankResult(part, [f.model_dump(mode="json") for f in report.findings], saving)


def findings_table(rank: int, findings: list[dict[str, Any]]) -> pa.Table:
    rows = [
        {
            "rank": rank,
            **{k: f[k] for k in ("kind", "pattern", "fused_as", "opportunity", "count", "time_us", "est_saving_us")},
            "finding_json": orjson.dumps(f, option=orjson.OPT_SORT_KEYS).decode(),
        }
        for f in findings
    ]
    return pa.Table.from_pylist(rows, schema=FINDINGS_SCHEMA)


def analyze_cluster_path(
    path: Path,
    *,
    top: int = 10,
    threshold: float = DEFAULT_THRESHOLD,
    patterns_file: str | None = None,
    cann_version: str | None = None,
    findings: bool = True,
    workers: int | None = None,
    ray: str | None = None,
    tables: Path | None = None,
    force: bool = False,
    trace: Path | None = None,
    trace_ranks: str | None = None,
) -> ClusterReport:
    """The cluster report of a cluster directory (or a run of ours on several devices), its ranks fanned out;
    `trace` also writes the cluster trace of `trace_ranks` (writers/cluster_trace.py; default: all up to 64)."""
    from atbprof.outputs.paths import check_output_dir
    from atbprof.outputs.staging import staged_dir
    from atbprof.scale.pool import check_workers, map_ordered, read_workers

    check_workers(workers)
    path = Path(path)
    target = (
        check_output_dir(tables, "cluster-tables", force=force, inputs=[path], option="--tables") if tables else None
    )
    if trace_ranks is not None:  # its syntax before any work; its ranks once the cluster is read
        from atbprof.writers.selection import parse_ranges

        parse_ranges(trace_ranks, "--trace-ranks")
    if trace is not None:
        from atbprof.outputs.paths import check_output_file

        check_output_file(trace, "cluster-trace", force=force, inputs=[path])
    elif trace_ranks is not None:
        from atbprof.errors import UsageError

        raise UsageError("--trace-ranks: chooses the ranks of --trace; give --trace FILE too")
    if is_run_dir(path):  # one run: its ranks share one op table, read once in this process
        if target is not None:
            from atbprof.errors import InputError

            raise InputError(
                f"--tables: {path} is a run of ours (its tables are its ops.parquet); export it with "
                "`atbprof export RUN --to ascend-pt` and analyze the export to get per-rank tables"
            )
        run = load_cluster(path, rows=trace is not None)  # the op rows only where the trace draws them
        pooled = _pooled_rank_findings(run, workers, top, patterns_file, cann_version) if findings else None
        done = analyze_cluster(
            run,
            top=top,
            threshold=threshold,
            patterns_file=patterns_file,
            findings=findings,
            precomputed=pooled,
            cann_version=cann_version,
        )
        return _with_trace(run, done, trace, trace_ranks, force)
    if cann_version is not None:  # a mistake is the user's: said once, before any rank is read
        from atbprof.fusion.versions import checked_release

        checked_release(cann_version, "--cann-version")
    tasks = [RankTask(d, findings, top, patterns_file, cann_version) for d in discover(path)]
    workers = read_workers(workers, len(tasks))
    by_rank: dict[int, tuple[list[RankFinding], float | None]] = {}

    def parts() -> Iterator[RankPart]:
        for result in map_ordered(run_rank, tasks, workers=workers, ray=ray):
            part = result.part
            if part.profile is not None and result.saving_us is not None:
                part.tables["findings"] = findings_table(part.profile.rank, result.findings)
                found = [RankFinding(rank=part.profile.rank, **f) for f in result.findings]
                by_rank.setdefault(part.profile.rank, (found, result.saving_us))
            yield part

    def report(store: Path | None) -> ClusterReport:
        cluster = gather(path, parts(), store)
        kept = {r.rank for r in cluster.ranks}
        pre = {r: v for r, v in by_rank.items() if r in kept}
        done = analyze_cluster(
            cluster, top=top, threshold=threshold, patterns_file=patterns_file, findings=findings, precomputed=pre
        )
        return _with_trace(cluster, done, trace, trace_ranks, force)

    if target is None and len(tasks) < IN_MEMORY_RANKS:
        return report(None)
    if target is None:
        with tempfile.TemporaryDirectory(prefix="atbprof-cluster-") as scratch:
            return report(Path(scratch))
    with staged_dir(target, "cluster-tables") as staged:
        return report(staged)


def _pooled_rank_findings(
    run: Cluster, workers: int | None, top: int, patterns_file: str | None, cann_version: str | None
) -> dict[int, tuple[list[RankFinding], float | None]] | None:
    """The findings of a run's ranks from `--workers N` pool workers (N >= 2), else None: analyze_cluster reads them
    one after the other in this process, the default. Measured on 2 cores, a 20.5 M-op TP8 run (8 ranks): two
    workers 30.3-31.4 s and 4.1 GB (the process and its workers together) against 37.4-44.9 s and 2.4 GB in turn,
    the same report: a rank's analysis in parts holds ~0.85 GB, so each worker adds that."""
    from atbprof.analyze.cluster_report import rank_findings, rank_tasks
    from atbprof.scale.pool import map_ordered

    tasks = rank_tasks(run, top, patterns_file, cann_version)
    if workers is None or workers <= 1 or len(tasks) < 2:
        return None
    return {rank: (found, saving) for rank, found, saving in map_ordered(rank_findings, tasks, workers=workers)}


def _with_trace(
    cluster: Cluster, report: ClusterReport, trace: Path | None, trace_ranks: str | None, force: bool
) -> ClusterReport:
    """The report, with the cluster trace written and described when `trace` is given."""
    if trace is None:
        return report
    from atbprof.writers.cluster_trace import write_cluster_trace

    chosen = trace_rank_choice(cluster, report, trace_ranks)
    slow = {r.rank: r.slow_reason for r in report.cluster.ranks if r.slow}
    written = write_cluster_trace(cluster, chosen, trace, slow=slow, kernels=_rank_kernels, force=force)
    info = ClusterTrace(
        path=str(written.path),
        ranks=list(written.ranks),
        steps=list(written.steps),
        steps_dropped=list(written.steps_dropped),
        events=written.events_written,
        note=written.note,
    )
    return report.model_copy(update={"trace": info})


def trace_rank_choice(cluster: Cluster, report: ClusterReport, text: str | None) -> list[int]:
    """The ranks `--trace-ranks` names (all of the cluster's up to 64, slow ones first beyond, when not given)."""
    from atbprof.errors import UsageError
    from atbprof.writers.cluster_trace import default_trace_ranks
    from atbprof.writers.selection import MAX_TRACE_RANKS, compact_ranges, members, parse_ranges

    known = sorted(r.rank for r in cluster.ranks)
    if text is None:
        return default_trace_ranks(known, report.cluster.slow_ranks)
    universe = np.array(known, np.int64)
    chosen = [int(r) for r in members(parse_ranges(text, "--trace-ranks"), universe)]
    if not chosen:
        raise UsageError(f"--trace-ranks {text!r}: names none of the cluster's ranks ({compact_ranges(universe)})")
    if len(chosen) > MAX_TRACE_RANKS:
        raise UsageError(
            f"--trace-ranks {text!r}: {len(chosen)} ranks; a trace holds at most {MAX_TRACE_RANKS} (name fewer, "
            "e.g. one stage or the slow ranks)"
        )
    return chosen


def _rank_kernels(rank: RankProfile) -> tuple[Profile, int]:
    """A complete rank's profile and the absolute ns of its time 0 (our runs: the export's fixed epoch)."""
    from atbprof.export.common import EPOCH_BASE_NS
    from atbprof.importers.detect import load_profile
    from atbprof.importers.ours import load_run

    if rank.run:
        return load_run(rank.path, rank=rank.rank), EPOCH_BASE_NS
    profile = load_profile(rank.path)
    origin = profile.meta.get("origin_ns")
    return profile, int(origin) if isinstance(origin, int) else 0


__all__ = ["FINDINGS_SCHEMA", "analyze_cluster_path", "run_rank", "write_part"]
