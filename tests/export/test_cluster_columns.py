"""The column-wise communication tables of a run equal what the torch_npu JSON path gives (`json_tables` of
`communication()`): the same rows, order and figures, for tensor, pipeline and data parallel runs on one and
several nodes."""

from __future__ import annotations

from pathlib import Path

import pytest

from atbprof.config import load_config
from atbprof.export import cluster as export
from atbprof.export.cluster_columns import communication_tables
from atbprof.export.common import load_run
from atbprof.importers.cluster_comm import json_tables
from atbprof.run import run_simulation
from tests.conftest import FIXTURES

CASES = {
    "tp8": ("llama2-70b-910b2-tp8.yaml", []),
    "tp4-pp2": ("llama2-70b-910b2-tp4-pp2.yaml", []),
    "tp2-pp2-dp2-910b2": ("llama2-13b-910b2.yaml", ["parallel.tp=2", "parallel.pp=2", "parallel.dp=2"]),
    "tp16-two-nodes": ("llama2-70b-910b2-tp8.yaml", ["parallel.tp=16"]),
    "pp4-910a": ("llama2-13b-910a.yaml", ["parallel.pp=4"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_columns_equal_the_json_path(tmp_path: Path, case: str) -> None:
    config, overrides = CASES[case]
    cfg = load_config(FIXTURES / config, [*overrides, "workload.decode_tokens=2", "output.trace=false"])
    run_simulation(cfg, tmp_path / "run")
    source = load_run(tmp_path / "run")
    per_rank = source.rank_rows()
    assert source.devices > 1
    for rank in range(source.devices):
        view = source.for_rank(rank, per_rank.get(rank, 0))
        want_warnings: list[str] = []
        want = json_tables(rank, *export.communication(view, rank), want_warnings, tmp_path, tmp_path)
        got_warnings: list[str] = []
        got = communication_tables(view, rank, got_warnings, str(tmp_path))
        assert got is not None
        for name, a, b in zip(("ops", "bandwidth", "links"), want, got, strict=True):
            assert b.equals(a), f"rank {rank} {name}"
        assert want[0].num_rows > 0
        assert got_warnings == want_warnings
