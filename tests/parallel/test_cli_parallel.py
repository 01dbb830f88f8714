"""`atbprof run` of a multi-device config: what the terminal shows, and the refusals (exit 2, one message)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from atbprof.commands import app
from tests.conftest import FIXTURES

runner = CliRunner()
TP8 = FIXTURES / "llama2-70b-910b4-tp8.yaml"


def test_a_tp8_run_shows_the_deployment_and_the_ranks_that_differ(tmp_path: Path) -> None:
    r = runner.invoke(
        app,
        ["run", "--config", str(TP8), "--out", str(tmp_path / "r"), "--set", "workload.decode_tokens=2",
         "--set", "execution.rank_slowdown={5: 1.1}", "--set", "output.trace=false"],
        env={"COLUMNS": "160"},
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    deployment = next(line for line in lines if line.startswith("deployment"))
    assert deployment.endswith("8 x 910B4 (tp 8, pp 1, dp 1; HCCL mesh over HCCS)")
    assert any(line.startswith("communication") and "of rank 0's step" in line for line in lines)
    assert any(line.startswith("memory per device") and "HCCL buffers 0.4" in line for line in lines)
    rows = [line for line in lines if line.startswith("│") and "1.1 │" in line]
    assert len(rows) == 1 and rows[0].split("│")[1].strip() == "5"  # the straggler's row of the rank table
    doc = json.loads((tmp_path / "r" / "run.json").read_text())
    assert doc["summary"]["parallel"]["devices"] == 8 and len(doc["summary"]["ranks"]) == 8
    rows = pq.read_metadata(tmp_path / "r" / "ops.parquet").num_rows
    assert doc["summary"]["ops_total"] == rows and rows % 8 == 0  # every rank's tasks


def test_bad_deployments_exit_2_with_one_message(tmp_path: Path) -> None:
    cases = {
        "parallel.tp=3": "parallel.tp = 3: llama2-70b has 64 attention heads, not divisible by 3",
        "parallel.pp=96": "parallel.pp = 96: llama2-70b has only 80 decoder layers, fewer than the stages",
        "parallel.microbatches=2": "parallel.microbatches = 2 needs pipeline stages",
        "parallel={tp: 8, pp: 2, microbatches: 3}": "parallel.microbatches = 3 does not divide workload.batch_size = 1",
        "parallel={tp: 8, pp: 2, stage_layers: [40, 41]}": "parallel.stage_layers adds up to 81 layers but llama2-70b",
        "execution.rank_slowdown={9: 1.2}": "execution.rank_slowdown names rank 9, but the deployment has 8 devices",
        "parallel={tp: 2, pp: 2}": "does not fit on each 910B4 of pipeline stage 0 (the fullest): it needs 35.7 GB",
        "output.trace_ranks='3-8'": "output.trace_ranks = '3-8' names rank 8, but the deployment has 8 devices",
    }
    for change, message in cases.items():
        r = runner.invoke(app, ["run", "--config", str(TP8), "--out", str(tmp_path / "x"), "--set", change])
        assert r.exit_code == 2, (change, r.output)
        assert message in " ".join(r.output.split()), (change, r.output)
        assert "Traceback" not in r.output
