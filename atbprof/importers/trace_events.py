"""Chrome-trace JSON (Ascend trace_view.json / msprof_*.json, Kineto) loaded once into per-field lists.

Speed: one `orjson.loads` with the garbage collector paused (millions of small dicts would otherwise trigger full
collections), then one list comprehension per field; the importers select rows by index and convert whole columns.

Exactness: Kineto writes `ts` as a JSON number (`1712195495519689.047`: epoch µs with ns digits, more than float64
holds). The digits are taken from the text: the numeric `"ts":` values found in the bytes, in file order, replace
the parsed floats one for one - after checking that their count matches and that each text parses to the same
float (else, e.g. with a nested "ts" key, the numbers are quoted in the bytes and the JSON parsed again).
Ascend already writes `ts` as a string.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.errors import InputError
from atbprof.gc_pause import gc_paused
from atbprof.importers.timetext import floats_to_ns, us_to_ns

PHASES = frozenset("BEXiICbneSTpFstfPNODMVvRc()")
"""Every phase of the Trace Event Format (Duration, Complete, Instant, Counter, Async, Flow, Sample, Object,
Metadata, Memory dump, Mark, Context)."""
_NUMERIC_TS = re.compile(rb'("ts"\s*:\s*)(-?[0-9][0-9.eE+-]*)')
_NUMERIC_TS_TEXT = re.compile(rb'"ts"\s*:\s*(-?[0-9][0-9.eE+-]*)')
_KEY_TYPES = (int, str, type(None))  # pid / tid as Chrome traces write them (Kineto: "Spans", "stream 7")


Rows = Sequence[int] | np.ndarray
"""Row numbers: a list, or an integer array (the fast readers index their columns with it as it is)."""


def _listed(rows: Rows) -> Sequence[int]:
    """Row numbers to iterate in Python (an array's own items are slower to index lists with)."""
    return rows.tolist() if isinstance(rows, np.ndarray) else rows


@dataclass
class TraceEvents:
    """The events of one trace file, one list per field (None where an event lacks it)."""

    path: Path
    top: dict[str, Any] | None  # the enclosing object (Kineto), None for a bare event array (Ascend)
    events: Sequence[
        Any
    ]  # the decoded events: dicts (orjson), structs (kineto_decode.py), parsed on demand (kineto_scan.py)
    ph: Sequence[str]
    name: Sequence[Any]
    cat: Sequence[Any]
    pid: Sequence[Any]
    tid: Sequence[Any]
    args: Sequence[Any]
    ts_ns: np.ndarray  # µs text -> ns, as written (Kineto: before adding baseTimeNanoseconds)
    has_ts: np.ndarray  # bool per event
    dur_ns: np.ndarray
    has_dur: np.ndarray
    _text: dict[str, pa.Array] = field(default_factory=dict)

    def take(self, field: str, rows: Rows) -> list[Any]:
        """pid / tid / name / ... of the given rows."""
        column = getattr(self, field)
        return [column[i] for i in _listed(rows)]

    def ids(self, field: str, rows: Rows) -> list[Any] | np.ndarray:
        """pid / tid of the given rows: an int64 array where a reader knows them all to be integers, else as
        `take` gives them."""
        return self.take(field, rows)

    def arg_values(self, key: str, rows: Rows) -> list[Any]:
        """args[key] of each row (None where the event has no args object or no such key)."""
        args = self.args
        return [a.get(key) if type(a := args[i]) is dict else None for i in _listed(rows)]

    def arg_dims(self, key: str, rows: Rows) -> list[str | None] | pa.Array:
        """`dims_texts` of args[key] (framework input shapes) per row."""
        return dims_texts(self.arg_values(key, rows))

    def nonneg_int_args(self, key: str, rows: Rows) -> np.ndarray:
        """`int_arg` of args[key] per row as int64; -1 where there is none or it is negative."""
        values = self.arg_values(key, rows)
        try:
            arr = np.array(pa.array(values, pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            ints = [int_arg({"v": v}, "v") for v in values]
            arr = np.array([v if v is not None and 0 <= v < 2**63 else -1 for v in ints], np.int64)
        return np.where(arr < 0, -1, arr)

    def texts(self, field: str, rows: Rows) -> pa.Array:
        """name / cat of the given rows as text ("" where missing, `str` of a number in a damaged trace)."""
        return pa.array([text_of(v) for v in self.take(field, rows)], pa.string())

    def coded(self, field: str, rows: Rows) -> pa.DictionaryArray:
        """`texts` as `pc.dictionary_encode` gives them (a reader that holds codes makes it without the texts)."""
        encoded: pa.DictionaryArray = pc.dictionary_encode(self.texts(field, rows))
        return encoded

    @property
    def timed(self) -> np.ndarray:
        """Events that happen at a time (everything with a ts but metadata)."""
        return self.has_ts & ~self.where("ph", ("M",))

    def text(self, field: str) -> pa.Array:
        """ph / cat / name as an Arrow string array (non-strings null), converted once."""
        if field not in self._text:
            self._text[field] = strings(getattr(self, field))
        return self._text[field]

    def where_prefix(self, field: str, prefix: str) -> np.ndarray:
        """Bool per event: the field is a string starting with `prefix`."""
        starts = pc.starts_with(self.text(field), prefix)
        return np.asarray(pc.fill_null(starts, False).to_numpy(zero_copy_only=False), bool)

    def where(self, field: str, accepted: Iterable[str]) -> np.ndarray:
        """Bool per event: the field is one of `accepted`."""
        value_set = pa.array(sorted(accepted), pa.string())
        return pc.is_in(self.text(field), value_set=value_set).to_numpy(zero_copy_only=False)

    @property
    def count(self) -> int:
        return len(self.events)

    def process_names(self) -> dict[Any, str]:
        """pid -> process_name (the only safe way to find a layer: Ascend pids are bit-packed or concatenated)."""
        return self._meta_names("process_name", lambda i: self.pid[i])

    def thread_names(self) -> dict[Any, str]:
        return self._meta_names("thread_name", lambda i: (self.pid[i], self.tid[i]))

    def _meta_names(self, kind: str, key: Any) -> dict[Any, str]:
        out: dict[Any, str] = {}
        rows = np.flatnonzero(self.where("ph", ("M",)) & self.where("name", (kind,))).tolist()
        for i, value in zip(rows, self.arg_values("name", rows), strict=True):
            if isinstance(value, str):
                out[key(i)] = value
        return out

    def fail(self, index: int, problem: str) -> InputError:
        event = orjson.dumps(self.events[index], default=repr).decode(errors="replace")
        return InputError(f"{self.path}: event #{index} ({event[:160]}): {problem}")


def load_trace(path: Path, data: bytes) -> TraceEvents:
    """Parse and check a trace: every event an object with a known phase, pid/tid numbers or strings, `ts` a time."""
    with gc_paused():
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise InputError(f"{path}: {_json_problem(data)}") from None
        top, events = _events_of(path, doc)
        return _columns(path, top, events, data)


def _exact_ts(ts: Sequence[Any], data: bytes) -> pa.Array:
    """Every event's `ts` as text, numbers replaced by their digits in the file (see the module doc)."""
    kinds = set(map(type, ts))
    if not kinds & {int, float}:
        return _texts(ts)
    if kinds <= {int, float, type(None)}:
        texts = _NUMERIC_TS_TEXT.findall(data)
        values = np.array(ts, np.float64)  # None -> NaN
        numeric = np.flatnonzero(~np.isnan(values))
        if len(texts) == len(numeric):
            text = pa.array(texts, pa.binary()).cast(pa.string())
            try:
                same = pc.equal(pc.cast(text, pa.float64()), pa.array(values[numeric])).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:
                same = np.zeros(1, bool)
            if same.all():
                at = np.full(len(ts), -1, np.int64)
                at[numeric] = np.arange(len(numeric))
                return text.take(pa.array(at, mask=at < 0))
    # mixed spellings or a "ts" key elsewhere in the file: quote the numbers in the bytes and parse again
    try:
        _, again = _events_of(Path(), orjson.loads(_NUMERIC_TS.sub(rb'\1"\2"', data)))
    except (orjson.JSONDecodeError, InputError):  # cannot happen for valid JSON; keep the parsed numbers then
        again = []
    if len(again) == len(ts):
        return _texts([e.get("ts") if type(e) is dict else None for e in again])
    return _texts([repr(v) if type(v) is float else str(v) if type(v) is int else v for v in ts])


def _texts(values: Sequence[Any]) -> pa.Array:
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([v if isinstance(v, str) else None if v is None else "x" for v in values], pa.string())


def _json_problem(data: bytes) -> str:
    """Where and why the JSON breaks."""
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as err:
        msg = err.msg
        if "UTF-8" in msg or "utf-8" in msg:
            return f"not UTF-8 text near line {err.lineno}, column {err.colno}; convert the file to UTF-8"
        end = len(data.rstrip())
        if err.pos >= end - 1:
            return (
                f"the JSON ends early at line {err.lineno} ({msg}): the file was cut off while being written "
                "(half-written?) - re-export it"
            )
        return f"not valid JSON at line {err.lineno}, column {err.colno}: {msg}"
    return "not valid JSON"


def _events_of(path: Path, doc: Any) -> tuple[dict[str, Any] | None, list[Any]]:
    if isinstance(doc, list):
        return None, doc
    if isinstance(doc, dict):
        events = doc.get("traceEvents")
        if isinstance(events, list):
            return doc, events
        raise InputError(
            f"{path}: a JSON object without a 'traceEvents' list: not a trace (Kineto traces have traceEvents; "
            "Ascend trace_view.json / msprof_*.json are a bare array of events)"
        )
    raise InputError(f"{path}: JSON {type(doc).__name__}, not a trace (expected an array of events or traceEvents)")


def _columns(path: Path, top: dict[str, Any] | None, events: list[Any], data: bytes) -> TraceEvents:
    if not events:
        raise InputError(f"{path}: the trace has no events")
    try:  # one pass over the events (one cache miss per event, not one per field)
        rows = [
            (
                e.get("ph"),
                e.get("name"),
                e.get("cat"),
                e.get("pid"),
                e.get("tid"),
                e.get("ts"),
                e.get("dur"),
                e.get("args"),
            )
            for e in events
        ]
    except AttributeError:
        bad = next(i for i, e in enumerate(events) if type(e) is not dict)
        raise InputError(
            f"{path}: event #{bad} is a JSON {type(events[bad]).__name__}, not an object: not a Chrome trace "
            "(or a damaged one) - re-export it"
        ) from None
    ph, name, cat, pid, tid, ts, dur, args = zip(*rows, strict=True)
    del rows
    _check(path, ph, "phase 'ph'", None)
    _check(path, pid, "pid", _KEY_TYPES)
    _check(path, tid, "tid", _KEY_TYPES)
    ts_ns, has_ts, bad_ts = us_to_ns(_exact_ts(ts, data), exact=True)
    if bad_ts.any():
        i = int(np.flatnonzero(bad_ts)[0])
        raise InputError(f"{path}: event #{i}: 'ts' {events[i].get('ts')!r} is not a time in µs")
    dur_ns, has_dur, bad_dur = floats_to_ns(list(dur))
    if bad_dur.any():
        i = int(np.flatnonzero(bad_dur)[0])
        raise InputError(f"{path}: event #{i}: 'dur' {events[i].get('dur')!r} is not a duration in µs")
    return TraceEvents(path, top, events, ph, name, cat, pid, tid, args, ts_ns, has_ts, dur_ns, has_dur)


def _check(path: Path, values: Sequence[Any], what: str, types: tuple[type, ...] | None) -> None:
    if types is None:  # the phase
        try:
            unknown = set(values) - PHASES
        except TypeError:  # an unhashable phase (a list, an object)
            unknown = {v for v in set(map(_hashable, values)) if v not in PHASES}
        if unknown:
            i = next(i for i, v in enumerate(values) if _hashable(v) in unknown)
            shown = "missing" if values[i] is None else repr(values[i])
            raise InputError(
                f"{path}: event #{i}: {what} is {shown}; a Chrome trace event has one of "
                f"{''.join(sorted(PHASES))} - the file is not a trace or is damaged"
            )
        return
    kinds = set(map(type, values))
    if kinds - set(types) or bool in kinds:
        i = next(i for i, v in enumerate(values) if type(v) not in types or isinstance(v, bool))
        raise InputError(f"{path}: event #{i}: {what} is a {type(values[i]).__name__}, expected a number or string")


def _hashable(value: Any) -> Any:
    return value if isinstance(value, str | int | float | type(None)) else repr(value)


def int_arg(args: Any, *keys: str) -> int | None:
    """The first of `keys` in an args dict as an int (Kineto old schema writes numbers as strings)."""
    if not isinstance(args, dict):
        return None
    for key in keys:
        value = args.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
        if isinstance(value, str) and len(value) < 20:
            try:
                return int(value)
            except ValueError:
                continue
    return None


def text_of(value: Any) -> str:
    """A name as text (a damaged trace may hold a number or nothing there)."""
    return value if isinstance(value, str) else "" if value is None else str(value)


def str_arg(args: Any, key: str) -> str | None:
    if not isinstance(args, dict):
        return None
    value = args.get(key)
    return value if isinstance(value, str) else None


def strings(values: Sequence[Any]) -> pa.Array:
    """A field as an Arrow string array; values that are not strings (a damaged trace) become null."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([v if isinstance(v, str) else None for v in values], pa.string())


def dims_texts(values: Sequence[Any]) -> list[str | None]:
    """`dims_text` per value, computed once per distinct value (shapes repeat across calls of one op)."""
    cache: dict[object, str | None] = {}
    out: list[str | None] = []
    for value in values:
        key = value if isinstance(value, str) else orjson.dumps(value) if isinstance(value, list) else None
        if key is None:
            out.append(None)
        elif key in cache:
            out.append(cache[key])
        else:
            out.append(cache.setdefault(key, dims_text(value)))
    return out


def dims_text(value: Any) -> str | None:
    """Framework input shapes in msprof's spelling: tensors ';'-separated, dims ','-separated.

    Kineto writes a list of dim lists (`[[4096, 1024], [], [1024]]`, or that as a string in old traces); torch_npu a
    string with CRLF after each ';' (`32,3,224,224;\\r\\n64`)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                return dims_text(orjson.loads(text))
            except orjson.JSONDecodeError:
                return text
        return text.replace("\r\n", "").replace("\n", "")
    if isinstance(value, list):
        try:  # the common case: a list of int lists
            return ";".join([",".join(map(str, dims)) for dims in value])
        except TypeError:  # a scalar where a dim list belongs
            return ";".join(orjson.dumps(dims).decode() for dims in value)
    return None
