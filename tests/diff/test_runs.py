"""`diff` on runs of ours: seed 000's table, fused groups with their instance counts, nothing unmatched."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from atbprof.analyze import analyze
from atbprof.diff.api import diff
from atbprof.errors import InputError
from atbprof.importers.base import Profile

SHORT = "workload.decode_tokens=8"


@pytest.fixture(scope="module")
def seed000(diff_runs: Callable[..., Profile]) -> tuple[Profile, Profile]:
    return diff_runs("seed000-baseline.yaml", SHORT), diff_runs("seed000-lnfused.yaml", SHORT)


def test_seed000_table_is_reproduced_from_data(seed000: tuple[Profile, Profile]) -> None:
    base, new = seed000
    report = diff(base, new).report
    cats = {c.name: c for c in report.categories}
    # seed 000: Attention 18 -> 15, FFN 20 -> 17, other 2 -> 2, total 40 -> 34 ms per token (15 %)
    assert cats["attention"].base_ms == pytest.approx(18, abs=0.5)
    assert cats["attention"].new_ms == pytest.approx(15, abs=0.6)
    assert cats["ffn"].base_ms == pytest.approx(20, abs=0.5)
    assert cats["ffn"].new_ms == pytest.approx(17, abs=0.7)
    assert cats["other"].base_ms == pytest.approx(2, abs=0.2)
    assert cats["other"].new_ms == pytest.approx(2, abs=0.2)
    total = cats["per-token total"]
    assert (total.base_ms, total.new_ms) == pytest.approx((40, 34), abs=0.5)
    head = report.headline.decode_ms_per_token
    assert head is not None and head.significant and head.delta_pct == pytest.approx(-14.2, abs=1.0)
    # the categories add up to the per-token total, and the headline equals each run's own summary
    assert sum(c.base_ms for c in report.categories[:-1]) == pytest.approx(total.base_ms, abs=1e-3)
    assert head.base == pytest.approx(base.meta["summary"]["decode_ms_per_token"], abs=1e-3)  # type: ignore[index]
    assert head.new == pytest.approx(new.meta["summary"]["decode_ms_per_token"], abs=1e-3)  # type: ignore[index]
    tps = report.headline.tokens_per_s
    assert tps is not None and tps.new == pytest.approx(new.meta["summary"]["tokens_per_s"], rel=1e-4)  # type: ignore[index]


def test_fused_groups_have_the_graphs_instance_counts(seed000: tuple[Profile, Profile]) -> None:
    base, new = seed000
    result = diff(base, new)
    fused = {r.name: r for r in result.report.rows if r.classification == "fused"}
    # analyze counts, from the baseline run's graph, the Add->Norm pairs and the Norm->MatMul edges that lnfused fuses
    findings = {f.kind: f for f in analyze(base).findings}
    add_norm = findings["add_norm"].by_phase["decode"].per_step
    norm_mm = findings["norm_matmul"].by_phase["decode"].per_step
    three = fused["Add + RmsNorm + MatMulV2 (3 kernels) -> FusedAddRmsNormMatMul"]
    two = fused["RmsNorm + MatMulV2 (2 kernels) -> FusedRmsNormMatMul"]
    assert three.instances_per_step == add_norm == 63
    assert three.instances_per_step + two.instances_per_step == norm_mm == 65
    assert three.base_ops_per_step == 3 * 63 and three.new_ops_per_step == 63
    assert three.delta_us < 0 and three.per_instance_delta_us == pytest.approx(three.delta_us / 63, abs=1e-2)
    # launch/wait time removed, not only kernel time: most of the saving is wait in this eager run
    assert three.wait_delta_us < 0 and abs(three.wait_delta_us) > abs(three.delta_us) / 2
    m = result.report.matching
    assert (m.base_unmatched_ops, m.new_unmatched_ops, m.base_unpaired_steps, m.new_unpaired_steps) == (0, 0, 0, 0)
    assert m.method == "graph" and m.base_matched_ops == base.ops.num_rows and m.new_matched_ops == new.ops.num_rows


def test_every_decomposed_chain_maps_to_its_fused_kernel(diff_runs: Callable[..., Profile]) -> None:
    base = diff_runs("llama2-7b-910a.yaml", "fusion=none", "workload.decode_tokens=4")
    new = diff_runs("llama2-7b-910a.yaml", "fusion=default", "workload.decode_tokens=4")
    report = diff(base, new, top=1000).report
    chain = ["Cast", "Pows", "ReduceMean", "Add", "Rsqrt", "Mul", "Cast", "Mul"]

    def chains_in(types: list[str]) -> int:
        return sum(types[i : i + len(chain)] == chain for i in range(len(types)))

    # default fusion folds each chain into a bigger kernel (FFN, FusedAddRmsNormMatMul, FusedRmsNormMatMul)
    mapped = {r.name: chains_in(r.base_types) * r.instances_per_step for r in report.rows if chains_in(r.base_types)}
    rows = {r.name: r for r in report.rows}
    assert all(rows[name].classification == "fused" and rows[name].rule for name in mapped)
    assert {rows[name].new_types[0] for name in mapped} == {"FFN", "FusedAddRmsNormMatMul", "FusedRmsNormMatMul"}
    # analyze finds 65 decomposed RMSNorm chains per decode token in the unfused run: all 65 are mapped
    decomposed = next(f for f in analyze(base).findings if f.kind == "decomposed_rmsnorm")
    assert sum(mapped.values()) == decomposed.by_phase["decode"].per_step == 65
    assert report.matching.base_unmatched_ops == report.matching.new_unmatched_ops == 0
    assert not [r for r in report.rows if r.classification in ("added", "removed")]


def test_a_run_against_itself_changes_nothing(seed000: tuple[Profile, Profile]) -> None:
    base, _ = seed000
    report = diff(base, base).report
    for f in (report.headline.decode_ms_per_token, report.headline.ttft_ms, report.headline.tokens_per_s):
        assert f is not None and f.delta == 0 and not f.significant
    assert all(c.saved_ms == 0 and not c.significant for c in report.categories)
    assert {r.classification for r in report.rows} == {"unchanged"}
    assert "1 fused" not in report.summary


def test_jitter_seeds_alone_are_not_significant_but_a_real_change_is(diff_runs: Callable[..., Profile]) -> None:
    jitter = ("execution.jitter.kernel_cv=0.05", "execution.jitter.host_cv=0.1", "workload.decode_tokens=24")
    a = diff_runs("seed000-baseline.yaml", *jitter, "seed=1")
    b = diff_runs("seed000-baseline.yaml", *jitter, "seed=2")
    same = diff(a, b).report
    dec = same.headline.decode_ms_per_token
    assert dec is not None and dec.method == "paired-t" and dec.ci_low is not None and dec.ci_high is not None
    assert dec.new_steps.sd > 0 and dec.ci_low < dec.ci_high
    assert not dec.significant and not any(c.significant for c in same.categories)
    fused = diff(a, diff_runs("seed000-lnfused.yaml", *jitter, "seed=2")).report
    dec = fused.headline.decode_ms_per_token
    assert dec is not None and dec.significant and dec.ci_high is not None and dec.ci_high < 0


def test_different_models_are_refused_with_what_differs(diff_runs: Callable[..., Profile]) -> None:
    a = diff_runs("tiny-llama.yaml")
    b = diff_runs("tiny-llama.yaml", "model.num_hidden_layers=3")
    with pytest.raises(InputError, match="different models"):
        diff(a, b)


def test_rows_by_every_key_add_up(seed000: tuple[Profile, Profile]) -> None:
    base, new = seed000
    totals = []
    for by in ("op-type", "category", "layer", "role", "shape"):
        rows = diff(base, new, by=by, top=100_000).report.rows  # type: ignore[arg-type]
        totals.append(round(sum(r.delta_us for r in rows), 1))
    # every key partitions the same groups: the per-step delta of the device time is the same sum
    assert len(set(totals)) == 1


def test_runs_of_different_lengths_compare_their_common_steps(diff_runs: Callable[..., Profile]) -> None:
    long = diff_runs("seed000-baseline.yaml", SHORT)
    short = diff_runs("seed000-lnfused.yaml", "workload.decode_tokens=3")
    report = diff(long, short).report
    m = report.matching
    assert (m.pairs, m.scope_pairs, m.base_unpaired_steps, m.new_unpaired_steps) == (4, 3, 5, 0)
    assert any("5 of the base, 0 of the new (4 pairs compared)" in n for n in report.notes)
    head = report.headline.decode_ms_per_token
    assert head is not None and head.base_steps.n == head.new_steps.n == 3
