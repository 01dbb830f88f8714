"""Every reader refuses what analyze refuses: plot, report, analyze and cluster of a damaged run or sweep exit 2
with one message naming the file (never exit 70, never a figure drawn from damaged data)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.reliability.conftest import TINY, cli, one_error


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("run") / "r"
    result = cli("run", "--config", TINY, "--out", root, "--set", "workload.decode_tokens=2")
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sweep") / "s"
    result = cli("sweep", "--config", TINY, "--grid", "workload.batch_size=1,2", "--out", root, "--workers", "0")
    assert result.exit_code == 0, result.output
    return root


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:3000])


def _rewrite(path: Path, column: str, value: object) -> None:
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    table = table.set_column(i, column, pa.array([value] * table.num_rows, table.schema.field(column).type))
    pq.write_table(table, path)


def _flip_a_page_byte(path: Path) -> None:
    """A byte in the middle of the data pages: the page checksum no longer matches."""
    data = bytearray(path.read_bytes())
    meta = pq.read_metadata(path)
    col = meta.row_group(0).column(meta.schema.to_arrow_schema().get_field_index("task_dur_ns"))
    at = col.data_page_offset + col.total_compressed_size // 2
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _summary(path: Path, key: str, value: object) -> None:
    doc = json.loads(path.read_text())
    node = doc["summary"]
    *parents, last = key.split(".")
    for p in parents:
        node = node[p]
    node[last] = value
    path.write_text(json.dumps(doc))


RUN_DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated ops": (lambda r: _truncate(r / "ops.parquet"), "ops.parquet: not a Parquet file"),
    "truncated steps": (lambda r: _truncate(r / "steps.parquet"), "steps.parquet: not a Parquet file"),
    "steps swapped for ops": (
        lambda r: shutil.copy(r / "ops.parquet", r / "steps.parquet"),
        "steps.parquet: missing columns",
    ),
    "a failed page checksum": (lambda r: _flip_a_page_byte(r / "ops.parquet"), "ops.parquet: damaged"),
    "negative durations": (lambda r: _rewrite(r / "ops.parquet", "task_dur_ns", -5), "ops.parquet"),
    "INT64_MAX durations": (lambda r: _rewrite(r / "ops.parquet", "task_dur_ns", 2**63 - 1), "ops.parquet"),
    "a string number in run.json": (
        lambda r: _summary(r / "run.json", "decode_ms_per_token", "12.5"),
        "run.json: summary.decode_ms_per_token = '12.5'",
    ),
    "a string count in run.json": (
        lambda r: _summary(r / "run.json", "decode_steps", "abc"),
        "run.json: summary.decode_steps = 'abc'",
    ),
}


@pytest.mark.parametrize("command", ["plot", "report", "analyze"])
@pytest.mark.parametrize("damage", sorted(RUN_DAMAGE))
def test_a_damaged_run_is_refused_by_every_reader(run: Path, tmp_path: Path, damage: str, command: str) -> None:
    broken = tmp_path / "r"
    shutil.copytree(run, broken)
    hurt, message = RUN_DAMAGE[damage]
    hurt(broken)
    args: list[object] = [command, broken]
    if command == "plot":
        args += ["--out", tmp_path / "plots"]
    elif command == "report":
        args += ["--out", tmp_path / "page.html"]
    err = one_error(cli(*args))
    assert message in err
    assert not (tmp_path / "plots").exists() and not (tmp_path / "page.html").exists()


SWEEP_DAMAGE: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "a foreign sweep.parquet": (
        lambda s, r: shutil.copy(r / "ops.parquet", s / "sweep.parquet"),
        "sweep.parquet: no column point",
    ),
    "a NaN figure": (
        lambda s, r: _rewrite(s / "sweep.parquet", "decode_ms_per_token", float("nan")),
        "sweep.parquet: column decode_ms_per_token holds NaN",
    ),
    "a truncated sweep.parquet": (lambda s, r: _truncate(s / "sweep.parquet"), "not a sweep directory"),
    "rows out of order": (
        lambda s, r: pq.write_table(pq.read_table(s / "sweep.parquet").take(pa.array([1, 0])), s / "sweep.parquet"),
        "its rows are not the points 0..N-1 in order",
    ),
}


@pytest.mark.parametrize("command", ["plot", "report"])
@pytest.mark.parametrize("damage", sorted(SWEEP_DAMAGE))
def test_a_damaged_sweep_is_refused(sweep: Path, run: Path, tmp_path: Path, damage: str, command: str) -> None:
    broken = tmp_path / "s"
    shutil.copytree(sweep, broken)
    hurt, message = SWEEP_DAMAGE[damage]
    hurt(broken, run)
    out = tmp_path / ("plots" if command == "plot" else "page.html")
    err = one_error(cli(command, broken, "--out", out))
    assert message in err and not out.exists()


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ("x", "summary.parallel.devices = 'x'"),
        ([1], "summary.parallel.devices = [1]"),
        (100000, "summary.parallel.devices = 100000"),
        (3, "devices = 3 is not tp x pp x dp"),
    ],
)
def test_a_run_json_device_count_no_run_has_is_refused(
    run: Path, tmp_path: Path, devices: object, message: str
) -> None:
    broken = tmp_path / "r"
    shutil.copytree(run, broken)
    doc = json.loads((broken / "run.json").read_text())
    doc["summary"]["parallel"] = {"tp": 1, "pp": 1, "dp": 1, "devices": devices, "transport": "", "algorithm": ""}
    (broken / "run.json").write_text(json.dumps(doc))
    for command in ("analyze", "plot"):
        args = [command, broken] + (["--out", tmp_path / "p"] if command == "plot" else [])
        assert message in one_error(cli(*args))
