"""`atbprof analyze CLUSTER --trace`, loaded into the real Perfetto trace_processor (v52, WASM under Node).

The layout is the one in `atbprof/writers/cluster_trace.py`'s docstring. Cases: the real 4-rank Qwen3 cluster (one
complete rank with kernels, three partial), and a simulated TP8 cluster of LLaMA-2-7B with rank 5 slowed by 15 %,
in which every other rank must be seen waiting for rank 5 (issue 15's acceptance), and its twin without the slowdown.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from atbprof.analyze.cluster_job import analyze_cluster_path
from atbprof.validate import validate_trace
from tests.analyze.test_cluster import _sim_cluster
from tests.tp.wasm_tp import WasmEngine, WasmTraceProcessor, require_wasm_trace_processor

require_wasm_trace_processor()

QWEN = Path(__file__).resolve().parents[3] / "shared/anchors/ascend_samples/msinsight_qwen3_0.6b_level2_cluster"


def tp8(tmp: Path, slowdown: dict[int, float]) -> Path:
    return _sim_cluster(tmp, slowdown, tp=8, kernel_ranks="0,5")


def _wait_per_process(tp: WasmTraceProcessor) -> dict[str, int]:
    rows = tp.rows(
        "select p.name, sum(s.dur) from slice s join thread_track tt on s.track_id = tt.id join thread t using(utid) "
        "join process p using(upid) where s.name = 'wait' group by p.name"
    )
    return {name: int(total) for name, total in rows}


@pytest.mark.skipif(not QWEN.is_dir(), reason="../shared/anchors is not beside the clone")
def test_the_qwen3_cluster_trace_holds_every_rank_and_event(tmp_path: Path, tp_engine: WasmEngine) -> None:
    out = tmp_path / "qwen.json.gz"
    report = analyze_cluster_path(QWEN, workers=0, trace=out)
    assert report.trace is not None and report.trace.ranks == [0, 1, 2, 3] and report.trace.steps == [13]
    doc = orjson.loads(gzip.decompress(out.read_bytes()))
    assert doc["otherData"]["generator"] == "atbprof" and doc["otherData"]["kind"] == "cluster"
    checked = validate_trace(out)
    assert not checked.loses_data and checked.count("error") == 0, checked.findings
    tp = WasmTraceProcessor(trace=out, engine=tp_engine)
    processes = dict(tp.rows("select pid, name from process where pid between 1 and 4"))
    assert processes == {
        1: "Rank 0 · stage 0 · slow: more free (host) time",
        2: "Rank 1 · stage 0 · partial",
        3: "Rank 2 · stage 1 · partial",
        4: "Rank 3 · stage 1 · partial",
    }
    comm = {o.rank: o.count for o in report.communication.ops}  # every op of every rank, once
    per_rank = dict(
        tp.rows(
            "select p.pid - 1, count(*) from slice s join thread_track tt on s.track_id = tt.id join thread t "
            "using(utid) join process p using(upid) where t.name like 'Communication%' and s.depth = 0 group by p.pid"
        )
    )
    expected: dict[int, int] = {}
    for o in report.communication.ops:
        expected[o.rank] = expected.get(o.rank, 0) + o.count
    assert per_rank == expected and set(comm) == {0, 1, 2, 3}
    kernels = tp.scalar(
        "select count(*) from slice s join thread_track tt on s.track_id = tt.id join thread t using(utid) "
        "where t.name like 'Stream%' or t.name like 'No stream%'"
    )
    assert kernels == 2463  # rank 0's kernel_details rows
    steps = tp.rows(
        "select p.pid - 1, s.ts, s.dur from slice s join thread_track tt on s.track_id = tt.id join thread t "
        "using(utid) join process p using(upid) where t.name = 'Step' order by p.pid"
    )
    split = {r.rank: r for r in report.cluster.ranks}
    for rank, _ts, dur in steps:  # the step is the split's Computing + Communication (Not Overlapped) + Free
        r = split[rank]
        total = r.computing_us + r.communication_not_overlapped_us + r.free_us
        assert dur == pytest.approx(total * 1000, abs=1000)
    starts = {rank: ts for rank, ts, _ in steps}
    assert starts[0] == 0 and 0 < starts[2] < 10_000_000  # one clock: stage 1 began 3.1 ms after rank 0's first kernel


def test_a_tp8_straggler_is_named_and_everyone_waits_for_it_in_the_trace(tmp_path: Path, tp_engine: WasmEngine) -> None:
    slow = analyze_cluster_path(tp8(tmp_path / "slow", {5: 1.15}), workers=0, trace=tmp_path / "slow.json")
    assert slow.cluster.slow_ranks == [5] and [w.rank for w in slow.communication.waited_for] == [5]
    tp = WasmTraceProcessor(trace=tmp_path / "slow.json", engine=tp_engine)
    waits = _wait_per_process(tp)
    straggler = "Rank 5 · slow: more computing"  # ranks 0 and 5 have kernel tables (--kernel-ranks 0,5)
    assert set(waits) - {straggler} == {"Rank 0"} | {f"Rank {r} · partial" for r in (1, 2, 3, 4, 6, 7)}
    others = [v for k, v in waits.items() if k != straggler]
    assert waits.get(straggler, 0) * 5 < min(others)  # the others wait, rank 5 hardly does (no wait slice at all)
    # the collectives end together: every rank's last allreduce of a step ends within 1 % of the step
    ends = tp.rows(
        "select p.pid, max(s.ts + s.dur) from slice s join thread_track tt on s.track_id = tt.id join thread t "
        "using(utid) join process p using(upid) where t.name like 'Communication%' group by p.pid"
    )
    last = [e for _, e in ends]
    assert max(last) - min(last) < 0.01 * max(last)
    even = analyze_cluster_path(tp8(tmp_path / "even", {}), workers=0, trace=tmp_path / "even.json")
    assert even.cluster.slow_ranks == [] and even.trace is not None and even.trace.ranks == list(range(8))
    tp = WasmTraceProcessor(trace=tmp_path / "even.json", engine=tp_engine)
    assert not any("slow" in name for (name,) in tp.rows("select name from process where name is not null"))
