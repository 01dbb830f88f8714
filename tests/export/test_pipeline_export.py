"""A pipeline-parallel run exported per rank: sends and receives in communication.json's p2p section, the pp group
in the metadata, Bubble in step_trace_time, and msprof-analyze's cluster mode finding the stages from them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from atbprof.config.models import RunConfig
from atbprof.export import export_run
from atbprof.run import run_simulation
from tests.export.test_cluster_export import OUT, _rank_dirs
from tests.export.test_export_msprof_analyze import MSPROF_ANALYZE, _run


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run directory, export root) of LLaMA-2-7B tp 2 x pp 2 on 910B2, 2 microbatches, a straggler at rank 3."""
    tmp = tmp_path_factory.mktemp("staged")
    cfg = RunConfig.model_validate(
        {
            "name": "pp2",
            "model": {"preset": "llama2-7b"},
            "device": {"preset": "910B2"},
            "parallel": {"tp": 2, "pp": 2},
            "workload": {"batch_size": 2, "prompt_len": 64, "decode_tokens": 4},
            "execution": {"mode": "graph", "rank_slowdown": {3: 1.2}},
            "output": {"trace": False},
        }
    )
    run = run_simulation(cfg, tmp / "run")
    result = export_run(run.out_dir, "ascend-pt", tmp / "export")
    return run.out_dir, result.root


def _steps(d: Path) -> list[dict[str, str]]:
    with open(d / OUT / "step_trace_time.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_sends_and_receives_are_p2p_in_the_pp_group(staged: tuple[Path, Path]) -> None:
    _, root = staged
    dirs = _rank_dirs(root)
    assert sorted(dirs) == [0, 1, 2, 3]
    for rank, d in dirs.items():
        meta = json.loads((d / "profiler_metadata.json").read_text())
        groups = {g["group_name"]: g["global_ranks"] for g in meta["parallel_group_info"].values()}
        assert groups["pp"] == [rank % 2, rank % 2 + 2] and groups["tp"] == [rank - rank % 2, rank - rank % 2 + 1]
        comm = json.loads((d / OUT / "communication.json").read_text())["step1"]
        names = [k.split("@")[0] for k in comm["p2p"] if k != "Total Op Info"]
        # two microbatches: stage 0 sends twice a step, stage 1 receives twice, each task named as HCCL numbers it
        assert names == (
            ["hcom_send__1_1", "hcom_send__1_2"] if rank < 2 else ["hcom_receive__1_1", "hcom_receive__1_2"]
        )
        assert sum(1 for k in comm["collective"] if k != "Total Op Info") == 2 * (16 * 2 + 1)  # AllReduces, 2 passes
        matrix = json.loads((d / OUT / "communication_matrix.json").read_text())["step1"]["p2p"]
        (links,) = {tuple(sorted(v)) for v in matrix.values()}
        assert links == ("0-0", "0-1") if rank < 2 else links == ("0-1", "1-1")  # stage 0 -> stage 1


def test_bubble_is_the_receive_time_and_the_split_is_the_summary(staged: tuple[Path, Path]) -> None:
    run_dir, root = staged
    ranks = {r["rank"]: r for r in json.loads((run_dir / "run.json").read_text())["summary"]["ranks"]}
    for rank, d in _rank_dirs(root).items():
        rows = [r for r in _steps(d) if int(r["Step"]) >= 2]  # the summary's steady decode steps

        def mean(key: str, rows: list[dict[str, str]] = rows) -> float:
            return sum(float(r[key]) for r in rows) / len(rows)

        for key, ours in (
            ("Computing", "computing_us"),
            ("Free", "free_us"),
            ("Stage", "stage_us"),
            ("Bubble", "bubble_us"),
            ("Communication(Not Overlapped)", "communication_not_overlapped_us"),
        ):
            assert mean(key) == pytest.approx(ranks[rank][ours], abs=0.01), (rank, key)
        assert (mean("Bubble") > 0) == (rank >= 2)
        for r in _steps(d):
            assert float(r["Free"]) >= 0 and float(r["Preparing"]) >= 0
            assert float(r["Stage"]) + float(r["Bubble"]) == pytest.approx(
                float(r["Computing"]) + float(r["Communication(Not Overlapped)"]) + float(r["Free"]), abs=0.01
            )


@pytest.mark.skipif(MSPROF_ANALYZE is None, reason="msprof-analyze is not installed (the `test` extra)")
def test_msprof_analyze_finds_the_stages(staged: tuple[Path, Path], tmp_path: Path) -> None:
    _, root = staged
    output = _run(["cluster", "-d", str(root), "-m", "all"], tmp_path)
    result = root / "cluster_analysis_output"
    groups = json.loads((result / "communication_group.json").read_text())["comm_group_parallel_info"]
    assert sorted((g["type"], tuple(g["rank_set"]), g["pg_name"]) for g in groups) == [
        ("collective", (0, 1), "tp"),
        ("collective", (2, 3), "tp"),
        ("p2p", (0, 2), "pp"),
        ("p2p", (1, 3), "pp"),
    ]
    with open(result / "cluster_step_trace_time.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    stages = {r["Index"] for r in rows if r["Type"] == "stage"}
    assert stages == {"(0, 1)", "(2, 3)"}
    theirs = {(r["Index"], r["Step"]): r for r in rows if r["Type"] == "rank"}
    for rank, d in _rank_dirs(root).items():
        for ours in _steps(d):
            row = theirs[(str(rank), ours["Step"])]
            assert row["PP Index"] == str(rank // 2)
            for key in ("Computing", "Free", "Stage", "Bubble"):
                assert float(row[key]) == pytest.approx(float(ours[key]), abs=1e-3)
    # a stage row is the slowest of its ranks, column by column
    for (index, step), stage in {(r["Index"], r["Step"]): r for r in rows if r["Type"] == "stage"}.items():
        members = [theirs[(m.strip(), step)] for m in index.strip("()").split(",")]
        assert float(stage["Bubble"]) == pytest.approx(max(float(m["Bubble"]) for m in members), abs=1e-3)
    assert "cannot be mapped" not in output
    # atbprof's cluster analysis of the same directory: the same stage rows, as means over the steps
    from atbprof.analyze.cluster_report import analyze_cluster
    from atbprof.importers.cluster import load_cluster

    report = analyze_cluster(load_cluster(root))
    for ours in report.cluster.stages:
        index = "(" + ", ".join(map(str, ours.ranks)) + ")"
        mine = [r for r in rows if r["Type"] == "stage" and r["Index"] == index]
        for key, field in (
            ("Computing", "computing_us"),
            ("Free", "free_us"),
            ("Stage", "stage_us"),
            ("Bubble", "bubble_us"),
        ):
            assert getattr(ours, field) == pytest.approx(sum(float(r[key]) for r in mine) / len(mine), abs=1e-3)
    assert report.cluster.slow_ranks == [3]  # the straggler of the fixture
