"""The parsed events as NumPy columns, with Perfetto's field coercions applied once, vectorised.

Perfetto's JSON tokenizer (`json_trace_tokenizer.cc`), reproduced per field:

- `ts`/`dur`/`tts`/`tdur` are µs. A JSON integer v → v·1000 ns; a double v → int64(v)·1000 if v is integral, else
  llround(v·1000.0) (so epoch-µs doubles keep only double precision); a string holding a JSON number is parsed and
  coerced the same way. Anything else present (null, bool, non-numeric string, array) makes the tokenizer give up
  on the event *and stop reading the file* (v52, checked on the real trace_processor).
- `pid`/`tid`: an integer or a double (truncated) outside 0..2^32−1 becomes 0; a string is interned (its own
  process/thread, named by the string); anything else counts as absent (0). Then a tid of 0 becomes the pid,
  unless the tid was a string or the pid is 0.
- `ph`: the first character of a non-empty string, else the event is dropped.
- `name`/`cat`: strings; anything else (or "") is null.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
BOOL = npt.NDArray[np.bool_]

UINT32_MAX = 0xFFFFFFFF
STRING_ID_BASE = 1 << 32
"""Interned string pids/tids live above the uint32 range, so they never collide with numeric ones."""

# value kinds, from the Python type orjson produced
K_INT, K_FLOAT, K_STR, K_OTHER, K_MISSING = 0, 1, 2, 3, 4
# field states
OK, MISSING, BAD = 0, 1, 2
# pid/tid states (OK and MISSING as above)
OUT_OF_RANGE, STRING = 2, 3


class _Missing:
    __slots__ = ()


MISSING_VALUE: Any = _Missing()
_KIND: dict[type, int] = {int: K_INT, float: K_FLOAT, str: K_STR, _Missing: K_MISSING}
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def values(events: list[dict[str, Any]], key: str) -> list[Any]:
    return list(map(dict.get, events, repeat(key), repeat(MISSING_VALUE)))


def kinds_of(vals: list[Any]) -> I8:
    return np.fromiter(map(_KIND.get, map(type, vals), repeat(K_OTHER)), dtype=np.int8, count=len(vals))


_EXACT_IN_DOUBLE = 2**53


def llround(x: npt.NDArray[np.float64]) -> I64:
    """C's llround: to nearest, halfway cases away from zero (np.rint alone rounds them to even)."""
    r = np.rint(x)
    whole = np.trunc(x)
    tie = np.abs(x - whole) == 0.5
    return np.where(tie, whole + np.sign(x), r).astype(np.int64)


def _float_to_ns(f: npt.NDArray[np.float64]) -> I64:
    integral = f == np.trunc(f)
    with np.errstate(invalid="ignore", over="ignore"):
        exact = f.astype(np.int64) * 1000
        rounded = llround(f * 1000.0)
    return np.where(integral, exact, rounded)


def _int_to_ns(ints: npt.NDArray[Any]) -> I64:
    # beyond int64 Perfetto's parser rejects the number; clamped here to keep the event visible
    v = np.array([max(min(int(x), 2**63 - 1), -(2**63)) for x in ints], dtype=np.int64)
    with np.errstate(over="ignore"):
        return v * 1000  # wraps like the C++ multiplication


def parse_json_number(text: str) -> int | float | None:
    """The number a string holds under Perfetto's rule (the whole string must be one JSON number), else None."""
    m = _JSON_NUMBER.fullmatch(text)
    if m is None:
        return None
    return float(text) if (m.group(1) or m.group(2)) else int(text)


def _numbers(vals: list[Any], kind: I8) -> npt.NDArray[np.float64]:
    """The values as doubles, 0 where not a number (one C-level conversion; only the non-numbers are patched)."""
    others = np.flatnonzero(kind > K_FLOAT)
    if len(others):
        vals = vals.copy()
        for i in others.tolist():
            vals[i] = 0
    return np.array(vals, dtype=np.float64) if vals else np.zeros(0, dtype=np.float64)


def time_column(vals: list[Any]) -> tuple[I64, I8, I8]:
    """(ns, state, kind) for a µs time field; state is OK, MISSING (key absent) or BAD (present, not a number)."""
    kind = kinds_of(vals)
    f = _numbers(vals, kind)
    ns = _float_to_ns(f)  # exact for integers below 2^53 (integral doubles take the int64 path)
    huge = np.flatnonzero((kind == K_INT) & (np.abs(f) >= _EXACT_IN_DOUBLE))
    if len(huge):
        ns[huge] = _int_to_ns(np.array([vals[i] for i in huge.tolist()], dtype=object))
    state = np.where(kind <= K_FLOAT, OK, np.where(kind == K_MISSING, MISSING, BAD)).astype(np.int8)
    for i in np.flatnonzero(kind == K_STR).tolist():
        num = parse_json_number(vals[i])
        if num is None:
            continue
        state[i] = OK
        ns[i] = (
            _int_to_ns(np.array([num], dtype=object))[0]
            if isinstance(num, int)
            else _float_to_ns(np.array([num], dtype=np.float64))[0]
        )
    return ns, state, kind


def id_column(vals: list[Any], strings: dict[str, int]) -> tuple[I64, I8, I64]:
    """(coerced uint32 value or string id, state, raw) for pid/tid; `strings` interns string values (shared)."""
    kind = kinds_of(vals)
    numeric = kind <= K_FLOAT
    # C++ static_cast<int64_t> truncates; beyond ±2^62 (clipped here) it is out of range either way
    raw = np.trunc(np.clip(_numbers(vals, kind), -(2.0**62), 2.0**62)).astype(np.int64)
    raw[~numeric] = -1
    state = np.where(numeric, np.where((raw < 0) | (raw > UINT32_MAX), OUT_OF_RANGE, OK), MISSING).astype(np.int8)
    for i in np.flatnonzero(kind == K_STR).tolist():
        raw[i] = STRING_ID_BASE + strings.setdefault(vals[i], len(strings))
        state[i] = STRING
    value = np.where((state == OK) | (state == STRING), raw, 0)
    return value, state, raw


class _Interner(dict[Any, int]):
    """value → id, numbering unseen values on lookup (one pass over the column)."""

    def __missing__(self, key: Any) -> int:
        self[key] = n = len(self)
        return n


def intern_strings(vals: list[Any], table: _Interner) -> I32:
    """Ids of the values in `table` (shared between calls), −1 for null: non-strings and ""."""
    try:
        ids = np.array(list(map(table.__getitem__, vals)), dtype=np.int64)
    except TypeError:  # an unhashable value (array/object): null, like Perfetto's GetStringValue
        ids = np.array(list(map(table.__getitem__, [v if type(v) is str else None for v in vals])), dtype=np.int64)
    lookup = np.array([i if (type(k) is str and k) else -1 for k, i in table.items()] or [-1], dtype=np.int32)
    order = np.array(list(table.values()) or [0], dtype=np.int64)
    by_id = np.full(len(table) or 1, -1, dtype=np.int32)
    by_id[order] = lookup
    return by_id[ids] if len(ids) else np.zeros(0, dtype=np.int32)


def string_table(table: _Interner) -> list[str | None]:
    out: list[str | None] = [None] * len(table)
    for v, i in table.items():
        if type(v) is str and v:
            out[i] = v
    return out


@dataclass
class EventTable:
    """One row per element of the trace's event array (non-objects are rows with every field missing)."""

    n: int
    events: list[dict[str, Any]]
    is_object: BOOL
    ph: npt.NDArray[np.uint8]
    """ord(first character of ph), 0 when ph is missing, empty or not a string."""
    ts: I64
    ts_state: I8
    ts_kind: I8
    dur: I64
    dur_state: I8
    stops_tokenizer: BOOL
    """A ts/dur/tts/tdur that is present but not a number: Perfetto v52 stops reading the file here."""
    pid: I64
    pid_state: I8
    pid_raw: I64
    """The pid before the uint32 coercion (−1: absent; strings: STRING_ID_BASE + interned index)."""
    tid: I64
    """After Perfetto's "tid 0 → pid" rule."""
    tid_state: I8
    tid_raw: I64
    name: I32
    cat: I32
    strings: list[str | None]
    """Names and categories share one table (−1 = null)."""
    keys: frozenset[str]
    """Every key used by any event (to skip columns nobody uses)."""

    def name_of(self, i: int) -> str | None:
        sid = int(self.name[i])
        return self.strings[sid] if sid >= 0 else None

    def sparse(self, key: str, rows: npt.NDArray[np.int64]) -> list[Any]:
        """`key` of the events at `rows` (MISSING_VALUE where absent)."""
        picked = map(self.events.__getitem__, rows.tolist())
        return list(map(dict.get, picked, repeat(key), repeat(MISSING_VALUE)))


def build_table(raw_events: list[Any]) -> EventTable:
    n = len(raw_events)
    if set(map(type, raw_events)) <= {dict}:
        is_object = np.ones(n, dtype=np.bool_)
        events: list[dict[str, Any]] = raw_events
    else:
        is_object = np.fromiter((type(e) is dict for e in raw_events), dtype=np.bool_, count=n)
        events = [e if type(e) is dict else {} for e in raw_events]
    keys: frozenset[str] = frozenset().union(*events) if events else frozenset()

    ph_table = _Interner()
    ph_ids = intern_strings(values(events, "ph"), ph_table)
    ph_codes = np.array([ord(s[0]) if s else 0 for s in string_table(ph_table)] or [0], dtype=np.uint8)
    ph = np.where(ph_ids >= 0, ph_codes[np.maximum(ph_ids, 0)], 0).astype(np.uint8)

    ts, ts_state, ts_kind = time_column(values(events, "ts"))
    dur, dur_state, _ = time_column(values(events, "dur"))
    stops = (ts_state == BAD) | (dur_state == BAD)
    for extra in ("tts", "tdur"):
        if extra in keys:
            stops |= time_column(values(events, extra))[1] == BAD

    interned: dict[str, int] = {}
    pid, pid_state, pid_raw = id_column(values(events, "pid"), interned)
    tid, tid_state, tid_raw = id_column(values(events, "tid"), interned)
    tid = np.where((tid == 0) & (pid != 0) & (tid_state != STRING), pid, tid)

    names = _Interner()
    name = intern_strings(values(events, "name"), names)
    cat = intern_strings(values(events, "cat"), names)
    return EventTable(
        n=n,
        events=events,
        is_object=is_object,
        ph=ph,
        ts=ts,
        ts_state=ts_state,
        ts_kind=ts_kind,
        dur=dur,
        dur_state=dur_state,
        stops_tokenizer=stops,
        pid=pid,
        pid_state=pid_state,
        pid_raw=pid_raw,
        tid=tid,
        tid_state=tid_state,
        tid_raw=tid_raw,
        name=name,
        cat=cat,
        strings=string_table(names),
        keys=keys,
    )
