"""predict and calibrate refuse measurements no kernel can have (exit 2, naming the kernel), before any pricing or
fitting: a negative or impossible Block Dim, a profile whose durations are all zero."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.importers.conftest import QWEN, shared
from tests.reliability.conftest import cli, one_error


def _damaged(tmp_path: Path, column: str, value: str, rows: slice) -> Path:
    src = shared(QWEN) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with open(src, newline="") as fh:
        table = list(csv.reader(fh))
    col = table[0].index(column)
    for row in table[1:][rows]:
        row[col] = value
    out = tmp_path / "kernel_details.csv"
    with open(out, "w", newline="") as fh:
        csv.writer(fh).writerows(table)
    return out


@pytest.mark.parametrize("command", ["predict", "calibrate"])
@pytest.mark.parametrize(
    ("column", "value", "rows", "message"),
    [
        ("Block Dim", "-1", slice(5, 6), "has Block Dim -1: a kernel runs on at least one core"),
        ("Block Dim", "-1", slice(None), "has Block Dim -1"),
        ("Block Dim", "100000", slice(0, 1), "has Block Dim 100000, more than any NPU's cores"),
        ("Duration(us)", "0", slice(None), "every kernel's duration is 0"),
    ],
)
def test_impossible_measurements_are_refused(
    tmp_path: Path, command: str, column: str, value: str, rows: slice, message: str
) -> None:
    profile = _damaged(tmp_path, column, value, rows)
    args: list[object] = [command, profile] + (["--out", tmp_path / "spec.yaml"] if command == "calibrate" else [])
    assert message in one_error(cli(*args))
    assert not (tmp_path / "spec.yaml").exists()
