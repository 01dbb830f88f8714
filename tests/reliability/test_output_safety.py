"""Issue 11, items 1, 2 and 9: outputs never destroy what the user had."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from atbprof.errors import OutputExistsError
from atbprof.outputs import MARKER, check_output_dir, clean_stale, staged_dir
from tests.reliability.conftest import TINY, cli, one_error, process, snapshot


@pytest.mark.parametrize("name", ["..", ".", ".hidden"])
def test_a_run_name_that_is_not_a_new_directory_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(f'name: "{name}"\nmodel: {{preset: llama2-7b}}\nworkload: {{decode_tokens: 2}}\n')
    before = snapshot(tmp_path)
    for args in (["run", "--config", cfg], ["run", "--config", cfg, "--force"]):
        err = one_error(cli(*args, cwd=tmp_path))
        assert "name = " in err and "not starting with '.'" in err
    err = one_error(cli("run", "--config", TINY, "--set", f"name={name}", "--force", cwd=tmp_path))
    assert f"--set name={name}" in err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("out", [".", "..", "sub/.."])
def test_out_that_is_or_contains_the_cwd_is_refused_even_with_force(tmp_path: Path, out: str) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "keep.txt").write_text("mine")
    before = snapshot(tmp_path)
    err = one_error(cli("run", "--config", TINY, "--out", out, "--force", cwd=work))
    assert "--out" in err
    assert snapshot(tmp_path) == before


def test_force_never_replaces_a_directory_atbprof_did_not_write(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    err = one_error(cli("run", "--config", TINY, "--out", mine, "--force"), 3)
    assert "not an atbprof run directory, so --force will not replace it" in err
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_force_never_deletes_a_file_added_to_a_run(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert cli("run", "--config", TINY, "--out", out).exit_code == 0
    (out / "notes.txt").write_text("mine")
    err = one_error(cli("run", "--config", TINY, "--out", out, "--force"), 3)
    assert "holds files atbprof did not write (notes.txt)" in err
    assert (out / "notes.txt").exists()


def test_out_that_is_a_file_or_a_symlink_exits_3_not_70(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "link").symlink_to(target)
    assert "is not a directory" in one_error(cli("run", "--config", TINY, "--out", tmp_path / "file", "--force"), 3)
    assert "symbolic link" in one_error(cli("run", "--config", TINY, "--out", tmp_path / "link", "--force"), 3)
    assert (tmp_path / "file").read_text() == "x" and list(target.iterdir()) == []


def test_replacement_is_rename_aside_then_rename_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure between setting the old output aside and renaming the new one in puts the old one back."""
    final = tmp_path / "r"
    with staged_dir(final, "run") as tmp:
        (tmp / "a.txt").write_text("old")
    real = os.rename
    calls: list[tuple[str, str]] = []

    def failing(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append((Path(src).name, Path(dst).name))
        if Path(dst) == final and Path(src).name.endswith(".tmp"):  # the rename-in (not the putting back)
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "rename", failing)
    with pytest.raises(OSError), staged_dir(final, "run") as tmp:
        (tmp / "a.txt").write_text("new")
    monkeypatch.setattr(os, "rename", real)
    assert (final / "a.txt").read_text() == "old"
    assert calls[0][0] == "r" and calls[0][1].endswith(".old"), "the old output went aside first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_the_marker_lists_what_atbprof_wrote(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert cli("run", "--config", TINY, "--out", out).exit_code == 0
    assert (out / MARKER).is_file()
    check_output_dir(out, "run", force=True)  # ours: may be replaced
    with pytest.raises(OutputExistsError, match="not an atbprof export"):
        check_output_dir(out, "export", force=True)  # but only by the command that wrote it


def test_diff_trace_never_overwrites_an_input(tmp_path: Path) -> None:
    a = tmp_path / "a"
    assert cli("run", "--config", TINY, "--out", a).exit_code == 0
    before = snapshot(a)
    err = one_error(cli("diff", a, a, "--trace", a / "ops.parquet", "--force"))
    assert "overlaps the input" in err
    err = one_error(cli("diff", a, a, "--trace", a / "combined.json", "--force"))
    assert "overlaps the input" in err
    assert snapshot(a) == before


def test_diff_trace_into_a_directory_exits_2_not_1(tmp_path: Path) -> None:
    a = tmp_path / "a"
    assert cli("run", "--config", TINY, "--out", a).exit_code == 0
    (tmp_path / "somedir").mkdir()
    assert "is a directory" in one_error(cli("diff", a, a, "--trace", f"{tmp_path / 'somedir'}/"))


def test_diff_trace_force_replaces_only_its_own_file(tmp_path: Path) -> None:
    a = tmp_path / "a"
    assert cli("run", "--config", TINY, "--out", a).exit_code == 0
    mine = tmp_path / "mine.json"
    mine.write_text('{"traceEvents": []}')
    assert "is not a diff trace atbprof wrote" in one_error(cli("diff", a, a, "--trace", mine, "--force"), 3)
    assert mine.read_text() == '{"traceEvents": []}'
    ours = tmp_path / "ours.json.gz"
    assert cli("diff", a, a, "--trace", ours).exit_code == 0
    assert cli("diff", a, a, "--trace", ours, "--force").exit_code == 0


def test_export_force_replaces_only_an_export(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert cli("run", "--config", TINY, "--out", run).exit_code == 0
    first = cli("export", run, "--to", "msprof", "--out", tmp_path / "x", "--format", "json")
    assert first.exit_code == 0, first.output
    root = next((tmp_path / "x").iterdir())
    (root / "analysis.xlsx").write_text("mine")
    err = one_error(cli("export", run, "--to", "msprof", "--out", tmp_path / "x", "--force"), 3)
    assert "analysis.xlsx" in err and (root / "analysis.xlsx").exists()


def _dead_pid() -> int:
    proc = process("--version")
    proc.wait()
    return proc.pid


def test_stale_temp_directories_of_dead_owners_are_removed(tmp_path: Path) -> None:
    pid = _dead_pid()
    stale = tmp_path / f".r.atbprof-{pid}-abcd1234.tmp"
    (stale / "junk").mkdir(parents=True)
    live = tmp_path / f".q.atbprof-{os.getpid()}-abcd1234.tmp"  # a live owner (this process): kept
    live.mkdir()
    foreign = tmp_path / ".r.x1y2.tmp"  # not a name atbprof uses: never touched
    foreign.mkdir()
    assert cli("run", "--config", TINY, "--out", tmp_path / "r").exit_code == 0
    assert not stale.exists() and live.exists() and foreign.exists()


def test_an_output_set_aside_by_an_interrupted_replacement_is_put_back(tmp_path: Path) -> None:
    pid = _dead_pid()
    aside = tmp_path / f".r.atbprof-{pid}-abcd1234.old"
    aside.mkdir()
    (aside / "ops.parquet").write_text("the only copy")
    assert clean_stale(tmp_path) == ["put back r (set aside by an interrupted replacement)"]
    assert (tmp_path / "r" / "ops.parquet").read_text() == "the only copy"


def _wait_for(pattern: str, where: Path, proc: object, timeout: float = 60.0) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(where.glob(pattern)) if where.exists() else []
        if found:
            return found
        if proc.poll() is not None:  # type: ignore[attr-defined]
            break
        time.sleep(0.02)
    raise AssertionError(f"no {pattern} appeared in {where}")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_while_writing_leaves_nothing_behind(tmp_path: Path, signum: int) -> None:
    # long enough to be caught mid-write even on a loaded machine: LLaMA-2-7B unfused, 4,000 decode steps (~5 s of
    # writing). On a starved CI machine the run can still finish before this process gets to send the signal: then
    # the signal never reached it (exit 0, the run written) and the attempt says nothing; it is repeated.
    for attempt in range(3):
        out = tmp_path / str(attempt)
        args = ["run", "--config", TINY.parent / "seed000-baseline.yaml", "--fusion", "none"]
        args += ["--set", "workload.decode_tokens=4000", "--set", "model.rope_scaling_factor=2", "--out", out / "r"]
        proc = process(*args)
        _wait_for(".r.atbprof-*.tmp", out, proc)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
        left = list(out.iterdir())
        if proc.returncode == 0 and left == [out / "r"]:
            continue  # finished before the signal was sent
        assert proc.returncode == 128 + signum, (proc.returncode, err, left)
        assert f"interrupted ({signal.Signals(signum).name}); nothing was written" in err.decode()
        assert b"Traceback" not in err
        assert left == []
        return
    pytest.fail("the run finished before the signal in 3 attempts: make it longer")


def test_sigterm_during_an_export_leaves_nothing_behind(tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = ["--config", TINY.parent / "seed000-baseline.yaml", "--fusion", "none", "--set", "workload.decode_tokens=400"]
    assert cli("run", *cfg, "--out", run).exit_code == 0
    proc = process("export", run, "--to", "ascend-pt", "--out", tmp_path / "x")
    _wait_for(".*.atbprof-*.tmp", tmp_path / "x", proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert list((tmp_path / "x").iterdir()) == []


def test_a_full_disk_is_a_user_error_and_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from atbprof.writers.parquet import ParquetOpsWriter

    def full(self: object, batch: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "ops.parquet"))

    monkeypatch.setattr(ParquetOpsWriter, "write_batch", full)
    err = one_error(cli("run", "--config", TINY, "--out", tmp_path / "out" / "r"))
    assert "No space left on device; free some space, or write elsewhere (--out)" in err
    assert list((tmp_path / "out").iterdir()) == []


def test_signals_are_deferred_only_while_a_temp_path_is_made(tmp_path: Path) -> None:
    """A signal that lands between making the temp directory and covering it by the cleanup waits (the race the
    SIGTERM test can hit on a loaded machine); afterwards the mask is what it was, also when making it fails."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    with staged_dir(tmp_path / "r", "run") as tmp:
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
        (tmp / "x").write_text("x")
    with pytest.raises(OSError), staged_dir(tmp_path / ("n" * 300), "run"):
        pass
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


def test_the_same_config_gives_the_same_bytes_however_its_path_is_written(tmp_path: Path) -> None:
    """run.json and sweep.json store the files a config names resolved (no `a/b/../..`, the same from any working
    directory), so a run or a sweep made from another directory, or through another spelling of the path, is
    byte-identical."""
    import shutil

    (tmp_path / "a" / "b").mkdir(parents=True)
    fx = tmp_path / "fx"
    shutil.copytree(TINY.parent / "hf", fx / "hf")
    cfg = fx / "cfg.yaml"
    cfg.write_text("name: t\nmodel: {hf_config: hf/tiny-llama/config.json}\nworkload: {decode_tokens: 2}\n")
    outs = []
    for i, (cwd, path) in enumerate([(tmp_path, "fx/cfg.yaml"), (tmp_path / "a" / "b", "../../fx/cfg.yaml")]):
        out = tmp_path / f"r{i}"
        assert cli("run", "--config", path, "--out", out, "--set", "output.trace=false", cwd=cwd).exit_code == 0
        sweep = tmp_path / f"x{i}" / "s"  # the sweep is named after its directory: the same name
        args = ["sweep", "--config", path, "--grid", "workload.batch_size=1,2", "--out", sweep, "--workers", "0"]
        assert cli(*args, cwd=cwd).exit_code == 0
        outs.append((out, sweep))
    (r0, s0), (r1, s1) = outs
    assert (r0 / "run.json").read_bytes() == (r1 / "run.json").read_bytes()
    assert b".." not in (r1 / "run.json").read_bytes()
    assert (s0 / "sweep.json").read_bytes() == (s1 / "sweep.json").read_bytes()


def test_a_signal_another_thread_takes_is_held_back_until_the_release() -> None:
    """The kernel hands a process-wide SIGTERM to a thread that does not block it (Arrow's, a writer's) while the
    main thread holds signals back; Python runs the handler on the main thread at once. The CLI's handler holds it
    back too, and the release delivers it: nothing between a temp path's creation and its cleanup is interrupted."""
    import threading

    from atbprof.commands import _terminate
    from atbprof.errors import Terminated
    from atbprof.outputs.staging import _Deferred

    old = signal.signal(signal.SIGTERM, _terminate)
    go = threading.Event()

    def send() -> None:  # started before the hold: this thread does not block the signal, so the kernel picks it
        go.wait()
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        held = _Deferred().hold()
        go.set()
        sender.join()
        for _ in range(50):  # the handler has run by now (it would have raised here)
            time.sleep(0.001)
        with pytest.raises(Terminated):
            held.release()
            for _ in range(50):
                time.sleep(0.001)
    finally:
        signal.signal(signal.SIGTERM, old)
