"""What real profilers guarantee about times, checked on every imported profile before it is assembled.

Refused (InputError naming the row and the likely damage): a start before 1970 / the trace's zero, a task longer
than a week, a profile spanning more than a week, a stream whose tasks all start together or mostly overlap.
Repaired with a note (as trace_processor's stats do): tasks or framework ops with a negative duration and exact
duplicate rows are dropped. Small overlaps on one stream are real (clock rounding, hand-edited samples) and kept:
the anchors have up to 100 of 191 (Level0, no stream ids) and 18 of 9,876 (a Kineto GPU trace).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.arrays import distinct
from atbprof.errors import InputError
from atbprof.optable.schema import WEEK_NS

OVERLAP_TOL_NS = 1_000
"""A task may start up to 1 µs before the previous task of its stream ended (rounding in µs exports)."""
OVERLAP_REFUSE_FRACTION = 0.5
_MIN_STREAM_TASKS = 8


def _name(columns: dict[str, pa.Array], i: int) -> str:
    names = columns.get("op_name")
    return str(names[i].as_py()) if names is not None and i < len(names) else "?"


def _us(ns: int) -> str:
    return f"{ns / 1e3:,.3f} µs"


def check_task_times(columns: dict[str, pa.Array], source: str, what: str = "task") -> tuple[np.ndarray, list[str]]:
    """Rows to keep (a boolean mask, in source order) and the notes on what was dropped; InputError when the
    times cannot be right. Row numbers in messages count the data rows from 1 in source order."""
    start = columns["task_start_ns"].to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    dur = columns["task_dur_ns"].to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    n = len(start)
    keep = np.ones(n, dtype=bool)
    notes: list[str] = []
    if n == 0:
        return keep, notes
    bad = np.flatnonzero(start < 0)
    if len(bad):
        i = int(bad[0])
        raise InputError(
            f"{source}: {what} {i + 1} ({_name(columns, i)}) starts at {_us(int(start[i]))}, before the clock's "
            f"zero ({len(bad):,} {what}s do): the start times are damaged; re-export the profile"
        )
    bad = np.flatnonzero(dur > WEEK_NS)
    if len(bad):
        i = int(bad[0])
        raise InputError(
            f"{source}: {what} {i + 1} ({_name(columns, i)}) lasts {dur[i] / 86_400e9:,.1f} days: durations are "
            "damaged (are the start time and duration columns swapped?); re-export the profile"
        )
    _drop(
        keep,
        dur < 0,
        notes,
        lambda n, i: (
            f"dropped {n:,} {what}(s) with a negative duration (first: row {i + 1}, {_name(columns, i)}, "
            f"{_us(int(dur[i]))}), as Perfetto does"
        ),
    )
    live = np.flatnonzero(keep)
    if len(live):
        first, last = int(live[np.argmin(start[live])]), int(live[np.argmax(start[live] + dur[live])])
        span = int(start[last] + dur[last] - start[first])
        if span > WEEK_NS:
            raise InputError(
                f"{source}: its {what}s span {span / 86_400e9 / 365.25:,.1f} years (row {first + 1} starts at "
                f"{_us(int(start[first]))}, row {last + 1} ends at {_us(int(start[last] + dur[last]))}); a "
                "profile covers seconds to hours: some start times are damaged"
            )
    _drop(
        keep,
        _exact_duplicates(columns, start, dur, keep),
        notes,
        lambda n, i: (
            f"dropped {n:,} exact duplicate {what}(s) (same name, stream, start and duration as an earlier "
            f"row; first: row {i + 1}, {_name(columns, i)})"
        ),
    )
    _check_streams(columns, start, dur, keep, source, what)
    return keep, notes


def _drop(keep: np.ndarray, mask: np.ndarray, notes: list[str], note: Callable[[int, int], str]) -> None:
    """Clear `mask` from `keep` (in place) and say what went: note(count, first row)."""
    if mask.any():
        keep &= ~mask
        notes.append(note(int(mask.sum()), int(np.flatnonzero(mask)[0])))


def _exact_duplicates(columns: dict[str, pa.Array], start: np.ndarray, dur: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Rows equal in every column to an earlier kept row (candidates by start and duration, then all columns)."""
    out = np.zeros(len(start), dtype=bool)
    idx = np.flatnonzero(keep)
    order = idx[np.lexsort((idx, dur[idx], start[idx]))]
    same = (start[order][1:] == start[order][:-1]) & (dur[order][1:] == dur[order][:-1])
    if not same.any():
        return out
    candidates = distinct(np.concatenate([order[1:][same], order[:-1][same]]))
    table = pa.table({name: arr.take(pa.array(candidates)) for name, arr in columns.items()})
    table = table.append_column("__row", pa.array(candidates))
    keys = [f.name for f in table.schema if f.name != "__row" and not pa.types.is_nested(f.type)]
    first = table.group_by(keys, use_threads=False).aggregate([("__row", "min")]).column("__row_min")
    out[candidates] = True
    out[first.to_numpy()] = False
    return out


def _check_streams(
    columns: dict[str, pa.Array], start: np.ndarray, dur: np.ndarray, keep: np.ndarray, source: str, what: str
) -> None:
    """A stream runs one task at a time: refuse a stream whose tasks mostly overlap (all at one start, say)."""
    sid_col = columns.get("stream_id")
    if sid_col is None or sid_col.null_count == len(sid_col):
        return
    sid = pc.fill_null(pc.cast(sid_col, pa.int64()), -1).to_numpy(zero_copy_only=False)
    live = np.flatnonzero(keep & (sid >= 0))
    if len(live) < _MIN_STREAM_TASKS:
        return
    order = live[np.lexsort((start[live], sid[live]))]
    s, st, du = sid[order], start[order], dur[order]
    for stream in distinct(s):
        m = s == stream
        if m.sum() < _MIN_STREAM_TASKS:
            continue
        a, d = st[m], du[m]
        ends = np.maximum.accumulate(a + np.maximum(d, 0))
        overlapping = (a[1:] < ends[:-1] - OVERLAP_TOL_NS) & (d[1:] > 0)
        if overlapping.mean() > OVERLAP_REFUSE_FRACTION:
            together = " (all start at the same time)" if np.all(a == a[0]) else ""
            raise InputError(
                f"{source}: {int(overlapping.sum()):,} of {int(m.sum()):,} {what}s on stream {int(stream)} start "
                f"before the previous one ended{together}; a stream runs one task at a time, so the start times "
                "are damaged: re-export the profile"
            )


def check_spans(start: np.ndarray, dur: np.ndarray, what: str) -> tuple[np.ndarray, list[str]]:
    """Framework ops / profiler steps: negative durations dropped with a note."""
    negative = dur < 0
    if not negative.any():
        return np.ones(len(dur), dtype=bool), []
    return ~negative, [f"dropped {int(negative.sum()):,} {what}(s) with a negative duration, as Perfetto does"]
