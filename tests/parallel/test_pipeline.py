"""Pipeline-parallel runs: stage layers (vLLM's split), stage graphs joined by Send/Receive, microbatches filling
the pipeline, bubbles in each rank's step split, memory per stage."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.config.models import RunConfig
from atbprof.graph.builder import build_graph
from atbprof.graph.dims import resolve_model
from atbprof.parallel.collectives import COMM_STREAM, insert_collectives
from atbprof.parallel.pipeline import stage_graph, stage_layers
from atbprof.run import run_simulation, summarize


def _cfg(parallel: dict[str, object], batch: int = 8, mode: str = "graph", **extra: object) -> RunConfig:
    doc: dict[str, object] = {
        "name": "pp",
        "model": {"preset": "llama2-7b"},
        "device": {"preset": "910B2"},
        "parallel": parallel,
        "workload": {"batch_size": batch, "prompt_len": 512, "decode_tokens": 6},
        "execution": {"mode": mode},
    }
    doc.update(extra)
    return RunConfig.model_validate(doc)


def test_stage_layers_split_as_vllm_does() -> None:
    # vLLM get_pp_indices: an even split, the remainder on the stages before the last (tests of vLLM: 20 / 4)
    assert stage_layers(20, 4, None, "m") == ((0, 5), (5, 10), (10, 15), (15, 20))
    assert [hi - lo for lo, hi in stage_layers(61, 4, None, "m")] == [15, 15, 16, 15]
    assert [hi - lo for lo, hi in stage_layers(61, 2, None, "m")] == [31, 30]
    assert [hi - lo for lo, hi in stage_layers(7, 4, None, "m")] == [2, 2, 2, 1]
    assert stage_layers(20, 4, (4, 6, 6, 4), "m") == ((0, 4), (4, 10), (10, 16), (16, 20))


def test_stage_graphs_cover_the_model_once_joined_by_send_and_receive() -> None:
    dims = resolve_model(_cfg({"tp": 2}).model).sharded(2)
    model = insert_collectives(build_graph(dims), dims)
    bounds = stage_layers(dims.layers, 3, None, dims.name)
    stages = [stage_graph(model, s, bounds) for s in range(3)]
    layer_nodes = [n.id for g in stages for n in g.nodes if n.layer >= 0 and "pipe" not in n.role]
    assert sorted(layer_nodes) == sorted(n.id for n in model.nodes if n.layer >= 0)  # every layer node once
    for s, g in enumerate(stages):
        lo, hi = bounds[s]
        assert {n.layer for n in g.nodes if n.layer >= 0 and "pipe" not in n.role} == set(range(lo, hi))
        roles = [n.role for n in g.nodes]
        assert ("head.embed" in roles) == (s == 0)
        assert ("head.lm_head" in roles) == (s == 2) and ("head.sample" in roles) == (s == 2)
        assert "head.rope_table" in roles  # each stage computes its rotary tables
        assert roles.count("pipe.send") == (s < 2) and roles.count("pipe.receive") == (s > 0)
        for n in g.nodes:
            if "pipe" in n.role:
                assert n.stream == COMM_STREAM
    # what stage s sends is what stage s+1 receives: the hidden state after stage s's last layer
    for s in range(2):
        send = next(n for n in stages[s].nodes if n.role == "pipe.send")
        recv = next(n for n in stages[s + 1].nodes if n.role == "pipe.receive")
        assert send.work[0].comm_bytes == recv.work[0].comm_bytes == recv.outputs[0].nbytes
        assert stages[s].nodes[-1] is send  # sent right after the stage's last kernel
        last = stages[s].nodes[-2]
        assert last.role == "ffn.residual" and last.layer == bounds[s][1] - 1


def test_one_microbatch_runs_the_stages_one_after_another() -> None:
    """Without microbatching a pipeline is the single-card step plus the transfers: no faster, barely slower."""
    one = summarize(_cfg({}, batch=1))
    for pp in (2, 4):
        s = summarize(_cfg({"pp": pp, "microbatches": 1}, batch=1))
        # what a boundary adds: its Send (the Receive ends with it) on one HCCS link, and two device gaps
        gap_ms = 2 * _cfg({}).execution.device_gap_us / 1e3
        send_ms = {c.phase: c.task_us / 1e3 + gap_ms for c in s.collectives if c.role == "pipe.send"}
        for phase, single, staged in (
            ("prefill", one.ttft_ms, s.ttft_ms),
            ("decode", one.decode_ms_per_token, s.decode_ms_per_token),
        ):
            added = (pp - 1) * send_ms[phase]
            assert staged - single == pytest.approx(added, rel=0.25, abs=0.01), phase
        # each later stage waits for the earlier ones: its bubble grows with its position
        bubbles = [r.bubble_us for r in s.ranks]
        assert bubbles[0] == 0 and all(a < b for a, b in itertools.pairwise(bubbles))


@pytest.mark.parametrize("pp", [2, 4])
def test_microbatches_fill_the_pipeline_of_a_compute_bound_prefill(pp: int) -> None:
    """Prefill of m microbatches over pp stages takes (pp - 1 + m) microbatch passes instead of pp whole-batch
    ones: (pp - 1 + m) / (m x pp) of the time at best (GPipe's bubble); smaller microbatches run a little less
    efficiently, never better."""
    base = summarize(_cfg({"pp": pp, "microbatches": 1})).ttft_ms
    filled = summarize(_cfg({"pp": pp})).ttft_ms  # default: pp microbatches
    ideal = (pp - 1 + pp) / (pp * pp)
    assert ideal < filled / base < ideal + 0.07


def test_memory_is_per_stage() -> None:
    one = summarize(_cfg({})).memory
    two = summarize(_cfg({"pp": 2})).memory
    assert two.weights_gb == pytest.approx(one.weights_gb / 2, rel=0.01)  # embedding and LM head weigh the same
    assert two.kv_cache_gb == pytest.approx(one.kv_cache_gb / 2, rel=1e-3)
    assert two.activations_gb < one.activations_gb  # one microbatch of 4 at a time
    assert two.communication_gb == pytest.approx(0.4)  # the pipeline group's HCCL buffers
    assert summarize(_cfg({"pp": 2, "stage_layers": [20, 12]})).memory.stage == 0


def test_a_straggler_on_a_later_stage_holds_up_the_whole_pipeline() -> None:
    even = summarize(_cfg({"tp": 2, "pp": 2}))
    slow = summarize(_cfg({"tp": 2, "pp": 2}, execution={"mode": "graph", "rank_slowdown": {3: 1.3}}))
    assert slow.decode_ms_per_token > 1.1 * even.decode_ms_per_token
    r = {row.rank: row for row in slow.ranks}
    assert r[2].communication_wait_us > 0 and r[3].communication_wait_us == 0  # rank 2 waits in its AllReduces
    assert r[0].free_us > {row.rank: row for row in even.ranks}[0].free_us  # stage 0 idles, waiting for tokens


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pp=st.sampled_from([2, 3, 4]),
    tp=st.sampled_from([1, 2]),
    batch=st.sampled_from([1, 2, 4, 6]),
    mode=st.sampled_from(["graph", "eager"]),
    data=st.data(),
)
def test_every_rank_step_adds_up(pp: int, tp: int, batch: int, mode: str, data: st.DataObject) -> None:
    """Each rank's frame holds all its step's tasks: Computing + Communication (not overlapped) + Free = the step,
    Free >= 0, Stage = step - Bubble, and the ranks of one deployment keep the same pace."""
    m = data.draw(st.sampled_from([d for d in range(1, batch + 1) if batch % d == 0]))
    cfg = _cfg({"tp": tp, "pp": pp, "microbatches": m}, batch=batch, mode=mode)
    cfg = cfg.model_copy(update={"workload": cfg.workload.model_copy(update={"prompt_len": 32, "decode_tokens": 4})})
    s = summarize(cfg)
    assert len(s.ranks) == tp * pp and s.parallel.microbatches == m
    for r in s.ranks:
        assert r.computing_us + r.communication_not_overlapped_us + r.free_us == pytest.approx(r.step_us, abs=0.01)
        assert r.free_us >= -0.01
        assert r.stage_us == pytest.approx(r.step_us - r.bubble_us, abs=0.01)
        assert r.stage == r.rank // tp
    steps = np.array([r.step_us for r in s.ranks])
    assert steps.max() < 1.25 * steps.min()


def test_the_run_holds_every_rank_and_is_reproducible(tmp_path: Path) -> None:
    cfg = _cfg({"tp": 2, "pp": 2}, batch=2, output={"trace": False})
    a = run_simulation(cfg, tmp_path / "a")
    b = run_simulation(cfg, tmp_path / "b")
    digest = [hashlib.sha256((p / "ops.parquet").read_bytes()).hexdigest() for p in (a.out_dir, b.out_dir)]
    assert digest[0] == digest[1]
    ops = pq.read_table(a.out_dir / "ops.parquet", columns=["rank", "stage", "microbatch", "op_type", "layer"])
    assert a.summary.ops_total == ops.num_rows
    assert sorted(pc.unique(ops.column("rank")).to_pylist()) == [0, 1, 2, 3]
    for rank in range(4):
        mine = ops.filter(pc.equal(ops.column("rank"), rank))
        assert pc.unique(mine.column("stage")).to_pylist() == [rank // 2]
        assert sorted(pc.unique(mine.column("microbatch")).to_pylist()) == [0, 1]
        types = set(mine.column("op_type").to_pylist())
        assert ("hcom_send_" in types) == (rank < 2) and ("hcom_receive_" in types) == (rank >= 2)
        layers = set(pc.unique(mine.column("layer")).to_pylist()) - {-1}
        assert layers == set(range(16) if rank < 2 else range(16, 32))
