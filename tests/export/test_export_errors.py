"""export_run's contract: deterministic bytes, atomic output, refusal to overwrite, clear errors, run dir untouched."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from atbprof.errors import InputError, OutputExistsError, SchemaError
from atbprof.export import TARGETS, ExportTarget, common, export_run
from atbprof.export import ascend_pt as ascend_pt_layout


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    return {
        p.relative_to(root).as_posix(): (
            p.stat().st_size,
            p.stat().st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest(),
        )
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _contents(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture()
def run_copy(make_run: Callable[[str], Path], tmp_path: Path) -> Path:
    """A private copy of the tiny unfused run (tests below damage it)."""
    dst = tmp_path / "run"
    shutil.copytree(make_run("tiny-none"), dst)
    return dst


@pytest.mark.parametrize("target", TARGETS)
def test_same_run_same_bytes_whatever_the_batching(
    target: ExportTarget, make_run: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run("tiny-none")
    a = export_run(run, target, tmp_path / "a")
    b = export_run(run, target, tmp_path / "b")
    monkeypatch.setattr(common, "BATCH_ROWS", 37)  # batches cut steps, busy intervals and flows anywhere
    c = export_run(run, target, tmp_path / "c")
    assert a.root.name == b.root.name == c.root.name
    assert _contents(a.root) == _contents(b.root) == _contents(c.root)
    assert (a.op_rows, a.steps, a.trace_events) == (c.op_rows, c.steps, c.trace_events)


def test_run_dir_is_never_modified(make_run: Callable[[str], Path], tmp_path: Path) -> None:
    run = make_run("tiny-graph")
    before = _snapshot(run)
    for target in TARGETS:
        export_run(run, target, tmp_path / "out")
        export_run(run, target, tmp_path / "out", force=True)
    assert _snapshot(run) == before
    with pytest.raises(InputError, match="overlaps the input"):
        export_run(run, "msprof", run / "exports")
    assert _snapshot(run) == before and not (run / "exports").exists()


def test_refuses_to_overwrite_without_force(make_run: Callable[[str], Path], tmp_path: Path) -> None:
    run = make_run("tiny-none")
    first = export_run(run, "ascend-pt", tmp_path)
    marker = first.root / "keep-me"
    marker.write_text("mine")
    with pytest.raises(OutputExistsError, match="--force") as info:
        export_run(run, "ascend-pt", tmp_path)
    assert info.value.exit_code == 3 and marker.exists()
    with pytest.raises(OutputExistsError, match=r"holds files atbprof did not write \(keep-me\)"):
        export_run(run, "ascend-pt", tmp_path, force=True)  # --force replaces only what atbprof wrote
    assert marker.read_text() == "mine"
    marker.unlink()
    again = export_run(run, "ascend-pt", tmp_path, force=True)
    assert again.root == first.root
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.root.name], "no temp directories left behind"
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputExistsError, match="not a directory"):
        export_run(run, "msprof", tmp_path / "file")


def test_failure_leaves_nothing_half_written(
    make_run: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_run("tiny-none")
    old = export_run(run, "ascend-pt", tmp_path)
    before = _contents(old.root)
    calls = 0
    real = ascend_pt_layout.kernel_details_lines

    def failing(cells: object, batch: pa.RecordBatch) -> pa.Array:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("disk full")
        return real(cells, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(common, "BATCH_ROWS", 100)
    monkeypatch.setattr(ascend_pt_layout, "kernel_details_lines", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        export_run(run, "ascend-pt", tmp_path, force=True)
    assert _contents(old.root) == before, "the previous export survives a failed --force"
    assert [p.name for p in tmp_path.iterdir()] == [old.root.name]
    calls = 0
    with pytest.raises(RuntimeError):
        export_run(run, "ascend-pt", tmp_path / "fresh")
    assert not any((tmp_path / "fresh").iterdir())


def test_missing_run_dir(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such run directory") as info:
        export_run(tmp_path / "nope", "ascend-pt", tmp_path / "out")
    assert info.value.exit_code == 2 and "atbprof run" in str(info.value)
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        export_run(tmp_path / "f", "msprof", tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["ops.parquet", "steps.parquet", "run.json"])
def test_missing_run_file_is_named(name: str, run_copy: Path, tmp_path: Path) -> None:
    (run_copy / name).unlink()
    with pytest.raises(InputError) as info:
        export_run(run_copy, "ascend-pt", tmp_path / "out")
    msg = str(info.value)
    assert name in msg and "missing" in msg and "atbprof run" in msg
    assert "\n" not in msg and "Traceback" not in msg


def test_corrupt_files(run_copy: Path, tmp_path: Path) -> None:
    ops = run_copy / "ops.parquet"
    good = ops.read_bytes()
    ops.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match=r"ops\.parquet: not a Parquet file"):
        export_run(run_copy, "ascend-pt", tmp_path / "out")
    ops.write_bytes(good[: len(good) // 2])  # truncated: no footer
    with pytest.raises(InputError, match=r"ops\.parquet"):
        export_run(run_copy, "msprof", tmp_path / "out")
    ops.write_bytes(good)
    (run_copy / "run.json").write_text("{broken")
    with pytest.raises(InputError, match=r"run\.json: not valid JSON"):
        export_run(run_copy, "ascend-pt", tmp_path / "out")
    (run_copy / "run.json").write_text('{"name": "x"}')
    with pytest.raises(InputError, match=r"missing key 'device\.soc_version'"):
        export_run(run_copy, "ascend-pt", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_wrong_op_schema_is_a_schema_error(run_copy: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(run_copy / "ops.parquet").drop_columns(["task_start_ns"])
    pq.write_table(table, run_copy / "ops.parquet")
    with pytest.raises(SchemaError, match="task_start_ns"):
        export_run(run_copy, "ascend-pt", tmp_path / "out")


def test_unknown_target(run_copy: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="ascend-pt, msprof"):
        export_run(run_copy, "chrome", tmp_path / "out")  # type: ignore[arg-type]
