"""The fast path for Kineto traces: decode only the fields the importer reads, straight into columns.

A full parse (orjson) builds a dict for every event and a string for every value, and Kineto traces are mostly
values no importer needs (`Call stack`, `Input type`, `Trace name`, flow events' args: 60-80% of the bytes). msgspec
decodes into typed structs and skips the other fields without building them (~3x faster than orjson here), and
`ts` arrives as its raw JSON text, so its digits are exact without a second scan of the bytes.

This path only serves well-formed Kineto traces: anything it does not expect (invalid JSON, an event that is not an
object, a field of an odd type, a top-level array, an Ascend layer) returns None or raises `NotFast`, and the caller
runs the general orjson path, which gives the same tables for valid input and the precise message for bad input
(tests/importers/test_kineto_decode.py checks both on every anchor and on mutated samples).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.importers.timetext import floats_to_ns, us_to_ns
from atbprof.importers.trace_events import PHASES, Rows, TraceEvents, dims_text

_ABSENT = msgspec.Raw(b"")  # msgspec.Raw cannot be in a union: an empty raw text marks an absent field


class NotFast(Exception):
    """The input needs the general path (which reports the problem, if there is one)."""


class _Args(msgspec.Struct, gc=False):
    correlation: Any = None
    stream: Any = None
    input_dims: msgspec.Raw = msgspec.field(default=_ABSENT, name="Input Dims")
    name: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = _ABSENT
    dur: Any = None
    args: _Args | None = None


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event]  # the field names are the JSON keys
    schemaVersion: Any = msgspec.UNSET
    displayTimeUnit: Any = msgspec.UNSET
    baseTimeNanoseconds: Any = msgspec.UNSET
    distributedInfo: Any = msgspec.UNSET
    traceName: Any = msgspec.UNSET
    deviceProperties: Any = msgspec.UNSET


_DECODER = msgspec.json.Decoder(_Doc)
_OUT_OF_RANGE = re.compile(rb"[:,\[]\s*-?(?:[0-9]+(?:\.[0-9]+)?[eE][+-]?[0-9]{3}|[0-9]{300})")
"""A JSON number that may be past double range (an exponent of 3+ digits, or 300+ digits): orjson refuses those, so
the general path reads the file (rare in real traces; the same text inside a string matches too, which only costs
speed)."""
_TOP_KEYS = ("schemaVersion", "displayTimeUnit", "baseTimeNanoseconds", "distributedInfo", "traceName")
_ARG_FIELDS = {"correlation": "correlation", "stream": "stream", "Input Dims": "input_dims", "name": "name"}
_NUMBER_START = np.zeros(256, bool)
_NUMBER_START[list(b"-0123456789")] = True
_US = pa.decimal128(24, 3)  # µs with ns digits: 21 integer digits, more than int64 ns can hold
_THOUSAND = pa.scalar(1000, pa.decimal128(4, 0))


def decode_kineto(path: Path, data: bytes) -> TraceEvents | None:
    """The trace's columns, or None when the general path must read it (see the module doc)."""
    if not data.isascii():  # msgspec does not check the UTF-8 of skipped strings; orjson does (and says where)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if _OUT_OF_RANGE.search(data):  # msgspec skips unread fields without checking their numbers; orjson refuses these
        return None
    try:
        doc = _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    events = doc.traceEvents
    if not events:
        return None
    ph, name, cat, ts, dur = (list(map(attrgetter(f), events)) for f in ("ph", "name", "cat", "ts", "dur"))
    try:  # an unknown phase: the general path names the event
        known = PHASES.issuperset(ph)
    except TypeError:  # an unhashable one (a list, an object)
        known = False
    if not known:
        raise NotFast
    ts_ns, has_ts, bad_ts = _ts_ns(ts)
    dur_ns, has_dur, bad_dur = floats_to_ns(dur)
    if bad_ts.any() or bad_dur.any():
        raise NotFast
    pid, tid, args = (_Field(events, f) for f in ("pid", "tid", "args"))
    top = {k: v for k in (*_TOP_KEYS, "deviceProperties") if (v := getattr(doc, k)) is not msgspec.UNSET}
    return StructEvents(path, top, events, ph, name, cat, pid, tid, args, ts_ns, has_ts, dur_ns, has_dur)


class StructEvents(TraceEvents):
    """TraceEvents over decoded structs: pid / tid / args are read per row, only for the rows an importer uses."""

    def take(self, field: str, rows: Rows) -> list[Any]:
        return list(map(attrgetter(field), map(self.events.__getitem__, rows)))

    def arg_values(self, key: str, rows: Rows) -> list[Any]:
        attr = _ARG_FIELDS[key]
        args = self.take("args", rows)
        if attr == "input_dims":
            cache: dict[bytes, Any] = {}
            raws = [a.input_dims if a is not None else _ABSENT for a in args]
            return [_cached(cache, bytes(r), _loads) if len(r) else None for r in raws]
        return [getattr(a, attr) if a is not None else None for a in args]

    def arg_dims(self, key: str, rows: Rows) -> list[str | None] | pa.Array:
        """`dims_texts` of the raw values, computed once per distinct text (shapes repeat across calls)."""
        if key != "Input Dims":
            return super().arg_dims(key, rows)
        raws = [a.input_dims if a is not None else _ABSENT for a in self.take("args", rows)]
        encoded = pc.dictionary_encode(_binary(raws)[0])
        texts = pa.array([_dims(v) for v in encoded.dictionary.to_pylist()], pa.string())
        return texts.take(encoded.indices)


class _Field(Sequence[Any]):
    """One field of every event, read on access."""

    def __init__(self, events: list[_Event], name: str) -> None:
        self._events, self._get = events, attrgetter(name)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._get(e) for e in self._events[i]]
        return self._get(self._events[i])

    def __len__(self) -> int:
        return len(self._events)


def _cached(cache: dict[bytes, Any], key: bytes, make: Any) -> Any:
    value = cache.get(key, cache)
    if value is cache:
        value = cache[key] = make(key)
    return value


def _loads(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # a value msgspec kept raw that orjson refuses (1e999): the general path explains
        raise NotFast from None


def _dims(raw: bytes) -> str | None:
    value = _loads(raw)
    return dims_text(value) if isinstance(value, str | list) else None


def _binary(raws: list[msgspec.Raw]) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Raw texts as one Arrow binary array (empty = absent -> null), with each value's first byte (0 if absent)."""
    n = len(raws)
    lengths = np.fromiter(map(len, raws), np.int64, count=n)
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(raws)
    present = lengths > 0
    first = np.zeros(n, np.uint8)
    if len(data):
        first[present] = np.frombuffer(data, np.uint8)[offsets[:-1][present]]
    arr = pa.Array.from_buffers(pa.binary(), n, [_bitmap(present), pa.py_buffer(offsets), pa.py_buffer(data)])
    return arr, first, present


def _ts_ns(raws: list[msgspec.Raw]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`us_to_ns(exact=True)` of the raw `ts` texts. Kineto writes numbers: their decimal text is cast in bulk
    (Arrow's decimal parser is exact); strings, more than three decimals or anything odd take `us_to_ns`."""
    arr, first, present = _binary(raws)
    valid = present & (first != ord("n"))  # JSON null: the only valid raw value starting with n
    text = pc.if_else(pa.array(valid), arr, pa.scalar(None, pa.binary())).cast(pa.string())
    if bool(_NUMBER_START[first[valid]].all()):
        try:
            ns = pc.cast(pc.multiply(pc.cast(text, _US), _THOUSAND), pa.int64())
            return np.asarray(pc.fill_null(ns, 0).to_numpy(), np.int64), valid, np.zeros(len(raws), bool)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    return us_to_ns(pc.utf8_trim(text, '"'), exact=True)  # strings: without their quotes


def _bitmap(mask: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(mask, bitorder="little"))
