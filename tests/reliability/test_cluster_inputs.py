"""Cluster inputs held to the limits a real cluster has: more than 1,024 ranks analysed and drawn, rank ids and
device counts no cluster has refused (exit 2, naming the file), never a crash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.importers.conftest import SHARED
from tests.reliability.conftest import cli, one_error

STEP_TRACE = (
    SHARED
    / "anchors/ascend_samples/msinsight_qwen3_0.6b_level2_cluster/rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT"
    / "step_trace_time.csv"
)


def _cluster(root: Path, ranks: list[int], links: bool = True) -> Path:
    """Rank directories with a step table, the default group of every rank and one link to the next rank."""
    n = len(ranks)
    for i, r in enumerate(ranks):
        d = root / f"r{i}_ascend_pt"
        (d / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (d / f"profiler_info_{i}.json").write_text(json.dumps({"rank_id": r}))
        group = {"group_name": "default_group", "group_rank": i, "global_ranks": list(range(n))}
        (d / "profiler_metadata.json").write_text(json.dumps({"parallel_group_info": {"group_name_0": group}}))
        shutil.copy(STEP_TRACE, d / "ASCEND_PROFILER_OUTPUT")
        if links:
            link = {"Transport Type": "HCCS", "Transit Size(MB)": 1.0, "Transit Time(ms)": 0.1,
                    "Bandwidth(GB/s)": 10.0, "Op Name": "hcom_allReduce__1_1_1"}  # fmt: skip
            matrix = {"step1": {"collective": {"allreduce-top1@1": {f"{i}-{(i + 1) % n}": link}}, "p2p": {}}}
            (d / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json").write_text(json.dumps(matrix))
    return root


@pytest.mark.skipif(not STEP_TRACE.exists(), reason="needs ../shared")
def test_more_than_1024_ranks_are_analysed_and_drawn(tmp_path: Path) -> None:
    root = _cluster(tmp_path / "c", list(range(1100)))
    result = cli("analyze", root, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"].startswith("1100 ranks")
    assert cli("plot", root, "--out", tmp_path / "p").exit_code == 0


@pytest.mark.skipif(not STEP_TRACE.exists(), reason="needs ../shared")
@pytest.mark.parametrize(
    ("rank_id", "message"),
    [
        ("99999999999999999999", "rank_id = 99999999999999999999: not a rank id (expected 0 to 65535)"),
        (-3, "rank_id = -3: not a rank id"),
        (70000, "rank_id = 70000: not a rank id"),
    ],
)
def test_a_rank_id_no_cluster_has_is_refused(tmp_path: Path, rank_id: object, message: str) -> None:
    root = _cluster(tmp_path / "c", [0, 1, 2, 3], links=False)
    (root / "r3_ascend_pt" / "profiler_info_3.json").write_text(json.dumps({"rank_id": rank_id}))
    result = cli("analyze", root)
    assert result.exit_code in (0, 2), result.output
    text = result.output
    # a rank that can not be read is left out with the reason (the cluster goes on with the others), or refused
    assert message in text and "Traceback" not in text
    if result.exit_code == 0:
        assert "3 ranks" in text or "ranks 0-2" in text


def test_too_many_rank_directories_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import atbprof.importers.cluster as cluster

    root = _cluster(tmp_path / "c", [0, 1, 2], links=False) if STEP_TRACE.exists() else None
    if root is None:
        pytest.skip("needs ../shared")
    monkeypatch.setattr(cluster, "MAX_RANKS", 2)
    assert "3 rank profiles, more than a cluster has (2 at most)" in one_error(cli("analyze", root))
