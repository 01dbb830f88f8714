"""Damaged and wrong inputs: one InputError that names the file, the place and the fix."""

from __future__ import annotations

import gzip
import sqlite3
from contextlib import closing
from pathlib import Path

import orjson
import pytest

from atbprof.errors import InputError
from atbprof.importers import load_profile
from atbprof.inputs import gunzip
from tests.importers.conftest import LEVEL1, MSTT, OUT, QWEN, TRACES, shared

QWEN_CSV = QWEN / OUT / "kernel_details.csv"


def _fails(path: Path, *patterns: str) -> str:
    with pytest.raises(InputError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message
    for pattern in patterns:
        assert pattern in message, (pattern, message)
    return message


def test_missing_path(tmp_path: Path) -> None:
    _fails(tmp_path / "nope.csv", "no such file", "atbprof reads:")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(b"")
    _fails(path, "empty file", "kernel_details.csv (torch_npu)")


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_bytes(bytes(range(256)) * 4)
    _fails(path, "binary data")


def test_sqlite_without_profiler_tables_says_what_to_pass_instead(tmp_path: Path) -> None:
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE t (x INTEGER)")
        db.commit()
    _fails(path, "no TASK, STRING_IDS, COMPUTE_TASK_INFO", "ascend_pytorch_profiler_<rank>.db")


def test_utf16_file(tmp_path: Path) -> None:
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(shared(QWEN_CSV).read_text().encode("utf-16"))
    _fails(path, "UTF-16", "convert the file to UTF-8")


def test_latin1_bytes_in_csv(tmp_path: Path) -> None:
    lines = shared(QWEN_CSV).read_bytes().split(b"\n")
    lines[5] = (
        lines[5].replace(b"RmsNorm", "RmsNörm".encode("latin-1"), 1).replace(b"aclnn", "äclnn".encode("latin-1"), 1)
    )
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(b"\n".join(lines))
    _fails(path, "line 6 is not UTF-8", "convert the file to UTF-8")


def test_latin1_header(tmp_path: Path) -> None:
    path = tmp_path / "op_summary.csv"
    path.write_bytes("Op Name,OP Type,Task Start Time(µs)\n".encode("latin-1"))
    _fails(path, "header line is not UTF-8")


def test_latin1_bytes_in_json(tmp_path: Path) -> None:
    data = shared(MSTT / "trace_view.json").read_bytes().replace(b"aten::empty", "aten::émpty".encode("latin-1"), 1)
    path = tmp_path / "trace_view.json"
    path.write_bytes(data)
    _fails(path, "not UTF-8 text near line 1", "convert the file to UTF-8")


def test_half_written_csv(tmp_path: Path) -> None:
    data = shared(QWEN_CSV).read_bytes()
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(data[: len(data) // 2])  # cut inside a row
    _fails(path, "columns", "half-written")


def test_csv_with_header_only(tmp_path: Path) -> None:
    path = tmp_path / "kernel_details.csv"
    path.write_bytes(shared(QWEN_CSV).read_bytes().split(b"\n")[0] + b"\n")
    _fails(path, "no rows")


@pytest.mark.parametrize("column", ["Start Time(us)", "Duration(us)", "Name", "Type"])
def test_csv_missing_a_needed_column(tmp_path: Path, column: str) -> None:
    lines = shared(LEVEL1 / OUT / "kernel_details.csv").read_text().splitlines()
    at = lines[0].split(",").index(column)
    cut = [",".join(c for i, c in enumerate(line.split(",")) if i != at) for line in lines[:20]]
    path = tmp_path / "kernel_details.csv"
    path.write_text("\n".join(cut) + "\n")
    message = _fails(path, f"lacks the column(s) '{column}'", "Restore the header line or re-export")
    assert "atbprof needs Name, Type, Start Time(us), Duration(us)" in message


def test_csv_with_a_bad_time(tmp_path: Path) -> None:
    lines = shared(QWEN_CSV).read_text().splitlines()
    lines[3] = lines[3].replace("1764246877", "17642x6877", 1)
    path = tmp_path / "kernel_details.csv"
    path.write_text("\n".join(lines) + "\n")
    _fails(path, "column 'Start Time(us)', row 3", "is not a time in µs")


def test_csv_with_a_time_beyond_any_range(tmp_path: Path) -> None:
    """An exponent Decimal cannot hold (found by the fuzz test): the time is bad, not a crash."""
    lines = shared(QWEN_CSV).read_text().splitlines()
    start = lines[3].split(",")[9]
    lines[3] = lines[3].replace(start, "80.1e999020000", 1)
    path = tmp_path / "kernel_details.csv"
    path.write_text("\n".join(lines) + "\n")
    _fails(path, "column 'Start Time(us)', row 3", "is not a time in µs")


def test_csv_with_a_bad_optional_number_is_a_warning(tmp_path: Path) -> None:
    lines = shared(QWEN_CSV).read_text().splitlines()
    cells = lines[3].split(",")
    cells[12] = "4x"  # Block Dim
    lines[3] = ",".join(cells)
    path = tmp_path / "kernel_details.csv"
    path.write_text("\n".join(lines) + "\n")
    profile = load_profile(path)
    assert profile.ops["block_dim"].null_count == 1
    warnings = profile.meta["warnings"]
    assert isinstance(warnings, list) and len(warnings) == 1
    assert warnings[0].startswith("kernel_details.csv: Block Dim: 1 value(s) are not numbers (first: row 3, '4x')")


def test_unknown_csv(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("a,b,c\n1,2,3\n")
    _fails(path, "not a profile atbprof knows (first line: a, b, c)", "atbprof reads:")


def test_half_written_json(tmp_path: Path) -> None:
    data = shared(MSTT / "trace_view.json").read_bytes()
    path = tmp_path / "trace_view.json"
    path.write_bytes(data[: len(data) * 2 // 3])
    _fails(path, "the JSON ends early at line 1", "half-written")


def test_broken_json_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b'[\n{"ph": "X", "ts": "1.0", "dur": 1},\n{"ph": "X" "ts": 2}\n]')
    _fails(path, "not valid JSON at line 3, column")


def test_json_with_an_unknown_phase(tmp_path: Path) -> None:
    events = orjson.loads(shared(MSTT / "trace_view.json").read_bytes())
    events[17]["ph"] = "Q"
    path = tmp_path / "trace_view.json"
    path.write_bytes(orjson.dumps(events))
    _fails(path, "event #17", "phase 'ph' is 'Q'")


def test_json_event_without_a_phase(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": [{"name": "x", "ts": 1, "pid": 1, "tid": 1}]}))
    _fails(path, "event #0", "phase 'ph' is missing")


def test_json_with_a_non_object_event(tmp_path: Path) -> None:
    events: list[object] = orjson.loads(shared(MSTT / "trace_view.json").read_bytes())
    events.insert(5, [1, 2, 3])
    path = tmp_path / "trace_view.json"
    path.write_bytes(orjson.dumps(events))
    _fails(path, "event #5 is a JSON list, not an object")


def test_json_with_a_bad_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps([{"ph": "X", "name": "k", "ts": "12:00", "dur": 1.0, "pid": 1, "tid": 1}]))
    _fails(path, "event #0", "'ts' '12:00' is not a time in µs")


def test_complete_event_without_duration(tmp_path: Path) -> None:
    events = [{"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "pid": 0, "tid": 7, "args": {}}]
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": events}))
    _fails(path, "event #0", "needs a 'ts' and a 'dur'")


def test_json_that_is_no_trace(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(orjson.dumps({"step13": {"p2p": {}}}))
    _fails(path, "without a 'traceEvents' list")
    path.write_bytes(b"[]")
    _fails(path, "no events")
    path.write_bytes(orjson.dumps({"traceEvents": [{"ph": "i", "name": "x", "ts": 1, "pid": 1, "tid": 1}]}))
    _fails(path, "without GPU kernels (cat kernel) or framework ops (cat cpu_op)")


def test_truncated_gzip(tmp_path: Path) -> None:
    data = shared(TRACES / "hta_triton_example.json.gz").read_bytes()
    path = tmp_path / "trace.json.gz"
    path.write_bytes(data[: len(data) // 2])
    _fails(path, "damaged or truncated gzip")


def test_damaged_deflate_stream(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)  # a gzip header, then an invalid deflate block
    _fails(path, "damaged or truncated gzip")


def test_gzip_with_two_members_is_read_whole(tmp_path: Path) -> None:
    text = shared(TRACES / "hta_triton_example.json.gz").read_bytes()
    whole = gzip.decompress(text)
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(whole[:1000]) + gzip.compress(whole[1000:]))
    assert gunzip(path.read_bytes(), path) == whole


def test_gzip_of_garbage(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(b"\x00\x01\x02 not a trace"))
    _fails(path, "binary data")


def test_directory_without_a_profile(tmp_path: Path) -> None:
    _fails(tmp_path, "a directory with no profile in it", "atbprof reads:")


def test_directory_with_several_profiles(tmp_path: Path) -> None:
    for name in ("a_ascend_pt", "b_ascend_pt"):
        (tmp_path / name / OUT).mkdir(parents=True)
    _fails(tmp_path, "holds 2 profiles (a_ascend_pt, b_ascend_pt); pass one of them")


def test_ascend_pt_without_outputs(tmp_path: Path) -> None:
    (tmp_path / "x_ascend_pt" / OUT).mkdir(parents=True)
    _fails(
        tmp_path / "x_ascend_pt",
        "without ASCEND_PROFILER_OUTPUT/kernel_details.csv, trace_view.json or ascend_pytorch_profiler_<rank>.db",
    )


def test_damaged_run_directory(tmp_path: Path) -> None:
    (tmp_path / "ops.parquet").write_bytes(b"PAR1 but not really")
    _fails(tmp_path, "not a Parquet file")
