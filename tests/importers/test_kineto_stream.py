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
from atbprof.importers import load_profile
from atbprof.importers.detect import _HEAD, _is_json, _kineto_profile
from atbprof.importers.kineto_scan import inflate_and_scan, scan_kineto
from atbprof.importers.native import native
from tests.importers.conftest import TRACES, shared
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


def _fed(data: bytes, cuts: list[int], margin: int) -> object:
    """native.scan_stream over `data` arriving in pieces split at `cuts`: the first piece before the scan starts,
    the others from a thread, a moment apart (so that the scanner meets the edge of what has arrived)."""
    assert native is not None
    stream = native.stream_new(len(data))
    bounds = [0, *sorted(set(cuts)), len(data)]
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    native.stream_feed(stream, pieces[0])

    def rest() -> None:
        for piece in pieces[1:]:
            time.sleep(0.0005)
            native.stream_feed(stream, piece)
        native.stream_end(stream, True)

    feeder = threading.Thread(target=rest)
    feeder.start()
    got = native.scan_stream(stream, margin)
    feeder.join()
    return got


@pytest.mark.parametrize("doc", DOCS)
def test_items_cut_at_the_edge_of_what_arrived_read_as_the_whole(doc: bytes) -> None:
    assert native is not None
    whole = native.scan_kineto(doc)
    for at in range(1, len(doc), max(1, len(doc) // 40)):
        got = _fed(doc, [at], 0)
        assert got == (doc, whole), f"cut at byte {at}"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(DOCS), st.lists(st.integers(1, 4000), max_size=6), st.integers(0, 64))
def test_any_cuts_and_margin_give_the_whole_scan(doc: bytes, cuts: list[int], margin: int) -> None:
    assert native is not None
    got = _fed(doc, [c for c in cuts if c < len(doc)], margin)
    assert got == (doc, native.scan_kineto(doc))


def test_a_stream_that_ends_short_or_overflows_is_aborted() -> None:
    assert native is not None
    stream = native.stream_new(10)
    assert native.stream_feed(stream, b"{}")
    native.stream_end(stream, True)  # 2 of 10 bytes: not complete
    assert native.scan_stream(stream, 0) is None
    stream = native.stream_new(4)
    assert not native.stream_feed(stream, b"{ }  ")  # past its size
    assert native.scan_stream(stream, 0) is None
    with pytest.raises(ValueError, match="once"):
        native.scan_stream(stream, 0)


@pytest.mark.parametrize("name", KINETO)
def test_every_kineto_anchor_streams_to_the_same_profile(name: str) -> None:
    path = shared(TRACES / name)
    raw = path.read_bytes()
    data = gzip.decompress(raw)
    got = inflate_and_scan(path, raw, _is_json, _HEAD)
    assert got is not None and got[0] == data and got[1] is not None
    whole = scan_kineto(path, data)
    assert whole is not None
    _same(_kineto_profile(path, got[1]), _kineto_profile(path, whole))


def test_small_pieces_and_no_margin_on_a_real_trace() -> None:
    path = shared(TRACES / KINETO[0])
    raw = path.read_bytes()
    got = inflate_and_scan(path, raw, _is_json, _HEAD, piece=512, margin=0)
    whole = scan_kineto(path, gzip.decompress(raw))
    assert got is not None and got[1] is not None and whole is not None
    _same(_kineto_profile(path, got[1]), _kineto_profile(path, whole))


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
    assert inflate_and_scan(path, _gz(latin), _is_json, _HEAD) == (latin, None)  # not UTF-8: the general path


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
