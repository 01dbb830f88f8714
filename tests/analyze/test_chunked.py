"""A run analysed in parts of whole steps (analyze/chunked.py) gives the report and the occurrences the whole table
gives: on runs that exercise every analyzer, with row groups cut so that steps straddle them, and per rank of a
multi-device run."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atbprof.analyze.chunked import analyze_input
from atbprof.analyze.columns import ANALYZE_COLUMNS
from atbprof.config import load_config
from atbprof.errors import InputError, UsageError
from atbprof.importers.ours import run_in_parts
from atbprof.optable.schema import OPS_SCHEMA, ops_metadata, read_ops_chunks, step_chunks
from atbprof.render.analyze import analysis_json
from atbprof.run import run_simulation
from tests.conftest import FIXTURES, regroup

CASES = [
    ("llama2-7b-910b2.yaml", ["fusion.strategy=none", "workload.decode_tokens=6"], None),
    ("llama2-7b-910b2.yaml", ["execution.mode=graph", "workload.decode_tokens=6"], None),
    ("llama2-7b-910a.yaml", ["workload.decode_tokens=4", "fusion.strategy=aggressive"], None),
    ("llama2-70b-910b2-tp4-pp2.yaml", ["workload.decode_tokens=2"], 5),
    ("llama2-70b-910b2-tp4-pp2.yaml", ["workload.decode_tokens=2"], 0),
]


def _both(run: Path, rank: int | None, part_ops: int) -> tuple[object, object]:
    whole = analyze_input(run, columns=ANALYZE_COLUMNS, rank=rank, parts_from=10**12)
    parts = analyze_input(run, columns=ANALYZE_COLUMNS, rank=rank, parts_from=0, part_ops=part_ops)
    return whole, parts


@pytest.mark.parametrize(("config", "overrides", "rank"), CASES, ids=[f"{c}-{o[0]}-{r}" for c, o, r in CASES])
def test_parts_give_the_whole_tables_report(
    tmp_path: Path, config: str, overrides: list[str], rank: int | None
) -> None:
    run = tmp_path / "run"
    run_simulation(load_config(FIXTURES / config, [*overrides, "output.trace=false"]), run)
    before = analysis_json(analyze_input(run, columns=ANALYZE_COLUMNS, rank=rank, parts_from=10**12))
    rows = pq.read_metadata(run / "ops.parquet").num_rows
    regroup(run, rows // 13 + 1)  # groups end mid-step
    meta = ops_metadata(run / "ops.parquet")
    part_ops = rows // 5 if rank is None else rows // 40  # a rank holds an eighth of the rows
    chunks = step_chunks(run / "ops.parquet", meta, rank, part_ops)
    assert chunks is not None and len(chunks) > 1
    whole, parts = _both(run, rank, part_ops)
    assert analysis_json(whole) == before  # the regrouped file is the same run
    assert analysis_json(parts) == analysis_json(whole)
    assert whole.occurrences.num_rows > 0  # type: ignore[attr-defined]
    assert parts.occurrences is None  # summed as they came, not kept (analyze/digest.py)
    with pytest.raises(UsageError, match="analysed in parts"):
        parts.to_arrow()  # type: ignore[attr-defined]


def test_a_run_of_one_part_per_row_group(tmp_path: Path) -> None:
    """Parts that are single row groups (the carried step is a whole group's worth of rows, or none)."""
    run = tmp_path / "run"
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=5", "output.trace=false"]), run
    )
    regroup(run, 4001)
    whole, parts = _both(run, None, 1)
    assert analysis_json(parts) == analysis_json(whole)


def test_steps_out_of_order_are_read_whole(tmp_path: Path) -> None:
    """Row groups whose steps go backwards cannot be cut into whole steps: the run is analysed whole."""
    run = tmp_path / "run"
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=4", "output.trace=false"]), run
    )
    ops = run / "ops.parquet"
    table = pq.read_table(ops)
    backwards = table.take(pa.array(sorted(range(table.num_rows), key=lambda i: -table.column("step")[i].as_py())))
    pq.write_table(backwards, ops, row_group_size=1000, write_page_checksum=True)
    assert step_chunks(ops, ops_metadata(ops), None, 1000) is None
    assert run_in_parts(run, None, ANALYZE_COLUMNS, 1000, 0) is None
    whole = analyze_input(run, columns=ANALYZE_COLUMNS, parts_from=0, part_ops=1000)
    assert whole.source.ops == table.num_rows


def test_a_damaged_column_not_held_is_refused_in_parts(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=4", "output.trace=false"]), run
    )
    regroup(run, 2000)
    ops = run / "ops.parquet"
    dropped = next(f.name for f in OPS_SCHEMA if f.name == "flops" and f.name not in ANALYZE_COLUMNS)
    meta = pq.read_metadata(ops)
    chunk = meta.row_group(meta.num_row_groups - 1).column(meta.schema.to_arrow_schema().get_field_index(dropped))
    data = bytearray(ops.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0xFF
    ops.write_bytes(bytes(data))
    with pytest.raises(InputError, match="damaged"):
        analyze_input(run, columns=ANALYZE_COLUMNS, parts_from=0, part_ops=3000)


def test_a_reader_stopped_early_stops_its_page_check(tmp_path: Path) -> None:
    """The pages of the columns not held are checked in a thread beside the reader: a reader closed before its
    last part (its consumer failed) stops that thread, and one read to the end waits for it."""
    import threading

    run = tmp_path / "run"
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=4", "output.trace=false"]), run
    )
    regroup(run, 500)
    ops = run / "ops.parquet"
    chunks = step_chunks(ops, ops_metadata(ops), None, 1000)
    assert chunks is not None and len(chunks) > 1

    def checking() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "atbprof-verify"]

    parts = read_ops_chunks(ops, chunks, columns=["op_type"])
    next(parts)
    parts.close()
    assert not checking()
    assert sum(p.num_rows for p in read_ops_chunks(ops, chunks, columns=["op_type"])) == pq.read_metadata(ops).num_rows
    assert not checking()


def test_the_cli_reads_a_large_run_in_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`atbprof analyze RUN` goes through the parts above the size limit: the same JSON as below it."""
    from typer.testing import CliRunner

    from atbprof.analyze import chunked
    from atbprof.commands import app

    run = tmp_path / "run"
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=4", "output.trace=false"]), run
    )
    regroup(run, 250)
    whole = CliRunner().invoke(app, ["analyze", str(run), "--format", "json"])
    monkeypatch.setattr(chunked, "CHUNKED_FROM", 0)
    monkeypatch.setattr(chunked, "CHUNK_OPS", 300)
    seen = []
    real = chunked.analyze_run_in_parts
    monkeypatch.setattr(chunked, "analyze_run_in_parts", lambda *a, **k: seen.append(len(a[2])) or real(*a, **k))
    parts = CliRunner().invoke(app, ["analyze", str(run), "--format", "json"])
    assert whole.exit_code == parts.exit_code == 0
    assert seen and seen[0] > 1
    assert parts.stdout == whole.stdout


def test_a_run_without_its_summary_is_read_whole(tmp_path: Path) -> None:
    """The what-if of a run read in parts is re-simulated from run.json; without the summary the device model
    prices the ops, which reads the whole table: such a run is analysed whole."""
    import json

    run = tmp_path / "run"
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=4", "output.trace=false"]), run
    )
    regroup(run, 500)
    doc = json.loads((run / "run.json").read_text())
    del doc["summary"]
    (run / "run.json").write_text(json.dumps(doc))
    report = analyze_input(run, columns=ANALYZE_COLUMNS, parts_from=0, part_ops=600)
    assert report.whatif.method == "device-model"
    assert report.source.ops == pq.read_metadata(run / "ops.parquet").num_rows


def test_a_run_without_roles_is_read_whole(tmp_path: Path) -> None:
    """Without roles the categories come from blocks that may cross a step's edge: such a run is analysed whole,
    giving the report the whole table gives."""
    run = tmp_path / "run"
    run_simulation(
        load_config(FIXTURES / "llama2-7b-910b2.yaml", ["workload.decode_tokens=4", "output.trace=false"]), run
    )
    ops = run / "ops.parquet"
    table = pq.read_table(ops)
    at = table.schema.get_field_index("role")
    table = table.set_column(at, table.schema.field("role"), pa.nulls(table.num_rows, table.schema.field("role").type))
    pq.write_table(table, ops, row_group_size=500, write_page_checksum=True)
    whole, parts = _both(run, None, 600)
    assert not whole.source.has_roles  # type: ignore[attr-defined]
    assert analysis_json(parts) == analysis_json(whole)


def test_a_runs_ranks_in_pool_workers_give_the_same_report(tmp_path: Path) -> None:
    """A multi-device run's ranks analysed in pool workers (--workers N) give the report of the ranks analysed one
    after the other in this process (the default)."""
    from typer.testing import CliRunner

    from atbprof.commands import app

    cfg = load_config(FIXTURES / "llama2-70b-910b2-tp4-pp2.yaml", ["workload.decode_tokens=2", "output.trace=false"])
    run_simulation(cfg, tmp_path / "run")
    runner = CliRunner()

    def report(*options: str) -> str:
        r = runner.invoke(app, ["analyze", str(tmp_path / "run"), "--format", "json", *options])
        assert r.exit_code == 0, r.output
        return r.stdout

    alone = report()
    assert report("--workers", "2") == alone
    assert report("--workers", "0") == alone
