"""Host dispatch and the host->device task queue, over arrays (one step at a time, chunks of queue depth).

Eager: the host spends `d_i` launching task i; launch i+1 starts when launch i ends, but not before a queue slot is
free (task i-Q has finished). A task is visible to the device `latency` after its launch ends; the device runs
tasks in order: s_i = max(e_{i-1}, ready_i), e_i = s_i + dur_i. Both recurrences are max-plus scans, solved with
cumulative sums and running maxima. Graph mode: one host launch per step, then the device runs the captured graph
with a fixed device-side gap between kernels. Each step ends with the sampled token copied back (`sync`), which
the next step's host work waits for. All times are integer ns.

Ranks of a tensor-parallel group meet in every collective: a collective can not end before the slowest rank has
reached it. `min_end` gives each task the earliest time it may end (the group's collective end, from the slowest
rank; 0 for other tasks); the task then lasts from its own start until then, as msprof shows a collective that
waited. With `min_end` the recurrences become e_i = max(e_{i-1} + ..., min_end_i): the same max-plus scan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HostModel:
    mode: str  # eager | graph
    dispatch_ns: int  # per kernel (eager)
    graph_launch_ns: int
    device_gap_ns: int
    latency_ns: int
    queue_depth: int
    step_overhead_ns: int
    sync_ns: int
    collective_launch_ns: int = 0  # eager: host cost of launching one HCCL collective


@dataclass
class StepTimeline:
    start: np.ndarray  # task start
    end: np.ndarray
    wait: np.ndarray  # gap since the previous task ended (0 for the first task of the run)
    launch_start: np.ndarray | None  # eager only
    launch_dur: np.ndarray | None
    host_start: int
    host_overhead: int
    sync_end: int


def _scan_max_plus(lower: np.ndarray, incr: np.ndarray, first: int) -> np.ndarray:
    """x_i = max(x_{i-1} + incr_{i-1}, lower_i), x_0 = max(first, lower_0); returns x."""
    c = np.concatenate(([0], np.cumsum(incr[:-1], dtype=np.int64)))
    return c + np.maximum(first, np.maximum.accumulate(lower - c))


def _ends_with_floor(first_start: int, dur: np.ndarray, gaps: np.ndarray, min_end: np.ndarray) -> np.ndarray:
    """e_i = max(e_{i-1} + gap_i + dur_i, min_end_i), e_0 = max(first_start + dur_0, min_end_0)."""
    incr = np.concatenate((gaps[1:] + dur[1:], [0]))
    return _scan_max_plus(min_end, incr, first_start + int(dur[0]))


def simulate_step(
    dur: np.ndarray,
    dispatch: np.ndarray | None,
    host: HostModel,
    host_start: int,
    prev_end: int,
    min_end: np.ndarray | None = None,
) -> StepTimeline:
    """One step: `dur` and `dispatch` are int64 ns per task in issue order; `prev_end` = last device end;
    `min_end`: earliest end per task (collectives waiting for the slowest rank), None for none."""
    n = len(dur)
    t_launch = host_start + host.step_overhead_ns
    if host.mode == "graph" or dispatch is None:
        ready_first = t_launch + host.graph_launch_ns + host.latency_ns
        gaps = np.full(n, host.device_gap_ns, dtype=np.int64)
        gaps[0] = 0
        first = max(ready_first, prev_end)
        if min_end is None:
            start = first + np.concatenate(([0], np.cumsum(dur[:-1] + gaps[1:])))
            end = start + dur
        else:
            end = _ends_with_floor(first, dur, gaps, min_end)
            start = np.concatenate(([first], end[:-1] + gaps[1:]))
        launch_start = launch_dur = None
    else:
        q = host.queue_depth
        start = np.empty(n, dtype=np.int64)
        end = np.empty(n, dtype=np.int64)
        launch_start = np.empty(n, dtype=np.int64)
        prev_launch_end = t_launch
        last_end = prev_end
        for a in range(0, n, q):
            b = min(a + q, n)
            d = dispatch[a:b]
            # host blocks until the task q positions earlier has finished (a queue slot is free)
            lower = end[a - q : b - q] if a >= q else np.full(b - a, t_launch, dtype=np.int64)
            if a >= q and len(lower) < b - a:
                lower = np.concatenate((lower, np.full(b - a - len(lower), t_launch)))
            ls = _scan_max_plus(lower, d, prev_launch_end)
            ready = ls + d + host.latency_ns
            u = dur[a:b]
            if min_end is None:
                p_excl = np.concatenate(([0], np.cumsum(u[:-1], dtype=np.int64)))
                s = p_excl + np.maximum(last_end, np.maximum.accumulate(ready - p_excl))
                e = s + u
            else:  # e_i = max(e_{i-1} + u_i, ready_i + u_i, min_end_i); s_i = max(e_{i-1}, ready_i)
                lower = np.maximum(ready + u, min_end[a:b])
                incr = np.concatenate((u[1:], [0]))
                e = _scan_max_plus(lower, incr, last_end + int(u[0]))
                s = np.maximum(np.concatenate(([last_end], e[:-1])), ready)
            start[a:b], end[a:b], launch_start[a:b] = s, e, ls
            prev_launch_end = int(ls[-1] + d[-1])
            last_end = int(end[b - 1])
        launch_dur = dispatch
    wait = np.empty(n, dtype=np.int64)
    wait[0] = start[0] - prev_end if prev_end > 0 else 0
    wait[1:] = start[1:] - end[:-1]
    sync_end = int(end[-1]) + host.sync_ns
    return StepTimeline(start, end, wait, launch_start, launch_dur, host_start, host.step_overhead_ns, sync_end)
