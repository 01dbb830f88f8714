"""Per-event rules that need no ordering: phases, times, pid/tid coercion, counters, metadata, async ids.

Each check takes the `EventTable` and masks of what survives the tokenizer, and reports through a `Collector`
(which aggregates one finding per rule). What Perfetto does in each case was read in `json_trace_tokenizer.cc` /
`json_trace_parser.cc` and checked against the real trace_processor v52 (tests/validate/test_tp_crosscheck.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from atbprof.arrays import distinct
from atbprof.validate.catalog import RULES
from atbprof.validate.columns import (
    K_FLOAT,
    K_STR,
    MISSING,
    MISSING_VALUE,
    OK,
    OUT_OF_RANGE,
    STRING,
    EventTable,
)
from atbprof.validate.report import MAX_INDICES, SEVERITIES, Finding

BOOL = npt.NDArray[np.bool_]
SUPPORTED_PH = frozenset("BEXCiIRbenstfMP")
HONOURED_METADATA = frozenset({"process_name", "thread_name", "process_sort_index", "thread_sort_index"})
PRECISION_LIMIT_US = 2.0**43
"""From here up a double's spacing exceeds 1 ns of µs: fractional timestamps get rounded (256 ns at ~1.7e15)."""


def ph_mask(table: EventTable, chars: str) -> BOOL:
    codes = np.frombuffer(chars.encode(), dtype=np.uint8)
    return np.isin(table.ph, codes)


class Collector:
    """One finding per rule: total count, first event indices, the catalog's message plus a detail."""

    def __init__(self) -> None:
        self._found: dict[str, Finding] = {}

    def add(self, rule: str, rows: npt.ArrayLike | None = None, detail: str = "", count: int | None = None) -> None:
        idx = np.sort(np.asarray(rows if rows is not None else [], dtype=np.int64))
        total = count if count is not None else len(idx)
        if total <= 0:
            return
        spec = RULES[rule]
        message = spec.message + (f"; {detail}" if detail else "")
        first = tuple(int(i) for i in idx[:MAX_INDICES])
        self._found[rule] = Finding(spec.severity, rule, total, message, spec.fix, first)

    def findings(self) -> tuple[Finding, ...]:
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        return tuple(sorted(self._found.values(), key=lambda f: (rank[f.severity], -f.count, f.rule)))


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


@dataclass
class Survivors:
    """Masks of what Perfetto's tokenizer and sorter let through."""

    alive: BOOL
    """Imported into the sorter: an object with a phase and a usable, non-negative ts (M may omit ts)."""
    thread_scoped: BOOL
    """Alive events that live on a thread track (X, B, E, thread instants, s/t/f, thread metadata)."""
    instants_thread: BOOL
    instants_other: BOOL
    """Valid process/global instants (slices on process/global tracks)."""


def _readable(table: EventTable, out: Collector, container: str) -> BOOL:
    """The events Perfetto's tokenizer gets to (all of them, unless the file makes it give up)."""
    read = np.ones(table.n, dtype=np.bool_)
    not_objects = np.flatnonzero(~table.is_object)
    if len(not_objects):
        out.add("event_not_object", not_objects, "nothing is imported, so the other rules were not checked")
        return np.zeros(table.n, dtype=np.bool_)
    stops = np.flatnonzero(table.stops_tokenizer)
    if len(stops):
        first = int(stops[0])
        if container == "object":
            lost = "the {traceEvents} form then fails to import ('JSON trace file is incomplete'): nothing is shown"
            read[:] = False
        else:
            lost = f"the {_plural(table.n - first, 'event')} from #{first} on are not imported (nor checked here)"
            read[first:] = False
        out.add("time_field_unreadable", stops, lost)
    return read


def check_fields(table: EventTable, out: Collector, container: str) -> Survivors:
    ph = table.ph
    read = _readable(table, out, container)
    out.add("missing_ph", np.flatnonzero(read & (ph == 0)))
    has_ph = read & (ph != 0)
    is_meta = ph == ord("M")
    out.add("missing_ts", np.flatnonzero(has_ph & ~is_meta & (table.ts_state == MISSING)))
    tok_ok = has_ph & ((table.ts_state == OK) | is_meta)
    negative = tok_ok & (table.ts_state == OK) & (table.ts < 0)
    out.add("negative_ts", np.flatnonzero(negative))
    alive = tok_ok & ~negative & (ph != ord("P"))
    out.add("v8_profile_events", np.flatnonzero(tok_ok & (ph == ord("P"))))

    unsupported = alive & ~ph_mask(table, "".join(sorted(SUPPORTED_PH)))
    if unsupported.any():
        seen = Counter(chr(int(c)) for c in ph[unsupported])
        out.add(
            "unsupported_ph", np.flatnonzero(unsupported), ", ".join(f"'{c}' ×{n:,}" for c, n in seen.most_common())
        )
        alive &= ~unsupported

    x = alive & (ph == ord("X"))
    out.add("complete_without_dur", np.flatnonzero(x & (table.dur_state == MISSING)))
    out.add("negative_dur", np.flatnonzero(x & (table.dur_state == OK) & (table.dur < 0)))
    alive &= ~(x & (table.dur_state != OK))

    out.add("string_timestamps", np.flatnonzero(alive & (table.ts_kind == K_STR)))
    _check_precision(table, alive, out)

    instants = alive & ph_mask(table, "iIR")
    inst_thread, inst_other = _check_instants(table, instants, out)
    thread_scoped = (alive & ph_mask(table, "XBEstf")) | inst_thread | _thread_metadata(table, alive)
    _check_ids(table, alive, thread_scoped, out)
    without_name = ((alive & ph_mask(table, "XB")) | inst_thread) & (table.name < 0)
    out.add("slice_without_name", np.flatnonzero(without_name))
    return Survivors(alive & ~(instants & ~(inst_thread | inst_other)), thread_scoped, inst_thread, inst_other)


def _check_precision(table: EventTable, alive: BOOL, out: Collector) -> None:
    fractional = alive & ((table.ts_kind == K_FLOAT) | (table.ts_kind == K_STR)) & (table.ts % 1000 != 0)
    big = fractional & (np.abs(table.ts) >= PRECISION_LIMIT_US * 1000)
    if big.any():
        step = float(np.spacing(float(np.abs(table.ts[big]).max())))
        out.add("ts_precision", np.flatnonzero(big), f"here the step is {step:.0f} ns")


def _check_instants(table: EventTable, instants: BOOL, out: Collector) -> tuple[BOOL, BOOL]:
    rows = np.flatnonzero(instants)
    scope = table.sparse("s", rows) if "s" in table.keys else [MISSING_VALUE] * len(rows)
    glob = np.array([s == "g" for s in scope], dtype=np.bool_)
    proc = np.array([s == "p" for s in scope], dtype=np.bool_)
    thread = ~glob & ~proc  # "t", absent, or anything else (v52 treats unknown scopes as thread)
    ok_proc = proc & (table.pid_state[rows] != MISSING)
    ok_thread = thread & (table.tid_state[rows] != MISSING)
    out.add("instant_without_track", rows[(proc & ~ok_proc) | (thread & ~ok_thread)])
    inst_thread = np.zeros(table.n, dtype=np.bool_)
    inst_thread[rows[ok_thread]] = True
    inst_other = np.zeros(table.n, dtype=np.bool_)
    inst_other[rows[glob | ok_proc]] = True
    return inst_thread, inst_other


def _thread_metadata(table: EventTable, alive: BOOL) -> BOOL:
    meta = np.flatnonzero(alive & (table.ph == ord("M")))
    thread_meta = np.zeros(table.n, dtype=np.bool_)
    for i in meta.tolist():
        if table.name_of(i) in ("thread_name", "thread_sort_index"):
            thread_meta[i] = True
    return thread_meta


def _check_ids(table: EventTable, alive: BOOL, thread_scoped: BOOL, out: Collector) -> None:
    out.add("pid_out_of_range", np.flatnonzero(alive & (table.pid_state == OUT_OF_RANGE)), _ranges(table, alive))
    out.add("tid_out_of_range", np.flatnonzero(thread_scoped & (table.tid_state == OUT_OF_RANGE)))
    stringly = alive & ((table.pid_state == STRING) | (table.tid_state == STRING))
    out.add("string_pid_tid", np.flatnonzero(stringly), _split_ids(table, alive) if stringly.any() else "")
    out.add("pid_missing", np.flatnonzero(alive & (table.pid_state == MISSING) & (table.ph != ord("M"))))
    is_meta = table.ph == ord("M")
    out.add("tid_missing", np.flatnonzero(thread_scoped & ~is_meta & (table.tid_state == MISSING) & (table.pid != 0)))

    rows = np.flatnonzero(thread_scoped)
    pid, tid, state, raw = table.pid[rows], table.tid[rows], table.tid_state[rows], table.tid_raw[rows]
    identity = np.where(state == MISSING, tid, raw)  # a missing tid means "the main thread": no merge
    zero = (state == OK) & (raw == 0) & (pid != 0)
    moved = (identity != tid) & (state != OUT_OF_RANGE)  # out-of-range tids have their own rule
    merged = np.zeros(len(rows), dtype=np.bool_)
    if moved.any():
        # only (pid, tid) tracks that received a moved tid can be merged: check those rows alone
        track = dense_tracks(pid, tid)
        suspect = np.isin(track, distinct(track[moved]))
        pairs = np.unique(np.stack([track[suspect], identity[suspect]]), axis=1)
        tracks, per_track = np.unique(pairs[0], return_counts=True)
        shared = tracks[per_track > 1]
        merged = moved & np.isin(track, shared)
    if merged.any():
        example = int(rows[np.flatnonzero(merged)[0]])
        detail = (
            f"e.g. #{example} tid {int(table.tid_raw[example])} lands on pid {int(table.pid[example])} "
            f"tid {int(table.tid[example])}, which other events use as a real tid"
        )
        out.add("threads_merged", rows[merged], detail)
    out.add("tid_zero", rows[zero & ~merged])


def _split_ids(table: EventTable, alive: BOOL) -> str:
    """Name a string id that is also used as a number: Perfetto makes two processes/threads of them."""
    for what, state, value in (("tid", table.tid_state, table.tid), ("pid", table.pid_state, table.pid)):
        numbers = set(distinct(value[alive & (state == OK)]).tolist())
        for i in np.flatnonzero(alive & (state == STRING))[:1000].tolist():
            text = table.events[i].get(what)
            if isinstance(text, str) and text.strip().isdigit() and int(text) in numbers:
                kind = "threads" if what == "tid" else "processes"
                return f"{what} {text!r} (a string) and {what} {int(text)} (a number) become two different {kind}"
    return ""


def dense_tracks(pid: npt.NDArray[np.int64], tid: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """A dense id per distinct (pid, tid) pair."""
    if not len(pid):
        return np.zeros(0, dtype=np.int64)
    _, pid_inv = np.unique(pid, return_inverse=True)
    tids, tid_inv = np.unique(tid, return_inverse=True)
    return pid_inv.astype(np.int64).reshape(-1) * len(tids) + tid_inv.reshape(-1)


def _ranges(table: EventTable, alive: BOOL) -> str:
    bad = alive & (table.pid_state == OUT_OF_RANGE)
    if not bad.any():
        return ""
    values = distinct(table.pid_raw[bad])[:3].tolist()
    return "pid " + ", ".join(f"{v:,}" for v in values) + " → 0"


def _strtod(text: str) -> float | None:
    """base::StringToDouble (strtod, whole string): decimal, inf/nan, or hex."""
    try:
        return float(text)
    except ValueError:
        try:
            return float.fromhex(text)
        except ValueError:
            return None


def check_counters(table: EventTable, alive: BOOL, out: Collector) -> tuple[int, int]:
    """C events → (samples imported, counter tracks)."""
    rows = np.flatnonzero(alive & (table.ph == ord("C")))
    no_values: list[int] = []
    bad_values: list[int] = []
    samples = 0
    series: set[tuple[int, str]] = set()
    for i, args, ident in zip(rows.tolist(), table.sparse("args", rows), table.sparse("id", rows), strict=True):
        if type(args) is not dict or not args:
            no_values.append(i)
            continue
        prefix = (table.name_of(i) or "") + (f" id: {ident}" if type(ident) is str else "")
        for key, v in args.items():
            ok = (type(v) in (int, float)) or (type(v) is str and _strtod(v) is not None)
            if not ok:
                bad_values.append(i)
                continue
            samples += 1
            series.add((int(table.pid[i]), f"{prefix} {key}"))
    out.add("counter_without_values", no_values)
    out.add("counter_value_not_numeric", sorted(set(bad_values)), count=len(bad_values))
    return samples, len(series)


def check_metadata(table: EventTable, alive: BOOL, out: Collector) -> None:
    rows = np.flatnonzero(alive & (table.ph == ord("M")))
    ignored: Counter[str] = Counter()
    ignored_rows: list[int] = []
    invalid: list[int] = []
    for i, args in zip(rows.tolist(), table.sparse("args", rows), strict=True):
        name = table.name_of(i)
        if name not in HONOURED_METADATA:
            ignored[name or "(no name)"] += 1
            ignored_rows.append(i)
            continue
        if type(args) is not dict:
            continue  # no args: nothing happens (and no stat)
        if name.endswith("sort_index"):
            value = args.get("sort_index", MISSING_VALUE)
            if value is not MISSING_VALUE and type(value) not in (int, float):
                invalid.append(i)
        else:
            value = args.get("name", MISSING_VALUE)
            if value is not MISSING_VALUE and not (type(value) is str and value):
                invalid.append(i)
    detail = ", ".join(f"{k} ×{n:,}" for k, n in ignored.most_common(6))
    out.add("metadata_ignored", ignored_rows, detail)
    out.add("metadata_invalid", invalid)


def _async_cookie(ident: Any, id2: Any, pid: int) -> tuple[Any, ...] | None:
    if type(ident) in (int, str):
        return ("id", ident)
    if type(id2) is dict:
        glob, local = id2.get("global"), id2.get("local")
        if type(glob) in (int, str):
            return ("global", glob)
        if type(local) in (int, str):
            return ("local", local, pid)
    return None


def check_async(table: EventTable, alive: BOOL, out: Collector) -> int:
    """b/e/n events → slices imported (b and n); reports missing ids and unmatched e."""
    mask = alive & ph_mask(table, "ben")
    rows = np.flatnonzero(mask)
    if not len(rows):
        return 0
    order = rows[np.lexsort((rows, table.ts[rows]))]
    ids = table.sparse("id", order)
    id2s = table.sparse("id2", order) if "id2" in table.keys else [MISSING_VALUE] * len(order)
    open_count: Counter[tuple[Any, ...]] = Counter()
    open_rows: dict[tuple[Any, ...], list[int]] = {}
    missing: list[int] = []
    unmatched: list[int] = []
    slices = 0
    for i, ident, id2 in zip(order.tolist(), ids, id2s, strict=True):
        cookie = _async_cookie(ident, id2, int(table.pid[i]))
        if cookie is None or table.pid_state[i] == MISSING:
            missing.append(i)
            continue
        key = (*cookie, int(table.cat[i]), int(table.name[i]))
        p = chr(int(table.ph[i]))
        if p == "e":
            if open_count[key]:
                open_count[key] -= 1
                open_rows[key].pop()
            else:
                unmatched.append(i)
            continue
        slices += 1
        if p == "b":
            open_count[key] += 1
            open_rows.setdefault(key, []).append(i)
    out.add("async_without_id", missing)
    out.add("async_unmatched_end", unmatched)
    out.add("async_unclosed_begin", [i for rows_ in open_rows.values() for i in rows_])
    return slices


def by_ph(table: EventTable) -> dict[str, int]:
    counts = np.bincount(table.ph[table.is_object], minlength=256)
    return {(chr(c) if c else "(none)"): int(counts[c]) for c in np.flatnonzero(counts).tolist()}
