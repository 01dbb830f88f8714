"""The header variants of docs/ascend_profiling_formats.md §0/§2.2, made from the real Qwen3 table: every variant
gives the same op rows."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from atbprof.importers import load_profile
from tests.importers.conftest import OUT, QWEN, shared

Rows = list[list[str]]
TO_MSPROF = {
    "Name": "Op Name",
    "Type": "OP Type",
    "Accelerator Core": "Task Type",
    "Start Time(us)": "Task Start Time(us)",
    "Duration(us)": "Task Duration(us)",
    "Wait Time(us)": "Task Wait Time(us)",
}


def _rename(names: dict[str, str]) -> Callable[[Rows], Rows]:
    return lambda rows: [[names.get(c, c) for c in rows[0]], *rows[1:]]


def _drop(*columns: str) -> Callable[[Rows], Rows]:
    def apply(rows: Rows) -> Rows:
        keep = [i for i, c in enumerate(rows[0]) if c not in columns]
        return [[row[i] for i in keep] for row in rows]

    return apply


VARIANTS: dict[str, tuple[Callable[[Rows], Rows], str]] = {
    "cann-8.3 (as captured)": (lambda rows: rows, "kernel_details"),
    "master: Block Num / Mix Block Num": (
        _rename({"Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num"}),
        "kernel_details",
    ),
    "2025-01: no Device_id": (_drop("Device_id"), "kernel_details"),
    "2023-11: no Device_id / OP State / HF32 Eligible": (
        _drop("Device_id", "OP State", "HF32 Eligible"),
        "kernel_details",
    ),
    "msprof op_summary vocabulary": (lambda rows: _drop("Step Id")(_rename(TO_MSPROF)(rows)), "op_summary"),
}
SAME = ["op_name", "op_type", "task_type", "task_start_ns", "task_dur_ns", "task_wait_ns", "block_dim"]
SAME += ["mix_block_dim", "stream_id", "task_id", "input_shapes", "output_dtypes", "mac_time_ns", "vec_ratio"]


def _write(rows: Rows, path: Path, newline: str = "\n", bom: bool = False) -> None:
    out = io.StringIO()
    csv.writer(out, lineterminator=newline).writerows(rows)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + out.getvalue().encode())


@pytest.fixture(scope="module")
def original() -> tuple[Rows, pa.Table]:
    path = shared(QWEN / OUT / "kernel_details.csv")
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    return rows, load_profile(path).ops


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_header_variant_gives_the_same_rows(variant: str, original: tuple[Rows, pa.Table], tmp_path: Path) -> None:
    rows, ops = original
    transform, kind = VARIANTS[variant]
    path = tmp_path / "table.csv"
    _write(transform(rows), path)
    profile = load_profile(path)
    assert profile.kind == kind
    for col in SAME:
        assert profile.ops[col].equals(ops[col]), col
    assert profile.ops["step"].null_count == (ops.num_rows if kind == "op_summary" else 0)


@pytest.mark.parametrize(("newline", "bom"), [("\r\n", False), ("\n", True), ("\r\n", True)])
def test_windows_line_ends_and_bom(newline: str, bom: bool, original: tuple[Rows, pa.Table], tmp_path: Path) -> None:
    rows, ops = original
    path = tmp_path / "kernel_details.csv"
    _write(rows, path, newline, bom)
    imported = load_profile(path).ops
    for col in SAME:
        assert imported[col].equals(ops[col]), col


@pytest.mark.parametrize("table", ["kernel_details", "op_summary"])
def test_runtime_task_rows_are_left_out_and_said(table: str, original: tuple[Rows, pa.Table], tmp_path: Path) -> None:
    """The same allowlist as the timelines: a row whose task type is a runtime task (here a TASK_TIMEOUT_SET a
    day before the kernels) is not a kernel; it is counted in the meta and warned about, never silently kept."""
    rows, ops = original
    header = rows[0]
    odd = list(rows[1])
    odd[header.index("Name")] = "TASK_TIMEOUT_SET"
    odd[header.index("Accelerator Core")] = "TASK_TIMEOUT_SET"
    start = header.index("Start Time(us)")
    odd[start] = str(float(odd[start].strip()) - 86_400e6)
    changed = [header, odd, *rows[1:]]
    path = tmp_path / "table.csv"
    _write(_rename(TO_MSPROF)(changed) if table == "op_summary" else changed, path)
    profile = load_profile(path)
    assert profile.ops.num_rows == ops.num_rows
    assert profile.meta["dropped_device_tasks"] == {"TASK_TIMEOUT_SET": 1}
    assert any("runtime tasks, not kernels" in w for w in profile.meta["warnings"])  # type: ignore[union-attr]
