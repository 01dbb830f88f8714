"""`atbprof diff CLUSTER_A CLUSTER_B`: ranks paired by id, stages by index, statistics over a stage's ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from atbprof.config.models import RunConfig
from atbprof.diff.clusters import diff_cluster_paths
from atbprof.errors import InputError
from atbprof.run import run_simulation

QWEN = Path(__file__).resolve().parents[3] / "shared/anchors/ascend_samples/msinsight_qwen3_0.6b_level2_cluster"


def _run(tmp: Path, name: str, parallel: dict[str, int], slowdown: dict[int, float]) -> Path:
    cfg = RunConfig.model_validate(
        {
            "name": name,
            "model": {"preset": "llama2-7b"},
            "device": {"preset": "910B2"},
            "parallel": parallel,
            "workload": {"batch_size": 2, "prompt_len": 64, "decode_tokens": 3},
            "execution": {"mode": "graph", "rank_slowdown": slowdown},
            "output": {"trace": False},
        }
    )
    return run_simulation(cfg, tmp / name).out_dir


def test_a_straggler_shows_in_its_stage_with_statistics_over_its_ranks(tmp_path: Path) -> None:
    even = _run(tmp_path, "even", {"tp": 2, "pp": 2}, {})
    slow = _run(tmp_path, "slow", {"tp": 2, "pp": 2}, {3: 1.2})
    d = diff_cluster_paths(even, slow)
    stage1 = next(s for s in d.stages if s.stage == 1)
    assert stage1.ranks == [2, 3]
    step = stage1.columns["stage_us"]
    assert step.delta > 0 and step.significant and step.method == "paired-t"  # both ranks' steps grew alike
    computing = stage1.columns["computing_us"]
    assert computing.delta > 0 and not computing.significant  # one of the two ranks computes more: not a stage trend
    assert [r.rank for r in d.ranks if r.slow_new and not r.slow_base] == [3]
    assert d.added_ranks == d.removed_ranks == []
    assert "slow in the new cluster: rank 3" in d.summary
    r = CliRunner().invoke(app, ["diff", str(even), str(slow), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema_version"] == "1" and [s["stage"] for s in doc["stages"]] == [0, 1]
    assert set(doc["stages"][1]["columns"]) == {
        "stage_us",
        "computing_us",
        "communication_not_overlapped_us",
        "free_us",
        "bubble_us",
    }


def test_one_rank_per_stage_is_untestable_and_missing_ranks_are_named(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", {"pp": 2}, {})
    b = _run(tmp_path, "b", {"pp": 2, "dp": 2}, {1: 1.1})
    d = diff_cluster_paths(a, b)
    assert d.added_ranks == [2, 3] and d.removed_ranks == []
    assert all(s.columns["stage_us"].method == "untestable" for s in d.stages)  # no significance from one rank
    assert not any(c.significant for s in d.stages for c in s.columns.values())


@pytest.mark.skipif(not QWEN.is_dir(), reason="../shared/anchors is not beside the clone")
def test_a_cluster_against_itself_changes_nothing() -> None:
    d = diff_cluster_paths(QWEN, QWEN)
    assert [s.ranks for s in d.stages] == [[0, 1], [2, 3]]
    assert all(c.delta == 0 and not c.significant for s in d.stages for c in s.columns.values())


def test_a_cluster_is_compared_with_a_cluster_only(tmp_path: Path) -> None:
    cluster = _run(tmp_path, "c", {"tp": 2}, {})
    single = _run(tmp_path, "s", {}, {})
    with pytest.raises(InputError, match="diff compares a cluster with a cluster"):
        diff_cluster_paths(cluster, single)
    r = CliRunner().invoke(app, ["diff", str(single), str(cluster)])
    assert r.exit_code == 2 and "not a cluster" in r.output and "Traceback" not in r.output
