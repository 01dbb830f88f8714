"""The cluster trace of `atbprof analyze CLUSTER --trace cluster.json[.gz]`: every chosen rank as a process group
of its own, step by step, for the Perfetto UI.

Layout (Chrome JSON): one process per rank (pid = rank + 1, sorted by rank, named `Rank r · stage s` with
`partial` / `slow: <reason>` when so) with a `Step` thread (one slice per step, its step split in the args), a
`Communication` thread (one slice per communication op, a `wait` slice inside it for the time it waited for its
peers; ops that overlap go to `Communication (overlap k)`), and, for a rank with kernel tables, one thread per
device stream (`Stream N`).

Steps are aligned: step k of every rank is placed at one T_k, the steps one after another with a gap of 2 % of the
longest. Within a step the ranks keep their recorded clocks relative to each other (each rank's frame start is its
first timed event of the step; the step's reference is the median of those), so a straggler's late arrival and the
others' waits stay where they happened. A rank whose frame start is further than the step's median length from the
reference (another clock) is aligned on its own frame start instead, and the trace says so. A rank step with no
timed event (a partial rank without communication in it) is drawn from its split at T_k.
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

from atbprof.arrays import distinct
from atbprof.importers.base import Profile
from atbprof.importers.cluster_tables import Cluster, RankProfile
from atbprof.optable.schema import SCHEMA_VERSION
from atbprof.outputs import check_output_file, staged_file
from atbprof.writers.diff_trace_text import CHUNK_ROWS, OP_COLUMNS, OpSliceText, js, stream_lanes, us
from atbprof.writers.selection import MAX_TRACE_RANKS

STEP_TID, COMM_TID = 1, 2
MIN_GAP_NS = 1_000
_SPLIT = ("computing_us", "communication_not_overlapped_us", "free_us")  # their sum is the step
_COMM_ARGS = ("elapse_ms", "transit_ms", "wait_ms", "synchronization_ms", "idle_ms")


@dataclass(frozen=True)
class ClusterTraceResult:
    path: Path
    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    """Steps written, in order."""
    steps_dropped: tuple[int, ...]
    """Steps left out by `max_events` (the tail)."""
    events_written: int
    realigned: tuple[tuple[int, int], ...]
    """(rank, step) placed on its own frame start (its clock far from the other ranks')."""
    note: str | None = None


@dataclass
class _RankEvents:
    """One rank's timed events (absolute ns), by step."""

    rank: RankProfile
    comm: pa.Table  # the cluster's ops rows of this rank
    comm_start: np.ndarray
    comm_end: np.ndarray
    kernels: Profile | None
    kernel_start: np.ndarray  # absolute ns
    kernel_end: np.ndarray
    split: dict[int, dict[str, float]]  # step -> its step split row

    def rows(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(comm rows, kernel rows) of `step`."""
        c = np.flatnonzero(self.comm.column("step").to_numpy(zero_copy_only=False) == step)
        if self.kernels is None:
            return c, np.zeros(0, np.int64)
        k = np.flatnonzero(self.kernels.ops.column("step").fill_null(-1).to_numpy() == step)
        return c, k

    def slices(self, step: int) -> int:
        """The slices `step` takes in the trace: its step slice, its ops, their wait slices, its kernels."""
        c, k = self.rows(step)
        return 1 + len(c) + int(np.count_nonzero(_wait_ns(self.comm, c, self.comm_end - self.comm_start) > 0)) + len(k)

    def frame(self, step: int) -> tuple[int | None, int]:
        """(first timed event's start or None, length in ns) of `step`: the split's step time or the events' reach."""
        c, k = self.rows(step)
        starts = np.concatenate([self.comm_start[c], self.kernel_start[k]])
        ends = np.concatenate([self.comm_end[c], self.kernel_end[k]])
        row = self.split.get(step)
        split_ns = round(sum(row[col] for col in _SPLIT) * 1000) if row else 0
        if not len(starts):
            return None, split_ns
        first = int(starts.min())
        return first, max(split_ns, int(ends.max()) - first)


def default_trace_ranks(ranks: Sequence[int], slow: Sequence[int]) -> list[int]:
    """Every rank up to MAX_TRACE_RANKS; beyond, the slow ranks first and then the lowest."""
    if len(ranks) <= MAX_TRACE_RANKS:
        return sorted(ranks)
    chosen = list(dict.fromkeys([*sorted(slow), *sorted(ranks)]))[:MAX_TRACE_RANKS]
    return sorted(chosen)


def _rank_events(cluster: Cluster, rank: RankProfile, kernels: Profile | None, origin_ns: int) -> _RankEvents:
    ops = cluster.ops.filter(pc.equal(cluster.ops.column("rank"), rank.rank))
    start = np.rint(ops.column("start_us").to_numpy(zero_copy_only=False) * 1000).astype(np.int64)
    elapse = np.rint(ops.column("elapse_ms").to_numpy(zero_copy_only=False) * 1e6).astype(np.int64)
    steps = cluster.steps.filter(pc.equal(cluster.steps.column("rank"), rank.rank)).to_pylist()
    split = {int(r["step"]): r for r in steps}
    if kernels is None:
        k_start = k_end = np.zeros(0, np.int64)
    else:
        k_start = kernels.ops.column("task_start_ns").to_numpy() + origin_ns
        k_end = k_start + kernels.ops.column("task_dur_ns").to_numpy()
    return _RankEvents(rank, ops, start, start + np.maximum(elapse, 0), kernels, k_start, k_end, split)


@dataclass(frozen=True)
class _Placed:
    step: int
    at_ns: int  # T_k
    shift: dict[int, int]  # rank -> ns added to its recorded times
    start: dict[int, int]  # rank -> its frame's start in the trace
    length: dict[int, int]  # rank -> its frame's length
    timed: dict[int, bool]  # rank -> it has timed events in the step (else drawn from its split at T_k)


def _layout(sides: list[_RankEvents], steps: list[int]) -> tuple[list[_Placed], list[tuple[int, int]]]:
    frames = [{s.rank.rank: s.frame(k) for s in sides} for k in steps]
    spans = []  # per step: (rank -> offset of its frame start from the reference, or None when on its own)
    realigned: list[tuple[int, int]] = []
    for k, f in zip(steps, frames, strict=True):
        timed = {r: v for r, v in f.items() if v[0] is not None}
        lengths = [v[1] for v in f.values()]
        median_len = int(np.median(lengths)) if lengths else 0
        ref = int(np.median([v[0] for v in timed.values()])) if timed else 0
        offset: dict[int, int | None] = {}
        for r, (first, _) in f.items():
            if first is None or abs(first - ref) > max(median_len, MIN_GAP_NS):
                offset[r] = None
                if first is not None:
                    realigned.append((r, k))
            else:
                offset[r] = first - ref
        spans.append((ref, offset))
    reach = [
        (
            max([0, *(-o for o in off.values() if o is not None)]),
            max((0 if off[r] is None else off[r] or 0) + f[r][1] for r in f) if f else 0,
        )
        for (_, off), f in zip(spans, frames, strict=True)
    ]
    gap = max(MIN_GAP_NS, max((b + a for b, a in reach), default=0) // 50)
    out, t = [], 0
    for k, (_, off), f, (before, after) in zip(steps, spans, frames, reach, strict=True):
        at = t + before
        shift: dict[int, int] = {}
        start: dict[int, int] = {}
        length: dict[int, int] = {}
        has_events: dict[int, bool] = {}
        for r, (first, n) in f.items():
            o = off[r]
            start[r] = at + (o if o is not None else 0)
            shift[r] = start[r] - first if first is not None else 0
            length[r], has_events[r] = n, first is not None
        out.append(_Placed(k, at, shift, start, length, has_events))
        t = at + after + gap
    return out, realigned


def write_cluster_trace(
    cluster: Cluster,
    ranks: Sequence[int],
    out: Path,
    *,
    slow: dict[int, str | None] | None = None,
    kernels: Callable[[RankProfile], tuple[Profile, int]] | None = None,
    force: bool = False,
    max_events: int = 2_000_000,
) -> ClusterTraceResult:
    """Write `out` (gzip when it ends in .gz): the steps of `ranks`, aligned, as the module docstring lays them out.

    `slow` names each slow rank's reason; `kernels` loads a complete rank's profile and its time origin (absolute
    ns of its time 0), so its kernels are drawn too. `max_events` caps the slices: the first whole steps that fit are
    written, the rest reported. The file appears only when complete (temp file + rename); same inputs, same bytes.
    """
    out = Path(out)
    inputs = [Path(cluster.path)]
    check_output_file(out, "cluster-trace", force=force, inputs=inputs)
    by_rank = {r.rank: r for r in cluster.ranks}
    sides = []
    for r in sorted(set(ranks)):
        profile, origin = (None, 0)
        if kernels is not None and by_rank[r].complete:
            profile, origin = kernels(by_rank[r])
        sides.append(_rank_events(cluster, by_rank[r], profile, origin))
    steps = sorted({k for s in sides for k in s.split} | {int(k) for s in sides for k in _steps_of(s)})
    keep, used = 0, 0
    for k in steps:
        used += sum(s.slices(k) for s in sides)
        if used > max_events:
            break
        keep += 1
    laid, realigned = _layout(sides, steps[:keep])
    dropped = tuple(steps[keep:])
    notes = []
    if dropped:
        notes.append(
            f"trace capped at {max_events:,} slices: wrote the first {keep} of {len(steps)} steps, left out "
            f"steps {dropped[0]} onwards"
        )
    if realigned:
        shown = ", ".join(f"rank {r} step {k}" for r, k in realigned[:6]) + (", ..." if len(realigned) > 6 else "")
        notes.append(f"aligned on their own first event (their clock is far from the other ranks'): {shown}")
    note = "; ".join(notes) or None
    recheck = lambda: check_output_file(out, "cluster-trace", force=force, inputs=inputs)  # noqa: E731
    with staged_file(out, recheck) as tmp, ExitStack() as stack:
        raw = stack.enter_context(open(tmp, "wb"))
        write: Callable[[bytes | memoryview], int] = raw.write
        if out.name.endswith(".gz"):  # no name, mtime 0: the bytes do not depend on the temp path or the time
            write = stack.enter_context(igzip.IGzipFile("", "wb", 1, raw, mtime=0)).write
        other: dict[str, Any] = {"generator": "atbprof", "kind": "cluster", "schema_version": SCHEMA_VERSION}
        other |= {"ranks": [s.rank.rank for s in sides], "steps": [p.step for p in laid]}
        other |= {"steps_dropped": list(dropped), "realigned": [list(x) for x in realigned], "note": note}
        # otherData first: its "generator" within the first bytes is how --force knows the file is ours
        write(f'{{"otherData":{orjson.dumps(other, option=orjson.OPT_SORT_KEYS).decode()},"traceEvents":['.encode())
        events, first = 0, True
        for side in sides:
            for text, n in _rank_document(side, laid, (slow or {}).get(side.rank.rank, "")):
                if first and n:
                    text, first = bytes(text)[1:], False  # the first event has no leading comma
                write(text)
                events += n
        write(b"\n]}\n")
    return ClusterTraceResult(
        out, tuple(s.rank.rank for s in sides), tuple(p.step for p in laid), dropped, events, tuple(realigned), note
    )


def _steps_of(side: _RankEvents) -> set[int]:
    steps = set(pc.unique(side.comm.column("step")).to_pylist())
    if side.kernels is not None:
        steps |= {int(s) for s in pc.unique(side.kernels.ops.column("step").drop_null()).to_pylist()}
    return steps


def _process_name(rank: RankProfile, slow: str | None) -> str:
    name = f"Rank {rank.rank}" + (f" · stage {rank.stage}" if rank.stage is not None else "")
    if not rank.complete:
        name += " · partial"
    if slow is not None and slow != "":  # the reason's kind; its figures are in the report
        name += f" · slow: {slow.split(':')[0]}"
    return name


def _rank_document(
    side: _RankEvents, laid: list[_Placed], slow: str | None
) -> Iterator[tuple[bytes | memoryview, int]]:
    pid = side.rank.rank + 1
    r = side.rank.rank
    comm_rows, comm_ts, kern_rows, kern_ts = [], [], [], []
    for p in laid:
        c, k = side.rows(p.step)
        comm_rows.append(c)
        comm_ts.append(side.comm_start[c] + p.shift[r])
        kern_rows.append(k)
        kern_ts.append(side.kernel_start[k] + p.shift[r])
    c_rows, c_ts = _cat(comm_rows), _cat(comm_ts)
    k_rows, k_ts = _cat(kern_rows), _cat(kern_ts)
    c_dur = side.comm_end[c_rows] - side.comm_start[c_rows]
    c_lane = stream_lanes(np.zeros(len(c_rows), np.int64), c_ts, c_ts + c_dur)
    threads = [(STEP_TID, "Step")]
    threads += [(COMM_TID + n, "Communication" + (f" (overlap {n})" if n else "")) for n in distinct(c_lane).tolist()]
    if not len(c_lane):
        threads.append((COMM_TID, "Communication"))
    first_stream_tid = COMM_TID + (int(c_lane.max()) + 1 if len(c_lane) else 1)
    k_tid, stream_names = _kernel_tids(side, k_rows, k_ts, first_stream_tid)
    threads += stream_names
    meta = [_meta("process_name", pid, None, _process_name(side.rank, slow)), _meta("process_sort_index", pid, None, r)]
    for tid, name in threads:
        meta += [_meta("thread_name", pid, tid, name), _meta("thread_sort_index", pid, tid, tid)]
    yield "".join(meta).encode(), len(meta)
    frames = []
    for p in laid:
        row = side.split.get(p.step)
        args: dict[str, object] = {"rank": r, "step": p.step, "timed": p.timed[r]}
        if row:
            args |= {c: round(float(row[c]), 3) for c in row if c.endswith("_us")}
        frames.append(_x(f"Step {p.step}", pid, STEP_TID, p.start[r], p.length[r], args))
    yield "".join(frames).encode(), len(frames)
    yield from _comm_slices(side, pid, c_rows, c_ts, c_dur, c_lane)
    if len(k_rows):
        dur = side.kernel_end[k_rows] - side.kernel_start[k_rows]
        assert side.kernels is not None
        text, table = OpSliceText(pid), side.kernels.ops.select(list(OP_COLUMNS))
        for lo in range(0, len(k_rows), CHUNK_ROWS):
            hi = min(lo + CHUNK_ROWS, len(k_rows))
            yield text.text(table.take(pa.array(k_rows[lo:hi])), k_tid[lo:hi], k_ts[lo:hi], dur[lo:hi]), hi - lo


def _comm_slices(
    side: _RankEvents, pid: int, rows: np.ndarray, ts: np.ndarray, dur: np.ndarray, lane: np.ndarray
) -> Iterator[tuple[bytes, int]]:
    if not len(rows):
        return
    table = side.comm.take(pa.array(rows)).select(["step", "section", "name", "group", *_COMM_ARGS]).to_pylist()
    waits = _wait_ns(side.comm, rows, side.comm_end - side.comm_start).tolist()
    parts, n = [], 0
    for row, t, d, ln, wait in zip(table, ts.tolist(), dur.tolist(), lane.tolist(), waits, strict=True):
        tid = COMM_TID + ln
        args = {"step": row["step"], "section": row["section"], "group": row["group"]}
        args |= {c: row[c] for c in _COMM_ARGS}
        parts.append(_x(row["name"], pid, tid, t, d, args))
        n += 1
        if wait > 0:  # HCCL waits for its peers before it transfers: the head of the op
            parts.append(_x("wait", pid, tid, t, wait, {"step": row["step"], "wait_ms": row["wait_ms"]}))
            n += 1
        if len(parts) >= 4096:
            yield "".join(parts).encode(), n
            parts, n = [], 0
    yield "".join(parts).encode(), n


def _kernel_tids(
    side: _RankEvents, rows: np.ndarray, ts: np.ndarray, first_tid: int
) -> tuple[np.ndarray, list[tuple[int, str]]]:
    """Per kernel row its thread (one per stream, overlap lanes after), and the threads' (tid, name)."""
    if side.kernels is None or not len(rows):
        return np.zeros(0, np.int64), []
    sid = side.kernels.ops.column("stream_id").take(pa.array(rows)).fill_null(-1).to_numpy().astype(np.int64)
    streams, dense = np.unique(sid, return_inverse=True)
    dur = side.kernel_end[rows] - side.kernel_start[rows]
    lane = stream_lanes(dense, ts, ts + dur)
    width = int(lane.max()) + 1
    key = dense * width + lane
    used = distinct(key)
    tid_of = np.zeros(int(used[-1]) + 1, np.int64)
    tid_of[used] = first_tid + np.arange(len(used))
    names = []
    for k in used.tolist():
        stream, n = int(streams[k // width]), k % width
        base = "No stream" if stream < 0 else f"Stream {stream}"
        names.append((int(tid_of[k]), base if n == 0 else f"{base} (overlap {n})"))
    return tid_of[key], names


def _wait_ns(comm: pa.Table, rows: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
    """Each op's wait slice in ns (its recorded wait, within the op), for `rows` of `comm`."""
    wait_ms = comm.column("wait_ms").take(pa.array(rows, pa.int64())).fill_null(0.0).to_numpy(zero_copy_only=False)
    return np.minimum(dur_ns[rows], np.rint(wait_ms * 1e6).astype(np.int64))


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def _meta(kind: str, pid: int, tid: int | None, value: object) -> str:
    t = "" if tid is None else f',"tid":{tid}'
    key = "sort_index" if kind.endswith("sort_index") else "name"
    return f',\n{{"name":"{kind}","ph":"M","pid":{pid}{t},"args":{{"{key}":{js(value)}}}}}'


def _x(name: str, pid: int, tid: int, start: int, dur: int, args: dict[str, object]) -> str:
    return (
        f',\n{{"name":{js(name)},"ph":"X","pid":{pid},"tid":{tid},"ts":{us(start)},"dur":{us(dur)},"args":{js(args)}}}'
    )
