"""`atbprof diff CLUSTER_A CLUSTER_B` (pure): ranks paired by id, stages by index, and per stage each column of
the step split compared over the stage's ranks (paired by rank: one value per rank, its mean step), with the
statistics of diff/stats.py - a stage of one rank is untestable: no significance from one rank. Ranks only one
side has are `added` / `removed` (HTA's vocabulary); the JSON twin is the contract (schema atbprof.cluster-diff/1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from atbprof.analyze.cluster_report import ClusterReport, RankRow
from atbprof.diff.cluster_report import COLUMNS, Change, ClusterDiff, RankChange, StageChange
from atbprof.diff.stats import compare
from atbprof.errors import InputError


def _change(base: list[float], new: list[float], threshold_pct: float) -> Change:
    c = compare(np.array(base), np.array(new), paired=True, threshold_pct=threshold_pct)
    return Change(
        base=round(c.base, 3),
        new=round(c.new, 3),
        delta=round(c.delta, 3),
        delta_pct=None if c.delta_pct is None else round(c.delta_pct, 3),
        ci_low=None if c.ci_low is None else round(c.ci_low, 3),
        ci_high=None if c.ci_high is None else round(c.ci_high, 3),
        significant=c.significant,
        method=c.method,
    )


def diff_cluster_paths(base: Path, new: Path, threshold_pct: float = 1.0) -> ClusterDiff:
    """Two cluster directories (or multi-device runs of ours), each through the cluster analysis (no findings)."""
    from atbprof.analyze.cluster_report import analyze_cluster
    from atbprof.importers.cluster import is_cluster, load_cluster

    for p, other in ((base, new), (new, base)):
        if not is_cluster(p):
            raise InputError(
                f"{p}: not a cluster, but {other} is: diff compares a cluster with a cluster (a directory of rank "
                "profiles, or a multi-device run of ours), or one profile with another"
            )
    a = analyze_cluster(load_cluster(base, rows=False), findings=False)
    b = analyze_cluster(load_cluster(new, rows=False), findings=False)
    return diff_clusters(a, b, threshold_pct)


def diff_clusters(a: ClusterReport, b: ClusterReport, threshold_pct: float = 1.0) -> ClusterDiff:
    ra = {r.rank: r for r in a.cluster.ranks}
    rb = {r.rank: r for r in b.cluster.ranks}
    common = sorted(set(ra) & set(rb))
    ranks = [
        RankChange(
            rank=r,
            stage=rb[r].stage,
            columns={c: _change([getattr(ra[r], c)], [getattr(rb[r], c)], threshold_pct) for c in COLUMNS},
            slow_base=ra[r].slow,
            slow_new=rb[r].slow,
        )
        for r in common
    ]
    stages: dict[int | None, list[int]] = {}
    for r in common:  # a rank that moved stage is compared in its new one
        stages.setdefault(rb[r].stage, []).append(r)
    stage_changes = []
    for s in sorted(stages, key=lambda s: (s is None, s or 0)):
        members = stages[s]
        pairs = [(ra[r], rb[r]) for r in members]
        stage_changes.append(
            StageChange(
                stage=s,
                ranks=members,
                columns={
                    c: _change([getattr(x, c) for x, _ in pairs], [getattr(y, c) for _, y in pairs], threshold_pct)
                    for c in COLUMNS
                },
            )
        )
    return ClusterDiff(
        base=a.source.path,
        new=b.source.path,
        summary=_summary(stage_changes, sorted(set(rb) - set(ra)), sorted(set(ra) - set(rb)), rb),
        added_ranks=sorted(set(rb) - set(ra)),
        removed_ranks=sorted(set(ra) - set(rb)),
        stages=stage_changes,
        ranks=ranks,
        slow_ranks_base=a.cluster.slow_ranks,
        slow_ranks_new=b.cluster.slow_ranks,
    )


def _summary(stages: list[StageChange], added: list[int], removed: list[int], new: dict[int, RankRow]) -> str:
    parts = []
    for s in stages:
        c = s.columns["stage_us"]
        pct = "" if c.delta_pct is None else f" ({c.delta_pct:+.1f} %)"
        verdict = (
            "significant"
            if c.significant
            else ("untestable: one rank" if c.method == "untestable" else "not significant")
        )
        label = "ranks" if s.stage is None else f"stage {s.stage}"
        parts.append(f"{label}: step {c.base / 1e3:,.3f} -> {c.new / 1e3:,.3f} ms{pct}, {verdict}")
    if added:
        parts.append(f"added ranks {', '.join(map(str, added))}")
    if removed:
        parts.append(f"removed ranks {', '.join(map(str, removed))}")
    slow = [r for r, row in new.items() if row.slow]
    if slow:
        parts.append(f"slow in the new cluster: rank {', '.join(map(str, sorted(slow)))}")
    return "; ".join(parts)
