"""`atbprof sweep` end to end: the directory it writes (sweep.parquet's schema and rows, sweep.json, plots,
report.html), byte-identical outputs, capacity-aware rows, failed points recorded, resuming an interrupted sweep,
and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from atbprof.errors import InputError, OutputExistsError
from atbprof.sweep import point as point_module
from atbprof.sweep.api import run_sweep
from atbprof.sweep.progress import progress_dir
from tests.conftest import FIXTURES

runner = CliRunner()
BASE = FIXTURES / "seed000-baseline.yaml"
GRID = ["workload.batch_size=1,8", "workload.prompt_len=64,8192", "fusion=seed000-baseline,seed000-lnfused"]
SETS = ["workload.decode_tokens=4", "model.rope_scaling_factor=3"]  # 8,196 tokens: past LLaMA-2's 4,096


def _sweep(out: Path, **kw: object) -> object:
    args = {"config": BASE, "spec_file": None, "grid": GRID, "sets": SETS, "out": out, "workers": 0} | kw
    return run_sweep(**args)  # type: ignore[arg-type]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_sweep_writes_its_table_plots_and_report(tmp_path: Path) -> None:
    result = _sweep(tmp_path / "s")
    report = result.report  # type: ignore[attr-defined]
    assert (report.points, report.ran, report.not_fitting, report.failed) == (8, 6, 2, 0)
    assert report.files == [
        "plots/sweep-gain.png",
        "plots/sweep-grid.png",
        "plots/sweep-lines.png",
        "report.html",
        "sweep.json",
        "sweep.parquet",
    ]
    table = pq.read_table(tmp_path / "s" / "sweep.parquet")
    names = table.column_names
    assert names[:6] == ["point", "workload.batch_size", "workload.prompt_len", "fusion", "fits", "error"]
    assert {"decode_ms_per_token", "ttft_ms", "tokens_per_s", "memory.total_gb", "fusion_fired.add_norm"} <= set(names)
    assert table.schema.field("workload.batch_size").type == "int64" and table.schema.field("fusion").type == "string"
    rows = table.to_pylist()
    big = [r for r in rows if r["workload.batch_size"] == 8 and r["workload.prompt_len"] == 8192]
    assert all(r["fits"] is False and r["decode_ms_per_token"] is None for r in big)  # a row saying so
    assert all(r["error"].startswith("does not fit: needs ") and r["memory.total_gb"] > 32 for r in big)
    ok = [r for r in rows if r["error"] is None]
    assert all(r["fits"] and r["decode_ms_per_token"] > 0 and r["memory.total_gb"] < 32 for r in ok)
    # the compared gain: base vs fused of the same batch and prompt, the seed-000 point as the README says
    gain = next(g for g in report.gains if g.at == {"workload.batch_size": 1, "workload.prompt_len": 64})
    assert gain.gain_pct == pytest.approx((gain.base - gain.new) / gain.base * 100, abs=1e-3) and gain.gain_pct > 10
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert doc["generator"] == "atbprof" and len(doc["spec"]["points"]) == 8 and "resumed" not in doc["report"]
    page = (tmp_path / "s" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 6 and "http://" not in page and "<script" not in page


def test_the_same_sweep_gives_the_same_bytes_in_this_process_and_a_pool(tmp_path: Path) -> None:
    _sweep(tmp_path / "a" / "s")  # the directory's name is the sweep's: the same in both
    _sweep(tmp_path / "b" / "s", workers=2)
    assert _files(tmp_path / "a" / "s") == _files(tmp_path / "b" / "s")


def test_a_failed_point_is_a_row_and_the_sweep_goes_on(tmp_path: Path) -> None:
    out = runner.invoke(
        app,
        [
            "sweep",
            "--config",
            str(BASE),
            "--grid",
            "parallel.tp=1,3",
            "--set",
            "device.preset=910B2",
            "--set",
            "workload.decode_tokens=2",
            "--out",
            str(tmp_path / "s"),
            "--workers",
            "0",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert (doc["ran"], doc["failed"]) == (1, 1)
    (err,) = doc["errors"]
    assert err["point"] == 1 and err["at"] == {"parallel.tp": 3} and "parallel.tp" in err["error"]
    assert not err["internal"]


def test_an_atbprof_bug_in_a_point_is_recorded_and_exits_70(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import atbprof.run

    real = atbprof.run.summarize

    def broken(cfg: object) -> object:
        if cfg.workload.batch_size == 8:  # type: ignore[attr-defined]
            raise ZeroDivisionError("boom")
        return real(cfg)  # type: ignore[arg-type]

    monkeypatch.setattr(atbprof.run, "summarize", broken)
    out = runner.invoke(
        app,
        [
            "sweep",
            "--config",
            str(BASE),
            "--grid",
            "workload.batch_size=1,8",
            "--set",
            "workload.decode_tokens=2",
            "--out",
            str(tmp_path / "s"),
            "--workers",
            "0",
        ],
    )
    assert out.exit_code == 70 and "Traceback" not in out.output
    assert "internal error: ZeroDivisionError: boom" in out.output
    assert pq.read_table(tmp_path / "s" / "sweep.parquet").num_rows == 2  # written all the same


def test_an_interrupted_sweep_resumes_where_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _sweep(tmp_path / "whole" / "s")
    real = point_module.run_point
    calls: list[int] = []

    def interrupted(task: point_module.PointTask) -> dict[str, object]:
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(task.index)
        return real(task)

    monkeypatch.setattr(point_module, "run_point", interrupted)
    monkeypatch.setattr("atbprof.sweep.point.run_point", interrupted)
    out = tmp_path / "s"
    with pytest.raises(KeyboardInterrupt) as err:
        _sweep(out)
    # each point is kept as it finishes, also within a chunk of points that share a model graph
    assert "5 of 8 points are kept" in err.value.kept  # type: ignore[attr-defined]
    assert not out.exists() and len(list((progress_dir(out) / "points").iterdir())) == 5
    calls.clear()
    monkeypatch.setattr(point_module, "run_point", real)
    resumed = _sweep(out).report  # type: ignore[attr-defined]
    assert resumed.resumed == 5 and resumed.points == 8
    assert _files(out) == _files(tmp_path / "whole" / "s")  # the same bytes as a sweep never interrupted
    assert not progress_dir(out).exists()


def test_what_a_sweep_refuses(tmp_path: Path) -> None:
    first = _sweep(tmp_path / "s").report  # type: ignore[attr-defined]
    again = _sweep(tmp_path / "s").report  # type: ignore[attr-defined]
    assert again.notes == [
        f"{tmp_path / 's'} already holds this sweep, complete: nothing was run (--force runs it again)"
    ]
    assert again.rows == first.rows and again.digest == first.digest
    with pytest.raises(InputError, match=r"holds another sweep \(8 points over workload.batch_size, "):
        _sweep(tmp_path / "s", grid=["workload.batch_size=1,2"])
    _sweep(tmp_path / "s", force=True, grid=["workload.batch_size=1,2"])  # replaces a sweep of ours
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="not an atbprof sweep directory"):
        _sweep(mine, force=True)
    # the unfinished points of another sweep are not resumed into this one
    other = tmp_path / "o"
    progress_dir(other).mkdir()
    (progress_dir(other) / "progress.json").write_text(
        '{"generator": "atbprof", "kind": "sweep-progress", "digest": "x", "points": 3}'
    )
    with pytest.raises(InputError, match="holds the unfinished points of another sweep"):
        _sweep(other)
    assert _sweep(other, force=True).report.points == 8  # type: ignore[attr-defined]


def test_the_cli_report_and_its_errors(tmp_path: Path) -> None:
    out = tmp_path / "s"
    ok = runner.invoke(
        app,
        [
            "sweep",
            "--config",
            str(BASE),
            *(a for g in GRID for a in ("--grid", g)),
            *(a for s in SETS for a in ("--set", s)),
            "--out",
            str(out),
            "--workers",
            "0",
            "--format",
            "md",
        ],
    )
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("# sweep s\n\n**sweep s: 8 points: 6 ran, 2 do not fit**")
    assert "| 1 | 64 | 39.952 | 34.261 | +14.2 |" in ok.output.replace("39.95", "39.95")  # the gain table's row
    assert f"atbprof plot {out}" in ok.output
    cases = [
        (["--grid", "workload.batchsize=1,2"], 2, "--grid workload.batchsize=1: workload.batchsize: unknown key"),
        (["--grid", "workload.batch_size=1,x"], 2, "expected a whole number"),
        ([], 2, "sweep: no points"),
        (
            ["--grid", "workload.batch_size=1", "--compare", "fusion=a"],
            2,
            "--compare 'fusion=a': expected KEY=BASE,NEW",
        ),
        (["--grid", "workload.batch_size=1", "--workers", "-1"], 2, "--workers -1"),
    ]
    for extra, code, message in cases:
        bad = runner.invoke(app, ["sweep", "--config", str(BASE), "--out", str(tmp_path / "x"), *extra])
        assert bad.exit_code == code and message in bad.output, (extra, bad.output)
        assert "Traceback" not in bad.output
    assert not (tmp_path / "x").exists()


def test_keep_runs_writes_every_points_whole_run(tmp_path: Path) -> None:
    result = _sweep(tmp_path / "s", grid=["workload.batch_size=1,2"], keep_runs=True)
    files = result.report.files  # type: ignore[attr-defined]
    for i in (0, 1):
        run = tmp_path / "s" / "runs" / f"point-000{i}"
        assert {"ops.parquet", "steps.parquet", "run.json"} <= {p.name for p in run.iterdir()}
        assert f"runs/point-000{i}/ops.parquet" in files
        doc = json.loads((run / "run.json").read_text())
        row = pq.read_table(tmp_path / "s" / "sweep.parquet").to_pylist()[i]
        assert doc["summary"]["decode_ms_per_token"] == row["decode_ms_per_token"]  # the row is that run's summary


def test_a_point_that_does_not_fit_says_what_would_never_batch_0() -> None:
    from atbprof.sweep.point import PointTask, run_point

    base = str(FIXTURES / "llama2-7b-910b2.yaml")
    whole = run_point(PointTask(0, base, ("model.preset=llama2-70b",)))  # 140 GB of weights on a 64 GB card
    assert "even batch 1 does not fit on this device; fits with parallel.tp 4" in whole["error"]
    assert "batch 0" not in whole["error"]
    long = run_point(
        PointTask(1, base, ("workload.batch_size=64", "workload.prompt_len=16384", "model.rope_scaling_factor=5"))
    )
    assert "fits on this device: batch " in long["error"] and "batch 0" not in long["error"]
