"""Tensor-parallel runs: sharded graphs, collectives in the op table, scaling with tp, stragglers, memory."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest

from atbprof.config.models import RunConfig
from atbprof.errors import ConfigError
from atbprof.graph.builder import build_graph
from atbprof.graph.dims import resolve_model
from atbprof.parallel.collectives import insert_collectives
from atbprof.run import summarize
from atbprof.sim.simulate import Simulation
from tests.conftest import fixture_config, simulate_table


def _cfg(model: str = "llama2-7b", device: str = "910B2", tp: int = 1, **extra: object) -> RunConfig:
    doc: dict[str, object] = {
        "name": "tp",
        "model": {"preset": model},
        "device": {"preset": device},
        "parallel": {"tp": tp},
        "workload": {"batch_size": 1, "prompt_len": 128, "decode_tokens": 4},
        "execution": {"mode": "graph"},
    }
    doc.update(extra)
    return RunConfig.model_validate(doc)


def test_tp1_is_exactly_the_single_device_run() -> None:
    """parallel: {tp: 1} is the run without a parallel section, op for op."""
    for name in ("llama2-7b-910b2.yaml", "llama2-13b-910a.yaml"):
        _, single = simulate_table(fixture_config(name, "workload.decode_tokens=3"))
        _, tp1 = simulate_table(fixture_config(name, "workload.decode_tokens=3", "parallel.tp=1"))
        assert single.equals(tp1)
        assert pc.unique(single.column("rank")).to_pylist() == [0]
        assert single.column("comm_bytes").null_count == single.num_rows  # no collectives on one card


def test_sharded_graph_has_each_ranks_share_and_the_collectives() -> None:
    dims = resolve_model(_cfg().model).sharded(4)
    graph = insert_collectives(build_graph(dims), dims)
    types = [n.op_type for n in graph.nodes]
    assert types.count("hcom_allReduce_") == 2 * dims.layers + 1  # o_proj, down_proj per layer + embedding
    assert types.count("hcom_allGather_") == 1  # the vocab-parallel logits
    q = next(n for n in graph.nodes if n.role == "attn.q")
    assert q.params[0].shape[1].key()[0] == 4096 // 4  # column parallel: N split
    o = next(n for n in graph.nodes if n.role == "attn.o")
    assert o.params[0].shape[0].key()[0] == 4096 // 4  # row parallel: K split
    ar = graph.nodes[graph.nodes.index(o) + 1]
    assert ar.op_type == "hcom_allReduce_" and ar.inputs[0].producer == o.id
    residual = next(n for n in graph.nodes if n.role == "attn.residual")
    assert any(e.producer == ar.id for e in residual.inputs)  # the Add waits for the sum, not the partial


def test_kv_heads_are_replicated_beyond_their_count() -> None:
    dims = resolve_model(_cfg("llama3-8b").model)
    assert dims.sharded(4).kv_local == 2 and dims.sharded(8).kv_local == 1 and dims.sharded(16).kv_local == 1


def test_decode_gets_faster_with_tp_until_communication_dominates() -> None:
    rows = [summarize(_cfg(tp=tp)) for tp in (1, 2, 4, 8)]
    lat = [r.decode_ms_per_token for r in rows]
    share = [r.communication_share for r in rows]
    assert lat == sorted(lat, reverse=True) and lat[-1] < lat[0] / 2
    assert share[0] == 0 and share == sorted(share) and share[-1] > share[1]
    assert [r.parallel.devices for r in rows] == [1, 2, 4, 8]
    # 32 layers x 2 + embedding AllReduces and the logits AllGather per step
    counts: dict[str, int] = {}
    for c in rows[-1].collectives:
        if c.phase == "decode":
            counts[c.op_type] = counts.get(c.op_type, 0) + c.count_per_step
    assert counts == {"hcom_allReduce_": 65, "hcom_allGather_": 1}


def test_every_rank_is_in_the_op_table_and_a_straggler_makes_the_others_wait() -> None:
    cfg = _cfg(tp=4, execution={"mode": "graph", "rank_slowdown": {3: 1.2}})
    sim, ops = simulate_table(cfg)
    assert pc.unique(ops.column("rank")).to_pylist() == [0, 1, 2, 3]
    per_rank = ops.num_rows // 4
    assert all(ops.filter(pc.equal(ops.column("rank"), r)).num_rows == per_rank for r in range(4))
    summary = summarize(cfg)
    by_rank = {r.rank: r for r in summary.ranks}
    slow, fast = by_rank[3], by_rank[0]
    assert slow.computing_us > fast.computing_us * 1.15
    assert slow.communication_wait_us == 0 and fast.communication_wait_us > 0
    # the group moves at the straggler's pace: every rank's step lasts as long
    assert fast.step_us == pytest.approx(slow.step_us, rel=1e-3)
    for r in summary.ranks:
        assert r.computing_us + r.communication_not_overlapped_us + r.free_us == pytest.approx(r.step_us, abs=0.01)
    # the collectives of rank 0 end when rank 3's do
    comm0 = ops.filter(pc.and_(pc.equal(ops.column("rank"), 0), pc.equal(ops.column("op_type"), "hcom_allReduce_")))
    comm3 = ops.filter(pc.and_(pc.equal(ops.column("rank"), 3), pc.equal(ops.column("op_type"), "hcom_allReduce_")))
    end0 = comm0.column("task_start_ns").to_numpy() + comm0.column("task_dur_ns").to_numpy()
    end3 = comm3.column("task_start_ns").to_numpy() + comm3.column("task_dur_ns").to_numpy()
    assert np.array_equal(end0, end3)
    assert sim.parallel.classes[0].factor == 1.2


def test_a_model_that_does_not_fit_names_the_tp_that_would() -> None:
    with pytest.raises(ConfigError, match=r"it fits with parallel.tp: 8"):
        Simulation(_cfg("llama2-70b", "910B4"))
    assert Simulation(_cfg("llama2-70b", "910B4", tp=8)).memory.fits


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"parallel": {"tp": 3}}, "32 attention heads, not divisible by 3"),
        ({"parallel": {"tp": 2}, "execution": {"rank_slowdown": {2: 1.1}}}, "names rank 2, but the deployment has 2"),
        ({"parallel": {"pp": 33}}, "llama2-7b has only 32 decoder layers"),
        ({"parallel": {"pp": 2, "stage_layers": [16, 15]}}, "adds up to 31 layers but llama2-7b has 32"),
        ({"parallel": {"pp": 2, "stage_layers": [32, 0]}}, "every stage needs at least one decoder layer"),
        ({"parallel": {"pp": 2, "stage_layers": [32]}}, "lists 1 stages but parallel.pp = 2"),
        ({"parallel": {"pp": 2}, "numerics": {"enabled": True}}, "numerics executes one device"),
        ({"parallel": {"tp": 2}, "numerics": {"enabled": True}}, "numerics executes one device"),
    ],
)
def test_impossible_deployments_are_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        Simulation(_cfg(**change))  # type: ignore[arg-type]


def test_a_fixed_kv_cache_costs_eager_attention_but_not_flash_attention() -> None:
    def decode(strategy: str, cache: str) -> float:
        w = {"batch_size": 4, "prompt_len": 256, "decode_tokens": 2, "kv_cache": cache}
        return summarize(_cfg(workload=w, fusion={"strategy": strategy})).decode_ms_per_token

    assert decode("none", "fixed") > decode("none", "dynamic") * 1.05  # 4096 cached positions, not 258
    assert decode("default", "fixed") == decode("default", "dynamic")


def test_mc2_fuses_prefill_only_as_torchair_does() -> None:
    s = summarize(fixture_config("llama2-70b-910b4-tp8.yaml", "workload.decode_tokens=2"))
    assert s.fusion_fired["prefill"]["mc2_prefill"] == 160
    assert "mc2_prefill" not in s.fusion_fired["decode"]
    assert any(n.rule == "mc2_prefill" and n.phase == "decode" for n in s.near_misses)


def test_analyzing_a_multi_device_run_reads_rank_0_and_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from atbprof.importers import load_profile
    from atbprof.importers.base import import_warnings
    from atbprof.run import run_simulation

    run = run_simulation(_cfg(tp=2, output={"trace": False}), tmp_path / "r")
    profile = load_profile(run.out_dir)
    assert pc.unique(profile.ops.column("rank")).to_pylist() == [0]
    assert profile.ops.num_rows == run.summary.ops_total // 2
    assert any("a run on 2 devices: this analysis reads rank 0" in w for w in import_warnings(profile))


def test_a_straggler_slows_its_own_replica_only() -> None:
    s = summarize(_cfg(parallel={"tp": 2, "dp": 2}, execution={"mode": "graph", "rank_slowdown": {3: 1.3}}))
    r = {row.rank: row for row in s.ranks}
    assert r[0].step_us == r[1].step_us < r[2].step_us  # replica 0 (ranks 0-1) is unaffected
    assert r[0].communication_wait_us == 0 and r[2].communication_wait_us > 0 and r[3].communication_wait_us == 0
    assert r[2].computing_us == r[0].computing_us and r[3].computing_us > 1.25 * r[0].computing_us
