"""A summary-only simulation (`atbprof.run.summarize`, what a sweep's point runs) gives exactly the summary of the
full run, and the caches it shares between points (fused graphs per rule constraint, node signatures, stage
graphs) never carry one point's figures into another's."""

from __future__ import annotations

from pathlib import Path

import pytest

from atbprof.config import load_config
from atbprof.device import kernels
from atbprof.fusion.passes import forget_prefixes
from atbprof.run import run_simulation, summarize
from atbprof.sim import memory, simulate
from atbprof.sim.rows import SUMMARY_COLUMNS
from tests.conftest import FIXTURES

CASES = [
    ("seed000-baseline.yaml", ["workload.decode_tokens=6"]),
    ("llama2-7b-910b2.yaml", ["workload.decode_tokens=6", "execution.jitter.kernel_cv=0.1", "seed=3"]),
    ("llama2-70b-910b2-tp4-pp2.yaml", ["workload.decode_tokens=3", "execution.rank_slowdown={3: 1.2}"]),
    ("llama3-8b-910b2.yaml", ["workload.decode_tokens=4", "fusion=none"]),
]


def _cold() -> None:
    forget_prefixes()
    kernels._GRAPH_SIGS.clear()
    simulate._NODE_FACTS.clear()
    memory._COEFFICIENTS.clear()
    simulate._model_graph.cache_clear()
    simulate._stage_graph.cache_clear()


@pytest.mark.parametrize(("fixture", "overrides"), CASES)
def test_the_summary_only_path_equals_the_full_run(fixture: str, overrides: list[str], tmp_path: Path) -> None:
    cfg = load_config(FIXTURES / fixture, [*overrides, "output.trace=false"])
    assert summarize(cfg) == run_simulation(cfg, tmp_path / "run").summary


def test_points_that_share_cached_graphs_get_their_own_figures() -> None:
    points = [
        ["workload.batch_size=1", "workload.prompt_len=512"],
        ["workload.batch_size=16", "workload.prompt_len=512"],
        ["workload.batch_size=1", "workload.prompt_len=2048"],
        [
            "workload.batch_size=4",
            "workload.prompt_len=4096",
            "fusion.softmax_fusion_max_seq=1024",
            "model.rope_scaling_factor=3",
        ],
        ["fusion=seed000-lnfused"],
    ]
    base = FIXTURES / "seed000-baseline.yaml"
    fresh = []
    for p in points:
        _cold()
        fresh.append(summarize(load_config(base, [*p, "workload.decode_tokens=4"])))
    warm = [summarize(load_config(base, [*p, "workload.decode_tokens=4"])) for p in points + points[::-1]]
    assert warm == fresh + fresh[::-1]
    assert len({s.decode_ms_per_token for s in fresh}) >= 3  # the points differ: the test could fail


def test_the_summary_reads_only_the_columns_a_summary_only_run_builds() -> None:
    import ast
    import inspect

    from atbprof.sim.summary import SummaryBuilder

    tree = ast.parse(inspect.getsource(SummaryBuilder.add).lstrip())
    read = {
        n.args[0].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "column" and isinstance(n.args[0], ast.Constant)
    }
    assert read == SUMMARY_COLUMNS


def test_a_rule_switched_off_by_the_sequence_length_says_each_point_its_own_length() -> None:
    """The fused graphs are shared between prompt lengths beyond fusion.softmax_fusion_max_seq (the rule is off in
    each); the reason, which names the length, is each point's own."""
    base = FIXTURES / "llama2-7b-910b2.yaml"
    points = [["workload.prompt_len=1500"], ["workload.prompt_len=3000"], ["workload.prompt_len=600"]]
    common = ["fusion=aggressive", "workload.decode_tokens=3"]
    fresh = []
    for p in points:
        _cold()
        fresh.append(summarize(load_config(base, [*common, *p])))
    warm = [summarize(load_config(base, [*common, *p])) for p in points]
    assert warm == fresh
    assert "sequence length 1503 >" in fresh[0].fusion_disabled["attention_softmax (decode)"]
    assert "sequence length 3003 >" in fresh[1].fusion_disabled["attention_softmax (decode)"]
    assert not fresh[2].fusion_disabled
