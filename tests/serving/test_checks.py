"""The serving simulation's own checks: a request alone gets a batch-1 run's prefill and decode steps, Little's law
holds on the simulated queue, an overloaded engine serves at its closed-loop maximum, results are deterministic,
the scheduler keeps its limits (token budget, sequences, KV blocks) and conserves tokens, and engine replicas
(parallel.dp) each serve their share as one engine would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atbprof.config import RunConfig, load_config
from atbprof.run import simulate_latency
from atbprof.serving.run import run_serving, simulate_serving

BATCH_8B = """\
name: batch-8b
seed: 0
model: {{preset: llama3-8b, dtype: bf16}}
device: {{preset: 910B2}}
workload: {{batch_size: 1, prompt_len: {prompt}, decode_tokens: {decode}}}
execution: {{mode: {mode}}}
fusion: {{strategy: {fusion}}}
"""

Make = Callable[..., RunConfig]


def col(t: pa.Table, name: str) -> np.ndarray:
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False))


@pytest.mark.parametrize(("mode", "fusion"), [("graph", "default"), ("eager", "default"), ("graph", "none")])
def test_a_request_alone_gets_a_batch_1_prefill_and_decode(
    serving_8b: Make, tmp_path: Path, mode: str, fusion: str
) -> None:
    cfg = serving_8b("workload.rate_qps=0.01", "workload.requests=4", f"execution.mode={mode}", f"fusion={fusion}")
    requests, _, summary, _, _ = simulate_serving(cfg)
    assert summary.decode_batch_mean == 1.0 and col(requests, "queue_ms").max() == 0.0  # each request alone
    batch = tmp_path / "batch.yaml"
    batch.write_text(BATCH_8B.format(prompt=256, decode=31, mode=mode, fusion=fusion))
    alone = simulate_latency(load_config(batch, []))
    np.testing.assert_allclose(col(requests, "ttft_ms"), alone.ttft_ms, atol=1e-3)
    np.testing.assert_allclose(col(requests, "tpot_ms"), alone.decode_ms_per_token, atol=1e-3)
    assert summary.alone_ttft_ms == pytest.approx(alone.ttft_ms, abs=1e-3)


@pytest.mark.parametrize("scheduler", ["prefill_first", "chunked"])
def test_littles_law_holds_on_the_queue(serving_8b: Make, scheduler: str) -> None:
    _, _, s, _, _ = simulate_serving(
        serving_8b("workload.rate_qps=30", "workload.requests=400", f"workload.scheduler={scheduler}")
    )
    assert s.queue_ms.p99 > 0  # requests did queue
    assert s.littles_law.in_system_mean > 5
    assert s.littles_law.relative_error < 0.02, s.littles_law


def test_an_overloaded_engine_serves_at_its_closed_loop_maximum(serving_8b: Make) -> None:
    closed = simulate_serving(serving_8b("workload.rate_qps=0", "workload.requests=300"))[2]
    flooded = simulate_serving(serving_8b("workload.rate_qps=100000", "workload.requests=300"))[2]
    light = simulate_serving(serving_8b("workload.rate_qps=1", "workload.requests=300"))[2]
    assert flooded.output_tokens_per_s == pytest.approx(closed.output_tokens_per_s, rel=0.01)
    assert light.output_tokens_per_s < 0.5 * closed.output_tokens_per_s
    assert closed.ttft_ms.p99 > 10 * light.ttft_ms.p99  # the queue, not the engine, makes the wait


def test_latency_grows_with_the_rate(serving_8b: Make) -> None:
    p99 = [simulate_serving(serving_8b(f"workload.rate_qps={r}"))[2].tpot_ms.p99 for r in (0.5, 4, 16, 64)]  # type: ignore[union-attr]
    assert p99 == sorted(p99) and p99[-1] > 1.5 * p99[0]


@pytest.mark.parametrize("scheduler", ["prefill_first", "chunked"])
def test_limits_and_token_conservation(serving_8b: Make, scheduler: str) -> None:
    cfg = serving_8b(
        "workload.rate_qps=0",
        "workload.requests=200",
        "workload.lengths=sharegpt",
        "workload.max_num_seqs=32",
        # a whole-prompt scheduler needs a budget of the longest request (prompt and output, recomputed)
        f"workload.max_num_batched_tokens={2048 if scheduler == 'prefill_first' else 1024}",
        f"workload.scheduler={scheduler}",
        "workload.gpu_memory_utilization=0.28",  # ~1.8 GB of KV blocks: preemptions
    )
    requests, iterations, s, _, _ = simulate_serving(cfg)
    assert s.preemptions > 0, "the small cache should force preemptions"
    assert col(iterations, "tokens").max() <= (2048 if scheduler == "prefill_first" else 1024)
    assert (col(iterations, "prefill_seqs") + col(iterations, "decode_seqs")).max() <= 32
    assert col(iterations, "kv_blocks_used").max() <= s.kv_blocks
    assert (col(requests, "finish_ns") > 0).all()
    # every output token is sampled once: by a prefill (the first, or after a recompute) or a decode step
    prompts = col(requests, "input_len").sum()
    assert col(iterations, "prefill_tokens").sum() >= prompts
    if scheduler == "prefill_first":  # whole prompts: one prefill per admission, each sampling a token
        assert col(iterations, "prefill_seqs").sum() == len(requests) + s.preemptions
        sampled = col(iterations, "prefill_seqs").sum() + col(iterations, "decode_seqs").sum()
        assert sampled == col(requests, "output_len").sum()  # a preemption drops KV, never a sampled token
    # a preempted request recomputes its prompt and output so far: more prefill tokens than prompts
    assert col(iterations, "prefill_tokens").sum() > prompts
    times = col(requests, "arrival_ns"), col(requests, "first_scheduled_ns"), col(requests, "first_token_ns")
    assert (times[0] <= times[1]).all() and (times[1] < times[2]).all()
    assert (times[2] <= col(requests, "finish_ns")).all()


def test_chunked_prefill_splits_long_prompts(serving_8b: Make) -> None:
    cfg = serving_8b(
        "workload.input_len=3000",
        "workload.max_num_batched_tokens=1024",
        "workload.scheduler=chunked",
        "workload.requests=20",
    )
    _, iterations, _, _, _ = simulate_serving(cfg)
    tokens = col(iterations, "tokens")
    assert tokens.max() == 1024
    mixed = (col(iterations, "prefill_seqs") > 0) & (col(iterations, "decode_seqs") > 0)
    assert mixed.any(), "chunked prefill runs prompt chunks beside decodes"


def test_deterministic_bytes_from_any_directory(
    serving_8b: Make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = serving_8b("workload.lengths=sharegpt", "workload.rate_qps=8")
    run_serving(cfg, tmp_path / "a")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    run_serving(cfg, Path("../b"))
    for name in ("requests.parquet", "iterations.parquet", "run.json", "trace.json.gz"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    other = run_serving(serving_8b("workload.lengths=sharegpt", "workload.rate_qps=8", "seed=1"), tmp_path / "c")
    assert (
        other.summary.input_len_mean
        != pq.read_table(tmp_path / "a" / "requests.parquet")["input_len"].to_numpy().mean()
    )


def test_a_rate_change_keeps_the_same_requests(serving_8b: Make) -> None:
    a = simulate_serving(serving_8b("workload.lengths=sharegpt", "workload.rate_qps=2"))[0]
    b = simulate_serving(serving_8b("workload.lengths=sharegpt", "workload.rate_qps=20"))[0]
    assert a.column("input_len").equals(b.column("input_len"))
    assert a.column("output_len").equals(b.column("output_len"))
    assert col(b, "arrival_ns")[-1] < col(a, "arrival_ns")[-1]


def test_a_client_concurrency_limit_keeps_that_many_in_flight(serving_8b: Make) -> None:
    requests, iterations, s, _, _ = simulate_serving(
        serving_8b("workload.rate_qps=0", "workload.requests=60", "workload.max_concurrency=4")
    )
    assert col(iterations, "in_system").max() == 4
    assert col(iterations, "decode_seqs").max() <= 4
    sent = col(requests, "arrival_ns")
    assert (np.diff(sent) >= 0).all() and sent[4] > 0  # the fifth waits for a slot
    assert s.queue_ms.p99 < 100  # a request is sent when a slot frees: it does not queue at the engine
    unlimited = simulate_serving(serving_8b("workload.rate_qps=0", "workload.requests=60"))[2]
    assert s.ttft_ms.mean < unlimited.ttft_ms.mean / 4
    assert s.output_tokens_per_s < unlimited.output_tokens_per_s


def test_each_replica_serves_its_share_as_one_engine_would(serving_8b: Make) -> None:
    """dp = 2, every request at t = 0: replica k gets requests k, k + 2, ... and serves them exactly as one engine
    serves a stream of half the requests; twice the throughput over the same span."""
    pair = simulate_serving(serving_8b("parallel.dp=2", "workload.rate_qps=0", "workload.requests=120"))
    one = simulate_serving(serving_8b("workload.rate_qps=0", "workload.requests=60"))
    requests, iterations, s = pair[0], pair[1], pair[2]
    replica = col(requests, "replica")
    for k in (0, 1):
        mine = requests.filter(pa.array(replica == k))
        assert col(mine, "request_id").tolist() == list(range(k, 120, 2))
        for name in ("ttft_ms", "tpot_ms", "e2e_ms", "first_token_ns", "finish_ns"):
            np.testing.assert_array_equal(col(mine, name), col(one[0], name))
        own = iterations.filter(pa.array(col(iterations, "replica") == k))
        assert own.num_rows == one[1].num_rows
        start, end = col(own, "start_ns"), col(own, "end_ns")
        assert (start[1:] >= end[:-1]).all()  # a replica's iterations follow one another
    assert (np.diff(col(iterations, "start_ns")) >= 0).all()  # the table in time order
    assert s.replicas == 2 and s.duration_s == one[2].duration_s
    assert s.requests_per_s == pytest.approx(2 * one[2].requests_per_s, rel=1e-3)
    assert s.device_busy == pytest.approx(one[2].device_busy, abs=1e-3)  # per replica
    assert s.littles_law.relative_error < 0.02


def test_littles_law_holds_across_replicas(serving_8b: Make) -> None:
    _, _, s, _, _ = simulate_serving(
        serving_8b("parallel.dp=3", "workload.rate_qps=60", "workload.requests=600", "workload.lengths=sharegpt")
    )
    assert s.replicas == 3 and s.queue_ms.p99 > 0
    assert s.littles_law.relative_error < 0.02, s.littles_law


def test_shortest_queue_deals_alike_requests_in_turn(serving_8b: Make) -> None:
    """Alike requests all at t = 0: the least waiting x 4 + running alternates, so both dispatches serve the same."""
    both = [
        simulate_serving(
            serving_8b("parallel.dp=2", "workload.rate_qps=0", "workload.requests=60", f"workload.dispatch={d}")
        )
        for d in ("shortest_queue", "round_robin")
    ]
    assert both[0][0].equals(both[1][0]) and both[0][1].equals(both[1][1])


def test_shortest_queue_balances_what_round_robin_piles_up(serving_8b: Make, tmp_path: Path) -> None:
    """Long and short requests in turn: round robin sends every long one to replica 0; the shortest queue spreads
    them, so the tail finishes sooner, and every request is still served once."""
    lengths = tmp_path / "lengths.csv"
    rows = [f"{0.05 * i:.2f},{1500 if i % 2 == 0 else 64},{300 if i % 2 == 0 else 8}" for i in range(200)]
    lengths.write_text("arrival_s,input_len,output_len\n" + "\n".join(rows) + "\n")
    sets = ("parallel.dp=2", f"workload.lengths={lengths}", "workload.requests=200")
    queue = simulate_serving(serving_8b(*sets, "workload.dispatch=shortest_queue"))
    turn = simulate_serving(serving_8b(*sets, "workload.dispatch=round_robin"))
    assert set(col(turn[0], "replica")[::2].tolist()) == {0}  # round robin: every long request on replica 0
    assert len(set(col(queue[0], "replica")[::2].tolist())) == 2
    assert queue[2].e2e_ms.p99 < turn[2].e2e_ms.p99
    assert queue[2].littles_law.relative_error < 0.02
    assert (col(queue[0], "finish_ns") > 0).all()
