"""Which segments of a layer each fused kernel of the run's fused graph covers, and the fused path's variants.

The fused graph records per kernel its op type, role (of the member named by the rule's role_from) and
`fused_from` (the base op types it replaced, in order). The role names the span's last segment; walking back over
the segments' base op counts until they add up to len(fused_from) gives its first one.
"""

from __future__ import annotations

from dataclasses import dataclass

from atbprof.errors import AtbprofError
from atbprof.graph.dims import ModelDims
from atbprof.graph.nodes import Graph
from atbprof.numerics.executor import SEGMENTS

END_SEGMENT = {
    "attn.norm": "attn_norm",
    "attn.q": "qkv",
    "attn.qkv": "qkv",
    "attn.rope": "rope",
    "attn.context": "attn",
    "ffn.norm": "ffn_norm",
    "ffn.gate_up": "gate_up",
    "ffn.act": "act",
    "ffn.down": "down",
}
ROPE_TYPES = ("RotaryPositionEmbedding", "RotaryMul")
MERGES = {"attn.qkv": "qkv_merge", "ffn.gate_up": "gate_up_merge"}
TARGETS = {
    "norm_kernel": ("attn_norm", "ffn_norm"),
    "add_norm": ("in_add", "attn_add"),
    "qkv_merge": ("qkv",),
    "gate_up_merge": ("gate_up",),
    "rope": ("rope",),
    "flash_attention": ("attn",),
    "attention_softmax": ("attn",),
    "swiglu": ("act",),
}
"""Rule -> the segments whose numerics it changes (the composite rules norm_matmul, ffn and qkv_attention change
nothing of their own: their members' kernels are already fused)."""
COMPOSITES = {
    "norm_matmul": (("attn_norm", "qkv"), ("ffn_norm", "gate_up")),
    "ffn": (("gate_up", "act", "down"),),
    "qkv_attention": (("qkv", "rope", "kv_write", "attn"),),
}
"""Composite rule -> segment runs one of its kernels covers (to credit it inside bigger kernels)."""


@dataclass(frozen=True)
class FusedKernel:
    op_type: str
    role: str
    rule: str
    fused_from: tuple[str, ...]
    span: tuple[str, ...]
    rules: tuple[str, ...]  # every rule whose numerics the span's fused run includes (the kernel's own first)


@dataclass(frozen=True)
class RuleProbe:
    """One rule's own effect at one place: `segments` run with only that rule's variants vs unfused."""

    rule: str
    segments: tuple[str, ...]
    variants: dict[str, str]


@dataclass(frozen=True)
class LayerPlan:
    kernels: tuple[FusedKernel, ...]
    variants: dict[str, str]
    probes: tuple[RuleProbe, ...] = ()


def _counts(d: ModelDims, fired: set[str], fused_attention: bool) -> dict[str, int]:
    norm = 8 if d.architecture == "llama" else 11
    attn = 8 + (2 if fused_attention and d.kv_heads != d.heads else 0)  # the absorbed GQA BroadcastTo copies
    return {
        "in_add": 1,
        "attn_norm": norm,
        "qkv": 1 if "qkv_merge" in fired else 3,
        "rope": 14 if d.architecture == "llama" else 0,
        "kv_write": 2,
        "attn": attn,
        "o_proj": 1,
        "attn_add": 1,
        "ffn_norm": norm,
        "gate_up": (1 if "gate_up_merge" in fired else 2) if d.architecture == "llama" else 1,
        "act": 2 if d.architecture == "llama" else 1,
        "down": 1,
    }


def _span(op_type: str, role: str, n_from: int, counts: dict[str, int]) -> tuple[str, ...]:
    end = END_SEGMENT.get(role)
    if end is None:
        raise AtbprofError(f"numerics: fused kernel {op_type} has role {role}, which no layer segment ends in")
    if op_type in ROPE_TYPES:
        return ("rope",)
    if n_from == 0:  # a merged MatMulV2
        return (end,)
    i = SEGMENTS.index(end)
    total = 0
    while i >= 0:
        total += counts[SEGMENTS[i]]
        if total == n_from:
            return tuple(s for s in SEGMENTS[i : SEGMENTS.index(end) + 1] if counts[s])
        if total > n_from:
            break
        i -= 1
    raise AtbprofError(f"numerics: cannot place fused kernel {op_type} ({role}, {n_from} base ops) in the layer")


def layer_plan(graph: Graph, layer: int, fired: set[str], dims: ModelDims) -> LayerPlan:
    """The fused kernels of `layer` in a phase's fused graph and the variant each segment runs in the fused path."""
    fused_attention = bool(fired & {"flash_attention", "attention_softmax"})
    counts = _counts(dims, fired, fused_attention)
    covered: set[str] = set()
    found: list[tuple[str, str, str, tuple[str, ...], tuple[str, ...]]] = []
    for n in graph.nodes:
        if n.layer != layer:
            continue
        rule = n.rule or (MERGES.get(n.role, "") if n.op_type == "MatMulV2" else "")
        if not rule:
            continue
        span = _span(n.op_type, n.role, len(n.fused_from), counts)
        covered.update(span)
        found.append((n.op_type, n.role, rule, n.fused_from, span))
    variants: dict[str, str] = {}
    for rule in sorted(fired):
        for seg in TARGETS.get(rule, ()):
            if seg not in covered:
                continue
            if seg == "attn":
                variants[seg] = "unguarded" if "attention_softmax" in fired else "flash"
            elif seg in ("qkv", "gate_up"):
                variants[seg] = "merged"
            else:
                variants[seg] = "fused"
    for add, norm in (("in_add", "attn_norm"), ("attn_add", "ffn_norm")):
        if variants.get(add) == "fused":
            variants[norm] = "fused"  # AddRmsNorm is a norm kernel too
    kernels = []
    seen: set[tuple[str, str]] = set()
    for op_type, role, rule, fused_from, span in found:
        if (op_type, role) in seen:
            continue  # RoPE of Q and of K: one kernel type, one span
        seen.add((op_type, role))
        involved = [rule, *sorted(r for r in fired if r != rule and _involved(r, span, variants))]
        kernels.append(FusedKernel(op_type, role, rule, fused_from, span, tuple(involved)))
    return LayerPlan(tuple(kernels), variants, _rule_probes(fired, variants, covered))


PROBE_GROUPS = {
    "norm_kernel": (("in_add", "attn_norm"), ("attn_add", "ffn_norm")),
    "add_norm": (("in_add", "attn_norm"), ("attn_add", "ffn_norm")),
}
"""A norm is probed with the residual Add before it (run unfused unless add_norm is the rule probed), so its
input exists whether or not AddRmsNorm folded that Add."""


def _rule_probes(fired: set[str], variants: dict[str, str], covered: set[str]) -> tuple[RuleProbe, ...]:
    out = []
    for rule in sorted(fired & set(COMPOSITES)):  # a composite kernel: its segments with everything fused there
        for run in COMPOSITES[rule]:
            if all(seg in covered for seg in run):
                lead = {"attn_norm": ("in_add",), "ffn_norm": ("attn_add",)}.get(run[0], ())
                group = (*lead, *run)
                out.append(RuleProbe(rule, group, {seg: variants[seg] for seg in group if seg in variants}))
    for rule in sorted(fired):
        targets = TARGETS.get(rule, ())
        groups = PROBE_GROUPS.get(rule, tuple((t,) for t in targets))
        for group in groups:
            own = {s: variants[s] for s in group if s in targets and s in variants}
            if rule == "add_norm" and own:
                own |= {s: variants[s] for s in group if s in variants}  # AddRmsNorm: the Add and the norm
            elif rule == "norm_kernel":
                own = {s: "fused" for s in group if s in ("attn_norm", "ffn_norm") and s in variants}
            if own:
                out.append(RuleProbe(rule, group, own))
    return tuple(out)


def _involved(rule: str, span: tuple[str, ...], variants: dict[str, str]) -> bool:
    if any(variants.get(s) and s in span for s in TARGETS.get(rule, ())):
        return True
    return any(all(s in span for s in run) for run in COMPOSITES.get(rule, ()))
