"""The fastest path for Kineto traces: the native scanner (`native_src/scan.c`) reads the fields the importer uses
straight into columns, and `ScannedEvents` serves them as `TraceEvents` without a Python object per event.

Like kineto_decode.py (msgspec, the next path when this one declines), it only serves well-formed traces: whenever
the scanner or this module meets something unexpected it returns None, and the caller tries the next path. Codes:
strings and raw JSON values are interned by the scanner, so `name`, `cat`, `pid`, ... are int codes into one list
of distinct values, and columns are built once per distinct value. Event `i` as a dict (for messages) is parsed
again from its bytes on demand (a gzip trace's bytes inflated again then: the stream does not keep them).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from atbprof.arrays import distinct
from atbprof.importers.coded import canonical_dictionary
from atbprof.importers.native import native
from atbprof.importers.timetext import floats_to_ns
from atbprof.importers.trace_events import PHASES, Rows, TraceEvents, dims_text, int_arg
from atbprof.inputs import INFLATE_ERRORS, gzip_size, inflate_exactly

_K_ABSENT, _K_INT, _K_STR, _K_RAW = range(4)  # the scanner's value kinds


class _Values:
    """A value column: per row a kind (absent, int, string code, raw-JSON code) and an int64."""

    def __init__(self, kind: bytes, val: bytes, strings: list[str], raws: list[bytes]) -> None:
        self.kind = np.frombuffer(kind, np.uint8)
        self.val = np.frombuffer(val, np.int64)
        self._strings, self._raws = strings, raws

    def one(self, i: int) -> Any:
        kind = self.kind[i]
        if kind == _K_INT:
            return int(self.val[i])
        if kind == _K_STR:
            return self._strings[self.val[i]]
        if kind == _K_RAW:
            return orjson.loads(self._raws[self.val[i]])
        return None

    def many(self, rows: Rows) -> list[Any]:
        rows = np.asarray(rows, np.int64)
        kind, val = self.kind[rows], self.val[rows]
        if (kind == _K_INT).all():
            return val.tolist()
        out = np.full(len(rows), None, object)
        for k, lookup in ((_K_INT, None), (_K_STR, self._strings), (_K_RAW, self._raws)):
            at = kind == k
            if at.any():
                if lookup is None:
                    out[at] = val[at].astype(object)
                else:
                    codes = val[at]
                    seen = distinct(codes)
                    table = np.full(int(seen[-1]) + 1, None, object)
                    for c in seen.tolist():
                        table[c] = lookup[c] if k == _K_STR else orjson.loads(lookup[c])
                    out[at] = table[codes]
        return out.tolist()

    def nonneg_ints(self, rows: np.ndarray) -> np.ndarray:
        """int_arg of each value as int64; -1 where there is none or it is negative (or beyond int64)."""
        kind, val = self.kind[rows], self.val[rows]
        out = np.where((kind == _K_INT) & (val >= 0), val, -1)
        for j in np.flatnonzero((kind == _K_STR) | (kind == _K_RAW)).tolist():
            value = int_arg({"v": self.one(int(rows[j]))}, "v")
            out[j] = value if value is not None and 0 <= value < 2**63 else -1
        return out


class _Lazy(Sequence[Any]):
    """A per-event field as a sequence, computed on access."""

    def __init__(self, n: int, get: Any) -> None:
        self._n, self._get = n, get

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._get(i)

    def __len__(self) -> int:
        return self._n


def native_scanner() -> bool:
    """Is the C scanner built (a C compiler at install time)?"""
    return native is not None


def scan_kineto(path: Path, data: bytes) -> ScannedEvents | None:
    """The trace's columns, or None when the next path must read it."""
    if native is None:  # built without a C compiler: kineto_decode.py serves instead
        return None
    if not _utf8(data):
        return None
    cols = native.scan_kineto(data)
    return None if cols is None else _events(path, lambda: data, cols)


PIECE = 8 << 10
"""Compressed bytes inflated at a time (4-32 kB measured alike, 64 kB slower: its ~1 MB output chunks leave the
cache)."""
MARGIN = 64 << 10
"""Bytes the scanner waits for ahead of each item (an event is well under 1 kB), so that an item is seldom cut by
the edge of what has arrived (a cut one is read again once more has)."""
WINDOW = 1 << 20
"""Bytes of the inflated document held at a time (stream.h; more only while one item needs it)."""


@dataclass(frozen=True)
class Streamed:
    """What inflate_and_scan read: the trace (None where the scanner declined it: the general path reads the
    bytes) and the inflated bytes, made again when asked for (the stream held a window of them at a time)."""

    events: ScannedEvents | None
    document: Callable[[], bytes]


def inflate_and_scan(
    path: Path,
    raw: bytes,
    wants: Callable[[bytes], bool],
    head_size: int,
    piece: int = PIECE,
    margin: int = MARGIN,
    window: int = WINDOW,
) -> Streamed | None:
    """A gzip trace inflated by a second thread while the scanner reads what has arrived (on two cores the two take
    the time of the slower instead of their sum; the scanner waits where it catches up, stream.h).

    `wants`: given the first `head_size` inflated bytes (all of them if fewer), is the file for the scanner? Returns
    None where this path does not serve: no scanner, not one gzip member of the size its trailer gives within the
    bounds, a head `wants` refuses, damaged data. The caller then reads the file the usual way (gunzip explains).
    `piece`, `margin`, `window`: see PIECE, MARGIN and WINDOW (the tests make items cut at the edge common).
    """
    size = gzip_size(raw) if native is not None else None
    if size is None:
        return None
    assert native is not None
    pieces = inflate_exactly(raw, size, piece)
    head, held = [], 0
    try:
        while held < min(head_size, size):
            head.append(next(pieces))
            held += len(head[-1])
    except (StopIteration, ValueError, *INFLATE_ERRORS):
        return None
    if not wants(b"".join(head)[:head_size]):
        return None
    stream = native.stream_new(size, window)
    failure: list[BaseException] = []
    feeder = threading.Thread(target=_feed, args=(stream, itertools.chain(head, pieces), failure), daemon=True)
    feeder.start()
    try:
        got = native.scan_stream(stream, margin)
    finally:
        native.stream_close(stream)  # the feeder waits for room no more, whatever happened here
        feeder.join()
    if failure:
        raise failure[0]
    if got is None:
        return None
    document = _inflated(raw, size)
    return Streamed(None if got is False else _events(path, document, got), document)


def _inflated(raw: bytes, size: int) -> Callable[[], bytes]:
    """The document of a gzip file the stream read whole (one member of `size` bytes, within the bounds), inflated
    once when first asked for: only messages and the general path need its bytes."""
    held: list[bytes] = []

    def document() -> bytes:
        if not held:
            held.append(b"".join(inflate_exactly(raw, size)))
        return held[0]

    return document


def _feed(stream: object, pieces: Iterator[bytes], failure: list[BaseException]) -> None:
    """The inflating thread: the pieces into the stream, which always ends (the scanner waits on it). Run to the
    end even when the scan is over: the generator's last checks (one member, ending where the file does) come
    after its last piece."""
    assert native is not None
    complete = False
    try:
        for chunk in pieces:
            native.stream_feed(stream, chunk)
        complete = True
    except (ValueError, *INFLATE_ERRORS):
        pass  # damaged data: the caller's gunzip says what
    except BaseException as err:  # raised again by the scanning thread
        failure.append(err)
    finally:
        native.stream_end(stream, complete)


def _utf8(data: bytes) -> bool:
    """The scanner leaves UTF-8 checks to us: orjson on the general path says where the bytes are wrong."""
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _events(path: Path, document: Callable[[], bytes], cols: dict[str, Any]) -> ScannedEvents | None:
    if cols["n"] == 0:
        return None
    ph_codes = np.frombuffer(cols["ph"], np.uint8)
    if not PHASES.issuperset(map(chr, distinct(ph_codes).tolist())):
        return None  # an unknown phase: the general path names the event
    dur = np.frombuffer(cols["dur_us"], np.float64)
    dur_ns, has_dur, bad_dur = floats_to_ns(dur)
    if bad_dur.any():
        return None
    text = cols["top_text"]
    try:
        top = {
            orjson.loads(b'"' + text[k : k + kl] + b'"'): orjson.loads(text[v : v + vl])
            for k, kl, v, vl in _quads(cols["top"])
        }
    except orjson.JSONDecodeError:
        return None
    return ScannedEvents.build(path, document, cols, top, dur_ns, has_dur)


def _int_text(text: str) -> int | None:
    """The integer `text` spells exactly as str() writes it, within int64; None for any other text."""
    try:
        value = int(text)
    except ValueError:
        return None
    return value if str(value) == text and -(2**63) <= value < 2**63 else None


def _quads(buf: bytes) -> list[tuple[int, int, int, int]]:
    flat = np.frombuffer(buf, np.int64).tolist()
    return [tuple(flat[i : i + 4]) for i in range(0, len(flat), 4)]


class ScannedEvents(TraceEvents):
    """TraceEvents over the scanner's columns."""

    codes: dict[str, np.ndarray]
    strings: list[str]
    raws: list[bytes]
    values: dict[str, _Values]
    ph_codes: np.ndarray
    _texts: pa.Array | None
    _codes_of: dict[str, list[int]] | None

    @classmethod
    def build(
        cls,
        path: Path,
        document: Callable[[], bytes],
        cols: dict[str, Any],
        top: dict[str, Any],
        dur_ns: np.ndarray,
        has_dur: np.ndarray,
    ) -> ScannedEvents:
        n: int = cols["n"]
        strings: list[str] = cols["strings"]
        raws: list[bytes] = cols["raws"]
        span = np.frombuffer(cols["span"], np.int64).reshape(-1, 2)
        ph_codes = np.frombuffer(cols["ph"], np.uint8)
        codes = {f: np.frombuffer(cols[f], np.int32) for f in ("name", "cat", "input_dims")}
        values = {
            f: _Values(cols[f][0], cols[f][1], strings, raws)
            for f in ("pid", "tid", "correlation", "stream", "arg_name")
        }
        args_kind = np.frombuffer(cols["args_kind"], np.uint8)

        def event(i: int) -> Any:
            return orjson.loads(document()[span[i, 0] : span[i, 1]])

        def args(i: int) -> Any:
            return event(i).get("args") if args_kind[i] else None

        def coded(field: str) -> _Lazy:
            c = codes[field]
            return _Lazy(n, lambda i: strings[c[i]] if c[i] >= 0 else None)

        self = cls(
            path,
            top,
            _Lazy(n, event),
            _Lazy(n, lambda i: chr(ph_codes[i])),
            coded("name"),
            coded("cat"),
            _Lazy(n, values["pid"].one),
            _Lazy(n, values["tid"].one),
            _Lazy(n, args),
            np.frombuffer(cols["ts_ns"], np.int64),
            np.frombuffer(cols["ts_kind"], np.uint8).astype(bool),
            dur_ns,
            has_dur,
        )
        self.codes, self.strings, self.raws, self.values, self.ph_codes = codes, strings, raws, values, ph_codes
        self._texts, self._codes_of = None, None
        return self

    def _all_texts(self) -> pa.Array:
        """Every string, then "" (for a missing one, as text_of gives): built once for every `texts` call."""
        if self._texts is None:
            self._texts = pa.array([*self.strings, ""], pa.string())
        return self._texts

    def _codes(self, wanted: set[str]) -> list[int]:
        """The codes of these strings (a string spelled two ways, with and without escapes, has two)."""
        if self._codes_of is None:
            self._codes_of = {}
            for i, s in enumerate(self.strings):
                self._codes_of.setdefault(s, []).append(i)
        return sorted(i for w in wanted for i in self._codes_of.get(w, ()))

    def take(self, field: str, rows: Rows) -> list[Any]:
        if field in ("pid", "tid"):
            return self.values[field].many(rows)
        return super().take(field, rows)

    def ids(self, field: str, rows: Rows) -> list[Any] | np.ndarray:
        """Integers, and texts that spell one as str() would ("25738": old Kineto writes tids so), as int64: the
        framework table keys threads by text and converts ids to integers, which these agree with."""
        values = self.values[field]
        at = np.asarray(rows, np.int64)
        kind, val = values.kind[at], values.val[at]
        texts = kind == _K_STR
        if not (texts | (kind == _K_INT)).all():
            return values.many(at)
        if not texts.any():
            return val
        codes = distinct(val[texts])
        spelled = [_int_text(self.strings[c]) for c in codes.tolist()]
        if None in spelled:
            return values.many(at)
        out = val.copy()
        out[texts] = np.array(spelled, np.int64)[np.searchsorted(codes, val[texts])]
        return out

    def texts(self, field: str, rows: Rows) -> pa.Array:
        return self._all_texts().take(self._text_codes(field, rows))

    def coded(self, field: str, rows: Rows) -> pa.DictionaryArray:
        return canonical_dictionary(pa.DictionaryArray.from_arrays(self._text_codes(field, rows), self._all_texts()))

    def _text_codes(self, field: str, rows: Rows) -> pa.Array:
        """Each row's index into `_all_texts` (its last entry, "", for a missing value)."""
        codes = self.codes[field][np.asarray(rows, np.int64)]
        return pa.array(np.where(codes < 0, len(self.strings), codes).astype(np.int32))

    def text(self, field: str) -> pa.Array:
        if field not in self._text:
            if field == "ph":
                chars = pa.array([chr(c) for c in range(256)], pa.string())
                self._text[field] = chars.take(pa.array(self.ph_codes))
            else:
                codes = self.codes[field]
                self._text[field] = pa.array(self.strings, pa.string()).take(pa.array(codes, mask=codes < 0))
        return self._text[field]

    def where_prefix(self, field: str, prefix: str) -> np.ndarray:
        return self._with_codes(field, [i for i, s in enumerate(self.strings) if s.startswith(prefix)])

    def where(self, field: str, accepted: Iterable[str]) -> np.ndarray:
        wanted = set(accepted)
        if field == "ph":
            table = np.zeros(256, bool)
            table[[ord(c) for c in wanted if len(c) == 1 and ord(c) < 256]] = True
            return table[self.ph_codes]
        return self._with_codes(field, self._codes(wanted))

    def _with_codes(self, field: str, codes: list[int]) -> np.ndarray:
        """Bool per event: its `field` has one of these codes (a table lookup: np.isin sorts the events)."""
        table = np.zeros(len(self.strings) + 1, bool)  # the last entry: a missing value (code -1)
        table[codes] = True
        return table[self.codes[field]]

    def arg_values(self, key: str, rows: Rows) -> list[Any]:
        field = {"correlation": "correlation", "stream": "stream", "name": "arg_name"}.get(key)
        if field is None:
            return super().arg_values(key, rows)
        return self.values[field].many(rows)

    def nonneg_int_args(self, key: str, rows: Rows) -> np.ndarray:
        if key in ("correlation", "stream"):
            return self.values[key].nonneg_ints(np.asarray(rows, np.int64))
        return super().nonneg_int_args(key, rows)

    def arg_dims(self, key: str, rows: Rows) -> list[str | None] | pa.Array:
        if key != "Input Dims":
            return super().arg_dims(key, rows)
        codes = self.codes["input_dims"][np.asarray(rows, np.int64)]
        texts: list[str | None] = [None] * len(self.raws)
        for code in distinct(codes[codes >= 0]).tolist():  # once per distinct text: shapes repeat across calls
            texts[code] = _dims(self.raws[code])
        return pa.array(texts, pa.string()).take(pa.array(codes, mask=codes < 0))


_INT_LISTS = re.compile(rb"\[(?:\[(?:-?[0-9]+(?:,-?[0-9]+)*)?\](?:,\[(?:-?[0-9]+(?:,-?[0-9]+)*)?\])*)?\]")
_NOT_AS_STR = re.compile(rb"-0(?![0-9])")  # "-0": str() of the integer drops the sign
_JSON_SPACE = bytes.maketrans(b"", b"")


def _dims(raw: bytes) -> str | None:
    """dims_text of a raw Input Dims value; a list of integer lists (nearly all) straight from its bytes."""
    packed = raw.translate(_JSON_SPACE, b" \t\r\n")
    if _INT_LISTS.fullmatch(packed) and not _NOT_AS_STR.search(packed):
        return packed[2:-2].replace(b"],[", b";").decode() if len(packed) > 2 else ""
    value = orjson.loads(raw)
    return dims_text(value) if isinstance(value, str | list) else None
