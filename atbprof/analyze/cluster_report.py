"""`atbprof analyze CLUSTER`: the cluster report (the `--format json` contract, schema atbprof.cluster/1) and the
function that makes it from an imported cluster.

The step table and the slow ranks come from analyze/cluster_steps.py, communication from analyze/cluster_comm.py,
and each complete rank (one with kernel tables) gets the single-profile analysis, its findings tagged with the
rank. The step is as slow as its slowest stage, so what fusing saves the step is the slowest stage's saving (the
least of its ranks'), at most the gap to the next slowest stage."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from atbprof.analyze.cluster_comm import bandwidth_table, matrix_table, op_table, slow_links, waited_for
from atbprof.analyze.cluster_steps import (
    DEFAULT_THRESHOLD,
    rank_means,
    slow_ranks,
    slow_stages,
    stage_rows,
    step_table,
    steps_of,
)
from atbprof.analyze.report import Finding
from atbprof.errors import InputError
from atbprof.importers.cluster import STEP_COLUMNS, Cluster
from atbprof.writers.selection import compact_ranges

CLUSTER_SCHEMA_VERSION = "1"


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepSplit(_M):
    """msprof-analyze's step split (µs): Computing, Communication (Not Overlapped), Overlapped, Communication,
    Free, Stage, Bubble, Communication (Not Overlapped and Exclude Receive), Preparing."""

    computing_us: float
    communication_not_overlapped_us: float
    overlapped_us: float
    communication_us: float
    free_us: float
    stage_us: float
    bubble_us: float
    communication_not_overlapped_exclude_receive_us: float
    preparing_us: float


class StepRow(StepSplit):
    rank: int
    stage: int | None
    step: int | None


class RankRow(StepSplit):
    """A rank's mean step."""

    rank: int
    stage: int | None = Field(description="pipeline stage (index in its pp group), null if not recorded")
    complete: bool = Field(description="has kernel tables: the fusion analysis ran on it")
    steps: int
    step_source: str = Field(description="analysis.db (StepTraceTime) | step_trace_time.csv | none")
    slow: bool
    slow_reason: str | None
    fusion_saving_us: float | None = Field(description="what fusing its findings saves per step; null: partial")


class StageRow(StepSplit):
    """A stage's mean step: per step the slowest of its ranks, column by column."""

    stage: int | None
    ranks: list[int]
    steps: int
    slow: bool
    slow_reason: str | None


class ClusterSteps(_M):
    threshold: float = Field(description="a rank or stage is slow beyond this share over the median")
    steps: list[int]
    ranks: list[RankRow]
    stages: list[StageRow]
    slow_ranks: list[int]
    slow_stages: list[int | None]
    step_table: list[StepRow] = Field(description="every rank's every step")


class CommOp(_M):
    """One op of one rank, summed over the steps it ran in."""

    rank: int
    section: str = Field(description="collective | p2p")
    name: str
    group: str = Field(description="communicator name (after '@' in the profile)")
    count: int
    elapse_us: float
    transit_us: float
    wait_us: float
    idle_us: float
    transit_size_mb: dict[str, float] = Field(description="per transport (HCCS, PCIE, RDMA, SDMA, SIO)")
    bandwidth_gbps: dict[str, float] = Field(description="per transport: transit size / transit time")


class Link(_M):
    src_rank: int
    dst_rank: int
    transport: str
    size_mb: float
    time_ms: float
    bandwidth_gbps: float


def link_bandwidths(links: list[Link]) -> dict[tuple[int, int], float]:
    """Per src -> dst link (sorted), the bandwidth over all its transports: summed size / summed time (GB/s)."""
    acc: dict[tuple[int, int], list[float]] = {}
    for m in links:
        a = acc.setdefault((m.src_rank, m.dst_rank), [0.0, 0.0])
        a[0] += m.size_mb
        a[1] += m.time_ms
    return {k: (v[0] / v[1] if v[1] > 0 else 0.0) for k, v in sorted(acc.items())}


class WaitedFor(_M):
    rank: int
    collectives: int = Field(description="collectives in which every other rank waited for this one")


class Communication(_M):
    ops: list[CommOp]
    matrix: list[Link]
    slow_links: list[Link]
    waited_for: list[WaitedFor]


class RankFinding(Finding):
    rank: int


class ClusterSource(_M):
    kind: str = "cluster"
    path: str
    ranks: list[int]
    complete_ranks: list[int]
    partial_ranks: list[int]
    parallel: dict[str, int] = Field(description="tp, pp, dp, world from profiler_metadata (0: not recorded)")


class ClusterTrace(_M):
    """The cluster trace `--trace` wrote (writers/cluster_trace.py)."""

    path: str
    ranks: list[int]
    steps: list[int]
    steps_dropped: list[int] = Field(description="left out by the trace's slice cap (the tail)")
    events: int
    note: str | None


class ClusterReport(_M):
    schema_version: str = CLUSTER_SCHEMA_VERSION
    source: ClusterSource
    summary: str
    has_unfused: bool
    step_saving_us: float | None = Field(
        description="what fusing saves the step: the slowest stage's saving, capped; null: its ranks are partial"
    )
    cluster: ClusterSteps
    communication: Communication
    findings: list[RankFinding]
    warnings: list[str]
    notes: list[str]
    trace: ClusterTrace | None = Field(default=None, description="the cluster trace written (--trace), else null")

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `atbprof analyze CLUSTER --format json`."""
        return self.model_dump(mode="json")

    def to_arrow(self) -> Any:
        """One row per rank: its step split (`cluster.ranks`)."""
        import pyarrow as pa

        return pa.Table.from_pylist([r.model_dump(mode="json") for r in self.cluster.ranks])


def _split(row: dict[str, Any]) -> dict[str, float]:
    return {c: round(float(row[c]), 3) for c in STEP_COLUMNS}


@dataclass(frozen=True)
class RankFindingsTask:
    """One complete rank's single-profile analysis (picklable: it may run in a pool worker)."""

    path: Path
    rank: int
    run: bool  # a rank of a run of ours: `path` is the run directory
    top: int
    patterns_file: str | None
    cann_version: str | None


def rank_findings(task: RankFindingsTask) -> tuple[int, list[RankFinding], float]:
    """(rank, its findings, what they save per step)."""
    from atbprof.analyze.api import analyze
    from atbprof.analyze.chunked import analyze_input
    from atbprof.analyze.columns import ANALYZE_COLUMNS
    from atbprof.heap import release_freed
    from atbprof.importers.detect import load_profile

    if task.run:  # a run's ranks are each read alone: every row group's pages are checked by its own rank's read
        report = analyze_input(
            task.path,
            columns=ANALYZE_COLUMNS,
            rank=task.rank,
            check_other_ranks=False,
            patterns_file=task.patterns_file,
            top=task.top,
            cann_version=task.cann_version,
        )
    else:
        report = analyze(
            load_profile(task.path), patterns_file=task.patterns_file, top=task.top, cann_version=task.cann_version
        )
    steps = max(1, report.source.steps)  # a finding's saving is over the profile: per step, as the split
    saving = round(sum(f.est_saving_us or 0.0 for f in report.findings if f.opportunity) / steps, 3)
    found = [RankFinding(rank=task.rank, **f.model_dump()) for f in report.findings]
    del report
    release_freed()  # a rank's tables are freed: the next one's should not stack on them
    return task.rank, found, saving


def rank_tasks(
    cluster: Cluster, top: int, patterns_file: str | None, cann_version: str | None = None
) -> list[RankFindingsTask]:
    return [
        RankFindingsTask(r.path, r.rank, r.run, top, patterns_file, cann_version) for r in cluster.ranks if r.complete
    ]


def _rank_findings(
    cluster: Cluster, top: int, patterns_file: str | None, cann_version: str | None = None
) -> tuple[list[RankFinding], dict[int, float]]:
    findings: list[RankFinding] = []
    savings: dict[int, float] = {}
    for task in rank_tasks(cluster, top, patterns_file, cann_version):
        rank, found, saving = rank_findings(task)
        savings[rank] = saving
        findings += found
    return findings, savings


def _step_saving(stages: list[StageRow], ranks: list[RankRow]) -> float | None:
    """The slowest stage's saving (the least of its ranks'), at most its lead over the next slowest stage; None
    when a rank of that stage has no kernel tables (its saving is unknown)."""
    if not stages:
        return 0.0
    order = sorted(stages, key=lambda s: -s.stage_us)
    slowest = order[0]
    saving = [r.fusion_saving_us for r in ranks if r.rank in slowest.ranks]
    if not saving or any(s is None for s in saving):
        return None
    best = min(s for s in saving if s is not None)
    if len(order) > 1:
        best = min(best, slowest.stage_us - order[1].stage_us) if slowest.stage_us > order[1].stage_us else 0.0
    return round(max(best, 0.0), 3)


def analyze_cluster(
    cluster: Cluster,
    *,
    top: int = 10,
    threshold: float = DEFAULT_THRESHOLD,
    patterns_file: str | None = None,
    findings: bool = True,
    precomputed: dict[int, tuple[list[RankFinding], float | None]] | None = None,
    cann_version: str | None = None,
) -> ClusterReport:
    """The cluster report (pure apart from reading each complete rank's kernel tables for its findings;
    `findings=False` skips them: the step table and communication only; `precomputed`: per rank its findings and
    saving per step, as the rank tasks of analyze/cluster_job.py found them)."""
    if not 0 < threshold < 1:
        raise InputError(f"threshold {threshold}: expected a share between 0 and 1, e.g. 0.05")
    table = step_table(cluster)
    means = rank_means(table)
    stages = stage_rows(table)
    verdicts, stage_verdicts = slow_ranks(means, threshold), slow_stages(stages, threshold)
    if precomputed is not None:
        rank_findings = [f for r in sorted(precomputed) for f in precomputed[r][0]]
        savings = {r: s for r, (_, s) in precomputed.items() if s is not None}
    elif findings:
        rank_findings, savings = _rank_findings(cluster, top, patterns_file, cann_version)
    else:
        rank_findings, savings = [], {}
    by_rank = {r.rank: r for r in cluster.ranks}
    rank_rows = [
        RankRow(
            rank=row["rank"],
            stage=row["stage"],
            complete=by_rank[row["rank"]].complete,
            steps=row["steps"],
            step_source=by_rank[row["rank"]].step_source,
            slow=v.slow,
            slow_reason=v.reason,
            fusion_saving_us=savings.get(row["rank"]),
            **_split(row),
        )
        for row, v in zip(means.to_pylist(), verdicts, strict=True)
    ]
    stage_of = {r.rank: r.stage for r in rank_rows}
    stage_list = [
        StageRow(
            stage=row["stage"],
            ranks=sorted(r for r, s in stage_of.items() if s == row["stage"]),
            steps=row["steps"],
            slow=v.slow,
            slow_reason=v.reason,
            **_split(row),
        )
        for row, v in zip(stages.to_pylist(), stage_verdicts, strict=True)
    ]
    step_rows = [StepRow(rank=r["rank"], stage=r["stage"], step=r["step"], **_split(r)) for r in table.to_pylist()]
    communication = _communication(cluster)
    waits = communication.waited_for
    complete = [r.rank for r in cluster.ranks if r.complete]
    slow_rank_ids = [r.rank for r in rank_rows if r.slow]
    summary = _summary(rank_rows, stage_list, slow_rank_ids, waits)
    notes = [
        "figures per rank and stage are means over the steps; a stage's row is, per step, the slowest of its ranks "
        "column by column (msprof-analyze's stage rows)",
        f"slow: computing, or free (host) time by at least 1 % of the step too, more than {threshold:.0%} over the "
        "median of the rank's stage",
    ]
    if len(complete) < len(cluster.ranks):
        partial = [r.rank for r in cluster.ranks if not r.complete]
        shown = compact_ranges(np.array(partial, np.int64)).replace(",", ", ")
        notes.append(f"ranks {shown} have no kernel tables: step split and communication only")
    return ClusterReport(
        source=ClusterSource(
            path=str(cluster.path),
            ranks=[r.rank for r in cluster.ranks],
            complete_ranks=complete,
            partial_ranks=[r.rank for r in cluster.ranks if not r.complete],
            parallel=cluster.parallel,
        ),
        summary=summary,
        has_unfused=any(f.opportunity for f in rank_findings),
        step_saving_us=_step_saving(stage_list, rank_rows),
        cluster=ClusterSteps(
            threshold=threshold,
            steps=steps_of(table),
            ranks=rank_rows,
            stages=stage_list,
            slow_ranks=slow_rank_ids,
            slow_stages=[s.stage for s in stage_list if s.slow],
            step_table=step_rows,
        ),
        communication=communication,
        findings=rank_findings,
        warnings=list(cluster.warnings),
        notes=notes,
    )


def _communication(cluster: Cluster) -> Communication:
    """Per rank and op its time split and bandwidth, the links, slow links, and who was waited for."""
    bandwidth: dict[tuple[int, str], dict[str, tuple[float, float]]] = {}
    for b in bandwidth_table(cluster).to_pylist():
        bandwidth.setdefault((b["rank"], b["name"]), {})[b["transport"]] = (b["size_mb"], b["bandwidth_gbps"])
    ops = [
        CommOp(
            rank=o["rank"],
            section=o["section"],
            name=o["name"],
            group=o["group"],
            count=o["count"],
            elapse_us=round(o["elapse_ms"] * 1e3, 3),
            transit_us=round(o["transit_ms"] * 1e3, 3),
            wait_us=round(o["wait_ms"] * 1e3, 3),
            idle_us=round(o["idle_ms"] * 1e3, 3),
            transit_size_mb={t: round(v[0], 6) for t, v in bandwidth.get((o["rank"], o["name"]), {}).items()},
            bandwidth_gbps={t: round(v[1], 4) for t, v in bandwidth.get((o["rank"], o["name"]), {}).items()},
        )
        for o in op_table(cluster).to_pylist()
    ]
    matrix = matrix_table(cluster)
    links = [Link(**_link(m)) for m in matrix.to_pylist()]
    slow = [Link(**_link(m)) for m in slow_links(matrix).to_pylist()]
    waits = [WaitedFor(rank=r, collectives=n) for r, n in waited_for(cluster).items()]
    return Communication(ops=ops, matrix=links, slow_links=slow, waited_for=waits)


def _link(m: dict[str, Any]) -> dict[str, Any]:
    bw = m["bandwidth_gbps"]
    return {
        "src_rank": m["src_rank"],
        "dst_rank": m["dst_rank"],
        "transport": m["transport"],
        "size_mb": round(m["size_mb"], 6),
        "time_ms": round(m["time_ms"], 6),
        "bandwidth_gbps": round(bw, 4) if math.isfinite(bw) else 0.0,
    }


def _summary(ranks: list[RankRow], stages: list[StageRow], slow: list[int], waits: list[WaitedFor]) -> str:
    step_ms = max((s.stage_us for s in stages), default=0.0) / 1e3
    text = f"{len(ranks)} ranks, {len(stages)} stage{'s' if len(stages) != 1 else ''}; step {step_ms:,.3f} ms"
    if slow:
        text += f"; slow: rank {', '.join(map(str, slow))}"
    else:
        text += "; no slow rank"
    slow_stages = [s.stage for s in stages if s.slow and s.stage is not None]
    if slow_stages:
        text += f"; slow stage {', '.join(map(str, slow_stages))} (the pipeline is imbalanced)"
    if waits:
        most = max(waits, key=lambda w: w.collectives)
        text += f"; the others waited most for rank {most.rank} ({most.collectives} collectives)"
    return text
