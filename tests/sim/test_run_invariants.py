"""Invariants that hold for every op of every run (several configs)."""

import numpy as np
import pyarrow as pa
import pytest

from atbprof.optable.schema import PIPES, check_table
from atbprof.run import summarize
from tests.conftest import fixture_config, simulate_table

CONFIGS = [
    ("tiny-llama.yaml",),
    ("tiny-gpt.yaml",),
    ("tiny-llama.yaml", "execution.mode=graph", "fusion=aggressive"),
    ("tiny-llama.yaml", "fusion=none", "workload.batch_size=3", "execution.queue_depth=8"),
    ("tiny-llama.yaml", "execution.jitter.kernel_cv=0.2", "execution.jitter.host_cv=0.3", "seed=7"),
    ("seed000-baseline.yaml", "workload.decode_tokens=3"),
    ("llama2-13b-910b2.yaml", "workload.decode_tokens=2", "workload.prompt_len=64"),
    ("llama2-7b-aggressive-long.yaml", "workload.decode_tokens=2"),
]


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: " ".join(c))
def run(request):
    cfg = fixture_config(*request.param)
    sim, table = simulate_table(cfg)
    return cfg, sim, table


def col(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy()


def test_schema_and_order(run) -> None:
    _, sim, table = run
    check_table(table)
    assert (col(table, "op_index") == np.arange(table.num_rows)).all()
    assert table.num_rows == sim.total_ops


def test_roofline_for_every_op(run) -> None:
    _, sim, table = run
    dur = col(table, "task_dur_ns").astype(float)
    hbm = (col(table, "hbm_read_bytes") + col(table, "hbm_write_bytes")) / (sim.device.hbm_bytes_per_s / 1e9)
    flops = col(table, "flops") / (sim.device.peak_flops / 1e9)
    # a jittered kernel is only ever slower; 1 ns for rounding
    assert (dur + 1 >= hbm).all()
    assert (dur + 1 >= flops).all()
    assert (dur > 0).all()


def test_pipe_ratios_are_fractions(run) -> None:
    _, _, table = run
    for p in PIPES:
        r = col(table, f"{p}_ratio")
        assert ((r >= 0) & (r <= 1)).all(), p
        assert (col(table, f"{p}_time_ns") <= col(table, "task_dur_ns")).all()


def test_device_timeline_is_sequential_and_wait_consistent(run) -> None:
    _, sim, table = run
    start, dur, wait = col(table, "task_start_ns"), col(table, "task_dur_ns"), col(table, "task_wait_ns")
    end = start + dur
    assert (start[1:] >= end[:-1]).all()
    assert (wait[1:] == start[1:] - end[:-1]).all()
    if sim.host.mode == "eager":
        ls = col(table, "host_launch_start_ns")
        ld = col(table, "host_launch_dur_ns")
        assert (start >= ls + ld + sim.host.latency_ns).all()
    else:
        assert table.column("host_launch_start_ns").null_count == table.num_rows


def test_steps_table_frames_the_ops(run) -> None:
    _, sim, table = run
    steps = sim.steps_table().to_pylist()
    start, end = col(table, "task_start_ns"), col(table, "task_start_ns") + col(table, "task_dur_ns")
    for s in steps:
        a, n = s["first_op_index"], s["op_count"]
        assert s["device_start_ns"] == start[a] and s["device_end_ns"] == end[a + n - 1]
        assert s["host_start_ns"] + s["host_overhead_ns"] <= s["device_start_ns"]
        assert s["sync_end_ns"] > s["device_end_ns"]


@pytest.mark.parametrize("config", CONFIGS[:3] + CONFIGS[5:], ids=lambda c: " ".join(c))
def test_decode_never_beats_the_hbm_floor(config) -> None:
    s = summarize(fixture_config(*config))
    assert s.decode_ms_per_token >= s.hbm_floor_ms_per_token
    rows = s.breakdown_ms_per_token
    assert abs(sum(rows.values()) - s.decode_ms_per_token) < 1e-3
    assert min(rows.values()) >= 0


def test_jitter_is_seeded() -> None:
    a = summarize(fixture_config("tiny-llama.yaml", "execution.jitter.kernel_cv=0.3", "seed=1"))
    b = summarize(fixture_config("tiny-llama.yaml", "execution.jitter.kernel_cv=0.3", "seed=1"))
    c = summarize(fixture_config("tiny-llama.yaml", "execution.jitter.kernel_cv=0.3", "seed=2"))
    d = summarize(fixture_config("tiny-llama.yaml"))
    assert a == b and a.decode_ms_per_token != c.decode_ms_per_token
    assert a.decode_ms_per_token > d.decode_ms_per_token  # jitter only ever slows a kernel down


def test_graph_launch_says_how_each_kernel_was_launched(run) -> None:
    """Graph mode replays the step: every kernel graph-launched, none with a launch of its own; eager: none."""
    cfg, _, table = run
    graph = table.column("graph_launch")
    assert graph.null_count == 0
    launched = table.column("host_launch_dur_ns")
    if cfg.execution.mode == "graph":
        assert all(graph.to_pylist()) and launched.null_count == table.num_rows
    else:
        assert not any(graph.to_pylist()) and launched.null_count == 0
