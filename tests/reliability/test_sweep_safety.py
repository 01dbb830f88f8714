"""A sweep keeps what it ran: kept runs survive an interrupt at any moment, progress is saved per point, and its
worker processes end with it, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atbprof.errors import InputError
from atbprof.sweep.api import run_sweep
from atbprof.sweep.progress import progress_dir
from tests.conftest import FIXTURES

BASE = FIXTURES / "tiny-llama.yaml"
GRID = ["workload.batch_size=1,2,3", "workload.prompt_len=16,32"]


def _sweep(out: Path, **kw: object) -> object:
    args = {"config": BASE, "spec_file": None, "grid": GRID, "sets": [], "out": out, "workers": 0} | kw
    return run_sweep(**args)  # type: ignore[arg-type]


def _runs(out: Path) -> list[str]:
    runs = out / "runs"
    return sorted(p.name for p in runs.iterdir() if (p / "run.json").is_file()) if runs.is_dir() else []


def _interrupt_after_writing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C just after the sweep's directory was written whole in its temp place, before it is renamed in."""
    import atbprof.sweep.api as api

    real = api.write_sweep

    def interrupted(*a: object, **kw: object) -> list[str]:
        real(*a, **kw)  # type: ignore[arg-type]
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "write_sweep", interrupted)


def test_an_interrupt_while_the_output_is_staged_keeps_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C at the last moment - every point ran and the sweep's directory is complete in its temp place - removes
    the temp directory, never the kept runs: the same command writes them all."""
    out = tmp_path / "s"
    _interrupt_after_writing(monkeypatch)
    with pytest.raises(KeyboardInterrupt) as err:
        _sweep(out, keep_runs=True)
    assert "all 6 points are kept" in err.value.kept  # type: ignore[attr-defined]
    assert not out.exists() and len(_runs(progress_dir(out))) == 6
    monkeypatch.undo()
    again = _sweep(out, keep_runs=True).report  # type: ignore[attr-defined]
    assert again.resumed == 6 and _runs(out) == [f"point-000{i}" for i in range(6)]
    assert not progress_dir(out).exists()


def test_a_point_whose_kept_run_is_gone_runs_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    out = tmp_path / "s"
    _interrupt_after_writing(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        _sweep(out, keep_runs=True)
    monkeypatch.undo()
    shutil.rmtree(progress_dir(out) / "runs" / "point-0002")  # a point file says done, its run is not there
    again = _sweep(out, keep_runs=True).report  # type: ignore[attr-defined]
    assert again.resumed == 5 and len(_runs(out)) == 6


def test_keep_runs_over_a_sweep_finished_without_them(tmp_path: Path) -> None:
    out = tmp_path / "s"
    _sweep(out)
    with pytest.raises(InputError, match="finished without its runs; --keep-runs needs every point run again"):
        _sweep(out, keep_runs=True)
    assert _runs(out) == []
    _sweep(out, keep_runs=True, force=True)
    assert len(_runs(out)) == 6


def _group(pgid: int) -> bool:
    """Any live process in the process group `pgid` (scripts/fuzz.py's check, which its --signals mode uses)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fuzz", Path(__file__).parents[2] / "scripts" / "fuzz.py")
    assert spec and spec.loader
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    return bool(fuzz._group_alive(pgid))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_kill_9_of_a_sweep_leaves_no_process_and_keeps_its_points(tmp_path: Path) -> None:
    """SIGKILL of the sweep (nothing of it runs to shut the pool down): its workers, the forkserver and the
    resource tracker end within seconds, so nothing keeps the caller's stdout open; the points finished so far
    are kept, point by point, and the same command goes on from them."""
    batches = ",".join(str(b) for b in range(1, 41))
    args = ["sweep", "--config", FIXTURES / "llama2-7b-910b2.yaml", "--out", tmp_path / "s", "--workers", "2"]
    args += ["--grid", f"workload.batch_size={batches}", "--grid", "workload.prompt_len=128,512,2048"]
    args += ["--grid", "workload.decode_tokens=32,64,128,256"]
    cmd = [sys.executable, "-c", "from atbprof.commands import main; main()", *map(str, args)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    points = progress_dir(tmp_path / "s") / "points"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not points.is_dir() or len(list(points.glob("*.json"))) < 20):
        assert proc.poll() is None, proc.stdout.read().decode()  # type: ignore[union-attr]
        time.sleep(0.1)
    kept_before = len(list(points.glob("*.json")))
    assert kept_before >= 20  # per point, not per chunk of a quarter of the points per worker
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _group(proc.pid):
        time.sleep(0.2)
    assert not _group(proc.pid)
    assert proc.stdout.read() is not None  # type: ignore[union-attr]  # EOF: no process holds the pipe
    kept = len(list(points.glob("*.json")))
    done = subprocess.run(cmd, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    assert f"{kept} taken from the interrupted run" in done.stdout.decode()


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("reference: [{label: c, at: {fusion: default}, gain_pct: [10, 5]}]", "a range is [low, high]"),
        ("reference: [{label: c, at: {fusion: default}, gain_pct: 1.0e308}]", "less than or equal to 100"),
        ("reference: [{label: c, at: {fusion: default}, gain_pct: .nan}]", "gain_pct"),
        ("reference: [{label: c, at: {fusion: default}, gain_pct: .inf}]", "gain_pct"),
        ("compare: {axis: fusion, base: none, new: default, figure: fusion}", "compare.figure fusion: not a figure"),
        (
            "compare: {axis: fusion, base: none, new: default, figure: nonexistent}",
            "compare.figure nonexistent: not a figure",
        ),
    ],
)
def test_a_spec_mistake_is_refused_before_any_point_runs(tmp_path: Path, block: str, message: str) -> None:
    from tests.reliability.conftest import cli, one_error

    spec = tmp_path / "spec.yaml"
    text = f"base: {BASE}\ngrid: {{fusion: [none, default], workload.batch_size: [1, 2]}}\n"
    if block.startswith("reference"):
        text += "compare: {axis: fusion, base: none, new: default}\n"
    spec.write_text(text + block + "\n")
    out = tmp_path / "s"
    assert message in one_error(cli("sweep", "--spec", spec, "--out", out, "--workers", "0"))
    assert not out.exists() and not progress_dir(out).exists()  # nothing ran


def test_a_progress_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    from tests.reliability.conftest import cli, one_error

    elsewhere = tmp_path / "mine"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("mine")
    out = tmp_path / "s"
    progress_dir(out).symlink_to(elsewhere)
    args = ["sweep", "--config", BASE, "--grid", "workload.batch_size=1,2", "--out", out, "--workers", "0"]
    assert "is a symbolic link" in one_error(cli(*args, "--force"))
    assert (elsewhere / "keep.txt").read_text() == "mine"
