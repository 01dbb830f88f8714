"""Execute a run's layers for real: unfused, fused (the run's fusion rules, per phase) and float64, and report.

Each selected layer runs on the same seeded synthetic input (unit-RMS hidden states; layer 0 of a checkpoint with
embeddings reads the embedding rows of seeded token ids), prefill over the (capped) prompt with a subset of query
rows, then one decode step over that prefill's KV cache. Batch 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from atbprof.arrays import distinct
from atbprof.config.models import RunConfig
from atbprof.errors import ConfigError
from atbprof.numerics.arith import REF, Arith
from atbprof.numerics.dtypes import Dtype, store
from atbprof.numerics.executor import (
    SEGMENTS,
    LayerContext,
    State,
    Variants,
    narrow,
    query_rows_of,
    run_segments,
    span_outputs,
)
from atbprof.numerics.metrics import ErrorStats, Prepared, Tolerance, Verdict, compare, nonfinite, verdict, worst
from atbprof.numerics.report import KernelNumerics, LayerNumerics, NumericsReport, RuleNumerics, Subset
from atbprof.numerics.safetensors_io import SafetensorsFile
from atbprof.numerics.spans import FusedKernel, RuleProbe, layer_plan
from atbprof.numerics.weights import LayerWeights, checkpoint_layer, embedding_rows, random_layer
from atbprof.sim.simulate import Simulation
from atbprof.writers.selection import parse_ranges


def rope_theta(cfg: RunConfig) -> tuple[float, str | None]:
    """rope_theta of the preset / HF config (10000 if absent) and a note when rope_scaling is ignored."""
    if cfg.model.preset:
        hf = json.loads(resources.files("atbprof.data.models").joinpath(f"{cfg.model.preset}.json").read_text())
    else:
        assert cfg.model.hf_config is not None
        hf = json.loads(Path(cfg.model.hf_config).read_text(encoding="utf-8"))
    note = "rope_scaling of the config is not applied (plain RoPE)" if hf.get("rope_scaling") else None
    return float(hf.get("rope_theta", 10000.0)), note


def query_rows(prompt: int, wanted: int | None) -> np.ndarray:
    """Evenly spaced rows including the first and the last (the longest attention row)."""
    if wanted is None or wanted >= prompt:
        return np.arange(prompt)
    return distinct(np.linspace(0, prompt - 1, wanted).round().astype(np.int64))


def merge_stats(items: list[ErrorStats]) -> ErrorStats:
    """Over several layers: maxima of the maxima, the element-weighted mean ULP, counts summed."""
    n = sum(s.elements for s in items)
    return ErrorStats(
        elements=n,
        max_abs_err=max(s.max_abs_err for s in items),
        max_rel_err=max(s.max_rel_err for s in items),
        scaled_err=max(s.scaled_err for s in items),
        ulp_mean=sum(s.ulp_mean * s.elements for s in items) / n if n else 0.0,
        ulp_p99=max(s.ulp_p99 for s in items),
        ulp_max=max(s.ulp_max for s in items),
        nan=sum(s.nan for s in items),
        inf=sum(s.inf for s in items),
    )


class _Runner:
    def __init__(self, sim: Simulation, weights: str | None) -> None:
        cfg, n = sim.cfg, sim.cfg.numerics
        self.sim, self.cfg, self.n, self.d = sim, cfg, n, sim.dims
        self.dtype: Dtype = "fp16" if sim.dims.dtype == "fp16" else "bf16"
        self.a = Arith(self.dtype)
        self.tol = Tolerance.of(n.tolerance.ratio, n.tolerance.floor_ulp, self.dtype)
        self.notes: list[str] = []
        d = sim.dims
        self.layers = sorted(
            {
                i
                for lo, hi in parse_ranges(n.layers, "numerics.layers")
                for i in range(lo, (hi if hi is not None else d.layers - 1) + 1)
                if i < d.layers
            }
        )
        if not self.layers:
            raise ConfigError(f"numerics.layers = {n.layers!r}: no such layer (the model has {d.layers})")
        self.prompt = min(cfg.workload.prompt_len, n.max_prompt)
        if self.prompt < cfg.workload.prompt_len:
            self.notes.append(
                f"prompt capped at numerics.max_prompt = {n.max_prompt} tokens (the run's prompt is "
                f"{cfg.workload.prompt_len}; which fusion rules fire is still decided at the run's length)"
            )
        self.rows = query_rows(self.prompt, n.query_rows)
        self.decode = n.decode and cfg.workload.decode_tokens > 0
        self.theta, note = rope_theta(cfg) if d.architecture == "llama" else (10000.0, None)
        if note:
            self.notes.append(note)
        self.ckpt = SafetensorsFile(weights) if weights else None
        self.kernels: dict[tuple[str, str, str], list[tuple[int, FusedKernel, Probe]]] = {}
        self.rule_probes: dict[tuple[str, str], list[tuple[int, RuleProbe, Probe]]] = {}
        self.layer_rows: list[LayerNumerics] = []

    # -- inputs and weights ------------------------------------------------------------------------------------
    def weights_of(self, layer: int) -> LayerWeights:
        if self.ckpt is not None:
            return checkpoint_layer(self.ckpt, self.d, layer)
        return random_layer(self.d, layer, self.cfg.seed, self.n.logit_std)

    def inputs(self, layer: int) -> tuple[State, State]:
        """(prefill input, decode input): hidden states of prompt + 1 tokens; layers > 0 get the (residual, delta)
        pair the previous layer hands over (AddRmsNorm folds that Add)."""
        rng = np.random.default_rng([self.cfg.seed, 0x696E70])
        total = self.prompt + 1
        h = None
        if self.ckpt is not None and layer == 0:
            h = embedding_rows(self.ckpt, self.d, rng.integers(0, self.d.vocab, total))
        if h is None:
            h = store(rng.standard_normal((total, self.d.hidden), dtype=np.float32), self.dtype)
        if layer == 0:
            return {"h_in": h[: self.prompt]}, {"h_in": h[self.prompt :]}
        delta = store(0.5 * rng.standard_normal((total, self.d.hidden), dtype=np.float32), self.dtype)
        p = self.prompt
        return {"resid": h[:p], "delta": delta[:p]}, {"resid": h[p:], "delta": delta[p:]}

    # -- one phase of one layer ----------------------------------------------------------------------------------
    def phase(self, phase: str, layer: int, ctx: LayerContext, state: State) -> dict[str, State]:
        pm = self.sim.phases[phase]
        plan = layer_plan(pm.graph, layer, set(pm.fusion.fired), self.d)
        finals = {
            "unfused": run_segments(state, SEGMENTS, {}, ctx, self.a, "unfused"),
            "ref": run_segments(state, SEGMENTS, {}, ctx, REF, "ref"),
        }
        s = dict(state)
        starts = {kn.span[0]: kn for kn in plan.kernels}
        for seg in SEGMENTS:
            kn = starts.get(seg)
            if kn is not None:
                entry = self.probe(kn.span, plan.variants, ctx, s)
                self.kernels.setdefault((phase, kn.op_type, kn.role), []).append((layer, kn, entry))
            for rp in plan.probes:
                if rp.segments[0] == seg:
                    entry = self.probe(rp.segments, rp.variants, ctx, s)
                    self.rule_probes.setdefault((phase, rp.rule), []).append((layer, rp, entry))
            s = run_segments(s, (seg,), plan.variants, ctx, self.a, "fused")
        finals["fused"] = s
        self.layer_row(phase, layer, ctx, finals)
        ctx.memo.clear()
        ctx.keep.clear()
        return finals

    def probe(self, span: tuple[str, ...], variants: Variants, ctx: LayerContext, s: State) -> Probe:
        """The span from the fused path's state `s`: with `variants`, unfused and in float64."""
        if len(ctx.q_rows) < len(ctx.positions) and not {"kv_write", "attn"} & set(span):
            s, ctx = narrow(s, ctx)  # only the query rows are compared: compute only them
        fz = run_segments(s, span, variants, ctx, self.a, "fused")
        uz = run_segments(s, span, {}, ctx, self.a, "fused")  # kept: probes from one state share prefixes
        rz = run_segments(s, span, {}, ctx, REF, "fused")
        names = [o for o in span_outputs(span) if o in fz and o in uz and o in rz]
        stats = {o: fz[o] for o in span_outputs(span) if o in fz and o not in names}
        f, u, r = (Prepared([query_rows_of(o, z[o], ctx) for o in names], self.dtype) for z in (fz, uz, rz))
        return Probe(
            compare(f, u, self.dtype), compare(f, r, self.dtype), compare(u, r, self.dtype), nonfinite(stats), names
        )

    def layer_row(self, phase: str, layer: int, ctx: LayerContext, finals: dict[str, State]) -> None:
        outs = {p: (REF if p == "ref" else self.a) for p in finals}
        y = {p: Prepared([run_out(finals[p], outs[p])], self.dtype) for p in finals}
        fvr = compare(y["fused"], y["ref"], self.dtype)
        uvr = compare(y["unfused"], y["ref"], self.dtype)
        fvu = compare(y["fused"], y["unfused"], self.dtype)
        v, why = verdict(fvr, uvr, 0, self.tol)
        self.layer_rows.append(
            LayerNumerics(
                phase=phase,
                layer=layer,
                fused_vs_ref=fvr,
                unfused_vs_ref=uvr,
                fused_vs_unfused=fvu,
                verdict=v,
                reason=why,
            )
        )

    # -- everything ------------------------------------------------------------------------------------------
    def run(self) -> NumericsReport:
        positions = np.arange(self.prompt)
        for layer in self.layers:
            w = self.weights_of(layer)
            pre_in, dec_in = self.inputs(layer)
            ctx = LayerContext(self.d, w, self.rows, positions, self.theta, add_norm_stats=self.n.add_layernorm_stats)
            finals = self.phase("prefill", layer, ctx, pre_in)
            if self.decode:
                past = {p: {"k_cache": s["k_cache"], "v_cache": s["v_cache"]} for p, s in finals.items()}
                dctx = LayerContext(
                    self.d, w, np.arange(1), np.array([self.prompt]), self.theta, past, self.n.add_layernorm_stats
                )
                self.phase("decode", layer, dctx, dec_in)
        return self.report()

    def report(self) -> NumericsReport:
        kernels = []
        for (phase, op_type, role), items in self.kernels.items():
            fk, p = items[0][1], merge_probes([e for _, _, e in items])
            v, why = verdict(p.fvr, p.uvr, p.stats, self.tol)
            kernels.append(
                KernelNumerics(
                    phase=phase, op_type=op_type, role=role, rule=fk.rule, rules=list(fk.rules),
                    fused_from=list(fk.fused_from), segments=list(fk.span), outputs=p.names,
                    layers=[ly for ly, _, _ in items], fused_vs_unfused=p.fvu, fused_vs_ref=p.fvr,
                    unfused_vs_ref=p.uvr, stats_nonfinite=p.stats, verdict=v, reason=why,
                )
            )  # fmt: skip
        rules = []
        for (phase, rule), ritems in sorted(self.rule_probes.items()):
            p = merge_probes([e for _, _, e in ritems])
            v, why = verdict(p.fvr, p.uvr, p.stats, self.tol)
            segs = sorted({g for _, rp, _ in ritems for g in rp.variants}, key=SEGMENTS.index)
            rules.append(
                RuleNumerics(
                    phase=phase, rule=rule, segments=segs, layers=sorted({ly for ly, _, _ in ritems}),
                    places=len(ritems), fused_vs_unfused=p.fvu, fused_vs_ref=p.fvr, unfused_vs_ref=p.uvr,
                    stats_nonfinite=p.stats, verdict=v, reason=why,
                )
            )  # fmt: skip
        per_rule: dict[str, list[Verdict]] = {}
        for kn in kernels:
            per_rule.setdefault(kn.rule, []).append(kn.verdict)
        for rn in rules:
            per_rule.setdefault(rn.rule, []).append(rn.verdict)
        for kn in kernels:  # a composite absorbed everywhere (norm_matmul inside FFN) counts by what contains it
            for r in kn.rules:
                if r not in per_rule:
                    per_rule[r] = [k.verdict for k in kernels if r in k.rules]
        finite = all(k.verdict != "broken" for k in kernels) and all(
            row.fused_vs_ref.nan + row.fused_vs_ref.inf == 0 for row in self.layer_rows
        )
        n = self.n
        weights = str(self.ckpt.path) if self.ckpt else f"random (seed {self.cfg.seed}, logit std {n.logit_std:g})"
        subset = Subset(
            layers=self.layers, prompt_len=self.prompt, run_prompt_len=self.cfg.workload.prompt_len,
            query_rows=len(self.rows), decode_steps=int(self.decode), batch=1, weights=weights, dtype=self.dtype,
        )  # fmt: skip
        return NumericsReport(
            fusion_strategy=self.cfg.fusion.strategy,
            subset=subset,
            tolerance={"ratio": self.tol.ratio, "floor_ulp": self.tol.floor_ulp, "floor": self.tol.floor},
            tolerance_rule=self.tol.describe(),
            kernels=kernels,
            rule_probes=rules,
            layers=self.layer_rows,
            rules={r: worst(vs) for r, vs in sorted(per_rule.items())},
            finite=finite,
            notes=self.notes,
        )


@dataclass(frozen=True)
class Probe:
    fvu: ErrorStats
    fvr: ErrorStats
    uvr: ErrorStats
    stats: int
    names: list[str]


def merge_probes(items: list[Probe]) -> Probe:
    return Probe(
        merge_stats([p.fvu for p in items]),
        merge_stats([p.fvr for p in items]),
        merge_stats([p.uvr for p in items]),
        sum(p.stats for p in items),
        items[0].names,
    )


def run_out(state: State, a: Arith) -> np.ndarray:
    """The layer's output hidden state: residual + MLP (the Add that the next layer's AddRmsNorm would fold)."""
    return a.st(a.c(state["h1"]) + a.c(state["mlp"]))


def run_numerics(sim: Simulation, weights: str | None = None) -> NumericsReport:
    """Numerics of the run `sim` simulates (its config's `numerics` section; `weights` overrides numerics.weights)."""
    return _Runner(sim, weights or sim.cfg.numerics.weights).run()
