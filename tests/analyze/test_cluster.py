"""`atbprof analyze CLUSTER`: the real 4-rank Qwen3 cluster against msprof-analyze's cluster mode on the same
directory (step split, communication time and bandwidth, matrix), our simulated clusters with and without a
straggler, and clusters with a bad rank."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from atbprof.analyze.cluster_report import ClusterReport, analyze_cluster
from atbprof.commands import app
from atbprof.config.models import RunConfig
from atbprof.errors import InputError
from atbprof.export import export_run
from atbprof.importers.cluster import load_cluster
from atbprof.run import run_simulation
from tests.export.test_export_msprof_analyze import MSPROF_ANALYZE, _run

QWEN = Path(__file__).resolve().parents[3] / "shared/anchors/ascend_samples/msinsight_qwen3_0.6b_level2_cluster"
needs_qwen = pytest.mark.skipif(not QWEN.is_dir(), reason="../shared/anchors is not beside the clone")


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> tuple[ClusterReport, Path]:
    if not QWEN.is_dir():
        pytest.skip("../shared/anchors is not beside the clone")
    copy = tmp_path_factory.mktemp("qwen") / "cluster"
    shutil.copytree(QWEN, copy)  # msprof-analyze writes its output into the directory
    return analyze_cluster(load_cluster(copy)), copy


@needs_qwen
def test_qwen_ranks_by_content_with_their_stages(qwen: tuple[ClusterReport, Path]) -> None:
    report, _ = qwen
    assert report.source.ranks == [0, 1, 2, 3] and report.source.complete_ranks == [0]
    assert report.source.parallel == {"tp": 1, "pp": 2, "dp": 2, "world": 4}
    assert [(r.rank, r.stage) for r in report.cluster.ranks] == [(0, 0), (1, 0), (2, 1), (3, 1)]  # rank 2 is device 4
    assert [s.ranks for s in report.cluster.stages] == [[0, 1], [2, 3]]
    # rank 0 idles 158.6 ms a step on its host against stage 0's median of 147.7 (+7.4 %, 1.3 % of the step)
    assert report.cluster.slow_ranks == [0]
    assert report.cluster.ranks[0].slow_reason.startswith("more free (host) time")
    assert report.cluster.slow_stages == [1]  # stage 1 computes 401 ms a step, stage 0 231 ms: imbalanced
    assert report.step_saving_us is None  # stage 1's ranks have no kernel tables
    # rank 0's fusion findings: the 54 unfused Add -> RmsNorm of the single-rank analysis
    adds = [f for f in report.findings if f.pattern == "add-rmsnorm"]
    assert [(f.rank, f.count) for f in adds] == [(0, 54)]
    assert report.has_unfused and report.cluster.ranks[0].fusion_saving_us > 0


@needs_qwen
@pytest.mark.skipif(MSPROF_ANALYZE is None, reason="msprof-analyze is not installed (the `test` extra)")
def test_qwen_equals_msprof_analyze_cluster(qwen: tuple[ClusterReport, Path], tmp_path: Path) -> None:
    report, copy = qwen
    assert_equals_msprof_analyze(report, copy, tmp_path, steps=4)


def assert_equals_msprof_analyze(report: ClusterReport, copy: Path, tmp_path: Path, steps: int) -> None:
    """Our step table, communication times and matrix totals equal `msprof-analyze cluster -m all`'s on `copy`."""
    _run(["cluster", "-d", str(copy), "-m", "all"], tmp_path)
    db = sqlite3.connect(copy / "cluster_analysis_output" / "cluster_analysis.db")
    columns = [
        ("computing", "computing_us"),
        ("communication_not_overlapped", "communication_not_overlapped_us"),
        ("overlapped", "overlapped_us"),
        ("communication", "communication_us"),
        ("free", "free_us"),
        ("stage", "stage_us"),
        ("bubble", "bubble_us"),
        ("communication_not_overlapped_and_exclude_receive", "communication_not_overlapped_exclude_receive_us"),
        ("preparing", "preparing_us"),
    ]
    cols = ", ".join(c for c, _ in columns)
    theirs = db.execute(f'select step, "index", {cols} from ClusterStepTraceTime where type = ?', ("rank",)).fetchall()
    ours = {(str(r.step), str(r.rank)): r for r in report.cluster.step_table}
    assert len(theirs) == len(ours) == steps
    for step, rank, *values in theirs:
        row = ours[(step.removeprefix("step"), rank)]
        for (_, key), value in zip(columns, values, strict=True):
            assert getattr(row, key) == pytest.approx(value, abs=1e-3), (rank, key)  # to the nanosecond
    # communication time per op and rank
    times = {
        (r, n): (e, t, w)
        for _, r, n, e, t, w in db.execute(
            "select step, rank_id, hccl_op_name, elapsed_time, transit_time, wait_time from ClusterCommunicationTime"
        )
    }
    ops = {(o.rank, o.name): o for o in report.communication.ops}
    times = {k: v for k, v in times.items() if k[1] != "Total Op Info"}  # msprof-analyze's own sums
    assert set(times) == set(ops)
    for key, (elapse, transit, wait) in times.items():
        o = ops[key]
        assert (o.elapse_us, o.transit_us, o.wait_us) == pytest.approx(
            (elapse * 1e3, transit * 1e3, wait * 1e3), abs=1e-3
        )
    # torch_npu's matrix summarises each op kind (top1, middle, ..., total): the totals, link by link
    totals: dict[tuple[int, int, str], list[float]] = {}
    for src, dst, transport, size, time in db.execute(
        "select src_rank, dst_rank, transport_type, transit_size, transit_time from ClusterCommunicationMatrix "
        "where transport_type != 'LOCAL' and hccl_op_name like '%-total'"
    ):
        sums = totals.setdefault((int(src), int(dst), transport), [0.0, 0.0])
        sums[0], sums[1] = sums[0] + size, sums[1] + time
    ours_links = {(m.src_rank, m.dst_rank, m.transport): m for m in report.communication.matrix}
    assert set(ours_links) == set(totals)
    for key, (size, time) in totals.items():
        assert (ours_links[key].size_mb, ours_links[key].time_ms) == pytest.approx((size, time), rel=1e-6), key


def _sim_cluster(tmp: Path, slowdown: dict[int, float], tp: int = 4, kernel_ranks: str | None = None) -> Path:
    """A simulated LLaMA-2-7B TP cluster (graph mode, 3 decode tokens) exported as torch_npu's rank directories."""
    cfg = RunConfig.model_validate(
        {
            "name": f"tp{tp}",
            "model": {"preset": "llama2-7b"},
            "device": {"preset": "910B2"},
            "parallel": {"tp": tp},
            "workload": {"batch_size": 1, "prompt_len": 64, "decode_tokens": 3},
            "execution": {"mode": "graph", "rank_slowdown": slowdown},
            "output": {"trace": False},
        }
    )
    run = run_simulation(cfg, tmp / "run")
    return export_run(run.out_dir, "ascend-pt", tmp / "export", kernel_ranks=kernel_ranks).root


def test_a_straggler_is_named_and_the_others_wait_for_it(tmp_path: Path) -> None:
    report = analyze_cluster(load_cluster(_sim_cluster(tmp_path / "slow", {2: 1.15})))
    assert report.cluster.slow_ranks == [2]
    slow = next(r for r in report.cluster.ranks if r.rank == 2)
    assert slow.slow_reason and slow.slow_reason.startswith("more computing: ")
    assert [w.rank for w in report.communication.waited_for] == [2]  # every collective waited for rank 2
    waits = {r.rank: sum(o.wait_us for o in report.communication.ops if o.rank == r.rank) for r in report.cluster.ranks}
    assert waits[2] < min(waits[r] for r in (0, 1, 3))
    even = analyze_cluster(load_cluster(_sim_cluster(tmp_path / "even", {})))
    assert even.cluster.slow_ranks == [] and "no slow rank" in even.summary


def test_bad_ranks_are_left_out_with_a_warning(tmp_path: Path) -> None:
    root = _sim_cluster(tmp_path / "c", {})  # the export's <run>_cluster directory of rank directories
    dirs = sorted(p for p in root.iterdir() if p.is_dir())
    shutil.copytree(dirs[1], root / "zz_copy_of_rank1_ascend_pt")  # a rank seen twice
    (dirs[3] / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").write_text("Device_id,Step,Computing\n0,1,x\n")
    (dirs[2] / "ASCEND_PROFILER_OUTPUT" / "analysis.db").write_bytes(b"not a database" * 100)
    report = analyze_cluster(load_cluster(root))
    assert report.source.ranks == [0, 1]
    assert any("rank 1 again" in w for w in report.warnings)
    assert any("step_trace_time.csv" in w and "left out" in w for w in report.warnings)
    assert any("analysis.db" in w and "re-export it" in w for w in report.warnings)
    for d in dirs[:2]:
        shutil.rmtree(d)
    with pytest.raises(InputError, match="a cluster needs at least two readable rank profiles, found 1"):
        load_cluster(root)


def test_the_cli_reports_a_cluster_as_json_and_markdown(tmp_path: Path) -> None:
    root = _sim_cluster(tmp_path / "c", {1: 1.2})
    r = CliRunner().invoke(app, ["analyze", str(root), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema_version"] == "1" and doc["source"]["kind"] == "cluster"
    row = doc["cluster"]["ranks"][1]
    for key in (
        "rank",
        "stage",
        "complete",
        "stage_us",
        "computing_us",
        "communication_not_overlapped_us",
        "overlapped_us",
        "communication_us",
        "free_us",
        "bubble_us",
        "preparing_us",
        "slow",
        "slow_reason",
    ):
        assert key in row
    assert row["slow"] and doc["cluster"]["slow_ranks"] == [1]
    assert {"name", "rank", "elapse_us", "wait_us", "transit_size_mb", "bandwidth_gbps"} <= set(
        doc["communication"]["ops"][0]
    )
    assert {"src_rank", "dst_rank", "transport", "size_mb", "time_ms", "bandwidth_gbps"} <= set(
        doc["communication"]["matrix"][0]
    )
    assert all("rank" in f for f in doc["findings"])
    md = CliRunner().invoke(app, ["analyze", str(root), "--format", "md"])
    assert md.exit_code == 0 and "| rank |" in md.output and "slow: rank 1" in md.output
    one = CliRunner().invoke(app, ["analyze", str(tmp_path / "nothing")])
    assert one.exit_code == 2


def test_a_run_of_ours_is_its_own_cluster(tmp_path: Path) -> None:
    """`analyze` of a multi-device run directory reads every rank from ops.parquet as its export would hold it."""
    root = _sim_cluster(tmp_path / "c", {3: 1.2})
    run = tmp_path / "c" / "run"
    direct, exported = analyze_cluster(load_cluster(run)), analyze_cluster(load_cluster(root))
    assert direct.source.ranks == exported.source.ranks == [0, 1, 2, 3]
    assert [r.model_dump(exclude={"step_source"}) for r in direct.cluster.ranks] == [
        r.model_dump(exclude={"step_source"}) for r in exported.cluster.ranks
    ]
    assert direct.communication.matrix == exported.communication.matrix
    assert direct.cluster.slow_ranks == [3] and {f.rank for f in direct.findings} == {0, 1, 2, 3}
    r = CliRunner().invoke(app, ["analyze", str(run), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.output)["source"]["kind"] == "cluster"
    # the op rows reduced rank by rank and not kept: the same report from the sums and the collectives' keys
    lean = load_cluster(run, rows=False)
    assert lean.ops.num_rows == 0 and load_cluster(run).ops.num_rows > 0
    assert analyze_cluster(lean).model_dump() == direct.model_dump()
    assert analyze_cluster(lean).communication.waited_for == exported.communication.waited_for
    traced = CliRunner().invoke(app, ["analyze", str(run), "--format", "json", "--trace", str(tmp_path / "t.json")])
    assert traced.exit_code == 0, traced.output  # the trace draws the rows: they are kept for it
    events = orjson.loads((tmp_path / "t.json").read_bytes())["traceEvents"]
    assert any(str(e.get("name", "")).startswith("hcom_allReduce") for e in events)


def test_a_compute_straggler_is_named_in_a_host_bound_cluster(tmp_path: Path) -> None:
    """16 ranks (TP4 x PP2 x DP2) of a tiny model, where host time dwarfs computing: rank 5 computing 15 % more is
    named, though its step barely changes."""
    cfg = RunConfig.model_validate(
        {
            "name": "c16",
            "model": {"hf_config": str(Path(__file__).resolve().parents[2] / "fixtures/hf/tiny-llama/config.json")},
            "device": {"preset": "910B2"},
            "parallel": {"tp": 4, "pp": 2, "dp": 2},
            "workload": {"batch_size": 2, "prompt_len": 16, "decode_tokens": 4},
            "execution": {"mode": "graph", "rank_slowdown": {5: 1.15}},
            "output": {"trace": False},
        }
    )
    run = run_simulation(cfg, tmp_path / "c16").out_dir
    report = analyze_cluster(load_cluster(run), findings=False)
    assert report.cluster.slow_ranks == [5]
    assert [r.stage for r in report.cluster.ranks] == [0] * 4 + [1] * 4 + [0] * 4 + [1] * 4
    assert report.communication.waited_for[0].rank == 5
