"""`atbprof analyze` on real torch.profiler (Kineto) traces of a tiny random-weight Hugging Face LLaMA on CPU.

Eager `LlamaRMSNorm` runs as a chain of outermost aten ops per norm (to, pow, mean, add, rsqrt, mul, to, mul): the
analyzer must call every one of them a decomposed RMSNorm at framework level (2 per layer + the final norm = 5 per
forward). With the norms swapped for `torch.nn.functional.rms_norm` the profiler records one `aten::rms_norm` per
norm whose composite implementation (`aten::_fused_rms_norm` -> pow, mean, add_, rsqrt, mul, ... in torch 2.13)
is nested inside it: those children must not be reported as unfused norms, the call itself is an already fused one.

Needs the `torch` extra (`pip install -e '.[torch]'`); skipped without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from atbprof.analyze import analyze
from atbprof.analyze.report import AnalysisReport, Finding
from atbprof.commands import app
from atbprof.importers import load_profile
from atbprof.importers.base import Profile

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install -e '.[torch]')")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[torch]')")

LAYERS = 2
NORMS_PER_FORWARD = 2 * LAYERS + 1  # input + post-attention norm per layer, and the final norm
ADDS_BEFORE_A_NORM = 2 * LAYERS  # the residual adds: before each post-attention norm, the next layer's / final norm
FORWARDS = 2  # profiled (ProfilerStep#1, #2); one more forward before them is the profiler's warm-up
HF_RMSNORM = [
    "aten::to",  # hidden_states.to(torch.float32)
    "aten::pow",
    "aten::mean",
    "aten::add",  # variance + eps
    "aten::rsqrt",
    "aten::mul",
    "aten::to",  # .to(input_dtype)
    "aten::mul",  # self.weight * ...
]


def tiny_llama() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=128,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config).eval()


def fused_rms_norm_forward(self: Any, hidden_states: Any) -> Any:
    """LlamaRMSNorm.forward as one framework op (aten::rms_norm)."""
    return torch.nn.functional.rms_norm(hidden_states, self.weight.shape, self.weight, self.variance_epsilon)


def profile_forwards(model: Any, input_ids: Any, path: Path) -> Path:
    """FORWARDS forward passes under torch.profiler (CPU, shapes, ProfilerStep markers), as a Chrome trace."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    plan = torch.profiler.schedule(wait=0, warmup=1, active=FORWARDS, repeat=1)
    with torch.no_grad(), torch.profiler.profile(activities=activities, record_shapes=True, schedule=plan) as prof:
        for _ in range(1 + FORWARDS):
            model(input_ids)
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """{"eager": trace of the stock model, "fused": the same model with every LlamaRMSNorm as F.rms_norm}."""
    if not hasattr(torch.nn.functional, "rms_norm"):
        pytest.skip(f"torch {torch.__version__} has no torch.nn.functional.rms_norm (added in 2.4)")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    tmp = tmp_path_factory.mktemp("torch_profiler")
    model = tiny_llama()
    input_ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    assert sum(isinstance(m, LlamaRMSNorm) for m in model.modules()) == NORMS_PER_FORWARD
    out = {"eager": profile_forwards(model, input_ids, tmp / "llama.pt.trace.json")}
    with torch.no_grad():
        reference = model(input_ids).logits
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LlamaRMSNorm, "forward", fused_rms_norm_forward)
        with torch.no_grad():  # the swap computes the same thing
            torch.testing.assert_close(model(input_ids).logits, reference, rtol=1e-5, atol=1e-5)
        out["fused"] = profile_forwards(model, input_ids, tmp / "llama_fused.pt.trace.json")
    yield out


@pytest.fixture(scope="module")
def loaded(traces: dict[str, Path]) -> dict[str, tuple[Profile, AnalysisReport]]:
    out = {}
    for name, path in traces.items():
        profile = load_profile(str(path))
        out[name] = (profile, analyze(profile))
    return out


def of_kind(report: AnalysisReport, kind: str, level: str = "framework") -> list[Finding]:
    return [f for f in report.findings if f.kind == kind and f.level == level]


def occurrence_members(report: AnalysisReport, keep: Callable[[str], bool] = lambda kind: True) -> set[int]:
    """op_index of every op that some occurrence (of the kinds kept) is made of: all of them, not only the top."""
    found = report.occurrences
    kinds = found.column("kind").to_pylist()
    rows = pa.array([i for i, k in enumerate(kinds) if keep(k)], pa.int64())
    return set(pc.list_flatten(found.take(rows).column("op_indices")).to_pylist())


def nested_in(framework: pa.Table, names: set[str]) -> set[int]:
    """Indices of the framework ops nested (at any depth) inside an op with one of these names."""
    index = framework.column("index").to_pylist()
    parent = dict(zip(index, framework.column("parent").to_pylist(), strict=True))
    name = dict(zip(index, framework.column("name").to_pylist(), strict=True))
    out = set()
    for i in index:
        p = parent[i]
        while p is not None:
            if name.get(p) in names:
                out.add(i)
                break
            p = parent.get(p)
    return out


def test_the_trace_is_a_cpu_only_kineto_trace_with_profiler_steps(loaded: dict[str, tuple[Profile, Any]]) -> None:
    for profile, _ in loaded.values():
        assert profile.kind == "kineto"
        assert profile.ops.num_rows == 0  # CPU only: no device kernels
        assert profile.framework is not None and profile.framework.num_rows > 0
        steps = set(pc.drop_null(profile.framework.column("step")).to_pylist())
        assert steps == set(range(1, FORWARDS + 1))


def test_every_eager_llama_rmsnorm_is_a_decomposed_chain(loaded: dict[str, tuple[Profile, AnalysisReport]]) -> None:
    profile, report = loaded["eager"]
    assert report.has_unfused
    assert not of_kind(report, "decomposed_rmsnorm", "kernel")  # no device ops at all
    (finding,) = of_kind(report, "decomposed_rmsnorm")
    assert finding.pattern == "aten-decomposed-rmsnorm" and finding.opportunity
    assert finding.count == NORMS_PER_FORWARD * FORWARDS
    (phase,) = finding.by_phase.values()
    assert (phase.steps, phase.per_step) == (FORWARDS, NORMS_PER_FORWARD)
    for example in finding.examples:
        assert example.op_types == HF_RMSNORM
        assert example.step in range(1, FORWARDS + 1)
    # every occurrence is the whole chain of outermost calls: nothing nested in aten::pow / aten::mean / aten::to
    fw = profile.framework
    assert fw is not None
    members = occurrence_members(report, lambda kind: kind == "decomposed_rmsnorm")
    assert len(members) == len(HF_RMSNORM) * NORMS_PER_FORWARD * FORWARDS
    is_member = np.isin(fw.column("index").to_numpy(), np.array(sorted(members), dtype=np.int64))
    assert fw.filter(pa.array(is_member)).column("parent").null_count == len(members)
    # no other norm findings (no aten::rms_norm in this trace, no LayerNorm chain) but the residual Adds in front
    # of the chains: the Add->Norm fusion that follows once each chain is one call, as many as the fused twin has
    assert {f.kind for f in report.findings} == {"decomposed_rmsnorm", "add_norm", "unfused_op"}
    # and the catalogue's other fusions Hugging Face's code leaves to the framework: rotate_half RoPE (Q and K) and
    # silu(gate) * up in each layer (attention is SDPA's one call here)
    other = {f.fusion: f.count for f in of_kind(report, "unfused_op")}
    assert set(other) == {"rope", "swiglu"} and other["rope"] == 2 * other["swiglu"]
    (add_norm,) = of_kind(report, "add_norm")
    assert add_norm.count == ADDS_BEFORE_A_NORM * FORWARDS and add_norm.opportunity
    assert all(e.op_types[0] == "aten::add" and e.op_types[1] == HF_RMSNORM[0] for e in add_norm.examples)
    # the summary counts per profiler step (one forward each) now that the host timeline frames the steps
    assert f"({NORMS_PER_FORWARD} decomposed RMSNorm" in report.summary


def test_fused_rms_norm_is_reported_as_fused_not_its_children(
    loaded: dict[str, tuple[Profile, AnalysisReport]],
) -> None:
    profile, report = loaded["fused"]
    fw = profile.framework
    assert fw is not None
    names = fw.column("name").to_pylist()
    calls = NORMS_PER_FORWARD * FORWARDS
    assert names.count("aten::rms_norm") == calls
    # the composite implementation is recorded nested inside the call: a decomposed-looking chain that is not one
    inside = nested_in(fw, {"aten::rms_norm"})
    nested_names = {names[i] for i, ix in enumerate(fw.column("index").to_pylist()) if ix in inside}
    assert {"aten::pow", "aten::mean", "aten::rsqrt", "aten::mul"} <= nested_names

    assert not [f for f in report.findings if f.kind in ("decomposed_rmsnorm", "decomposed_layernorm")]
    (fused,) = of_kind(report, "fused_norm")
    assert not fused.opportunity and fused.est_method == "already fused"
    assert (fused.fused_as, fused.count) == ("aten::rms_norm", calls)
    assert all(e.op_types == ["aten::rms_norm"] for e in fused.examples)
    assert f"already fused: {calls // FORWARDS} aten::rms_norm" in report.summary  # per profiler step
    # what is left to fuse: the residual add in front of a norm (torch_npu.npu_add_rms_norm), outermost ops only
    (add_norm,) = of_kind(report, "add_norm")
    assert add_norm.count == ADDS_BEFORE_A_NORM * FORWARDS
    assert all(e.op_types == ["aten::add", "aten::rms_norm"] for e in add_norm.examples)
    assert {f.kind for f in report.findings} == {"fused_norm", "add_norm", "unfused_op"}
    assert not occurrence_members(report) & inside


def test_cli_analyze_json_on_the_trace(traces: dict[str, Path]) -> None:
    result = CliRunner().invoke(app, ["analyze", str(traces["eager"]), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.output)
    assert doc["has_unfused"] is True
    finding = next(f for f in doc["findings"] if f["kind"] == "decomposed_rmsnorm")
    assert {f["kind"] for f in doc["findings"]} == {"decomposed_rmsnorm", "add_norm", "unfused_op"}
    assert finding["level"] == "framework"
    assert finding["count"] == NORMS_PER_FORWARD * FORWARDS
    assert finding["by_phase"]["all"]["per_step"] == NORMS_PER_FORWARD
    assert finding["examples"][0]["op_types"] == HF_RMSNORM


def test_cpu_only_trace_attributes_the_host_timeline(loaded: dict[str, tuple[Profile, AnalysisReport]]) -> None:
    profile, report = next(iter(loaded.values()))
    assert profile.ops.num_rows == 0  # no device kernels: the framework ops are the timeline
    assert report.breakdown.span_us > 0
    assert report.whatif.span_us == report.breakdown.span_us and 0 < report.whatif.saving_share < 1
    assert any("framework ops (host)" in n for n in report.notes)
    assert report.breakdown.step_kind == "host"  # a CPU step: no per-token figures


def test_diff_of_the_cpu_traces_compares_their_framework_ops(traces: dict[str, Path]) -> None:
    from atbprof.diff.api import diff_paths

    report = diff_paths(traces["eager"], traces["fused"], top=1000).report
    assert any("no device kernels" in n for n in report.notes)
    rows = {r.name: r for r in report.rows}
    assert report.matching.base_unmatched_ops == report.matching.new_unmatched_ops == 0
    # each LlamaRMSNorm's eight eager calls (to, pow, mean, add, rsqrt, mul, to, mul) -> one aten::rms_norm
    fused = [r for r in report.rows if r.classification == "fused"]
    assert [(r.new_types, r.base_ops_per_step, r.new_ops_per_step) for r in fused] == [
        (["aten::rms_norm"], 8.0 * NORMS_PER_FORWARD, float(NORMS_PER_FORWARD))
    ]
    assert not [r for r in report.rows if r.classification in ("added", "removed")]
    assert rows["aten::linear"].base_ops_per_step == rows["aten::linear"].new_ops_per_step
