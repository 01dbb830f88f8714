"""Each rank's step time split as msprof-analyze's step_trace_time does (Computing, Communication (Not
Overlapped), Overlapped, Free, Stage, Bubble), accumulated per rank class while the timeline runs.

Definitions (msprof-analyze cluster_step_trace_time, ascend_profiling_formats.md 2.3): Computing = time some
compute kernel runs; Communication = time some collective runs; Overlapped = both at once; Communication (Not
Overlapped) = Communication - Overlapped; Free = the step's span - Computing - Communication (Not Overlapped);
Bubble = time in pipeline receives; Stage = span - Bubble. A step's span is the rank's frame (as a profile's
ProfilerStep frames it): from the end of its previous step to the end of this one - its last task, or, on the
rank that samples (the last stage), the token back on the host. Every task of the step lies inside its frame, so
Free >= 0."""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel


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
    """Per rank class, one row per step: span, computing, communication, overlapped, wait, bubble (ns)."""

    def __init__(self, classes: int, steady: bool = False) -> None:
        """`steady`: decode means leave out the first decode step (with pipeline stages, a first stage's first
        decode step also waits for the later stages to finish the prefill: the pipeline draining, not decode)."""
        self.rows: list[list[tuple[str, int, int, int, int, int, int]]] = [[] for _ in range(classes)]
        self.steady = steady

    def add(
        self,
        c: int,
        phase: str,
        span: int,
        start: np.ndarray,
        dur: np.ndarray,
        comm: np.ndarray,
        receive: np.ndarray,
        waited: int,
    ) -> None:
        """One step of class `c`: its frame `span`, its tasks' starts and durations (as run), which are HCCL tasks
        and which pipeline receives, and how long its collectives waited for the group's slowest rank."""
        end = start + dur
        computing = int(dur[~comm].sum())
        communication = int(dur[comm].sum())
        # tasks of one device run in order (each starts after the previous ended), so a collective overlaps
        # compute only where the schedule lets a later task start before an earlier one ends
        overlap = int(np.maximum(end[:-1] - start[1:], 0)[comm[:-1] != comm[1:]].sum())
        bubble = int(dur[receive].sum())
        self.rows[c].append((phase, span, computing, communication, overlap, waited, bubble))

    def decode_means(self, c: int) -> dict[str, float]:
        rows = [r for r in self.rows[c] if r[0] == "decode"] or self.rows[c]
        if self.steady and len(rows) > 1 and rows[0][0] == "decode":
            rows = rows[1:]
        span, computing, comm, overlap, waited, bubble = (np.mean([r[i] for r in rows]) / 1e3 for i in range(1, 7))
        not_overlapped = comm - overlap
        return {
            "step_us": round(float(span), 3),
            "computing_us": round(float(computing), 3),
            "communication_not_overlapped_us": round(float(not_overlapped), 3),
            "overlapped_us": round(float(overlap), 3),
            "communication_us": round(float(comm), 3),
            "free_us": round(float(span - computing - not_overlapped), 3),
            "stage_us": round(float(span - bubble), 3),
            "bubble_us": round(float(bubble), 3),
            "communication_wait_us": round(float(waited), 3),
        }
