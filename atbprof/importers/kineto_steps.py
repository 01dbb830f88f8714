"""Iterations of a serving loop, for Kineto traces that record no ProfilerStep#N frame.

vLLM, SGLang and vllm-ascend's profilers wrap the model runner, not a training loop, so their traces carry no
ProfilerStep. The iterations are found the way a user would find them (step_ranges.yaml, first that applies):

  1. a framework's own iteration range (vLLM / SGLang annotations, the model runner's execute_model call; on
     Ascend the mstx ranges of the MsprofTx layer a serving framework or the user marks): a kernel belongs to the
     outermost range its host launch falls in;
  2. graph launches (cudaGraphLaunch, hipGraphLaunch): a kernel belongs to the last graph launch at or before its
     host launch (the replayed kernels, and the eager ones the host launched between two replays);
  3. device idle gaps far longer than the trace's launch gaps (the host scheduling between iterations), when the
     pieces they cut hold about the same number of ops (iterations of one loop repeat their work).

The host and the device clocks of a trace run apart (a GPU lagging its host by 150 ms is in shared/ anchors), so a
step is cut on the device timeline: step k runs from the end of step k-1's device work to the end of its own. The
idle before an iteration's first kernel (scheduling, input preparation, sampling of the previous token) is in the
step it delays, so the steps partition the span from the first iteration's first kernel to the last one's end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml

from atbprof.importers.assemble import RawOps, RawSteps
from atbprof.importers.trace_events import TraceEvents

ITERATION = "iteration"
"""The step_frames `frame` of a step found here (a ProfilerStep frame is `ProfilerStep`)."""


@dataclass(frozen=True)
class RangeRule:
    name: str
    cats: tuple[str, ...]
    regex: str


@dataclass(frozen=True)
class StepVocabulary:
    ranges: tuple[RangeRule, ...]
    graph_launch_calls: tuple[str, ...]
    gap_min_ns: int
    gap_median_factor: float
    gap_max_count_spread: float


@cache
def vocabulary() -> StepVocabulary:
    """step_ranges.yaml, parsed once."""
    text = resources.files("atbprof.importers").joinpath("step_ranges.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    rules = tuple(RangeRule(r["name"], tuple(r["cats"]), r["regex"]) for r in doc["rules"])
    for r in rules:
        re.compile(r.regex)  # a broken pattern is our bug: fail at first use, not on some trace
    gap = doc["idle_gap"]
    return StepVocabulary(
        rules,
        tuple(doc["graph_launch_calls"]),
        int(gap["min_ns"]),
        float(gap["median_gaps"]),
        float(gap["max_count_spread"]),
    )


@dataclass(frozen=True)
class Iterations:
    frames: RawSteps  # device-time windows, absolute ns, kind ITERATION
    found_by: str  # the rule, as a sentence for reports


def iterations_of(
    trace: TraceEvents, ts: np.ndarray, ops: RawOps, marked: tuple[np.ndarray, np.ndarray, str] | None = None
) -> tuple[Iterations, np.ndarray] | None:
    """`find_iterations` for an importer's op rows, and each op's device start (absolute ns): the windows are
    device time, so an op's step is the window it starts in. An op is placed by its host launch, or by its device
    start where no launch is recorded."""
    start = np.asarray(ops.columns["task_start_ns"].to_numpy(), np.int64)
    end = start + np.asarray(ops.columns["task_dur_ns"].to_numpy(), np.int64)
    launch_ns = ops.step_time_ns
    if launch_ns is None:
        launched = ops.columns.get("host_launch_start_ns")
        launch_ns = start
        if launched is not None:
            known = np.asarray(launched.is_valid().to_numpy(zero_copy_only=False), bool)
            launch_ns = np.where(
                known, np.asarray(launched.fill_null(0).to_numpy(zero_copy_only=False), np.int64), start
            )
    found = find_iterations(trace, ts, launch_ns, start, end, marked)
    return (found, start) if found is not None else None


def find_iterations(
    trace: TraceEvents,
    ts: np.ndarray,
    launch_ns: np.ndarray,
    start_ns: np.ndarray,
    end_ns: np.ndarray,
    marked: tuple[np.ndarray, np.ndarray, str] | None = None,
) -> Iterations | None:
    """The iterations of a trace without ProfilerStep frames; `launch_ns` is each device op's host launch time
    (its device start where no launch is recorded), `start_ns`/`end_ns` its device times, all absolute. `marked`:
    ranges the profile's own marker layer holds (start, end, what they are: Ascend's mstx ranges), tried first.
    None when nothing cuts the trace into more than what the ops' span already is."""
    if not len(start_ns):
        return None
    vocab = vocabulary()
    complete = trace.where("ph", ("X",)) & trace.has_ts & trace.has_dur
    candidates: list[tuple[np.ndarray, np.ndarray, str]] = [marked] if marked is not None else []
    for rule in vocab.ranges:
        rows = np.flatnonzero(complete & trace.where("cat", rule.cats) & _matches(trace, rule.regex))
        if len(rows):
            candidates.append((ts[rows], ts[rows] + np.maximum(trace.dur_ns[rows], 0), rule.name))
    for range_start, range_end, name in candidates:
        if not len(range_start):
            continue
        lo, hi = _outermost(range_start, range_end)
        at = np.searchsorted(lo, launch_ns, side="right") - 1
        inside = (at >= 0) & (launch_ns < hi[np.clip(at, 0, None)])
        owner = np.where(inside, at, -1)
        if (owner >= 0).any():
            return _windows(owner, start_ns, end_ns, f"{name} ({len(lo)} range(s))")
    graph = np.flatnonzero(complete & trace.where("name", vocab.graph_launch_calls))
    if len(graph) >= 2:
        starts = np.sort(ts[graph])
        owner = np.searchsorted(starts, launch_ns, side="right") - 1
        if (owner >= 0).any():
            return _windows(owner, start_ns, end_ns, f"graph launches ({len(starts)} {_calls(trace, graph)})")
    order = np.argsort(start_ns, kind="stable")
    s, e = start_ns[order], end_ns[order]
    reached = np.maximum.accumulate(e)
    gaps = s[1:] - reached[:-1]
    positive = gaps[gaps > 0]
    if not len(positive):
        return None
    limit = max(vocab.gap_min_ns, vocab.gap_median_factor * float(np.median(positive)))
    cut = np.flatnonzero(gaps > limit)
    if not len(cut):
        return None
    cluster = np.zeros(len(s), np.int64)
    cluster[cut + 1] = 1
    owner = np.empty(len(s), np.int64)
    owner[order] = np.cumsum(cluster)
    counts = np.bincount(owner)
    if float(counts.std()) > vocab.gap_max_count_spread * float(counts.mean()):
        return None  # pieces of very different work: gaps inside one step, not a loop's iterations
    return _windows(
        owner, start_ns, end_ns, f"device idle gaps over {limit / 1e6:.3g} ms ({len(cut)} gap(s) cut the trace)"
    )


def _matches(trace: TraceEvents, regex: str) -> np.ndarray:
    hit = pc.match_substring_regex(trace.text("name"), "^(?:" + regex + ")")
    return np.asarray(pc.fill_null(hit, False).to_numpy(zero_copy_only=False), bool)


def _calls(trace: TraceEvents, rows: np.ndarray) -> str:
    names = sorted(set(pa.array(trace.texts("name", rows.tolist())).to_pylist()))
    return " / ".join(names)


def _outermost(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ranges no other range contains, in start order (a partial overlap starts where the one before ended)."""
    order = np.lexsort((-end, start))
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    keep = np.ones(len(start), bool)
    keep[1:] = end[1:] > reach[:-1]
    start, end = start[keep], end[keep]
    if len(start) > 1:
        start[1:] = np.maximum(start[1:], end[:-1])
    return start, end


def _windows(owner: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, found_by: str) -> Iterations | None:
    """Device-time windows of the iterations that own ops: iteration k runs from the end of iteration k-1's device
    work (its own first op, for the first) to the end of its own."""
    mine = owner >= 0
    ids, inverse = np.unique(owner[mine], return_inverse=True)
    if not len(ids):
        return None
    first = np.full(len(ids), np.iinfo(np.int64).max)
    last = np.full(len(ids), np.iinfo(np.int64).min)
    np.minimum.at(first, inverse, start_ns[mine])
    np.maximum.at(last, inverse, end_ns[mine])
    order = np.argsort(first, kind="stable")
    first, last = first[order], np.maximum.accumulate(last[order])
    lo = np.append(first[:1], last[:-1])
    keep = last > lo  # an iteration wholly inside the one before adds no window of its own
    lo, hi = lo[keep], last[keep]
    return Iterations(RawSteps(np.arange(len(lo), dtype=np.int64), lo, hi - lo, ITERATION), found_by)
