"""The combined trace of `atbprof diff a b --trace combined.json[.gz]`: both profiles side by side, step-aligned.

Layout (Chrome JSON, loads in Perfetto): pid 1 `diff` on top (one slice per pair with base_ms, new_ms, delta_ms,
delta_pct), pid 2 `<base label>: <name>`, pid 3 `<new label>: <name>`. Each side has a `Steps` thread (tid 1, one
slice per step frame) and one thread per device stream (`Stream N`, tids 2.. in stream order); ops that overlap an
earlier op of their stream (foreign profiles) go to extra lanes `Stream N (overlap k)` so no thread has partially
overlapping slices. Pair k is placed at T_k, and each side's step frame start (host start of our runs' steps, else
the profile's step frame, else the step's first op) is shifted onto T_k:

    T_k = T_{k-1} + max(after_{k-1}) + gap + max(before_k)

`after` is how far a side's step reaches past its frame start (frame end or last op end), `before` how far its ops
start before it (usually 0); the gap is 2% of the longest pair (at least 1 µs). Steps not in `pairs` are left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from isal import igzip

from atbprof.errors import InputError
from atbprof.importers.base import Profile
from atbprof.optable.schema import SCHEMA_VERSION
from atbprof.outputs import check_output_file, staged_file
from atbprof.writers.diff_trace_text import CHUNK_ROWS, OP_COLUMNS, OpSliceText, js, stream_lanes, us

PID_DIFF, PID_BASE, PID_NEW = 1, 2, 3
STEPS_TID, FIRST_STREAM_TID = 1, 2
MIN_GAP_NS = 1_000
NO_STEP = int(np.iinfo(np.int32).min)  # null step: never paired
NO_STREAM = int(np.iinfo(np.int32).max)  # null stream_id: its own thread, after the streams


@dataclass(frozen=True)
class DiffTraceResult:
    path: Path
    pairs: tuple[tuple[int, int], ...]
    """(base step, new step) pairs written, in order."""
    pairs_dropped: tuple[tuple[int, int], ...]
    """Pairs left out by `max_events` (the tail of `pairs`)."""
    events_written: int
    """All events of `traceEvents`: slices and the process / thread metadata."""
    note: str | None = None
    """Why pairs were dropped, for the report; None when every pair was written."""


@dataclass(frozen=True)
class _Frame:
    start_ns: int  # the alignment anchor
    end_ns: int
    title: str


class _Side:
    """One profile: its ops grouped by step, and the frame of each step."""

    def __init__(self, profile: Profile, label: str, pid: int) -> None:
        ops = profile.ops
        self.profile, self.label, self.pid = profile, label, pid
        self.name = f"{label}: {_profile_name(profile)}"
        self.start = ops.column("task_start_ns").to_numpy()
        dur = ops.column("task_dur_ns").to_numpy()
        if len(dur) and int(dur.min()) < 0:
            bad = int(np.argmin(dur))
            raise InputError(f"{profile.source}: op row {bad} has a negative duration ({int(dur[bad])} ns)")
        self.end = self.start + dur
        step = ops.column("step").fill_null(NO_STEP).to_numpy()
        order = np.argsort(step, kind="stable")
        values, first = np.unique(step[order], return_index=True)
        bounds = np.append(first, len(order))
        self.rows = {int(v): order[bounds[i] : bounds[i + 1]] for i, v in enumerate(values) if v != NO_STEP}
        self.frames = _frames(profile)

    def frame(self, step: int) -> _Frame:
        if step in self.frames:
            return self.frames[step]
        rows = self.rows.get(step)
        if rows is None:
            known = sorted(set(self.rows) | set(self.frames))
            shown = ", ".join(map(str, known[:12])) + (", ..." if len(known) > 12 else "")
            raise InputError(
                f"{self.profile.source} ({self.label}) has no step {step}; its steps are: {shown or 'none'}"
            )
        return _Frame(int(self.start[rows].min()), int(self.end[rows].max()), f"Step {step}")

    def extent(self, step: int) -> tuple[int, int]:
        """(ns before, ns after) the frame start that the step's frame and ops cover."""
        f, rows = self.frame(step), self.rows.get(step)
        lo, hi = f.start_ns, f.end_ns
        if rows is not None and len(rows):
            lo, hi = min(lo, int(self.start[rows].min())), max(hi, int(self.end[rows].max()))
        return f.start_ns - lo, hi - f.start_ns

    def n_ops(self, step: int) -> int:
        rows = self.rows.get(step)
        return 0 if rows is None else len(rows)


def _profile_name(profile: Profile) -> str:
    name = profile.meta.get("name")
    return name if isinstance(name, str) and name else Path(profile.source).name


def _frames(profile: Profile) -> dict[int, _Frame]:
    if profile.steps is not None and profile.steps.num_rows:
        rows = profile.steps.select(["step", "phase", "host_start_ns", "sync_end_ns"]).to_pylist()
        return {
            r["step"]: _Frame(r["host_start_ns"], r["sync_end_ns"], f"Step {r['step']} ({r['phase']})") for r in rows
        }
    if profile.step_frames is not None:
        rows = profile.step_frames.select(["step", "start_ns", "dur_ns"]).to_pylist()
        return {r["step"]: _Frame(r["start_ns"], r["start_ns"] + r["dur_ns"], f"Step {r['step']}") for r in rows}
    return {}


@dataclass(frozen=True)
class _Pair:
    steps: tuple[int, int]
    at_ns: int  # T_k: where both frame starts land
    lo_ns: int  # window of the pair (all its slices)
    hi_ns: int


def _layout(sides: tuple[_Side, _Side], pairs: Sequence[tuple[int, int]]) -> list[_Pair]:
    ext = [[side.extent(s) for side, s in zip(sides, p, strict=True)] for p in pairs]
    before = [max(b for b, _ in e) for e in ext]
    after = [max(a for _, a in e) for e in ext]
    gap = max(MIN_GAP_NS, max((b + a for b, a in zip(before, after, strict=True)), default=0) // 50)
    out, t = [], 0
    for p, b, a in zip(pairs, before, after, strict=True):
        at = t + b
        out.append(_Pair((int(p[0]), int(p[1])), at, t, at + a))
        t = at + a + gap
    return out


def _cap(sides: tuple[_Side, _Side], pairs: Sequence[tuple[int, int]], max_events: int) -> int:
    """How many leading pairs fit in `max_events` slices (ops of both sides + 2 step slices + 1 diff slice)."""
    used = 0
    for k, (b, n) in enumerate(pairs):
        used += sides[0].n_ops(b) + sides[1].n_ops(n) + 3
        if used > max_events:
            return k
    return len(pairs)


def write_diff_trace(
    base: Profile,
    new: Profile,
    pairs: list[tuple[int, int]],
    out: Path,
    *,
    labels: tuple[str, str] = ("base", "new"),
    force: bool = False,
    max_events: int = 2_000_000,
) -> DiffTraceResult:
    """Write `out` (gzip when it ends in .gz) with the steps of `pairs` of both profiles aligned side by side.

    `max_events` caps the slices: the first whole pairs that fit are written, the rest reported as dropped.
    Raises OutputExistsError if `out` exists and not `force`, InputError if a paired step is in neither the
    profile's frames nor its ops. The file appears only when complete (temp file + rename); same inputs, same bytes.
    """
    out = Path(out)
    inputs = [Path(p.source) for p in (base, new)]
    check_output_file(out, "diff-trace", force=force, inputs=inputs)
    sides = (_Side(base, labels[0], PID_BASE), _Side(new, labels[1], PID_NEW))
    for b, n in pairs:  # every step must exist before anything is written
        sides[0].frame(b), sides[1].frame(n)
    keep = _cap(sides, pairs, max_events)
    laid = _layout(sides, pairs[:keep])
    dropped = tuple((int(b), int(n)) for b, n in pairs[keep:])
    note = None
    if dropped:
        note = (
            f"trace capped at {max_events:,} slices: wrote the first {keep} of {len(pairs)} step pairs, left out "
            f"{len(dropped)} (base/new steps {dropped[0][0]}/{dropped[0][1]} onwards)"
        )
    recheck = lambda: check_output_file(out, "diff-trace", force=force, inputs=inputs)  # noqa: E731
    with staged_file(out, recheck) as tmp, ExitStack() as stack:
        raw = stack.enter_context(open(tmp, "wb"))
        write: Callable[[bytes | memoryview], int] = raw.write
        if out.name.endswith(".gz"):  # no name, mtime 0: the bytes do not depend on the temp path or the time
            write = stack.enter_context(igzip.IGzipFile("", "wb", 1, raw, mtime=0)).write
        events = 0
        for text, n in _document(sides, laid, dropped, note):
            write(text)
            events += n
    return DiffTraceResult(out, tuple(p.steps for p in laid), dropped, events, note)


def _document(
    sides: tuple[_Side, _Side], laid: list[_Pair], dropped: tuple[tuple[int, int], ...], note: str | None
) -> Iterator[tuple[bytes | memoryview, int]]:
    """The file as (bytes, events in them) pieces: metadata, per side its op and step slices, the diff slices."""
    tracks = [_tracks(side, laid) for side in sides]
    meta = [_meta("process_name", PID_DIFF, None, "diff"), _meta("process_sort_index", PID_DIFF, None, 0)]
    meta += [_meta("thread_name", PID_DIFF, 1, "Pairs"), _meta("thread_sort_index", PID_DIFF, 1, 0)]
    for side, (*_, names) in zip(sides, tracks, strict=True):
        meta += [
            _meta("process_name", side.pid, None, side.name),
            _meta("process_sort_index", side.pid, None, side.pid),
        ]
        for tid, name in [(STEPS_TID, "Steps"), *names]:
            meta += [_meta("thread_name", side.pid, tid, name), _meta("thread_sort_index", side.pid, tid, tid)]
    other: dict[str, Any] = {"generator": "atbprof", "schema_version": SCHEMA_VERSION, "kind": "diff"}
    other |= {"sides": [{"label": s.label, "source": s.profile.source, "kind": s.profile.kind} for s in sides]}
    other |= {"pairs": [list(p.steps) for p in laid], "pairs_dropped": [list(p) for p in dropped], "note": note}
    # otherData first: its "generator" within the first bytes is how --force knows the file is ours
    head = f'{{"otherData":{orjson.dumps(other, option=orjson.OPT_SORT_KEYS).decode()},"traceEvents":[\n'
    yield (head + "".join(meta)[2:]).encode(), len(meta)  # [2:]: the first event's ",\n"
    for side, (rows, ts, tids, _) in zip(sides, tracks, strict=True):
        yield from _op_slices(side, rows, ts, tids)
    diff = []
    for k, p in enumerate(laid):
        frames = [side.frame(s) for side, s in zip(sides, p.steps, strict=True)]
        for side, s, f in zip(sides, p.steps, frames, strict=True):
            args: dict[str, object] = {"step": s, "ops": side.n_ops(s), "dur_ns": f.end_ns - f.start_ns}
            yield _x(f.title, side.pid, STEPS_TID, p.at_ns, p.at_ns + f.end_ns - f.start_ns, args).encode(), 1
        diff.append(_x(*_pair_slice(k, p, frames)))
    yield "".join(diff).encode(), len(diff)
    yield b"\n]}\n", 0


def _pair_slice(k: int, p: _Pair, frames: list[_Frame]) -> tuple[str, int, int, int, int, dict[str, object]]:
    base_ns, new_ns = (f.end_ns - f.start_ns for f in frames)
    delta = new_ns - base_ns
    pct = round(100.0 * delta / base_ns, 3) if base_ns else None
    steps = f"step {p.steps[0]}" if p.steps[0] == p.steps[1] else f"step {p.steps[0]} vs {p.steps[1]}"
    name = f"{steps}: {'n/a' if pct is None else f'{pct:+.1f}%'}"
    args: dict[str, object] = {"pair": k, "base_step": p.steps[0], "new_step": p.steps[1]}
    args |= {"base_ms": base_ns / 1e6, "new_ms": new_ns / 1e6, "delta_ms": delta / 1e6, "delta_pct": pct}
    return name, PID_DIFF, 1, p.lo_ns, p.hi_ns, args


def _tracks(side: _Side, laid: list[_Pair]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[int, str]]]:
    """The op rows written (pair by pair), their shifted start (ns) and tid, and each lane thread's (tid, name)."""
    rows, ts = _placed(side, laid)
    if len(rows) == 0:
        return rows, ts, np.zeros(0, np.int64), []
    sid_col = side.profile.ops.column("stream_id").take(pa.array(rows)).combine_chunks()
    enc = pc.dictionary_encode(sid_col.fill_null(NO_STREAM))  # hash-based: no sort of a million ids
    streams = enc.dictionary.to_numpy().astype(np.int64)
    order = np.argsort(streams)  # threads in stream order; no stream (NO_STREAM) last
    rank = np.empty(len(streams), np.int64)
    rank[order] = np.arange(len(streams))
    sid = rank[enc.indices.to_numpy()]
    lane = stream_lanes(sid, ts, ts + (side.end[rows] - side.start[rows]))
    width = int(lane.max()) + 1
    key = sid * width + lane  # (stream rank, lane) -> one small int
    used = np.flatnonzero(np.bincount(key))
    tid_of = np.zeros(int(used[-1]) + 1, np.int64)
    tid_of[used] = FIRST_STREAM_TID + np.arange(len(used))
    names = []
    for k in used.tolist():
        stream, n = int(streams[order[k // width]]), k % width
        base = "No stream" if stream == NO_STREAM else f"Stream {stream}"
        names.append((int(tid_of[k]), base if n == 0 else f"{base} (overlap {n})"))
    return rows, ts, tid_of[key], names


def _placed(side: _Side, laid: list[_Pair]) -> tuple[np.ndarray, np.ndarray]:
    """The op rows written for `side` (pair by pair, op order within a step) and their shifted start (ns)."""
    idx = [p.steps[side.pid - PID_BASE] for p in laid]
    parts = [side.rows.get(s, np.zeros(0, np.int64)) for s in idx]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.concatenate(parts)
    shift = np.repeat(
        [p.at_ns - side.frame(s).start_ns for p, s in zip(laid, idx, strict=True)], [len(r) for r in parts]
    )
    return rows, side.start[rows] + shift


def _op_slices(side: _Side, rows: np.ndarray, ts: np.ndarray, tid: np.ndarray) -> Iterator[tuple[memoryview, int]]:
    dur = side.end[rows] - side.start[rows]
    text, table = OpSliceText(side.pid), side.profile.ops.select(list(OP_COLUMNS))
    for lo in range(0, len(rows), CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, len(rows))
        chunk = table.take(pa.array(rows[lo:hi]))
        yield text.text(chunk, tid[lo:hi], ts[lo:hi], dur[lo:hi]), hi - lo


def _meta(kind: str, pid: int, tid: int | None, value: object) -> str:
    t = "" if tid is None else f',"tid":{tid}'
    key = "sort_index" if kind.endswith("sort_index") else "name"
    return f',\n{{"name":"{kind}","ph":"M","pid":{pid}{t},"args":{{"{key}":{js(value)}}}}}'


def _x(name: str, pid: int, tid: int, start: int, end: int, args: dict[str, object]) -> str:
    span = f'"ts":{us(start)},"dur":{us(end - start)}'
    return f',\n{{"name":{js(name)},"ph":"X","pid":{pid},"tid":{tid},{span},"args":{js(args)}}}'
