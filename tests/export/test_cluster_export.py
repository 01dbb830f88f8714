"""A multi-device run exported as torch_npu does it: one *_ascend_pt directory per rank with its step split,
communication.json, communication_matrix.json and parallel groups, read by msprof-analyze's cluster mode."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from atbprof.config.models import RunConfig
from atbprof.errors import InputError
from atbprof.export import export_run
from atbprof.run import run_simulation
from tests.export.test_export_msprof_analyze import MSPROF_ANALYZE, _run

OUT = Path("ASCEND_PROFILER_OUTPUT")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run directory, export root) of LLaMA-2-7B tp 4 on 910B2 with a straggler at rank 2."""
    tmp = tmp_path_factory.mktemp("cluster")
    cfg = RunConfig.model_validate(
        {
            "name": "tp4",
            "model": {"preset": "llama2-7b"},
            "device": {"preset": "910B2"},
            "parallel": {"tp": 4},
            "workload": {"batch_size": 1, "prompt_len": 64, "decode_tokens": 3},
            "execution": {"mode": "graph", "rank_slowdown": {2: 1.25}},
        }
    )
    run = run_simulation(cfg, tmp / "run")
    result = export_run(run.out_dir, "ascend-pt", tmp / "export")
    return run.out_dir, result.root


def _rank_dirs(root: Path) -> dict[int, Path]:
    out = {}
    for d in sorted(root.glob("*_ascend_pt")):
        (info,) = d.glob("profiler_info_*.json")
        out[int(json.loads(info.read_text())["rank_id"])] = d
    return out


def test_one_directory_per_rank_with_its_groups(cluster: tuple[Path, Path]) -> None:
    _, root = cluster
    dirs = _rank_dirs(root)
    assert sorted(dirs) == [0, 1, 2, 3]
    meta = json.loads((dirs[2] / "profiler_metadata.json").read_text())
    assert meta["distributed_args"]["tensor_model_parallel_size"] == 4 and meta["distributed_args"]["rank"] == 2
    groups = {g["group_name"]: g for g in meta["parallel_group_info"].values()}
    assert groups["tp"]["global_ranks"] == [0, 1, 2, 3] and groups["tp"]["group_rank"] == 2
    comm = json.loads((dirs[0] / OUT / "communication.json").read_text())
    ops = comm["step1"]["collective"]
    assert sum(1 for k in ops if k.startswith("hcom_allReduce_")) == 65
    assert sum(1 for k in ops if k.startswith("hcom_allGather_")) == 1
    one = next(v for k, v in ops.items() if k.startswith("hcom_allReduce_"))
    assert one["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"] > 0
    assert one["Communication Time Info"]["Wait Time(ms)"] > 0  # rank 0 waits for the straggler
    slow = json.loads((dirs[2] / OUT / "communication.json").read_text())["step1"]["collective"]
    assert all(v["Communication Time Info"]["Wait Time(ms)"] == 0 for k, v in slow.items() if k != "Total Op Info")


def test_step_split_per_rank_is_the_run_summary(cluster: tuple[Path, Path]) -> None:
    run_dir, root = cluster
    ranks = {r["rank"]: r for r in json.loads((run_dir / "run.json").read_text())["summary"]["ranks"]}
    for rank, d in _rank_dirs(root).items():
        with open(d / OUT / "step_trace_time.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if r["Step"] != "0"]  # decode steps

        def mean(key: str, rows: list[dict[str, str]] = rows) -> float:
            return sum(float(r[key]) for r in rows) / len(rows)

        assert mean("Computing") == pytest.approx(ranks[rank]["computing_us"], abs=0.01)
        assert mean("Communication(Not Overlapped)") == pytest.approx(
            ranks[rank]["communication_not_overlapped_us"], abs=0.01
        )
        assert mean("Free") == pytest.approx(ranks[rank]["free_us"], abs=0.01)
        assert mean("Stage") == pytest.approx(ranks[rank]["stage_us"], abs=0.01)


@pytest.mark.skipif(MSPROF_ANALYZE is None, reason="msprof-analyze is not installed (the `test` extra)")
def test_msprof_analyze_cluster_reads_it_and_agrees(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    _, root = cluster
    output = _run(["cluster", "-d", str(root), "-m", "all"], tmp_path)
    result = root / "cluster_analysis_output"
    with open(result / "cluster_step_trace_time.csv", newline="") as fh:
        theirs = {(r["Index"], r["Step"]): r for r in csv.DictReader(fh) if r["Type"] == "rank"}
    for rank, d in _rank_dirs(root).items():
        with open(d / OUT / "step_trace_time.csv", newline="") as fh:
            for ours in csv.DictReader(fh):
                row = theirs[(str(rank), ours["Step"])]
                for key in ("Computing", "Communication(Not Overlapped)", "Free", "Stage"):
                    assert float(row[key]) == pytest.approx(float(ours[key]), abs=1e-3)
    matrix = json.loads((result / "cluster_communication_matrix.json").read_text())
    (group,) = matrix
    links = next(iter(matrix[group]["step1"].values()))
    assert {"0-1", "2-3", "3-0"} <= set(links)  # global ranks, every link of the mesh
    assert "cannot be mapped" not in output


def test_msprof_target_refuses_a_cluster_with_the_way_out(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    run_dir, _ = cluster
    with pytest.raises(InputError, match="export it --to ascend-pt"):
        export_run(run_dir, "msprof", tmp_path / "x")


def test_the_cli_names_the_cluster_command_next(cluster: tuple[Path, Path], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from atbprof.commands import app

    run_dir, _ = cluster
    r = CliRunner().invoke(app, ["export", str(run_dir), "--to", "ascend-pt", "--out", str(tmp_path / "e")])
    assert r.exit_code == 0, r.output
    install, last = [line for line in r.output.splitlines() if line.startswith("next:")]
    assert install.startswith("next: pip install 'atbprof[ascend-tools]'")  # msprof-analyze is not a dependency
    assert last.startswith("next: msprof-analyze cluster -d ") and last.split()[4].endswith("_cluster")
    assert "more (--format json lists every file)" in r.output  # the rich view lists 20 files
    j = CliRunner().invoke(
        app, ["export", str(run_dir), "--to", "ascend-pt", "--out", str(tmp_path / "j"), "--format", "json"]
    )
    assert sum(1 for f in json.loads(j.output)["files"] if f.endswith("communication.json")) == 4
