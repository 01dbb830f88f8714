"""The cluster analysis fanned out over ranks: a process pool gives the local result exactly, per-rank Parquet
tables (`--tables`) that pyarrow reads as a hive-partitioned dataset, db-only and mixed text/db clusters (against
msprof-analyze), ranks of another capture left out, and partial ranks written by `export --kernel-ranks`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from typer.testing import CliRunner

from atbprof.analyze.cluster_job import analyze_cluster_path
from atbprof.commands import app
from atbprof.config.models import RunConfig
from atbprof.errors import InputError
from atbprof.export import export_run
from atbprof.run import run_simulation
from tests.analyze.test_cluster import QWEN, assert_equals_msprof_analyze, needs_qwen
from tests.export.test_export_msprof_analyze import MSPROF_ANALYZE

SAMPLES = QWEN.parent
DB_RANKS = [SAMPLES / f"msinsight_imagenet_cnn_db_level1_rank{r}" for r in (0, 1)]
TEXT_RANK0 = SAMPLES / "msinsight_imagenet_cnn_level1_rank0"


def _cluster_of(root: Path, ranks: list[Path]) -> Path:
    root.mkdir(parents=True)
    for i, r in enumerate(ranks):
        shutil.copytree(r, root / f"r{i}_ascend_pt")
    return root


def _json(report: object) -> dict:
    from atbprof.render.cluster import cluster_json

    doc = json.loads(json.dumps(cluster_json(report)))  # type: ignore[arg-type]
    doc["source"]["path"] = ""
    return doc


@needs_qwen
def test_a_process_pool_gives_the_local_result_exactly(tmp_path: Path) -> None:
    local = analyze_cluster_path(QWEN, workers=0)
    pooled = analyze_cluster_path(QWEN, workers=2)
    assert _json(local) == _json(pooled)
    assert [(f.rank, f.pattern, f.count) for f in pooled.findings] == [
        (f.rank, f.pattern, f.count) for f in local.findings
    ]


@needs_qwen
def test_tables_are_hive_partitioned_parquet_and_never_overwritten_unasked(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    report = analyze_cluster_path(QWEN, tables=out)
    assert sorted(p.name for p in (out / "steps").iterdir()) == ["rank=0", "rank=1", "rank=2", "rank=3"]
    steps = ds.dataset(out / "steps", format="parquet", partitioning="hive").to_table().to_pylist()
    ours = {(r.rank, r.step): r.computing_us for r in report.cluster.step_table}
    assert {(r["rank"], r["step"]): round(r["computing_us"], 3) for r in steps} == ours
    findings = ds.dataset(out / "findings", format="parquet", partitioning="hive").to_table()
    assert findings.num_rows == len(report.findings)
    assert set(findings.column("rank").to_pylist()) == {0}
    matrix = ds.dataset(out / "matrix", format="parquet", partitioning="hive").to_table()
    assert (
        matrix.num_rows == len({(m.src_rank, m.dst_rank) for m in report.communication.matrix}) or matrix.num_rows > 0
    )
    runner = CliRunner()
    again = runner.invoke(app, ["analyze", str(QWEN), "--tables", str(out), "--format", "json"])
    assert again.exit_code != 0 and "pass --force" in again.output
    forced = runner.invoke(app, ["analyze", str(QWEN), "--tables", str(out), "--force", "--format", "json"])
    assert forced.exit_code == 0, forced.output
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    refused = runner.invoke(app, ["analyze", str(QWEN), "--tables", str(mine), "--force"])
    assert refused.exit_code != 0 and (mine / "notes.txt").read_text() == "the user's"


@needs_qwen
def test_tables_and_workers_are_for_clusters_only(tmp_path: Path) -> None:
    rank0 = SAMPLES / "msinsight_qwen3_0.6b_level2_rank0"
    result = CliRunner().invoke(app, ["analyze", str(rank0), "--tables", str(tmp_path / "t")])
    assert result.exit_code == 2 and "--tables: for a cluster" in result.output
    result = CliRunner().invoke(app, ["analyze", str(QWEN), "--workers", "999"])
    assert result.exit_code == 2 and "--workers 999" in result.output


@needs_qwen
@pytest.mark.skipif(MSPROF_ANALYZE is None, reason="msprof-analyze is not installed (the `test` extra)")
def test_a_db_only_cluster_equals_msprof_analyze_and_gets_findings(tmp_path: Path) -> None:
    root = _cluster_of(tmp_path / "db", DB_RANKS)
    report = analyze_cluster_path(root)
    assert report.source.complete_ranks == [0, 1]  # ascend_pytorch_profiler_*.db has the kernels
    assert {r.step_source for r in report.cluster.ranks} == {"analysis.db"}
    # the single-profile analysis ran on both (a CNN: no norm to fuse, so a saving of 0, not unknown)
    assert [r.fusion_saving_us for r in report.cluster.ranks] == [0.0, 0.0]
    # no profiler_metadata.json: the communicator's members are the ranks that report it, as msprof-analyze takes
    assert any("taken as the ranks that report it (0, 1)" in w for w in report.warnings)
    assert_equals_msprof_analyze(report, root, tmp_path, steps=2)


@needs_qwen
def test_a_mixed_text_and_db_cluster_reads_both(tmp_path: Path) -> None:
    root = _cluster_of(tmp_path / "mixed", [TEXT_RANK0, DB_RANKS[1]])
    report = analyze_cluster_path(root)
    by_rank = {r.rank: r for r in report.cluster.ranks}
    assert by_rank[0].step_source == "step_trace_time.csv" and by_rank[1].step_source == "analysis.db"
    assert report.source.complete_ranks == [0, 1]
    assert [r.fusion_saving_us for r in report.cluster.ranks] == [0.0, 0.0]


@needs_qwen
def test_a_rank_of_another_capture_is_left_out_and_named(tmp_path: Path) -> None:
    root = tmp_path / "qwen"
    shutil.copytree(QWEN, root)
    # rank 3's profile re-dated five hours later: another profiling run of the same job
    rank3 = next(d for d in root.iterdir() if (d / "profiler_info_3.json").is_file())
    comm = rank3 / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    doc = json.loads(comm.read_text())
    for sections in doc.values():
        for entries in sections.values():
            for info in entries.values():
                t = info.get("Communication Time Info")
                if t and "Start Timestamp(us)" in t:
                    t["Start Timestamp(us)"] += 5 * 3600e6
    comm.write_text(json.dumps(doc))
    db = rank3 / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
    if db.exists():
        import sqlite3

        con = sqlite3.connect(db)
        con.execute("update CommAnalyzerTime set start_timestamp = start_timestamp + ?", (5 * 3600e6,))
        con.commit()
        con.close()
    report = analyze_cluster_path(root)
    assert report.source.ranks == [0, 1, 2]
    assert any("rank 3: captured 5.0 h apart from the other 3 ranks" in w for w in report.warnings)


def test_export_kernel_ranks_writes_partial_ranks_the_analysis_reads(tmp_path: Path) -> None:
    cfg = RunConfig.model_validate(
        {
            "name": "tp4",
            "model": {"preset": "llama2-7b"},
            "device": {"preset": "910B2"},
            "parallel": {"tp": 4},
            "workload": {"batch_size": 1, "prompt_len": 64, "decode_tokens": 3},
            "execution": {"mode": "graph"},
            "output": {"trace": False},
        }
    )
    run = run_simulation(cfg, tmp_path / "run")
    full = export_run(run.out_dir, "ascend-pt", tmp_path / "full").root
    part = export_run(run.out_dir, "ascend-pt", tmp_path / "part", kernel_ranks="0,2").root
    kernels = sorted(p.parent.parent.name.split("-rank")[1].split("_")[0] for p in part.rglob("kernel_details.csv"))
    assert kernels == ["0", "2"]
    a, b = analyze_cluster_path(full), analyze_cluster_path(part)
    assert b.source.complete_ranks == [0, 2] and b.source.partial_ranks == [1, 3]
    # the step split and communication of a partial rank are those of the full export
    assert [r.model_dump() for r in a.cluster.step_table] == [r.model_dump() for r in b.cluster.step_table]
    assert a.communication == b.communication
    bad = CliRunner().invoke(
        app, ["export", str(run.out_dir), "--to", "ascend-pt", "--out", str(tmp_path / "x"), "--kernel-ranks", "9"]
    )
    assert bad.exit_code == 2 and "rank 9 is not in the run" in bad.output


@needs_qwen
def test_a_db_of_an_unknown_schema_version_is_named_and_the_cluster_still_analysed(tmp_path: Path) -> None:
    import sqlite3

    root = _cluster_of(tmp_path / "db", DB_RANKS)
    rank1 = root / "r1_ascend_pt"
    (db,) = rank1.rglob("ascend_pytorch_profiler*.db")
    con = sqlite3.connect(db)
    con.execute("update META_DATA set value = '2.1.0' where name = 'SCHEMA_VERSION'")
    con.commit()
    con.close()
    report = analyze_cluster_path(root, workers=0)
    assert report.source.ranks == [0, 1]
    by_rank = {r.rank: r for r in report.cluster.ranks}
    assert by_rank[0].fusion_saving_us == 0.0 and by_rank[1].fusion_saving_us is None  # rank 1's kernels unread
    assert by_rank[1].step_source == "analysis.db"  # its step split is still read
    (said,) = [w for w in report.warnings if w.startswith("rank 1: kernel tables not analysed")]
    assert "SCHEMA_VERSION 2.1.0; atbprof reads schema 1.x" in said and str(db) in said
    assert said.endswith("step split only")
    # an analysis.db whose tables lack the columns atbprof reads: that rank is left out, named, the rest goes on
    analysis = rank1 / "ASCEND_PROFILER_OUTPUT" / "analysis.db"
    con = sqlite3.connect(analysis)
    con.execute("alter table StepTraceTime rename column computing to computing_v9")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="needs at least two readable rank profiles") as err:
        analyze_cluster_path(root, workers=0)
    assert f"{analysis}: no such column: computing" in str(err.value)
    assert "of a schema atbprof does not know" in str(err.value)
