"""A gzip trace scanned while a second thread inflates it gives what scanning the inflated bytes gives, or steps
aside (and the file is then read the usual way)."""

from __future__ import annotations

import gzip
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import atbprof.importers.kineto_scan as kineto_scan
from atbprof.errors import InputError
from atbprof.importers import load_profile
from atbprof.importers.detect import _HEAD, _is_json, _kineto_profile
from atbprof.importers.kineto_scan import inflate_and_scan, scan_kineto
from atbprof.importers.native import native
from tests.importers.conftest import ASCEND, TRACES, shared
from tests.importers.test_kineto_decode import _same

KINETO = sorted(p.name for p in TRACES.glob("*.json.gz")) if TRACES.exists() else []
pytestmark = pytest.mark.skipif(native is None, reason="the native scanner is not built")

_KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {"stream": 7}}
_CPU = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5.125, "dur": 10.5}
DOCS = [
    orjson.dumps({"schemaVersion": 1, "traceEvents": [_KERNEL, _CPU] * 40, "traceName": "x" * 300}),
    orjson.dumps({"deviceProperties": [{"id": 0, "totalGlobalMem": 34079637504}] * 30, "traceEvents": [_CPU] * 50}),
    b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "\\u00e9\\ud83d\\ude00\\n", "pid": 1, "tid": 1, '
    b'"ts": 5, "dur": 1, "args": {"Input Dims": [[4096, 1024], [], [1024]], "x": [true, false, null, -1.5e3]}}]}',
    b'{"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 12345678901234}], "a": 1, "b": [], "c": {}}',
    b'{"traceEvents": []}',
    b' \n\t {"traceEvents": [ ] , "x": { } } \n',
    b'  {"traceEvents": [{"ph": "X", "ts": 1.2345}]}',  # refused: more decimals than ns
    b'{"traceEvents": [{"ph": "X", "ts": 1}]} x',  # refused: trailing bytes
    b'{"traceEvents": [{"ph": "X", "ts": 1',  # refused: cut off
    b'{"traceEvents": [{"ph": "X"}], "traceEvents": []}',  # refused: twice
]
_UTF8_EDGES = [
    "é€😀".encode(),
    b"\xed\xa0\x80",  # a surrogate
    b"\xed\x9f\xbf",  # U+D7FF: the last before them
    b"\xc0\x80",  # overlong
    b"\xc1\xbf",
    b"\xe0\x80\x80",
    b"\xe0\xa0\x80",  # U+0800: the first three-byte one
    b"\xf0\x8f\xbf\xbf",
    b"\xf4\x8f\xbf\xbf",  # U+10FFFF
    b"\xf4\x90\x80\x80",  # past it
    b"\xf5\x80\x80\x80",
    b"\xff",
    b"\x80",  # a lone continuation byte
    b"\xe2\x82",  # cut short
]


def _fed(data: bytes, cuts: list[int], margin: int, window: int = 1 << 20) -> object:
    """native.scan_stream over `data` arriving in pieces split at `cuts` from a thread, a moment apart (so that the
    scanner meets the edge of what has arrived), held `window` bytes at a time."""
    assert native is not None
    stream = native.stream_new(len(data), window)
    bounds = [0, *sorted(set(cuts)), len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]

    def feed() -> None:
        for piece in pieces:
            time.sleep(0.0005)
            native.stream_feed(stream, piece)
        native.stream_end(stream, True)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        got = native.scan_stream(stream, margin)
    finally:
        native.stream_close(stream)
        feeder.join()
    return got


def _whole(doc: bytes) -> object:
    """What the stream gives for a document scanned whole: its columns, or False where the scanner declines it."""
    assert native is not None
    cols = native.scan_kineto(doc)
    return False if cols is None else cols


@pytest.mark.parametrize("doc", DOCS)
def test_items_cut_at_the_edge_of_what_arrived_read_as_the_whole(doc: bytes) -> None:
    whole = _whole(doc)
    for at in range(1, len(doc), max(1, len(doc) // 40)):
        for window in (1 << 20, 5):  # a window of 5 bytes: slid and grown at every item
            assert _fed(doc, [at], 0, window) == whole, f"cut at byte {at}, window {window}"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(DOCS),
    st.lists(st.integers(1, 4000), max_size=6),
    st.integers(0, 64),
    st.sampled_from([1, 7, 64, 300, 1 << 20]),
)
def test_any_cuts_margin_and_window_give_the_whole_scan(doc: bytes, cuts: list[int], margin: int, window: int) -> None:
    assert _fed(doc, [c for c in cuts if c < len(doc)], margin, window) == _whole(doc)


def test_the_window_stays_its_size_over_a_real_trace() -> None:
    """Memory: a 35 MB trace of small items is read through the 1 MB window, never held whole."""
    assert native is not None
    raw = shared(TRACES / "kineto_tbplugin_resnet50_worker0.pt.trace.json.gz").read_bytes()
    data = gzip.decompress(raw)
    stream = native.stream_new(len(data), kineto_scan.WINDOW)
    feeder = threading.Thread(target=lambda: (native.stream_feed(stream, data), native.stream_end(stream, True)))
    feeder.start()
    got = native.scan_stream(stream, kineto_scan.MARGIN)
    feeder.join()
    assert got == native.scan_kineto(data)
    assert native.stream_window(stream) == kineto_scan.WINDOW < len(data) // 30


_CHARS = st.characters(min_codepoint=32, exclude_characters='"\\', exclude_categories=["Cs"])
_PLAIN = st.text(_CHARS, max_size=6).map(str.encode)  # valid UTF-8 that needs no escape in a JSON string
_BYTES = st.binary(max_size=6).filter(lambda b: b"\\" not in b and min(b, default=35) > 34)  # held raw in a string
_TEXT = st.one_of(_PLAIN, st.sampled_from(_UTF8_EDGES), _BYTES)


def _in_a_value(body: bytes) -> tuple[bytes, object]:
    """A trace with `body` in a value no column keeps, and what the stream should give for it."""
    doc = b'{"traceEvents": [{"ph": "X", "ts": 1, "args": {"Call stack": "' + body + b'"}}]}'
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return doc, False
    return doc, _whole(doc)


@pytest.mark.parametrize("edge", _UTF8_EDGES)
def test_each_utf8_edge_cut_at_each_byte(edge: bytes) -> None:
    doc, want = _in_a_value(b"ab" + edge + b"cd")
    for at in range(60, 75):
        assert _fed(doc, [at], 0, 16) == want, f"cut at {at}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_TEXT, max_size=4), st.integers(1, 60))
def test_the_feeder_checks_utf8_as_python_does(parts: list[bytes], cut: int) -> None:
    """Any bytes in a value no column keeps, cut anywhere between the pieces: the stream declines exactly what
    Python's strict decoder refuses (surrogates, overlong forms, past U+10FFFF, cut sequences), and reads the rest
    as whole."""
    doc, want = _in_a_value(b"".join(parts))
    assert _fed(doc, [c for c in range(cut, len(doc), cut)], 0, 16) == want


def test_a_stream_that_ends_short_or_overflows_is_aborted() -> None:
    assert native is not None
    stream = native.stream_new(10, 4)
    assert native.stream_feed(stream, b"{}")
    native.stream_end(stream, True)  # 2 of 10 bytes: not complete
    assert native.scan_stream(stream, 0) is None
    stream = native.stream_new(4, 4)
    assert not native.stream_feed(stream, b"{ }  ")  # past its size
    assert native.scan_stream(stream, 0) is None
    with pytest.raises(ValueError, match="once"):
        native.scan_stream(stream, 0)


def test_a_closed_stream_lets_its_feeder_go_on() -> None:
    """A scan that stops early (or never starts) closes the stream: a feeder waiting for room goes on to the end."""
    assert native is not None
    stream = native.stream_new(1000, 10)
    native.stream_close(stream)
    assert native.stream_feed(stream, b" " * 1000)  # far more than the window: counted, not held
    native.stream_end(stream, True)
    assert native.stream_window(stream) == 10


@pytest.mark.parametrize("name", KINETO)
def test_every_kineto_anchor_streams_to_the_same_profile(name: str) -> None:
    path = shared(TRACES / name)
    raw = path.read_bytes()
    data = gzip.decompress(raw)
    got = inflate_and_scan(path, raw, _is_json, _HEAD)
    assert got is not None and got.events is not None
    assert got.document() == data  # inflated again on demand: event messages, the general path
    whole = scan_kineto(path, data)
    assert whole is not None
    _same(_kineto_profile(path, got.events), _kineto_profile(path, whole))
    assert got.events.events[7] == orjson.loads(data)["traceEvents"][7]


def test_small_pieces_no_margin_and_a_small_window_on_a_real_trace() -> None:
    path = shared(TRACES / KINETO[0])
    raw = path.read_bytes()
    got = inflate_and_scan(path, raw, _is_json, _HEAD, piece=512, margin=0, window=300)
    whole = scan_kineto(path, gzip.decompress(raw))
    assert got is not None and got.events is not None and whole is not None
    _same(_kineto_profile(path, got.events), _kineto_profile(path, whole))


def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def test_what_the_stream_does_not_serve_is_left_to_the_usual_path(tmp_path: Path) -> None:
    doc = DOCS[0]
    path = tmp_path / "t.json.gz"
    one = _gz(doc)
    assert inflate_and_scan(path, one, _is_json, _HEAD) is not None
    assert inflate_and_scan(path, one[:-9], _is_json, _HEAD) is None  # truncated
    assert inflate_and_scan(path, _gz(doc[:100]) + _gz(doc[100:]), _is_json, _HEAD) is None  # two members
    # two members of one size: the trailer's size is the first member's too, and the head holds all of it
    small = b'{"traceEvents": [{"ph": "X", "ts": 1}]}'
    assert inflate_and_scan(path, _gz(small) + _gz(small), _is_json, _HEAD) is None
    for size in (len(doc) - 1, len(doc) + 1):  # a trailer that does not tell the size
        assert inflate_and_scan(path, one[:-4] + size.to_bytes(4, "little"), _is_json, _HEAD) is None
    damaged = bytearray(one)
    damaged[len(one) // 2] ^= 0xFF
    assert inflate_and_scan(path, bytes(damaged), _is_json, _HEAD) is None
    assert inflate_and_scan(path, _gz(b"Name,Type\nk,MatMul\n"), _is_json, _HEAD) is None  # a CSV
    latin = '{"traceEvents": [{"ph": "X", "name": "\xe9"}]}'.encode("latin-1")
    got = inflate_and_scan(path, _gz(latin), _is_json, _HEAD)  # not UTF-8: the general path reads the bytes
    assert got is not None and got.events is None and got.document() == latin


def test_load_profile_reads_a_gzip_trace_the_stream_declines_as_the_plain_file(tmp_path: Path) -> None:
    data = gzip.decompress(shared(TRACES / KINETO[0]).read_bytes())
    plain, members = tmp_path / "t.json", tmp_path / "m.json.gz"
    plain.write_bytes(data)
    members.write_bytes(_gz(data[: len(data) // 2]) + _gz(data[len(data) // 2 :]))  # read by gunzip, not streamed
    assert inflate_and_scan(members, members.read_bytes(), _is_json, _HEAD) is None
    _same(load_profile(members), load_profile(plain))


def test_a_failure_while_inflating_is_raised_not_waited_on(monkeypatch: pytest.MonkeyPatch) -> None:
    real = kineto_scan.inflate_exactly

    def failing(raw: bytes, size: int, piece: int) -> Iterator[bytes]:
        for i, chunk in enumerate(real(raw, size, piece)):
            if i == 3:
                raise RuntimeError("a bug while inflating")
            yield chunk

    monkeypatch.setattr(kineto_scan, "inflate_exactly", failing)
    path = shared(TRACES / KINETO[0])
    with pytest.raises(RuntimeError, match="a bug while inflating"):
        inflate_and_scan(path, path.read_bytes(), _is_json, _HEAD, piece=1024)


def test_a_gzip_ascend_timeline_reads_as_the_plain_file(tmp_path: Path) -> None:
    """The stream reads it but the fast readers hand it on (not the scanner's plain case: Ascend timestamps are
    strings), and the general path reads the bytes inflated again. (An object with traceEvents: the
    stream reads no top-level array.)"""
    events = shared(ASCEND / "msinsight_imagenet_cnn_level0_rank0" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json")
    plain, packed = tmp_path / "trace_view.json", tmp_path / "trace_view.json.gz"
    plain.write_bytes(b'{"traceEvents": ' + events.read_bytes() + b"}")
    packed.write_bytes(_gz(plain.read_bytes()))
    got = inflate_and_scan(packed, packed.read_bytes(), _is_json, _HEAD)
    assert got is not None and got.events is None and got.document() == plain.read_bytes()
    profiles = load_profile(packed), load_profile(plain)
    assert [p.meta.pop("trace_files") for p in profiles] == [[str(packed)], [str(plain)]]
    _same(*profiles)


def test_a_bad_event_in_a_gzip_trace_is_named_as_in_the_plain_file(tmp_path: Path) -> None:
    """A message quotes the event: the stream kept no bytes, so they are inflated again for it."""
    doc = orjson.loads(DOCS[0])
    del doc["traceEvents"][41]["dur"]
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(orjson.dumps(doc))
    packed.write_bytes(_gz(plain.read_bytes()))
    errors = []
    for path in (plain, packed):
        with pytest.raises(InputError) as caught:
            load_profile(path)
        errors.append(str(caught.value).replace(str(path), "FILE"))
    assert errors[0] == errors[1] and "event #41" in errors[0]
