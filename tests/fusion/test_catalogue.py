"""The inference fusion catalogue (data/fusion_catalogue.yaml): one source of names for `atbprof fusions`, the
analyzer's already-fused kernels and calls, and the simulator's rules."""

from __future__ import annotations

import orjson

from atbprof.analyze.categories import norm_symbols
from atbprof.analyze.patterns import OTHER, load_patterns
from atbprof.fusion import load_rules
from atbprof.fusion.catalogue import fusion_catalogue
from tests.reliability.conftest import cli


def _examples(globs: tuple[str, ...]) -> list[str]:
    """A name each glob matches (`UnpadFlashAttention*` -> UnpadFlashAttentionX)."""
    return [g.replace("*", "X") for g in globs]


def test_every_row_names_its_source_and_its_rule() -> None:
    rules = load_rules().rules
    for row in fusion_catalogue().fusions:
        assert row.source and row.fused_types and row.api and row.removes, row.name
        assert all(rule in rules for rule in row.simulated), row.name


def test_the_analyzer_knows_every_fused_type_of_the_catalogue() -> None:
    """A norm row's fused Types are norm kernels of patterns.yaml; every other row's are its own class, found as
    already fused (no earlier class shadows them)."""
    patterns = load_patterns()
    norms = norm_symbols(patterns)
    for row in fusion_catalogue().fusions:
        names = _examples(row.fused_types)
        symbols = patterns.kernel.lookup(names).tolist()
        if row.detected == "norm-patterns":
            assert all(s in norms for s in symbols), (row.name, names, symbols)
        else:
            assert all(s == patterns.kernel.symbols[f"Fused_{row.name}"] for s in symbols), (row.name, names)
            calls = patterns.framework.lookup(list(row.framework_names())).tolist()
            assert OTHER not in calls and len(set(calls)) == 1, row.name


def test_fusions_lists_the_catalogue_in_every_format() -> None:
    doc = orjson.loads(cli("fusions", "--format", "json").stdout)
    assert doc["schema_version"] == "2"
    assert [r["name"] for r in doc["fusions"]] == [r.name for r in fusion_catalogue().fusions]
    assert set(doc["fusions"][0]) == {
        "name", "title", "fused_types", "api", "removes", "versions", "simulated", "detected", "source", "by_version",
    }  # fmt: skip
    attention = next(r for r in doc["fusions"] if r["name"] == "attention")
    assert attention["by_version"] == [
        {"fused": "FusedInferAttentionScore", "since": None, "before": "8.0",
         "fused_as": "PromptFlashAttention / IncreFlashAttention",
         "api": ["npu_prompt_flash_attention", "npu_incre_flash_attention"]},
    ]  # fmt: skip
    md = cli("fusions", "--format", "md").stdout
    assert "| fusion | fused kernel Types | torch_npu API |" in md and "torch_npu.npu_swiglu" in md
    rich = cli("fusions")
    assert rich.exit_code == 0 and "Rotary position embedding" in rich.stdout
    assert "Fused attention (prefill and decode): FusedInferAttentionScore is PromptFlashAttention / " in rich.stdout


def test_every_sequences_row_has_a_pattern_that_finds_it_and_the_rule_that_makes_it() -> None:
    patterns = load_patterns()
    specs = [cp.spec for cp in patterns.kernel.patterns if cp.spec.kind == "unfused_op"]
    rows = [row for row in fusion_catalogue().fusions if row.detected == "sequences"]
    assert {row.name for row in rows} == {
        "rope", "norm_rope_cache", "swiglu", "attention", "kv_cache_write", "mc2", "moe", "sampling",
    }  # fmt: skip
    # every row of the catalogue is simulated and found: the norms by the norm patterns, the others as sequences
    assert all(row.simulated and row.detected in ("norm-patterns", "sequences") for row in fusion_catalogue().fusions)
    # and the W8A8 quant fusions of the (norm-patterns) Add + RMSNorm row
    assert {p.fusion for p in specs} == {row.name for row in rows} | {"add_rms_norm"}
    for row in fusion_catalogue().fusions:
        for spec in (p for p in specs if p.fusion == row.name):
            assert spec.rule in row.simulated and spec.fused_as in row.fused_types, (row.name, spec.name)


def test_the_all_strategy_turns_on_every_simulated_row() -> None:
    rules = load_rules()
    simulated = {rule for row in fusion_catalogue().fusions for rule in row.simulated}
    assert simulated <= set(rules.strategies["all"])
