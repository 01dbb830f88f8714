"""The native helpers (importers/native_src) are built and give what their pure-Python twins give, or step aside."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.errors import InputError
from atbprof.importers.assemble import _nesting, nesting_python
from atbprof.importers.base import Profile
from atbprof.importers.detect import _kineto_profile
from atbprof.importers.kineto_decode import decode_kineto
from atbprof.importers.kineto_scan import scan_kineto
from atbprof.importers.native import native
from tests.importers.conftest import TRACES, mutate, shared
from tests.importers.test_kineto_decode import _data, _general, _same

KINETO = sorted(p.name for p in TRACES.glob("*.json.gz")) if TRACES.exists() else []


def test_the_extension_is_built() -> None:
    # optional in pyproject.toml so that installs never fail; CI has a compiler and must not lose the fast path
    assert native is not None, "atbprof.importers._native was not built: is a C compiler installed?"


def _scanned(path: Path, data: bytes) -> Profile | InputError | None:
    trace = scan_kineto(path, data)
    if trace is None:
        return None
    try:
        return _kineto_profile(path, trace)
    except InputError as err:
        return err


@pytest.mark.parametrize("name", KINETO)
def test_scanner_reads_every_kineto_anchor_as_the_other_paths_do(name: str) -> None:
    path = TRACES / name
    data = _data(name)
    scanned = _scanned(path, data)
    assert isinstance(scanned, Profile), "the scanner should read every real Kineto trace"
    decoded = decode_kineto(path, data)
    assert decoded is not None
    _same(scanned, _kineto_profile(path, decoded))
    general = _general(path, data)
    assert isinstance(general, Profile)
    _same(scanned, general)


def _doc(events: list[object], **top: object) -> bytes:
    return orjson.dumps({"schemaVersion": 1, "traceEvents": events, **top})


_KERNEL = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2, "args": {"stream": 7}}
_CPU = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 10}


@pytest.mark.parametrize(
    "data",
    [
        _doc([_KERNEL, {**_CPU, "name": 'caf\u00e9 "quoted" \\ \U0001f600'}]),
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "\\u00e9\\ud83d\\ude00\\n\\/", "pid": 1, '
        b'"tid": 1, "ts": 5, "dur": 1}], "traceName": "after the events"}',
        _doc([{**_CPU, "ts": 1712195495519689.047, "dur": 0.5}, {**_KERNEL, "ts": 1712195495519690.5}]),
        _doc([{**_CPU, "pid": "Spans", "tid": "25738"}, _KERNEL]),
        # ids as texts that spell integers (old Kineto), mixed with integers, and texts that do not spell one as
        # str() writes it: the same threads and ids as the general path gives
        _doc([{**_CPU, "tid": "25738"}, {**_CPU, "tid": 25738, "ts": 6}, {**_CPU, "tid": "-3", "ts": 7}, _KERNEL]),
        _doc([{**_CPU, "tid": "007"}, {**_CPU, "tid": "7", "ts": 6}, {**_CPU, "tid": " 7", "ts": 7}]),
        _doc([{**_CPU, "pid": "12", "tid": "99999999999999999999"}, {**_CPU, "pid": "1_2", "ts": 6}]),
        _doc([{**_KERNEL, "args": {"stream": "7", "correlation": "12"}}, _CPU]),
        _doc([{**_KERNEL, "args": {"stream": -3, "correlation": 1.5}}, {**_KERNEL, "tid": "stream 9", "args": {}}]),
        _doc([{**_KERNEL, "args": None}, {**_KERNEL, "args": [1, 2]}, _CPU]),
        _doc([{**_CPU, "args": {"Input Dims": [[4096, 1024], [], [1024]]}}, {**_CPU, "args": {"Input Dims": "[[2]]"}}]),
        _doc([{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}, _CPU], baseTimeNanoseconds=7),
        # duplicate keys: the last one counts, as in the general path's JSON
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "name": "b", "pid": 1, "tid": 1, '
        b'"ts": 1, "ts": 2, "dur": 1, "args": {"Input Dims": [[1]]}, "args": {}}]}',
    ],
)
def test_scanner_edge_cases_agree_with_the_general_path(data: bytes) -> None:
    path = Path("edge.json")
    scanned = _scanned(path, data)
    assert scanned is not None, "the scanner should serve this"
    general = _general(path, data)
    assert type(scanned) is type(general)
    if isinstance(scanned, Profile) and isinstance(general, Profile):
        _same(scanned, general)


@pytest.mark.parametrize(
    "data",
    [
        b'[{"ph": "X"}]',  # a bare array (Ascend)
        b'{"traceEvents": [{"ph": "X", "ts": 1',  # cut off
        b'{"traceEvents": []} x',  # trailing bytes
        b'\xef\xbb\xbf{"traceEvents": [{"ph": "X"}]}',  # a BOM
        b'{"traceEvents": [{"ph": "X", "pid": true}]}',  # odd pid
        b'{"traceEvents": [{"ph": "X", "pid": 1.5}]}',
        b'{"traceEvents": [{"ph": "XX"}]}',  # not a phase
        b'{"traceEvents": [{"ph": "Q"}]}',
        b'{"traceEvents": [{"ph": "X", "ts": "12.5"}]}',  # a string ts (Ascend style)
        b'{"traceEvents": [{"ph": "X", "ts": 1.2345}]}',  # more decimals than ns
        b'{"traceEvents": [{"ph": "X", "ts": 1e3}]}',  # an exponent
        b'{"traceEvents": [{"ph": "X", "ts": 99999999999999999999}]}',  # beyond int64 ns
        b'{"traceEvents": [{"ph": "X", "dur": "3"}]}',
        b'{"traceEvents": [{"ph": "X", "name": 12}]}',
        b'{"traceEvents": [{"ph": "X", "name": "\\ud800"}]}',  # a lone surrogate
        b'{"traceEvents": [{"ph": "X", "name": "a\x01b"}]}',  # a control character in a string
        b'{"traceEvents": [{"ph": "X", "name": "\\x"}]}',  # a bad escape
        b'{"traceEvents": [{"ph": "X"}], "traceEvents": []}',  # twice
        b'{"traceEvents": [{"ph": "X", "n\\u0061me": "k"}]}',  # a key spelled with an escape
        b'{"traceEvents": [{"ph": "X", "args": {"str\\u0065am": 7}}]}',
        b'{"traceEvents": [1, 2]}',
        b'{"traceEvents": {}}',
        b'{"traceEvents": [{"ph": "X", "ts": 01}]}',  # not JSON numbers
        b'{"traceEvents": [{"ph": "X", "ts": -}]}',
        b'{"traceEvents": [{"ph": "X", "a": tru}]}',
        b'{"traceEvents": [{"ph": "X",}]}',
        '{"traceEvents": [{"ph": "X", "name": "\xe9"}]}'.encode("latin-1"),  # not UTF-8
        b'{"traceEvents": [{"ph": "X", "args": {"x": 1e400}}]}',  # beyond double: orjson refuses it
        b'{"traceEvents": [{"ph": "X", "args": {"x": -' + b"9" * 400 + b"}}]}",
        b'{"traceEvents": [{"ph": "X", "args": ' + b"[" * 600 + b"]" * 600 + b"}]}",  # too deep
    ],
)
def test_scanner_steps_aside_for_what_it_does_not_serve(data: bytes) -> None:
    assert scan_kineto(Path("odd.json"), data) is None


@pytest.fixture(scope="module")
def small_trace() -> bytes:
    doc = orjson.loads(_data("kineto_tbplugin_resnet50_worker0.pt.trace.json.gz"))
    doc["traceEvents"] = doc["traceEvents"][:200] + [e for e in doc["traceEvents"] if e.get("cat") == "Kernel"][:50]
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_traces_scanner_agrees_or_steps_aside(small_trace: bytes, data: st.DataObject) -> None:
    mutated = mutate(data, small_trace, b'0123456789.-"[]{},:eE ntx\\u\x01\xff')
    path = Path("mutated.json")
    scanned = _scanned(path, mutated)
    if scanned is None:
        return
    general = _general(path, mutated)
    if isinstance(scanned, InputError):
        assert isinstance(general, InputError), f"the scanner's table refused what the general path reads: {scanned}"
        return
    assert isinstance(general, Profile), f"the scanner accepted what the general path rejects: {general}"
    _same(scanned, general)


@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_what_the_scanner_accepts_is_json(data: st.DataObject) -> None:
    """Deletions and insertions too: the scanner's own JSON checks never let through what orjson refuses."""
    raw = bytearray(_data("hta_triton_example.json.gz"))
    for _ in range(data.draw(st.integers(1, 5))):
        at = data.draw(st.integers(0, len(raw) - 1))
        edit = data.draw(st.sampled_from(["replace", "delete", "insert"]))
        chunk = data.draw(st.binary(min_size=1, max_size=4).filter(bytes.isascii))
        if edit == "replace":
            raw[at : at + len(chunk)] = chunk
        elif edit == "delete":
            del raw[at : at + len(chunk)]
        else:
            raw[at:at] = chunk
    if native is not None and native.scan_kineto(bytes(raw)) is not None:
        orjson.loads(bytes(raw))  # raises if the scanner accepted invalid JSON


@settings(max_examples=200, deadline=None)
@given(spans=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 60), st.integers(0, 30)), min_size=0, max_size=60))
def test_native_nesting_equals_the_python_loop(spans: list[tuple[int, int, int]]) -> None:
    thread = np.array([t for t, _, _ in spans], np.int64)
    start = np.array([s for _, s, _ in spans], np.int64)
    dur = np.array([d for _, _, d in spans], np.int64)
    index = np.arange(len(spans), dtype=np.int64) * 3 + 5
    order = np.lexsort((index, -dur, start, thread))
    got = _nesting(order, thread, start, start + dur, index)
    want = nesting_python(order, thread, start, start + dur, index)
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1])


def test_native_nesting_refuses_bad_arrays() -> None:
    assert native is not None
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="out of range"):
        native.nest(np.array([5], np.int64), one, one, one, one, np.zeros(1, np.int64), np.zeros(1, np.int64))
    with pytest.raises(TypeError, match="int64"):
        native.nest(np.zeros(1, np.int32), one, one, one, one, np.zeros(1, np.int64), np.zeros(1, np.int64))


def test_without_the_extension_the_python_paths_give_the_same_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a machine without a C compiler runs: kineto_decode.py and nesting_python."""
    from atbprof.importers import assemble, kineto_scan
    from atbprof.importers.detect import load_profile

    path = TRACES / "hta_trace_diff_control.json.gz"
    with_native = load_profile(shared(path))
    monkeypatch.setattr(kineto_scan, "native", None)
    monkeypatch.setattr(assemble, "native", None)
    assert scan_kineto(path, _data(path.name)) is None
    without = load_profile(shared(path))
    _same(with_native, without)
    assert with_native.framework is not None and with_native.framework.column("depth").to_pylist().count(0) < len(
        with_native.framework
    )  # the trace nests: the comparison covered parents and depths


def test_the_loader_knows_sqlite_by_the_database_importers_magic() -> None:
    """load_profile tells a database by its first bytes without importing the database importer (sqlite3)."""
    from atbprof.importers import ascend_db, detect

    assert detect._SQLITE == ascend_db.SQLITE_MAGIC


@settings(max_examples=400, deadline=None)
@given(
    st.booleans(),
    st.text("0123456789", min_size=1, max_size=18).map(lambda s: s.lstrip("0") or "0"),
    st.one_of(st.none(), st.text("0123456789", min_size=1, max_size=8)),
)
def test_scanned_durations_are_what_a_correctly_rounding_reader_gives(neg: bool, whole: str, frac: str | None) -> None:
    # the scanner reads short decimals itself (one division) and the rest with strtod: both must be float()'s value
    text = ("-" if neg else "") + whole + ("" if frac is None else "." + frac)
    assert native is not None
    cols = native.scan_kineto(b'{"traceEvents": [{"ph": "X", "dur": ' + text.encode() + b"}]}")
    assert cols is not None
    assert np.frombuffer(cols["dur_us"], np.float64)[0].tobytes() == np.float64(float(text)).tobytes()


_DIM = st.one_of(st.integers(-3, 3), st.integers(-(2**62), 2**62))
_DIMS = st.lists(st.lists(_DIM, max_size=4), max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(_DIMS, st.lists(st.one_of(st.lists(st.floats(allow_nan=False, allow_infinity=False)), _DIM)), st.text()),
    st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : ")]),
    st.one_of(st.none(), st.integers(0, 2)),
)
def test_input_dims_read_from_their_bytes_are_dims_text(
    value: object, separators: tuple[str, str], indent: int | None
) -> None:
    import json

    from atbprof.importers.kineto_scan import _dims
    from atbprof.importers.trace_events import dims_text

    raw = json.dumps(value, separators=separators, indent=indent).encode()
    assert _dims(raw) == dims_text(orjson.loads(raw))
