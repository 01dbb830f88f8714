"""Unreadable input: one InputError (exit code 2) naming the file and the fix; the input is never modified."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from atbprof.errors import InputError
from atbprof.validate import validate_trace
from tests.validate.cases import X

EVENTS = [X("a", 0, 10), X("b", 20, 5), X("c", 40, 5)]


def _error(path: Path) -> str:
    with pytest.raises(InputError) as info:
        validate_trace(path)
    assert info.value.exit_code == 2
    message = str(info.value)
    assert str(path) in message
    return message


def test_missing_file(tmp_path: Path) -> None:
    assert "no such file" in _error(tmp_path / "nope.json")


def test_directory_without_a_trace(tmp_path: Path) -> None:
    assert "trace.json.gz" in _error(tmp_path)


def test_run_directory_with_only_a_pftrace(tmp_path: Path) -> None:
    (tmp_path / "trace.pftrace").write_bytes(b"\x0a\x00")
    assert "Perfetto protobuf trace" in _error(tmp_path)


def test_truncated_object(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": EVENTS})[:-30])
    message = _error(path)
    assert "truncated JSON" in message and "JSON trace file is incomplete" in message


def test_truncated_bare_array(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(EVENTS)[:-15])
    message = _error(path)
    assert "truncated JSON" in message and "keep only the complete events" in message


def test_invalid_json(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('[{"ph": "X"} {"ph": "X"}]')
    assert "invalid JSON at line 1, column" in _error(path)


def test_corrupt_gzip(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(json.dumps(EVENTS * 50).encode()))
    data[20:40] = b"\xff" * 20
    path = tmp_path / "t.json.gz"
    path.write_bytes(bytes(data))
    assert "corrupt gzip" in _error(path)


def test_truncated_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(EVENTS).encode())[:-12])
    assert "gzip stream is truncated" in _error(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty"),
        (b"hello world\n", "not a JSON trace"),
        (b"\x0a\x1c\x12\x1a", "Perfetto protobuf trace"),
        (b'{"schemaVersion": 1, "other": []}', "without a traceEvents array"),
        (b'{"traceEvents": {"ph": "X"}}', "traceEvents is a dict, not an array"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(content)
    assert expected in _error(path)


def test_gzip_is_recognised_by_content_not_name(tmp_path: Path) -> None:
    path = tmp_path / "named-like-plain.json"
    path.write_bytes(gzip.compress(json.dumps(EVENTS).encode()))
    assert validate_trace(path).summary.slices == 3


def test_the_input_is_never_modified(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps([*EVENTS, X("overlap", 5, 10)]).encode()))
    before = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns, sorted(tmp_path.iterdir()))
    assert validate_trace(path).loses_data
    after = (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns, sorted(tmp_path.iterdir()))
    assert before == after
