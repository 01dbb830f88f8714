"""A multi-device run traced with several ranks (`--trace-ranks`): a process group per rank and flows between the
HCCL tasks of one collective (to the rank the others waited for) and from each pipeline Send to its Receive,
loaded into the real trace_processor (v52, WASM under Node) from both the Chrome JSON and the protobuf trace."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from atbprof.config.models import RunConfig
from atbprof.run import run_simulation
from tests.tp.wasm_tp import WasmEngine, WasmTraceProcessor, require_wasm_trace_processor

require_wasm_trace_processor()

FLOWS = """
    select tso.name, po.name, pi.name, tsi.name from flow f
    join slice so on f.slice_out = so.id join slice tso on so.parent_id = tso.id
    join slice si on f.slice_in = si.id join slice tsi on si.parent_id = tsi.id
    join thread_track to_ on so.track_id = to_.id join thread tho on tho.utid = to_.utid
    join process po on po.upid = tho.upid
    join thread_track ti on si.track_id = ti.id join thread thi on thi.utid = ti.utid
    join process pi on pi.upid = thi.upid
    where so.category = 'HCCL' or so.dur = 0"""
DEVICE_SLICES = """
    select p.name, count(*) from slice s join thread_track tt on s.track_id = tt.id
    join thread t using (utid) join process p using (upid)
    where p.name like 'Ascend Hardware%' and s.depth = 0 group by p.name"""
BAD_STATS = "select name, value from stats where severity in ('error', 'data_loss') and value > 0"


@dataclass
class Loaded:
    ops: Any
    views: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def traced(tp_engine: WasmEngine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loaded]:
    """LLaMA-2-7B tp 2 x pp 2 (2 microbatches) with a straggler at rank 3, every rank traced, both formats."""
    cfg = RunConfig.model_validate(
        {
            "name": "ranks",
            "model": {"preset": "llama2-7b"},
            "device": {"preset": "910B2"},
            "parallel": {"tp": 2, "pp": 2},
            "workload": {"batch_size": 2, "prompt_len": 32, "decode_tokens": 2},
            "execution": {"mode": "graph", "rank_slowdown": {3: 1.3}},
            "output": {"trace_ranks": "1-3", "trace_format": "both"},
        }
    )
    out = tmp_path_factory.mktemp("ranks") / "run"
    run_simulation(cfg, out)
    views = {}
    for name in ("trace.json.gz", "trace.pftrace"):
        with WasmTraceProcessor(trace=out / name, engine=tp_engine) as tp:
            views[name] = {
                "stats": tp.rows(BAD_STATS),
                "processes": sorted(n for (n,) in tp.rows("select name from process where pid != 0")),
                "device": dict(tp.rows(DEVICE_SLICES)),
                "flows": Counter(tuple(r) for r in tp.rows(FLOWS)),
            }
    yield Loaded(pq.read_table(out / "ops.parquet", columns=["rank", "op_type", "step"]), views)


def test_a_process_group_per_rank(traced: Loaded) -> None:
    for view in traced.views.values():
        assert view["stats"] == []
        names = {f"{p} (rank {r})" for r in range(4) for p in ("CANN", "Ascend Hardware", "Overlap Analysis", "Model")}
        assert set(view["processes"]) == names
        for r in range(4):  # every task of every rank on its own device process
            rows = pc.sum(pc.equal(traced.ops.column("rank"), r)).as_py()
            assert view["device"][f"Ascend Hardware (rank {r})"] == rows


def test_flows_join_collectives_and_stages(traced: Loaded) -> None:
    json_flows, proto_flows = (traced.views[k]["flows"] for k in ("trace.json.gz", "trace.pftrace"))
    assert json_flows and sum(json_flows.values()) == sum(proto_flows.values())
    steps = len(pc.unique(traced.ops.column("step")))
    per_pass = {"stage0": 16 * 2 + 1, "stage1": 16 * 2 + 1}  # AllReduces (+ embedding / + logits AllGather)
    allreduce_into = Counter()
    pipeline = 0
    for (name, src, dst, _), n in json_flows.items():  # out slice, its process, in process, in slice
        if name.startswith("hcom_send"):
            pipeline += n
            assert _.startswith("hcom_receive")
            assert (src, dst) in {
                ("Ascend Hardware (rank 0)", "Ascend Hardware (rank 2)"),
                ("Ascend Hardware (rank 1)", "Ascend Hardware (rank 3)"),
            }
        else:
            assert name.split("__")[0] == _.split("__")[0]  # the same collective on both ranks
            allreduce_into[(src, dst)] += n
    assert pipeline == steps * 2 * 2  # every step, microbatch and tp rank: one Send -> Receive
    # stage 1: rank 2 waits for the straggler in every collective; stage 0's ranks arrive together (-> rank 0)
    assert allreduce_into[("Ascend Hardware (rank 2)", "Ascend Hardware (rank 3)")] == steps * 2 * per_pass["stage1"]
    assert allreduce_into[("Ascend Hardware (rank 1)", "Ascend Hardware (rank 0)")] == steps * 2 * per_pass["stage0"]
    assert set(allreduce_into) == {
        ("Ascend Hardware (rank 2)", "Ascend Hardware (rank 3)"),
        ("Ascend Hardware (rank 1)", "Ascend Hardware (rank 0)"),
    }


def test_bad_trace_ranks_are_refused(tmp_path: Path) -> None:
    from atbprof.errors import ConfigError

    cfg = RunConfig.model_validate(
        {"name": "x", "model": {"preset": "llama2-7b"}, "parallel": {"tp": 2}, "output": {"trace_ranks": "2"}}
    )
    with pytest.raises(ConfigError, match="names rank 2, but the deployment has 2 devices"):
        run_simulation(cfg, tmp_path / "x")
    assert not (tmp_path / "x").exists()
