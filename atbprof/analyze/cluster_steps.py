"""The cluster's step table (pure): per rank and step msprof-analyze's split, per stage the slowest of its ranks
column by column (as msprof-analyze's stage rows), and the slow ranks and stages.

A rank is slow when its Computing exceeds the median of its stage's ranks by more than `threshold` (5 % by
default, as msprof-analyze advises) - "more computing" - or its Free (host) time does, by that share and by at
least 1 % of the stage's median step - "more free (host) time" (host time is noisy: a few µs more are not a
cause). The others of its group show the wait in their communication. A stage is slow when its computing (its
slowest rank's) exceeds the median over the stages by as much: an imbalanced pipeline. Figures per rank and
stage are means over the steps."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.importers.cluster import STEP_COLUMNS, Cluster

DEFAULT_THRESHOLD = 0.05


@dataclass(frozen=True)
class SlowVerdict:
    slow: bool
    reason: str | None


FREE_MIN_SHARE = 0.01  # more free time counts only beyond this share of the median step too


def _verdict(
    computing: float, free: float, med_computing: float, med_free: float, med_step: float, threshold: float
) -> SlowVerdict:
    extra_c, extra_f = computing - med_computing, free - med_free
    if med_computing > 0 and extra_c > threshold * med_computing:
        return SlowVerdict(
            True,
            f"more computing: {computing / 1e3:,.3f} ms, {extra_c / med_computing:+.1%} over the median "
            f"{med_computing / 1e3:,.3f} ms",
        )
    if med_free > 0 and extra_f > threshold * med_free and extra_f > FREE_MIN_SHARE * med_step:
        return SlowVerdict(
            True,
            f"more free (host) time: {free / 1e3:,.3f} ms, {extra_f / med_free:+.1%} over the median "
            f"{med_free / 1e3:,.3f} ms ({extra_f / med_step:.1%} of the step)",
        )
    return SlowVerdict(False, None)


def step_table(cluster: Cluster) -> pa.Table:
    """Per rank and step: the split, with the rank's stage (null: no pp group recorded)."""
    stage = {r.rank: r.stage for r in cluster.ranks}
    ranks = cluster.steps.column("rank").to_pylist()
    return cluster.steps.append_column("stage", pa.array([stage.get(r) for r in ranks], pa.int32()))


def rank_means(steps: pa.Table) -> pa.Table:
    """Per rank: the mean of each column over its steps, and the number of steps."""
    aggs = [("step", "count"), *((c, "mean") for c in STEP_COLUMNS)]
    out = steps.group_by(["rank", "stage"], use_threads=False).aggregate(aggs)
    names = ["rank", "stage", "steps", *STEP_COLUMNS]
    out = out.rename_columns([{"step_count": "steps"}.get(n, n.removesuffix("_mean")) for n in out.column_names])
    return out.select(names).sort_by("rank")


def stage_rows(steps: pa.Table) -> pa.Table:
    """Per stage and step the maximum over the stage's ranks (msprof-analyze's stage rows), then per stage the
    mean over steps; ranks without a stage are one group (stage null)."""
    per_step = steps.group_by(["stage", "step"], use_threads=False).aggregate([(c, "max") for c in STEP_COLUMNS])
    per_step = per_step.rename_columns([n.removesuffix("_max") for n in per_step.column_names])
    out = per_step.group_by(["stage"], use_threads=False).aggregate(
        [("step", "count"), *((c, "mean") for c in STEP_COLUMNS)]
    )
    out = out.rename_columns([{"step_count": "steps"}.get(n, n.removesuffix("_mean")) for n in out.column_names])
    return out.select(["stage", "steps", *STEP_COLUMNS]).sort_by("stage")


def slow_ranks(means: pa.Table, threshold: float = DEFAULT_THRESHOLD) -> list[SlowVerdict]:
    """A verdict per row of `rank_means`, against the medians of the rank's stage."""
    stage = means.column("stage").to_pylist()
    comp, free, step = (means.column(c).to_numpy(zero_copy_only=False) for c in ("computing_us", "free_us", "stage_us"))
    out = []
    for i, s in enumerate(stage):
        peers = np.array([j for j, t in enumerate(stage) if t == s])
        medians = (float(np.median(comp[peers])), float(np.median(free[peers])), float(np.median(step[peers])))
        out.append(_verdict(comp[i], free[i], *medians, threshold))
    return out


def slow_stages(stages: pa.Table, threshold: float = DEFAULT_THRESHOLD) -> list[SlowVerdict]:
    """A verdict per stage against the median over the stages (none with a single stage), on computing alone:
    a stage's free time is mostly waiting for the others (the first stage for the token, later ones for data),
    so only its work tells an imbalanced pipeline."""
    comp = stages.column("computing_us").to_numpy(zero_copy_only=False)
    if len(comp) < 2:
        return [SlowVerdict(False, None)] * len(comp)
    mc = float(np.median(comp))
    return [_verdict(c, 0.0, mc, 0.0, 0.0, threshold) for c in comp]


def steps_of(steps: pa.Table) -> list[int]:
    return sorted(s for s in pc.unique(steps.column("step")).to_pylist() if s is not None)
