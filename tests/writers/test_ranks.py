"""Several ranks in one trace: process layout, the flows between ranks' HCCL tasks, the shared size budget."""

from __future__ import annotations

import pyarrow as pa

from atbprof.config.models import RunConfig
from atbprof.run import _trace_selection, traced_ranks
from atbprof.sim.simulate import Simulation
from atbprof.writers.ranks import PID_DEVICE, RankLayout, rank_flows


def test_one_rank_keeps_the_msprof_layout_and_ranks_never_share_ids() -> None:
    one = RankLayout(0, multi=False)
    assert (one.host, one.device, one.overlap, one.model) == (1, PID_DEVICE, 3, 4)
    assert one.name("Ascend Hardware") == "Ascend Hardware" and one.label("NPU") == "NPU" and one.tid(6) == 6
    layouts = [RankLayout(r, multi=True) for r in range(64)]
    pids = [p for lay in layouts for p in (lay.host, lay.device, lay.overlap, lay.model)]
    assert len(set(pids)) == len(pids)
    tids = {lay.tid(t) for lay in layouts for t in (1, 2, 3, 6, 65536, 1001)}
    assert len(tids) == 64 * 6  # no two ranks share a thread id
    assert all(lay.tid(t) != lay.device for lay in layouts for t in (0, 2, 6, 65536))  # a stream is no main thread
    assert layouts[3].name("Ascend Hardware") == "Ascend Hardware (rank 3)" and layouts[3].label("NPU") == "NPU 3"
    order = sorted(
        pids,
        key=lambda p: next(lay.sort_index(p) for lay in layouts if p in (lay.host, lay.device, lay.overlap, lay.model)),
    )
    assert order[:8] == [1, PID_DEVICE, 3, 4, 9, PID_DEVICE + 1, 11, 12]  # rank by rank


def _rows(rows: list[tuple[object, ...]]) -> pa.Table:
    names = ["rank", "stage", "step", "microbatch", "node_id", "op_type", "op_name", "stream_id", "task_start_ns"]
    names.append("task_dur_ns")
    cols = list(zip(*rows, strict=True))
    return pa.table({n: pa.array(c) for n, c in zip(names, cols, strict=True)})


def test_flows_go_to_the_last_to_arrive_and_from_send_to_receive() -> None:
    # tp 3 x pp 2: an AllReduce of stage 0 (rank 2 arrives last), then stage 0 -> stage 1 sends
    rows = [
        (0, 0, 1, 0, 7, "hcom_allReduce_", "hcom_allReduce__0_1", 6, 1000, 150),  # waits until 1150
        (1, 0, 1, 0, 7, "hcom_allReduce_", "hcom_allReduce__0_1", 6, 1010, 140),
        (2, 0, 1, 0, 7, "hcom_allReduce_", "hcom_allReduce__0_1", 6, 1050, 100),
        (0, 0, 1, 0, 9, "hcom_send_", "hcom_send__1_1", 6, 2000, 100),
        (3, 1, 1, 0, 0, "hcom_receive_", "hcom_receive__1_1", 6, 1500, 600),  # began waiting before the send
        (1, 0, 1, 0, 9, "hcom_send_", "hcom_send__1_1", 6, 2000, 100),
        (4, 1, 1, 0, 0, "hcom_receive_", "hcom_receive__1_1", 6, 2010, 100),
        (4, 1, 1, 1, 0, "hcom_receive_", "hcom_receive__1_2", 6, 2200, 100),  # microbatch 1: its send is not traced
    ]
    flows = rank_flows(_rows(rows), tp=3, pp=2)
    assert [(f.name, f.src_rank, f.dst_rank) for f in flows] == [
        ("hcom_allReduce_", 0, 2),
        ("hcom_allReduce_", 1, 2),
        ("pipeline", 0, 3),
        ("pipeline", 1, 4),
    ]
    span = {(r[0], r[6]): (r[8], r[8] + r[9]) for r in rows}
    for f in flows:
        assert f.dst_ts > f.src_ts  # trace processors sort flow events by time
        src = next(v for (rank, _), v in span.items() if rank == f.src_rank and v[0] <= f.src_ts < v[1])
        dst = next(v for (rank, _), v in span.items() if rank == f.dst_rank and v[0] <= f.dst_ts < v[1])
        assert src and dst  # both ends inside their tasks


def test_the_ranks_share_the_trace_budget() -> None:
    cfg = RunConfig.model_validate(
        {
            "name": "b",
            "model": {"preset": "llama2-7b"},
            "parallel": {"tp": 4},
            "workload": {"prompt_len": 32, "decode_tokens": 64},
            "output": {"trace_max_mb": 5, "trace_ranks": "1-3"},
        }
    )
    sim = Simulation(cfg)
    assert traced_ranks(sim) == (0, 1, 2, 3)
    one, four = _trace_selection(sim, 1), _trace_selection(sim, 4)
    assert 4 * four.estimated_bytes <= 5e6 < 4 * one.estimated_bytes
    assert len(four.steps) < len(one.steps)


def test_a_trace_holds_at_most_64_ranks() -> None:
    import pytest

    from atbprof.errors import ConfigError

    cfg = RunConfig.model_validate(
        {"name": "b", "model": {"preset": "llama2-7b"}, "parallel": {"tp": 8, "dp": 9}, "output": {"trace_ranks": "1-"}}
    )
    with pytest.raises(ConfigError, match="puts 72 ranks in the trace, more than 64"):
        traced_ranks(Simulation(cfg))
