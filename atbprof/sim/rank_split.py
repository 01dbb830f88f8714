"""Each rank's step time split as msprof-analyze's step_trace_time does (Computing, Communication (Not
Overlapped), Overlapped, Free, Stage, Bubble), accumulated per rank class while the timeline runs.

Definitions (msprof-analyze cluster_step_trace_time, ascend_profiling_formats.md 2.3): Computing = time some
compute kernel runs; Communication = time some collective runs; Overlapped = both at once; Communication (Not
Overlapped) = Communication - Overlapped; Free = the step's span - Computing - Communication (Not Overlapped);
Bubble = time in pipeline receives; Stage = span - Bubble. A step's span is its frame: the host starting it to
the sampled token back on the host (as a profile's ProfilerStep frames it)."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from atbprof.sim.timeline import StepTimeline


class RankStepSplit(BaseModel):
    """summary.ranks[] of run.json: one rank's mean decode step, µs (the keys the cluster analysis uses)."""

    rank: int
    stage: int
    slowdown: float
    step_us: float
    computing_us: float
    communication_not_overlapped_us: float
    overlapped_us: float
    communication_us: float
    free_us: float
    stage_us: float
    bubble_us: float
    communication_wait_us: float  # time its collectives waited for the group's slowest rank


class RankSplit:
    """Per rank class, one row per step: span, computing, communication, overlapped, wait (ns)."""

    def __init__(self, classes: int) -> None:
        self.rows: list[list[tuple[str, int, int, int, int, int]]] = [[] for _ in range(classes)]

    def add(self, c: int, phase: str, tl: StepTimeline, dur: np.ndarray, comm: np.ndarray, waited: int) -> None:
        start, end = tl.start, tl.start + dur
        computing = int(dur[~comm].sum())
        communication = int(dur[comm].sum())
        # tasks of one device run in order (each starts after the previous ended), so a collective overlaps
        # compute only where the schedule lets a later task start before an earlier one ends
        overlap = int(np.maximum(end[:-1] - start[1:], 0)[comm[:-1] != comm[1:]].sum())
        self.rows[c].append((phase, tl.sync_end - tl.host_start, computing, communication, overlap, waited))

    def decode_means(self, c: int) -> dict[str, float]:
        rows = [r for r in self.rows[c] if r[0] == "decode"] or self.rows[c]
        span, computing, comm, overlap, waited = (np.mean([r[i] for r in rows]) / 1e3 for i in range(1, 6))
        not_overlapped = comm - overlap
        return {
            "step_us": round(float(span), 3),
            "computing_us": round(float(computing), 3),
            "communication_not_overlapped_us": round(float(not_overlapped), 3),
            "overlapped_us": round(float(overlap), 3),
            "communication_us": round(float(comm), 3),
            "free_us": round(float(span - computing - not_overlapped), 3),
            "stage_us": round(float(span), 3),  # no pipeline stages: no bubble
            "bubble_us": 0.0,
            "communication_wait_us": round(float(waited), 3),
        }
