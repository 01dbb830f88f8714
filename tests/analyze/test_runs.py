"""The analyzer on runs of ours: findings against the run's own graph, attribution against run.json, what-if
against re-simulation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pyarrow.compute as pc
import pytest

from atbprof.analyze import AnalysisReport, analyze
from atbprof.analyze.attribute import NO_DEVICE_OP
from atbprof.analyze.graph_edges import run_config
from atbprof.graph.nodes import Graph
from atbprof.importers.base import Profile
from atbprof.run import summarize
from atbprof.sim.simulate import Simulation

NORMS = {"RmsNorm", "LayerNormV3", "AddRmsNorm", "AddLayerNorm"}
Runs = Callable[..., Profile]


def kinds(report: AnalysisReport, phase: str = "decode") -> dict[str, float]:
    """Norm kind -> occurrences per step of `phase` (kernel level; the catalogue's other fusions are tested in
    test_catalogue_fusions.py)."""
    return {
        f.kind: f.by_phase[phase].per_step
        for f in report.findings
        if f.level == "kernel" and phase in f.by_phase and f.kind not in ("unfused_op", "fused_op")
    }


def graph_pairs(graph: Graph) -> tuple[set[tuple[int, int]], set[tuple[int, int]]]:
    """(Add -> Norm data edges, Norm -> its only reader, a MatMul) as (producer, consumer) graph positions."""
    pos = {n.id: i for i, n in enumerate(graph.nodes)}
    by_id = graph.by_id()
    readers = graph.consumers()
    add_norm = {
        (pos[e.producer], pos[n.id])
        for n in graph.nodes
        if n.op_type in NORMS
        for e in n.inputs
        if e.producer in by_id and by_id[e.producer].op_type == "Add"
    }
    norm_mm = {
        (pos[n.id], pos[readers[n.id][0]])
        for n in graph.nodes
        if n.op_type in NORMS and len(readers[n.id]) == 1 and by_id[readers[n.id][0]].op_type == "MatMulV2"
    }
    return add_norm, norm_mm


def found_pairs(report: AnalysisReport, profile: Profile, kind: str, step: int) -> set[tuple[int, int]]:
    """The (first, last) member of each `kind` finding of one step, as graph positions (node_id)."""
    node = profile.ops.column("node_id").to_pylist()
    occ = report.occurrences
    occ = occ.filter(pc.and_(pc.equal(occ.column("kind"), kind), pc.equal(occ.column("step"), step)))
    return {(node[ix[0]], node[ix[-1]]) for ix in occ.column("op_indices").to_pylist()}


def test_unfused_7b_has_65_decomposed_rmsnorm_chains_per_token(runs: Runs) -> None:
    profile = runs("seed000-baseline.yaml", "workload.decode_tokens=2", "fusion=none")
    report = analyze(profile)
    # and the 63 residual Adds in front of them: the Add->Norm fusion that follows once each chain is one kernel
    # and the final norm's only reader, the LM head: the Norm->MatMul that follows (the layers' norms feed the
    # separate Q, K, V and gate, up projections: the run's graph says they are not fusable)
    assert kinds(report) == {"decomposed_rmsnorm": 65, "add_norm": 63, "norm_matmul": 1}
    assert kinds(report, "prefill") == {"decomposed_rmsnorm": 65, "add_norm": 63, "norm_matmul": 1}
    chain = next(f for f in report.findings if f.kind == "decomposed_rmsnorm").examples[0].op_types
    assert chain == ["Cast", "Pows", "ReduceMean", "Add", "Rsqrt", "Mul", "Cast", "Mul"]
    occ = report.occurrences
    chains = occ.filter(pc.equal(occ.column("kind"), "decomposed_rmsnorm"))
    roles = Counter(chains.column("role").to_pylist())
    assert roles == {"attn.norm": 32 * 3, "ffn.norm": 32 * 3, "head.norm": 3}
    assert report.has_unfused


def test_baseline_finds_every_add_norm_and_norm_matmul_edge_of_its_graph(runs: Runs) -> None:
    profile = runs("seed000-baseline.yaml")
    cfg = run_config(profile.meta)
    assert cfg is not None
    sim = Simulation(cfg)
    report = analyze(profile, whatif=False)
    assert report.source.has_graph
    for phase, step in (("prefill", 0), ("decode", 1), ("decode", 128)):
        add_norm, norm_mm = graph_pairs(sim.phases[phase].graph)
        assert len(add_norm) == 63 and len(norm_mm) == 65  # 2 per layer; the first norm reads the embedding
        assert found_pairs(report, profile, "add_norm", step) == add_norm
        assert found_pairs(report, profile, "norm_matmul", step) == norm_mm
    assert kinds(report) == {"add_norm": 63, "norm_matmul": 65, "fused_norm": 65}


def test_norm_read_by_three_matmuls_is_no_norm_matmul_opportunity(runs: Runs) -> None:
    # without the QKV merge the attention norm feeds the Q, K and V projections: one fused Norm+MatMul can not
    # replace it (the simulator's rule records a near-miss), so only FFN and final norms are opportunities
    profile = runs("seed000-baseline.yaml", "workload.decode_tokens=2", "fusion.disable=[qkv_merge]")
    report = analyze(profile)
    assert kinds(report)["norm_matmul"] == 33
    occ = report.occurrences
    roles = Counter(occ.filter(pc.equal(occ.column("kind"), "norm_matmul")).column("role").to_pylist())
    assert roles == {"ffn.norm": 32 * 3, "head.norm": 3}


def test_lnfused_has_no_norm_opportunities_and_reports_its_fused_norms(runs: Runs) -> None:
    report = analyze(runs("seed000-lnfused.yaml"))
    # what seed 000's fused column leaves unfused: HF's rotate_half RoPE and the two KV-cache writes
    missed = {f.fusion: f.by_phase["decode"].per_step for f in report.findings if f.opportunity}
    assert missed == {"rope": 64, "kv_cache_write": 32}
    norms = [f for f in report.findings if f.kind == "fused_norm"]
    assert len(norms) == 2 and {f.kind for f in report.findings} == {"fused_norm", "fused_op", "unfused_op"}
    fused = {f.fused_as: f.by_phase["decode"].per_step for f in norms}
    assert fused == {"FusedAddRmsNormMatMul": 63, "FusedRmsNormMatMul": 2}
    # the catalogue's other fusions the run made: flash attention (one per layer and step) and SwiGLU
    ops = {f.fused_as: f.count for f in report.findings if f.kind == "fused_op"}
    assert set(ops) == {"IncreFlashAttention", "PromptFlashAttention", "SwiGlu"} and ops["SwiGlu"] > 0
    assert [s.rules[-1] for s in report.whatif.steps] == ["rope", "kv_cache_write"]


@pytest.mark.parametrize(
    "config",
    [
        ("seed000-baseline.yaml",),
        ("seed000-lnfused.yaml",),
        ("seed000-baseline.yaml", "workload.decode_tokens=2", "fusion=none"),
        ("tiny-gpt.yaml", "fusion=none"),
    ],
)
def test_attribution_equals_the_simulators_own_summary(runs: Runs, config: tuple[str, ...]) -> None:
    profile = runs(*config)
    summary = profile.meta["summary"]
    assert isinstance(summary, dict)
    b = analyze(profile, whatif=False).breakdown
    phases = {p.phase: p for p in b.phases}
    decode, prefill = phases["decode"], phases["prefill"]
    assert decode.per_step_ms == pytest.approx(summary["decode_ms_per_token"], abs=1e-4)
    assert prefill.per_step_ms == pytest.approx(summary["ttft_ms"], abs=1e-4)
    for got, want in ((decode, summary["breakdown_ms_per_token"]), (prefill, summary["ttft_breakdown_ms"])):
        assert {r.name: r.per_step_ms for r in got.categories} == pytest.approx(want, abs=2e-4)
    assert decode.norm.per_step_ms == pytest.approx(summary["norm_ms_per_token"], abs=2e-4)
    assert decode.norm.kernel_us / 1e3 / decode.steps == pytest.approx(summary["norm_kernel_ms_per_token"], abs=2e-4)
    assert decode.norm.launch_us / 1e3 / decode.steps == pytest.approx(summary["norm_launch_ms_per_token"], abs=2e-4)
    bounds = {r.name: r.per_step_ms for r in b.by_bound if r.name != NO_DEVICE_OP}
    assert bounds == pytest.approx({k: v for k, v in summary["bound_ms_per_token"].items() if v}, abs=2e-4)
    # every row set adds up to 100 % of the measured span
    for p in b.phases:
        assert sum(r.charged_us for r in p.categories) == pytest.approx(p.span_us, rel=1e-9, abs=0.01)
    assert sum(p.span_us for p in b.phases) == pytest.approx(b.span_us, abs=0.01)
    scope = phases[b.scope]
    # ... and so do the op-type, layer and bound tables, with the step time no kernel owns as a row of its own
    for rows in (b.by_op_type, b.by_layer, b.by_bound):
        assert sum(r.charged_us for r in rows) == pytest.approx(scope.span_us, abs=0.05)
    assert next(r for r in b.by_op_type if r.name == NO_DEVICE_OP).charged_us == pytest.approx(b.idle.frame_us)


def test_tiny_gpt_unfused_layernorm_is_a_decomposed_layernorm(runs: Runs) -> None:
    report = analyze(runs("tiny-gpt.yaml", "fusion=none"), whatif=False)
    found = kinds(report)
    # its RMSNorm-like tail is not counted a second time; the residual Add in front is the Add->Norm that follows
    assert set(found) == {"decomposed_layernorm", "add_norm", "norm_matmul"}  # the final norm -> LM head
    example = next(f for f in report.findings if f.kind == "decomposed_layernorm").examples[0].op_types
    assert example == ["Cast", "ReduceMean", "Sub", "Pows", "ReduceMean", "Add", "Rsqrt", "Mul", "Cast", "Mul", "Add"]


def test_whatif_is_the_re_simulation_with_the_rules_on(runs: Runs) -> None:
    profile = runs("seed000-baseline.yaml")
    report = analyze(profile)
    w = report.whatif
    assert w.method == "resimulated"
    # the norm fusions first, then the rest of the catalogue the baseline lacks (its RoPE is HF's rotate_half,
    # its K and V cache writes two kernels)
    norms, rest = ["add_norm", "norm_matmul"], ["rope", "kv_cache_write"]
    assert [s.rules for s in w.steps] == [norms[:1], norms, [*norms, *rest[:1]], [*norms, *rest]]
    cfg = run_config(profile.meta)
    assert cfg is not None
    fused = summarize(cfg.model_copy(update={"fusion": cfg.fusion.model_copy(update={"enable": tuple(norms)})}))
    assert w.steps[1].decode_ms_per_token == fused.decode_ms_per_token
    lnfused = runs("seed000-lnfused.yaml").meta["summary"]
    assert isinstance(lnfused, dict)
    assert w.steps[1].decode_ms_per_token == lnfused["decode_ms_per_token"]  # seed 000's fused column
    every = summarize(cfg.model_copy(update={"fusion": cfg.fusion.model_copy(update={"enable": (*norms, *rest)})}))
    assert w.decode_ms_per_token_after == every.decode_ms_per_token
    opportunities = sum(f.est_saving_us for f in report.findings if f.opportunity)
    assert opportunities == pytest.approx(w.total_saving_us, rel=1e-6)
    assert w.total_saving_us == pytest.approx(w.span_us - w.span_after_us)
    assert 0.13 < (w.steps[0].saving_us + w.steps[1].saving_us) / w.span_us < 0.16  # seed 000: ~15 %


def test_whatif_of_the_unfused_run_enables_the_norm_kernel_rule(runs: Runs) -> None:
    profile = runs("seed000-baseline.yaml", "workload.decode_tokens=2", "fusion=none")
    w = analyze(profile).whatif
    cfg = run_config(profile.meta)
    assert cfg is not None
    enable = ("norm_kernel", "add_norm")
    want = summarize(cfg.model_copy(update={"fusion": cfg.fusion.model_copy(update={"enable": enable})}))
    # the norms become kernels first, then the Adds in front of them fuse: exact re-simulations, no double count
    assert [s.rules for s in w.steps][:2] == [["norm_kernel"], ["norm_kernel", "add_norm"]]
    assert w.steps[1].decode_ms_per_token == want.decode_ms_per_token
    assert w.steps[0].fired == {"prefill": 65, "decode": 65}
    assert w.steps[1].span_us < w.steps[0].span_us


def test_analyze_does_not_modify_its_input_or_print(runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    profile = runs("seed000-baseline.yaml", "workload.decode_tokens=2", "fusion=none")
    before = profile.ops.slice(0)
    analyze(profile)
    assert profile.ops.equals(before)
    assert capsys.readouterr() == ("", "")


def test_add_norm_after_a_decomposed_norm_is_not_counted_twice_by_the_device_model(runs: Runs) -> None:
    """The same unfused run read as a foreign profile (no config: the device model prices the fusions). The Add in
    front of a chain is priced against the fused norm the chain becomes, so what fusing the Adds saves is bounded
    by the Adds' own charged time (an AddRmsNorm costs at least the RmsNorm it replaces)."""
    profile = runs("seed000-baseline.yaml", "workload.decode_tokens=2", "fusion=none")
    foreign = Profile("kernel_details", profile.source, profile.ops, meta={})
    report = analyze(foreign)
    assert report.whatif.method == "device-model"
    add_norm = [f for f in report.findings if f.kind == "add_norm"]
    assert add_norm and all(f.opportunity for f in add_norm)
    saved = sum(f.est_saving_us or 0.0 for f in add_norm)
    adds = next(r for r in report.breakdown.by_op_type if r.name == "Add")
    assert 0 < saved <= adds.charged_us


def test_no_catalogue_fusion_is_invented_on_an_unfused_run(runs: Runs) -> None:
    """fusion=none: no kernel of the catalogue's fused Types runs, so none is reported as already fused; with the
    default fusions the run's flash attention and RoPE (RotaryMul on the 910A) are."""
    none = analyze(runs("tiny-llama.yaml", "fusion=none", "workload.decode_tokens=2"), whatif=False)
    assert not [f for f in none.findings if f.kind == "fused_op"]
    default = analyze(runs("tiny-llama.yaml", "workload.decode_tokens=2"), whatif=False)
    assert {f.fused_as for f in default.findings if f.kind == "fused_op"} >= {"IncreFlashAttention", "RotaryMul"}
