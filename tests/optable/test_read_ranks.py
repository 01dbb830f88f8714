"""read_ops of one rank reads only the row groups holding it, gives exactly that rank's rows, and still refuses a
file damaged in another rank's pages (unless the reader reads every rank in turn)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from atbprof.config import load_config
from atbprof.errors import InputError
from atbprof.optable.schema import op_ranks, read_ops
from atbprof.run import run_simulation
from tests.conftest import FIXTURES


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tp") / "run"
    cfg = load_config(FIXTURES / "llama2-70b-910b2-tp4-pp2.yaml", ["workload.decode_tokens=2", "output.trace=false"])
    run_simulation(cfg, out)
    return out / "ops.parquet"


def test_one_rank_is_its_rows(tp_run: Path) -> None:
    whole = read_ops(tp_run)
    assert op_ranks(tp_run) == list(range(8))
    for rank in (0, 5):
        mine = read_ops(tp_run, rank=rank)
        assert mine.equals(whole.filter(pc.equal(whole.column("rank"), rank)))
        held = read_ops(tp_run, rank=rank, columns=["op_type"])
        assert held.column_names == ["op_type", "task_start_ns", "task_dur_ns", "rank"]
        assert held.num_rows == mine.num_rows


def test_damage_in_another_rank(tmp_path: Path, tp_run: Path) -> None:
    meta = pq.read_metadata(tp_run)
    rank_col = meta.schema.to_arrow_schema().get_field_index("rank")
    group = next(g for g in range(meta.num_row_groups) if meta.row_group(g).column(rank_col).statistics.min == 3)
    chunk = meta.row_group(group).column(meta.schema.to_arrow_schema().get_field_index("task_dur_ns"))
    data = bytearray(tp_run.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0xFF
    damaged = tmp_path / "ops.parquet"
    damaged.write_bytes(bytes(data))
    with pytest.raises(InputError, match="damaged"):
        read_ops(damaged, rank=0)
    assert read_ops(damaged, rank=0, check_other_ranks=False).num_rows  # rank 3's own read refuses it
    with pytest.raises(InputError, match="damaged"):
        read_ops(damaged, rank=3, check_other_ranks=False)
