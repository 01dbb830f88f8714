"""Perfetto's per-thread slice stack, replayed: which X slices it drops or spills, which E events close nothing,
which B never end, and which slice each flow event binds to.

Order: trace_processor sorts events by ts; at equal ts an E comes first, then X by descending dur (a parent
before its children), then everything else, then file order (`trace_sorter.h`, SlowOperatorLess). Per track that
is one lexsort on (track, ts, key, index); tracks never interact, so each is swept on its own.

The sweep is `SliceTracker::MaybeCloseStack` (`slice_tracker.cc`): walking the stack from the top, a complete
slice that ended before the new event (or at it, unless both are instants) is popped; a new X that starts inside
a slice and ends after it partially overlaps it: dropped in v51–v56, spilled to an overflow track since v57.
Above a still-open B (pending), a complete slice that ended before the new event truncates the open children
(`misplaced_end_event`). An E closes the innermost pending slice whose cat and name match (a null cat/name on the
E matches anything). Flow events bind to the top of the stack as it stands (a slice that may already have
ended); an `f` without `"bp": "e"` waits for the next slice that starts on its thread.

Shortcut, exact for tracks holding only X (dur ≥ 0) and instants: there every slice on the stack ends no later
than the one below it (a new X is pushed only if it fits inside every open slice), so the walk can stop at the
first slice that neither ends nor conflicts. Tracks with B/E or negative durations get the full walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

PH_X, PH_B, PH_E = ord("X"), ord("B"), ord("E")
PH_INSTANT = ord("i")
"""Thread-scoped i/I/R events are given this code before the sweep (they all become 0-dur slices)."""
PH_S, PH_T, PH_F = ord("s"), ord("t"), ord("f")
NO_NAME = -2
"""A slice without a name is stored as "[No name]", which is not null: an E with a name does not match it."""

Entry = list[Any]
"""A slice on the stack: [ts, dur (None while a B is open), name, cat, event index] (a list: dur is set by E)."""
_INT64_MAX = np.iinfo(np.int64).max
_INT64_MIN = np.iinfo(np.int64).min


def sort_key(ph: npt.NDArray[np.uint8], dur: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The sorter's tie-break at equal ts: E first, X by descending dur, everything else last (file order)."""
    key = np.full(len(ph), _INT64_MAX, dtype=np.int64)
    x = ph == PH_X
    with np.errstate(over="ignore"):
        key[x] = _INT64_MAX - dur[x]  # wraps for negative dur, as the C++ does
    key[ph == PH_E] = _INT64_MIN
    return key


@dataclass
class SweepResult:
    slices: int = 0
    overlaps: list[tuple[int, int]] = field(default_factory=list)
    """(dropped/spilled X, the open slice it partially overlaps)."""
    unmatched_ends: list[int] = field(default_factory=list)
    unmatched_end_had_open: list[bool] = field(default_factory=list)
    """Per unmatched E: whether a B was open on the thread (so the E's name or cat did not match it)."""
    unclosed_begins: list[int] = field(default_factory=list)
    misplaced_ends: list[int] = field(default_factory=list)
    bound: dict[int, int] = field(default_factory=dict)
    """Flow event (s, t, f with bp "e", or a slice carrying a v2 bind_id) → the slice event it binds to (−1: none)."""
    stale: list[int] = field(default_factory=list)
    """Flow events bound to a slice that had already ended at the flow's ts."""
    pending_bound: dict[int, int] = field(default_factory=dict)
    """`f` without bp "e" → the next slice started on its thread (absent: never bound)."""


def sweep(
    order: npt.NDArray[np.int64],
    track: npt.NDArray[np.int64],
    ph: npt.NDArray[np.uint8],
    ts: npt.NDArray[np.int64],
    dur: npt.NDArray[np.int64],
    name: npt.NDArray[np.int32],
    cat: npt.NDArray[np.int32],
    bind_enclosing: npt.NDArray[np.bool_],
    has_v2_flow: npt.NDArray[np.bool_],
    exact_tracks: set[int],
) -> SweepResult:
    """Replay the thread-track events `order` (event indices sorted by track, ts, key, index)."""
    res = SweepResult()
    columns = (order, track[order], ph[order], ts[order], dur[order], name[order], cat[order])
    flags = (bind_enclosing[order], has_v2_flow[order])
    stack: list[Entry] = []
    pending: list[int] = []
    current = None
    exact = False
    overlaps, bound, pending_bound = res.overlaps, res.bound, res.pending_bound
    rows = zip(*(c.tolist() for c in columns), *(f.tolist() for f in flags), strict=True)
    for idx, tr, p, t, dur_x, nm, ct, bp_e, v2 in rows:
        if tr != current:
            _finish_track(stack, res)
            stack, pending, current = [], [], tr
            exact = tr in exact_tracks
        if p in (PH_X, PH_B, PH_INSTANT):
            d = dur_x if p == PH_X else (0 if p == PH_INSTANT else None)
            if exact:
                conflict = _close_stack(stack, t, d, res, idx)
            else:  # X/instant-only track: inlined MaybeCloseStack (see the module docstring)
                conflict = -1
                while stack:
                    top = stack[-1]
                    td = top[1]
                    end = top[0] + td
                    if end < t or (end == t and not (td == 0 and d == 0)):
                        stack.pop()
                        continue
                    if t < end < t + d:
                        conflict = top[4]
                    break
            if conflict < 0:
                stack.append([t, d, nm if nm >= 0 else NO_NAME, ct, idx])
                res.slices += 1
                if pending:
                    for f in pending:
                        pending_bound[f] = idx
                    pending = []
            else:
                overlaps.append((idx, conflict))
            if v2:
                bound[idx] = _top(stack, t, res, idx)
        elif p == PH_E:
            _close_stack(stack, t, None, res, idx)
            _end(stack, t, nm, ct, res, idx)
        elif p in (PH_S, PH_T) or (p == PH_F and bp_e):
            if stack:
                top = stack[-1]
                bound[idx] = top[4]
                if top[1] is not None and top[0] + top[1] < t:
                    res.stale.append(idx)
            else:
                bound[idx] = -1
        elif p == PH_F:
            pending.append(idx)
    _finish_track(stack, res)
    return res


def _top(stack: list[Entry], t: int, res: SweepResult, idx: int) -> int:
    if not stack:
        return -1
    top = stack[-1]
    top_ts, top_dur, top_idx = top[0], top[1], top[4]
    if top_dur is not None and top_ts + top_dur < t:
        res.stale.append(idx)
    return top_idx


def _finish_track(stack: list[Entry], res: SweepResult) -> None:
    for entry in stack:
        if entry[1] is None:
            idx = entry[4]
            res.unclosed_begins.append(idx)


def _close_stack(stack: list[Entry], new_ts: int, new_dur: int | None, res: SweepResult, idx: int) -> int:
    """MaybeCloseStack: pop what ended; return the event index of a slice the new X partially overlaps, or −1."""
    incomplete_descendant = False
    i = len(stack) - 1
    while i >= 0:
        entry = stack[i]
        start, d = entry[0], entry[1]
        if d is None:
            incomplete_descendant = True
            i -= 1
            continue
        end = start + d
        if incomplete_descendant:
            if new_ts > end:
                # truncate the open children to this slice's end and pop them with it (misplaced_end_event)
                res.misplaced_ends.append(idx)
                while len(stack) - 1 > i:
                    child = stack.pop()
                    if child[1] is None:
                        child[1] = end - child[0]
                stack.pop()
                incomplete_descendant = False
            i -= 1
            continue
        if end < new_ts or (end == new_ts and not (d == 0 and new_dur == 0)):
            stack.pop()  # Perfetto pops the top, whichever entry it was looking at
            i -= 1
            continue
        if new_dur is None:
            i -= 1
            continue
        if new_ts < end < new_ts + new_dur:
            owner = entry[4]
            return owner
        i -= 1
    return -1


def _end(stack: list[Entry], t: int, name: int, cat: int, res: SweepResult, idx: int) -> None:
    """SliceTracker::End for an E: close the innermost pending slice with matching cat and name."""
    for j in range(len(stack) - 1, -1, -1):
        entry = stack[j]
        if entry[1] is not None:
            continue
        if cat >= 0 and entry[3] != cat:
            continue
        if name >= 0 and entry[2] != name:
            continue
        start = entry[0]
        entry[1] = t - start
        if j == len(stack) - 1:
            stack.pop()
        return
    res.unmatched_ends.append(idx)
    res.unmatched_end_had_open.append(any(e[1] is None for e in stack))
