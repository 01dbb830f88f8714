"""Numerics of whole runs: every default rule aligned on LLaMA-2-7B dimensions at prompt 512 and 8192, the
attention-softmax fusion broken beyond its length limit when forced on, the run's limit keeping runs finite, and
the same seed giving the same report."""

from __future__ import annotations

from atbprof.numerics.report import NumericsReport
from atbprof.numerics.runner import run_numerics
from atbprof.sim.simulate import Simulation
from tests.conftest import fixture_config


def numerics(name: str, *overrides: str) -> tuple[NumericsReport, Simulation]:
    sim = Simulation(fixture_config(name, "numerics.enabled=true", *overrides))
    return run_numerics(sim), sim


def fired(sim: Simulation) -> set[str]:
    return {r for pm in sim.phases.values() for r in pm.fusion.fired}


def test_default_rules_aligned_7b_prompt_512() -> None:
    report, sim = numerics("llama2-7b-910a.yaml", "workload.decode_tokens=1", "numerics.query_rows=64")
    assert report.rules and set(report.rules) == fired(sim)
    assert set(report.rules.values()) == {"aligned"}, report.rules
    assert report.finite and all(row.verdict == "aligned" for row in report.layers)
    assert {k.op_type for k in report.kernels} >= {"FusedRmsNormMatMul", "PromptFlashAttention", "FFN", "RotaryMul"}
    assert report.subset.prompt_len == 512 and report.subset.query_rows == 64 and report.subset.layers == [0]


def test_default_rules_aligned_7b_prompt_8192() -> None:
    report, sim = numerics("llama2-7b-910a.yaml", "workload.prompt_len=8192", "model.rope_scaling_factor=3",
                           "workload.decode_tokens=1", "numerics.query_rows=8")  # fmt: skip
    assert set(report.rules) == fired(sim)
    assert set(report.rules.values()) == {"aligned"}, report.rules
    assert report.finite and report.subset.prompt_len == 8192


def test_unguarded_softmax_broken_beyond_the_limit_when_forced_on() -> None:
    report, _ = numerics("tiny-llama.yaml", "fusion=aggressive", "workload.prompt_len=8192",
                         "fusion.softmax_fusion_max_seq=100000", "numerics.query_rows=16")  # fmt: skip
    assert report.rules["attention_softmax"] == "broken" and not report.finite
    soft = [r for r in report.rule_probes if r.rule == "attention_softmax"]
    assert soft and all(r.stats_nonfinite > 0 for r in soft)
    # the other rules stay aligned: the failure is attributed to the softmax fusion alone
    assert {v for r, v in report.rules.items() if r not in ("attention_softmax", "qkv_attention")} == {"aligned"}


def test_unguarded_softmax_aligned_below_the_limit() -> None:
    report, _ = numerics("tiny-llama.yaml", "fusion=aggressive", "workload.prompt_len=1024")
    assert report.rules["attention_softmax"] == "aligned" and report.finite


def test_the_runs_length_limit_keeps_numerics_finite() -> None:
    """aggressive at 8192 with the default softmax_fusion_max_seq (1024): the rule is switched off, the fused
    graph uses FlashAttention, and the numerics are finite."""
    report, sim = numerics("tiny-llama.yaml", "fusion=aggressive", "workload.prompt_len=8192", "numerics.query_rows=16")
    assert "attention_softmax" not in fired(sim) and "attention_softmax" not in report.rules
    assert report.finite and set(report.rules.values()) == {"aligned"}


def test_same_seed_same_report_other_seed_other_report() -> None:
    a, _ = numerics("tiny-llama.yaml", "numerics.layers=0-1")
    b, _ = numerics("tiny-llama.yaml", "numerics.layers=0-1")
    c, _ = numerics("tiny-llama.yaml", "numerics.layers=0-1", "seed=1")
    assert a.model_dump_json() == b.model_dump_json()
    assert a.model_dump_json() != c.model_dump_json()
    assert a.subset.layers == [0, 1] and {row.layer for row in a.layers} == {0, 1}


def test_prompt_cap_is_stated() -> None:
    report, _ = numerics("tiny-llama.yaml", "workload.prompt_len=300", "numerics.max_prompt=100")
    assert report.subset.prompt_len == 100 and report.subset.run_prompt_len == 300
    assert any("capped" in n for n in report.notes)
