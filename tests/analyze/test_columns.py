"""`analyze` reads a run with only ANALYZE_COLUMNS: the report is the one the whole table gives, on runs that
exercise every analyzer (eager and graph, norms fused or not, several ranks, training-free and multi-stream)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from atbprof.analyze import analyze
from atbprof.analyze.columns import ANALYZE_COLUMNS
from atbprof.config import load_config
from atbprof.errors import InputError
from atbprof.importers.detect import load_profile
from atbprof.optable.schema import OPS_SCHEMA
from atbprof.render.analyze import analysis_json
from atbprof.run import run_simulation
from tests.conftest import FIXTURES

CASES = [
    ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.decode_tokens=4"]),
    ("llama2-7b-910b2.yaml", ["execution.mode=graph", "workload.decode_tokens=4"]),
    ("llama2-7b-910a.yaml", ["workload.decode_tokens=4"]),
    ("llama2-70b-910b2-tp4-pp2.yaml", ["workload.decode_tokens=2"]),
]


@pytest.mark.parametrize(("config", "overrides"), CASES, ids=[f"{c}-{o[0]}" for c, o in CASES])
def test_projected_report_is_the_whole_tables(tmp_path: Path, config: str, overrides: list[str]) -> None:
    run_simulation(load_config(FIXTURES / config, [*overrides, "output.trace=false"]), tmp_path / "run")
    whole = load_profile(tmp_path / "run")
    held = load_profile(tmp_path / "run", columns=ANALYZE_COLUMNS)
    assert held.ops.num_columns < whole.ops.num_columns
    assert analysis_json(analyze(held)) == analysis_json(analyze(whole))
    # the bare op table too (no run.json: the device-model what-if reads the kernel columns)
    bare = tmp_path / "run" / "ops.parquet"
    assert analysis_json(analyze(load_profile(bare, columns=ANALYZE_COLUMNS))) == analysis_json(
        analyze(load_profile(bare))
    )


def test_columns_not_held_are_still_checked(tmp_path: Path) -> None:
    """A damaged page in a column analyze does not hold is refused, as a whole read refuses it."""
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=2", "output.trace=false"]),
        tmp_path / "run",
    )
    ops = tmp_path / "run" / "ops.parquet"
    dropped = next(f.name for f in OPS_SCHEMA if f.name not in ANALYZE_COLUMNS and f.name == "flops")
    meta = pq.read_metadata(ops)
    col = meta.schema.to_arrow_schema().get_field_index(dropped)
    chunk = meta.row_group(0).column(col)
    data = bytearray(ops.read_bytes())
    at = chunk.data_page_offset + chunk.total_compressed_size // 2
    data[at] ^= 0xFF
    ops.write_bytes(bytes(data))
    with pytest.raises(InputError, match="damaged"):
        load_profile(tmp_path / "run", columns=ANALYZE_COLUMNS)
