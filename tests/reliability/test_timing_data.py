"""Issue 11, item 7: times no profiler can write are refused with the row named, or repaired with a note."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from atbprof.errors import InputError
from atbprof.importers import load_profile
from tests.importers.conftest import OUT, QWEN, shared
from tests.reliability.conftest import TINY, cli, one_error

START, DUR = "Start Time(us)", "Duration(us)"


def _kernel_details(tmp_path: Path, edit: object) -> Path:
    """The real Qwen3 kernel_details.csv with `edit(header, rows)` applied."""
    with open(shared(QWEN / OUT / "kernel_details.csv"), newline="") as fh:
        header, *rows = list(csv.reader(fh))
    rows = edit(header, rows)  # type: ignore[operator]
    out = io.StringIO()
    csv.writer(out).writerows([header, *rows])
    path = tmp_path / "kernel_details.csv"
    path.write_text(out.getvalue())
    return path


def _set(header: list[str], rows: list[list[str]], col: str, i: int, value: str) -> list[list[str]]:
    rows[i][header.index(col)] = value
    return rows


def test_a_negative_start_is_refused_with_its_row(tmp_path: Path) -> None:
    path = _kernel_details(tmp_path, lambda h, r: _set(h, r, START, 4, "-1736413974248200.543\t"))
    with pytest.raises(InputError, match=r"task 5 \(aclnnAdds_AddAiCore_Add\) starts at -1,736,413,974,248,200"):
        load_profile(path)
    assert "before the clock's zero" in one_error(cli("analyze", path))


def test_a_start_110_years_off_is_refused(tmp_path: Path) -> None:
    path = _kernel_details(tmp_path, lambda h, r: _set(h, r, START, 7, "1000.000\t"))
    err = one_error(cli("analyze", path))
    assert "span 55.9 years (row 8 starts at" in err and "some start times are damaged" in err


def test_start_and_duration_swapped_is_refused(tmp_path: Path) -> None:
    def swap(h: list[str], rows: list[list[str]]) -> list[list[str]]:
        s, d = h.index(START), h.index(DUR)
        for row in rows:
            row[s], row[d] = row[d], row[s].strip()
        return rows

    err = one_error(cli("analyze", _kernel_details(tmp_path, swap)))
    assert "lasts 20,419.5 days" in err and "start time and duration columns swapped?" in err


def test_every_task_at_one_start_on_one_stream_is_refused(tmp_path: Path) -> None:
    def one_start(h: list[str], rows: list[list[str]]) -> list[list[str]]:
        for row in rows:
            row[h.index(START)] = rows[0][h.index(START)]
        return rows

    err = one_error(cli("analyze", _kernel_details(tmp_path, one_start)))
    assert "on stream 2 start before the previous one ended (all start at the same time)" in err


def test_a_negative_duration_in_an_op_table_is_refused_with_its_row(tmp_path: Path) -> None:
    path = _kernel_details(tmp_path, lambda h, r: _set(h, r, DUR, 3, "-5.0"))
    assert "column 'Duration(us)', row 4: negative duration" in one_error(cli("analyze", path))


def test_every_event_tripled_is_read_once(tmp_path: Path) -> None:
    path = _kernel_details(tmp_path, lambda h, r: [row for row in r for _ in range(3)])
    profile = load_profile(path)
    assert profile.ops.num_rows == 2463
    assert profile.meta["warnings"] == [
        "dropped 4,926 exact duplicate task(s) (same name, stream, start and duration as an earlier row; first: "
        f"row 2, {profile.ops.column('op_name')[0]})"
    ]


def test_kineto_negative_dur_and_duplicates(tmp_path: Path) -> None:
    import orjson

    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"stream": 7}},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"stream": 7}},
            {"ph": "X", "cat": "kernel", "name": "n", "pid": 0, "tid": 7, "ts": 20, "dur": -3, "args": {"stream": 7}},
            {"ph": "X", "cat": "kernel", "name": "m", "pid": 0, "tid": 7, "ts": 30, "dur": 2, "args": {"stream": 7}},
        ]
    }
    path = tmp_path / "t.pt.trace.json"
    path.write_bytes(orjson.dumps(trace))
    profile = load_profile(path)
    assert profile.ops.column("op_name").to_pylist() == ["k", "m"]
    assert profile.meta["warnings"] == [
        "dropped 1 task(s) with a negative duration (first: row 3, n, -3.000 µs), as Perfetto does",
        "dropped 1 exact duplicate task(s) (same name, stream, start and duration as an earlier row; first: row 2, k)",
    ]
    result = cli("analyze", path, "--format", "json")
    assert result.exit_code == 0 and "dropped 1 task(s) with a negative duration" in result.stdout


@pytest.fixture
def run(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    assert cli("run", "--config", TINY, "--out", out).exit_code == 0
    return out


def _rewrite_ops(run: Path, fn: object) -> None:
    path = run / "ops.parquet"
    table = pq.read_table(path)
    schema = table.schema
    pq.write_table(fn(table).cast(schema), path)  # type: ignore[operator]


@pytest.mark.parametrize(
    "damage",
    [
        lambda t: t.set_column(t.schema.get_field_index("task_dur_ns"), "task_dur_ns", pc.negate(t["task_dur_ns"])),
        lambda t: t.set_column(
            t.schema.get_field_index("task_dur_ns"), "task_dur_ns", pa.array([2**63 - 1] * t.num_rows, pa.int64())
        ),
        lambda t: t.slice(0, 0),
    ],
    ids=["negative", "int64-max", "no-rows"],
)
def test_a_damaged_op_table_stops_analyze_export_and_diff(run: Path, tmp_path: Path, damage: object) -> None:
    _rewrite_ops(run, damage)
    for args in (["analyze", run], ["export", run, "--to", "msprof", "--out", tmp_path / "x"], ["diff", run, run]):
        err = one_error(cli(*args))
        assert "re-create the run with `atbprof run`" in err, (args, err)
    assert not (tmp_path / "x").exists() or list((tmp_path / "x").iterdir()) == []


def test_a_flipped_byte_in_ops_parquet_is_detected(run: Path) -> None:
    path = run / "ops.parquet"
    data = bytearray(path.read_bytes())
    meta = pq.read_metadata(path)
    col = meta.row_group(0).column(meta.schema.names.index("task_start_ns"))
    at = col.data_page_offset + col.total_compressed_size - 4  # in the page's (compressed) data, not its header
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    err = one_error(cli("analyze", run))
    assert "ops.parquet" in err and ("damaged" in err or "not a Parquet file" in err)
