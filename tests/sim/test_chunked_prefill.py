"""Chunked prefill (`workload.max_num_batched_tokens`, vLLM's budget per iteration): the prompt in iterations that
attend to the cached prefix, the same work as one prefill, activations sized for one chunk."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from atbprof.config import load_config
from atbprof.errors import ConfigError, DoesNotFitError
from atbprof.run import run_simulation, summarize
from atbprof.sim.steps import plan_steps, prefill_chunk

CONFIG = Path(__file__).parents[2] / "fixtures" / "llama2-7b-910b2.yaml"
BASE = ["workload.batch_size=8", "workload.prompt_len=2048", "workload.decode_tokens=3", "execution.mode=graph"]


def test_plan_is_chunks_then_decode() -> None:
    assert prefill_chunk(2048, 8, 4096) == 512 and prefill_chunk(2048, 8, None) == 2048
    assert prefill_chunk(2048, 8, 1 << 20) == 2048  # the whole batch fits the budget: one step
    prefill, decode = plan_steps(2000, 3, chunk=512)
    assert prefill.steps.tolist() == [0, 1, 2, 3]
    assert prefill.sq.tolist() == [512, 512, 512, 464] and prefill.skv.tolist() == [512, 1024, 1536, 2000]
    assert decode.steps.tolist() == [4, 5, 6] and decode.skv.tolist() == [2001, 2002, 2003]


def _prefill_flops(tmp_path: Path, extra: list[str]) -> tuple[float, int, object]:
    out = tmp_path / ("chunked" if extra else "whole")
    result = run_simulation(load_config(CONFIG, BASE + extra), out)
    ops = pq.read_table(out / "ops.parquet", columns=["phase", "flops", "op_type"])
    prefill = np.array(ops.column("phase").to_pylist()) == "prefill"
    return float(ops.column("flops").to_numpy()[prefill].sum()), int(prefill.sum()), result


def test_chunks_do_the_work_of_one_prefill(tmp_path: Path) -> None:
    """Causal attention over a cached prefix: chunk k of c tokens attends to k c cached positions and causally
    to itself, so the chunks' pairs add up to the whole prompt's S (S + 1) / 2 and the FLOPs match one prefill
    (the LM head samples each sequence's last position per iteration: 3 more rows of B)."""
    whole, whole_ops, one = _prefill_flops(tmp_path, [])
    chunked, chunked_ops, four = _prefill_flops(tmp_path, ["workload.max_num_batched_tokens=4096"])
    assert chunked_ops == 4 * whole_ops
    assert chunked == pytest.approx(whole, rel=0.02)
    steps = pq.read_table(tmp_path / "chunked" / "steps.parquet")
    phases = steps.column("phase").to_pylist()
    assert phases == ["prefill"] * 4 + ["decode"] * 3 and steps.column("step").to_pylist() == list(range(7))
    assert four.summary.ttft_ms == pytest.approx(steps.column("sync_end_ns").to_numpy()[3] / 1e6, abs=1e-3)
    # smaller GEMMs and four syncs: a longer TTFT, the same decode
    assert four.summary.ttft_ms > one.summary.ttft_ms
    assert four.summary.decode_ms_per_token == pytest.approx(one.summary.decode_ms_per_token, rel=1e-6)
    assert four.summary.decode_steps == 3 and 0 < four.summary.prefill_mfu < one.summary.prefill_mfu <= 0.80


def test_activations_are_sized_for_one_chunk() -> None:
    """Eager attention's fp32 scores of 8 x 8,192 tokens need 138 GB at once; in 4,096-token chunks the same
    batch fits a 64 GB 910B2 (as vLLM runs it)."""
    long = ["workload.batch_size=8", "workload.prompt_len=8192", "workload.decode_tokens=2"]
    long += ["model.rope_scaling_factor=3", "fusion.strategy=none"]
    with pytest.raises(DoesNotFitError, match="chunk the prefill"):
        summarize(load_config(CONFIG, long))
    s = summarize(load_config(CONFIG, [*long, "workload.max_num_batched_tokens=4096"]))
    assert s.memory is not None and s.memory.fits and s.memory.activations_gb < 10


def test_budget_below_the_batch_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_num_batched_tokens = 4 is below batch_size = 8"):
        load_config(CONFIG, [*BASE, "workload.max_num_batched_tokens=4"])
