"""`diff` shows how the numerics of two `--numerics` runs changed: the forced unguarded softmax fusion is worse."""

from __future__ import annotations

from collections.abc import Callable

from atbprof.diff.api import diff
from atbprof.importers.base import Profile

LONG = ("fusion=aggressive", "workload.prompt_len=8192", "workload.decode_tokens=2", "numerics.enabled=true")
LONG += ("numerics.query_rows=16",)


def test_diff_shows_a_rule_going_from_aligned_to_broken(diff_runs: Callable[..., Profile]) -> None:
    guarded = diff_runs("tiny-llama.yaml", *LONG)  # the run's limit (1024) switches the softmax fusion off
    forced = diff_runs("tiny-llama.yaml", *LONG, "fusion.softmax_fusion_max_seq=100000")
    report = diff(guarded, forced).report
    n = report.numerics
    assert n is not None and n.base_finite is True and n.new_finite is False
    verdicts = {v.rule: (v.base, v.new) for v in n.rules}
    assert verdicts["attention_softmax"] == (None, "broken")  # not fused in the base run at all
    assert "attention_softmax" in n.worse_rules and "numerics worse for" in report.summary
    assert all(b == "aligned" for b, _ in verdicts.values() if b is not None)
    assert "numerics" in report.model_dump(mode="json")
    softmax = [k for k in n.kernels if k.new_verdict == "broken"]
    assert softmax and all(k.new_scaled_err is not None and k.new_scaled_err > 0.1 for k in softmax)
    same = diff(guarded, guarded).report.numerics
    assert same is not None and not same.worse_rules and all(v.base == v.new for v in same.rules)


def test_no_numerics_section_without_numerics(diff_runs: Callable[..., Profile]) -> None:
    run = diff_runs("tiny-llama.yaml")
    report = diff(run, run).report
    assert report.numerics is None
