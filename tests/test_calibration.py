"""Seed 000's latency table and the seeds' other claims, as tests with the issue's tolerances.

LLaMA-2-7B fp16, 910A, batch 1, prompt 512, 128 decode steps, eager. The two fixtures differ only by the two
LayerNorm fusions (Add + RmsNorm -> AddRmsNorm, norm folded into the MatMul it feeds).
"""

import pytest

from atbprof.run import summarize
from tests.conftest import fixture_config


def within(value: float, target: float, tol: float) -> bool:
    return abs(value - target) <= tol * target


@pytest.fixture(scope="module")
def seed000():
    return summarize(fixture_config("seed000-baseline.yaml")), summarize(fixture_config("seed000-lnfused.yaml"))


def test_per_token_totals(seed000) -> None:
    base, fused = seed000
    assert within(base.decode_ms_per_token, 40, 0.10)
    assert within(fused.decode_ms_per_token, 34, 0.10)
    gain = 1 - fused.decode_ms_per_token / base.decode_ms_per_token
    assert 0.12 <= gain <= 0.18


def test_rows(seed000) -> None:
    base, fused = seed000
    assert within(base.breakdown_ms_per_token["attention"], 18, 0.15)
    assert within(base.breakdown_ms_per_token["ffn"], 20, 0.15)
    assert within(fused.breakdown_ms_per_token["attention"], 15, 0.15)
    assert within(fused.breakdown_ms_per_token["ffn"], 17, 0.15)
    for s in seed000:
        assert within(s.breakdown_ms_per_token["other"], 2, 0.25)


def test_norm_related_time(seed000) -> None:
    base, fused = seed000
    assert within(base.norm_ms_per_token, 6, 0.25)
    # mostly launch/wait, not kernel time (device_model_facts.md section 4.1)
    assert base.norm_launch_ms_per_token > 5 * base.norm_kernel_ms_per_token
    assert fused.norm_ms_per_token < 0.1 * base.norm_ms_per_token


def test_fully_decomposed_is_slower_and_graph_default_nears_the_hbm_floor() -> None:
    base = summarize(fixture_config("seed000-baseline.yaml", "workload.decode_tokens=16"))
    none = summarize(fixture_config("seed000-baseline.yaml", "workload.decode_tokens=16", "fusion=none"))
    graph = summarize(
        fixture_config("seed000-baseline.yaml", "workload.decode_tokens=16", "fusion=default", "execution.mode=graph")
    )
    aggressive = summarize(
        fixture_config(
            "seed000-baseline.yaml", "workload.decode_tokens=16", "fusion=aggressive", "execution.mode=graph"
        )
    )
    assert none.decode_ms_per_token > 1.5 * base.decode_ms_per_token
    assert none.ops_per_decode_step > 1600
    assert abs(graph.hbm_floor_ms_per_token - 11.2) < 0.3  # 13.2 GB / 1.2 TB/s (+ KV cache)
    assert graph.hbm_floor_ms_per_token < graph.decode_ms_per_token < 1.5 * graph.hbm_floor_ms_per_token
    assert aggressive.decode_ms_per_token > graph.decode_ms_per_token  # big fusions pay the icache


def _gain(*overrides: str) -> float:
    b = summarize(fixture_config("seed000-baseline.yaml", "workload.decode_tokens=16", *overrides))
    f = summarize(fixture_config("seed000-lnfused.yaml", "workload.decode_tokens=16", *overrides))
    return 1 - f.decode_ms_per_token / b.decode_ms_per_token


def test_batch_32_dilutes_the_gain() -> None:
    # seed 000: "about 8-10 %" at batch 32. The model agrees on the direction; it finds less (batch 32 makes
    # the eager run device-bound, so removed launches are hidden) - see README, calibration.
    assert _gain("workload.batch_size=32") < 0.5 * _gain()


def test_long_context_gain_is_bounded_by_physics() -> None:
    # seed 000 claims the gain rises toward 20 % at context 8192. Decode norm traffic is KBs; longer context adds
    # KV streaming that removed launches can not hide, so the model finds the gain falls slightly (README).
    g512, g8k = _gain(), _gain("workload.prompt_len=8192", "model.rope_scaling_factor=3")
    assert g8k <= g512
    assert g8k > 0.10
