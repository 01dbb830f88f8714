"""Apply fusion rules to an op graph: match, check constraints, rewrite, and record near-misses.

Each rule is one left-to-right sweep over the graph in issue order (linear in the number of nodes): matched
windows become one fused node, and later nodes that read a replaced node are re-pointed at the fused one.
"""

from __future__ import annotations

import fnmatch
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

from atbprof.fusion.rules import Pattern, Rule
from atbprof.graph.expr import ZERO, Lin
from atbprof.graph.nodes import Edge, Graph, Node, Tensor, Work


@dataclass(frozen=True)
class FusionContext:
    """What decides whether a rule may fire in one phase of one run."""

    phase: str  # prefill | decode
    soc_version: str
    tokens: int  # tokens per step in this phase (batch x query length)
    seq_len: int  # longest sequence the phase sees
    softmax_fusion_max_seq: int = 1024
    shape_buckets: tuple[int, ...] | None = None
    dtype: str = "fp16"


@dataclass(frozen=True)
class NearMiss:
    rule: str
    phase: str
    layer: int
    node: int  # graph node where the attempted match starts
    reason: str


@dataclass
class FusionResult:
    graph: Graph
    fired: dict[str, int] = field(default_factory=dict)
    near_misses: list[NearMiss] = field(default_factory=list)
    disabled: dict[str, str] = field(default_factory=dict)  # rule -> why it was switched off for the phase


@lru_cache(maxsize=8192)
def type_matches(want: str, have: str) -> bool:
    """Does op type `have` match a rule's `want` (alternatives 'A|B', globs 'Fused*MatMul')? Remembered: a
    re-simulating what-if asks the same few pairs for every node of every pass."""
    return any(fnmatch.fnmatchcase(have, alt) for alt in want.split("|"))


def _fused_type(pattern: Pattern, ctx: FusionContext, members: Sequence[Node]) -> str:
    if ctx.soc_version in pattern.fused_by_soc:
        return pattern.fused_by_soc[ctx.soc_version]
    fused = pattern.fused if isinstance(pattern.fused, str) else pattern.fused[ctx.phase]
    return fused.format(*(m.op_type for m in members))


def _unit(node: Node) -> str:
    units = {w.unit for w in node.work}
    return units.pop() if len(units) == 1 else "mix"


class _Sweep:
    """Builds the rewritten node list; `remap` points replaced node ids at the node that now produces them."""

    def __init__(self, graph: Graph) -> None:
        self.src = graph.nodes
        self.consumers = graph.consumers()
        self.out: list[Node] = []
        self.remap: dict[int, int] = {}
        self.dropped: set[int] = set()
        self.next_id = max((n.id for n in self.src), default=-1) + 1

    def current(self, node: Node) -> Node:
        """The node with its inputs re-pointed at fused producers."""
        if any(e.producer in self.remap for e in node.inputs):
            node = node.clone(inputs=[Edge(self.remap.get(e.producer, e.producer), e.tensor) for e in node.inputs])
        return node

    def fuse(
        self,
        rule: Rule,
        members: list[Node],
        op_type: str,
        op_name: str,
        keep: list[Tensor],
        role_idx: int,
    ) -> Node:
        """`keep`: member outputs read outside the match (they stay outputs of the fused kernel)."""
        ids = {m.id for m in members}
        units = {m.id: _unit(m) for m in members}
        inputs: list[Edge] = []
        handoff: list[Lin] = []
        for m in members:
            for e in m.inputs:
                if e.producer in ids:
                    if units[e.producer] != units[m.id]:
                        handoff.append(e.tensor.nbytes)
                elif e not in inputs:
                    inputs.append(e)
        outputs: list[Tensor] = []
        for t in [*keep, *members[-1].outputs]:
            if not any(t is o for o in outputs):
                outputs.append(t)
        params: list[Tensor] = []
        for m in members:  # by identity: two caches of one shape are two tensors
            params.extend(p for p in m.params if not any(p is q for q in params))
        writes = ZERO
        for m in members:
            writes = writes + m.writes_params
        node = Node(
            id=self.next_id,
            op_type=op_type,
            op_name=op_name,
            role=members[role_idx].role,
            layer=members[role_idx].layer,
            inputs=inputs,
            outputs=outputs,
            params=params,
            work=[_scaled(w, rule.vec_scale) for m in members for w in m.work],
            fused_from=tuple(t for m in members for t in (m.fused_from or (m.op_type,))),
            rule=rule.name,
            units=1 if rule.library else sum(m.units for m in members),
            icache=not rule.library,
            handoff=[h for m in members for h in m.handoff] + handoff,
            stream=members[role_idx].stream,  # the kernel's own (MC2: the MatMul's, not the collective's)
            writes_params=writes,
            origin=tuple(sorted(i for m in members for i in m.origin_ids)),
        )
        self.next_id += 1
        for m in members:
            self.remap[m.id] = node.id
        self.consumers[node.id] = [c for m in members for c in self.consumers.get(m.id, []) if c not in ids]
        return node

    def finish(self, graph: Graph) -> Graph:
        nodes = [n for n in self.out if n.id not in self.dropped]
        return Graph([self.current(n) for n in nodes], graph.phase, graph.notes)


def _scaled(work: Work, vec_scale: float) -> Work:
    if vec_scale == 1.0:
        return work
    return Work(work.unit, work.mm, work.vec_bytes * vec_scale, work.vec_flops, work.stream_bytes, work.kind)


def _constraint_kind(rule: Rule, ctx: FusionContext) -> str | None:
    """Which of `_constraint`'s checks switches the rule off (None: none does)."""
    if rule.phases and ctx.phase not in rule.phases:
        return "phase"
    if rule.dtypes and ctx.dtype not in rule.dtypes:
        return "dtype"
    if rule.max_seq and ctx.seq_len > ctx.softmax_fusion_max_seq:
        return "max_seq"
    if rule.static_shape and ctx.shape_buckets is not None and ctx.tokens not in ctx.shape_buckets:
        return "static_shape"
    return None


def _constraint(rule: Rule, ctx: FusionContext) -> str | None:
    """Why the rule is switched off in `ctx`, in words (None: it is not)."""
    kind = _constraint_kind(rule, ctx)
    if kind == "phase":
        return f"applied in {', '.join(rule.phases)} only"
    if kind == "dtype":
        return f"the fused kernel supports {', '.join(rule.dtypes)}, not {ctx.dtype}"
    if kind == "max_seq":
        return (
            f"sequence length {ctx.seq_len} > fusion.softmax_fusion_max_seq {ctx.softmax_fusion_max_seq} "
            "(softmax fusion overflows in fp16 on long sequences, seed 002 pitfall 1)"
        )
    if kind == "static_shape":
        return (
            f"{ctx.tokens} tokens per step is outside the compiled shape buckets {list(ctx.shape_buckets or ())} "
            "(the fused kernel falls back, seed 002 pitfall 3)"
        )
    return None


def _escapes_ok(rule: Rule, pattern: Pattern, window: Sequence[Node], k: int, tensor: Tensor) -> bool:
    """May output `tensor` of member k stay visible to ops outside the match?

    `exports` members keep all outputs; `export_if` members keep all but their primary (last) output - the
    residual sum of an AddRmsNorm may leave a Norm+MatMul kernel, the normalised activation may not."""
    if k in rule.exports or k == len(window) - 1:
        return True
    glob = pattern.export_if.get(k)
    return glob is not None and type_matches(glob, window[k].op_type) and tensor is not window[k].outputs[-1]


def _escaping(
    sw_consumers: dict[int, list[int]], by_id: dict[int, Node], window: Sequence[Node]
) -> list[tuple[int, Tensor, Node]]:
    """(member index, tensor, consumer) for every edge from a member to an op outside the window."""
    ids = {m.id for m in window}
    out = []
    for k, m in enumerate(window):
        for c in sw_consumers.get(m.id, []):
            if c in ids or c not in by_id:
                continue
            for e in by_id[c].inputs:
                if e.producer == m.id:
                    out.append((k, e.tensor, by_id[c]))
    return out


def _structure(
    rule: Rule, pattern: Pattern, window: list[Node], consumers: dict[int, list[int]], by_id: dict[int, Node]
) -> str | None:
    ids = [m.id for m in window]
    if len({m.layer for m in window}) > 1 and rule.role_from == -1:
        return "the ops span two layers"
    shared = {e.producer for e in window[0].inputs if e.producer >= 0}
    for k, m in enumerate(window[1:] if rule.connected else [], start=1):
        # connected: reads an earlier member, or the same producer as an earlier member (RoPE's slices of x)
        if not any(e.producer in ids[:k] or e.producer in shared for e in m.inputs):
            return f"{m.op_type} ({m.role}) reads nothing the earlier ops produce or read (not one subgraph)"
        shared.update(e.producer for e in m.inputs if e.producer >= 0)
    bad: dict[int, set[int]] = {}
    for k, tensor, consumer in _escaping(consumers, by_id, window):
        if not _escapes_ok(rule, pattern, window, k, tensor):
            bad.setdefault(k, set()).add(consumer.id)
    for k, outside in sorted(bad.items()):
        m = window[k]
        return (
            f"the output of {m.op_type} ({m.role}) is also read by {len(outside)} op(s) outside the pattern; "
            "fusing would drop it"
        )
    return None


def _interposed(pattern: Pattern, nodes: list[Node], i: int) -> str | None:
    """The pattern matches except for one op interposed inside it -> the reason, else None."""
    n = len(pattern.ops)
    if n < 2 or not type_matches(pattern.ops[0], nodes[i].op_type):
        return None
    k = 1
    while k < n and i + k < len(nodes) and type_matches(pattern.ops[k], nodes[i + k].op_type):
        k += 1
    rest = nodes[i + k + 1 : i + n + 1]
    if k >= n or len(rest) != n - k:
        return None
    extra, before = nodes[i + k], nodes[i + k - 1]
    if type_matches(pattern.ops[0], extra.op_type):
        return None  # the extra op starts a match of its own
    reads = {e.producer for e in rest[0].inputs}
    # interposed on the data path (Add -> Cast -> RmsNorm) or issued in between (Swish, up MatMul, Mul)
    on_path = extra.id in reads and any(e.producer == before.id for e in extra.inputs)
    if (on_path or before.id in reads) and all(
        type_matches(w, m.op_type) for w, m in zip(pattern.ops[k:], rest, strict=True)
    ):
        return f"{extra.op_type} ({extra.role}) is interposed between {pattern.ops[k - 1]} and {pattern.ops[k]}"
    return None


def _chain(rule: Rule, graph: Graph, ctx: FusionContext, result: FusionResult) -> Graph:
    sw = _Sweep(graph)
    why_off = _constraint(rule, ctx)
    src = graph.nodes
    by_id = {n.id: n for n in src}
    i = 0
    while i < len(src):
        matched = 0
        for pattern in rule.patterns:
            n = len(pattern.ops)
            raw = src[i : i + n]  # op types do not change when inputs are re-pointed: test them first
            if len(raw) < n or not all(type_matches(w, m.op_type) for w, m in zip(pattern.ops, raw, strict=True)):
                reason = _interposed(pattern, src, i) if type_matches(pattern.ops[0], src[i].op_type) else None
                if reason:
                    result.near_misses.append(NearMiss(rule.name, ctx.phase, src[i].layer, src[i].id, reason))
                continue
            window = [sw.current(m) for m in raw]
            reason = why_off or _structure(rule, pattern, window, sw.consumers, by_id)
            if reason:
                result.near_misses.append(NearMiss(rule.name, ctx.phase, window[-1].layer, window[0].id, reason))
                continue
            op_type = _fused_type(pattern, ctx, window)
            keep = [t for k, t, _ in _escaping(sw.consumers, by_id, window) if k < n - 1]
            role_from = rule.role_from if pattern.role_from is None else pattern.role_from
            node = sw.fuse(rule, window, op_type, pattern.op_name or op_type, keep, role_from)
            _absorb(rule, sw, node)
            if rule.actual_lengths:
                _at_actual_lengths(node)
                if rule.causal:
                    _causal(node)
            sw.out.append(node)
            result.fired[rule.name] = result.fired.get(rule.name, 0) + 1
            matched = n
            break
        if matched:
            i += matched
        else:
            sw.out.append(src[i])
            i += 1
    if why_off and any(nm.rule == rule.name for nm in result.near_misses):
        result.disabled.setdefault(rule.name, why_off)
    return sw.finish(graph)


def _actual(t: Tensor) -> Tensor:
    return Tensor(tuple(d.at_actual_lengths() for d in t.shape), t.dtype, t.nbytes.at_actual_lengths())


def _at_actual_lengths(node: Node) -> None:
    """A kernel given the actual sequence lengths (FlashAttention's actual_seq_lengths) reads and computes over
    the KV length, not the whole attended cache (the same sizes when the cache is not fixed)."""
    node.work = [
        replace(
            w,
            mm=w.mm and (*(d.at_actual_lengths() for d in w.mm),),  # type: ignore[arg-type]
            vec_bytes=w.vec_bytes.at_actual_lengths(),
            vec_flops=w.vec_flops.at_actual_lengths(),
            stream_bytes=w.stream_bytes.at_actual_lengths(),
        )
        for w in node.work
    ]
    node.inputs = [Edge(e.producer, _actual(e.tensor)) for e in node.inputs]
    node.params = [_actual(p) for p in node.params]
    node.handoff = [h.at_actual_lengths() for h in node.handoff]


def _causal(node: Node) -> None:
    """A fused attention kernel under a causal mask (sparse_mode / next_tokens = 0) skips the blocks above the
    diagonal: its GEMMs run over the causal KV length and its softmax over the causal (token, position) pairs -
    the same accounting `predict` uses. Eager attention computes every pair and masks it: it keeps the square."""
    node.work = [
        replace(
            w,
            mm=w.mm and (*(d.causal_length() for d in w.mm),),  # type: ignore[arg-type]
            vec_bytes=w.vec_bytes.causal_pairs(),
            vec_flops=w.vec_flops.causal_pairs(),
        )
        for w in node.work
    ]
    node.handoff = [h.causal_pairs() for h in node.handoff]


def _absorb(rule: Rule, sw: _Sweep, node: Node) -> None:
    """Drop producers (the GQA BroadcastTo copies, the dequantised copies of an int8 cache) read only by the fused
    kernel, and the producers of those in turn: it reads their sources instead (the cache, as stored)."""
    if not rule.absorb_inputs:
        return
    by_id = {n.id: n for n in sw.out[-16:]}
    absorbed: set[int] = set()
    group = 1.0
    pending = list(node.inputs)
    while pending:
        e = pending.pop(0)
        prod = by_id.get(e.producer)
        if prod is None or prod.op_type not in rule.absorb_inputs or prod.id in absorbed:
            continue
        if any(sw.remap.get(c) != node.id and c not in absorbed for c in sw.consumers.get(prod.id, [])):
            continue  # someone else still reads the copy
        if prod.op_type == "BroadcastTo":  # the copy's size over its source's: the GQA group
            source = prod.params[0].nbytes if prod.params else prod.inputs[0].tensor.nbytes if prod.inputs else None
            if source is not None and source.coef.sum():
                group = float(prod.work[0].vec_bytes.coef.sum() / source.coef.sum())
        if e in node.inputs:
            node.inputs.remove(e)
        node.params.extend(p for p in prod.params if not any(p is q for q in node.params))
        node.work = [w for w in node.work if w is not prod.work[0]]
        node.fused_from = (*node.fused_from, prod.op_type)
        node.origin = tuple(sorted((*node.origin_ids, *prod.origin_ids)))
        sw.dropped.add(prod.id)
        absorbed.add(prod.id)
        pending.extend(prod.inputs)  # what the copy was made from (a dequantised cache before a GQA copy)
    if absorbed:
        streamed = ZERO
        for p in node.params:
            streamed = streamed + p.nbytes
        # the fused kernel streams each KV cache once, at its stored (not repeated) size, and multiplies each KV
        # head with its whole query group at once (the group's rows stacked along M), not once per query head
        node.work = [Work(w.unit, _grouped(w.mm, group), w.vec_bytes, w.vec_flops, ZERO, w.kind) for w in node.work]
        node.work.append(Work("vector", stream_bytes=streamed, kind="kv_stream"))


def _grouped(mm: tuple[Lin, Lin, Lin, Lin] | None, group: float) -> tuple[Lin, Lin, Lin, Lin] | None:
    """(batch, M, K, N) of a per-query-head product, as a GQA kernel runs it: batch / group, M x group."""
    if mm is None or group <= 1:
        return mm
    b, m, k, n = mm
    return (b * (1 / group), m * group, k, n)


def _siblings(rule: Rule, graph: Graph, ctx: FusionContext, result: FusionResult) -> Graph:
    sw = _Sweep(graph)
    groups: dict[tuple[int, int], list[Node]] = {}
    for n in graph.nodes:
        if n.op_type in MERGEABLE_GEMMS and n.role in rule.roles and n.inputs:
            groups.setdefault((n.layer, n.inputs[0].producer), []).append(n)
    merged: dict[int, Node] = {}
    skip: set[int] = set()
    for members in groups.values():
        if sorted(m.role for m in members) != sorted(rule.roles):
            result.near_misses.append(
                NearMiss(
                    rule.name,
                    ctx.phase,
                    members[0].layer,
                    members[0].id,
                    f"only {', '.join(m.role for m in members)} read the same input",
                )
            )
            continue
        w0 = members[0]
        k = w0.params[0].shape[0]
        n_total = int(sum(m.params[0].shape[1].coef[0] for m in members))
        n0 = int(w0.params[0].shape[1].coef[0])
        per_element = float(w0.params[0].nbytes.coef[0]) / max(int(k.coef[0]) * n0, 1)  # 2 (fp16), 1 (int8)
        weight = Tensor((k, Lin(one=n_total)), w0.params[0].dtype, Lin(one=int(k.coef[0]) * n_total * per_element))
        out_bytes = ZERO
        for m in members:
            out_bytes = out_bytes + m.outputs[0].nbytes
        out = Tensor((*w0.outputs[0].shape[:-1], Lin(one=n_total)), w0.outputs[0].dtype, out_bytes)
        mm = w0.work[0].mm
        assert mm is not None
        node = sw.fuse(rule, members, w0.op_type, w0.op_name, [], 0)
        node.role = rule.role
        node.params = [weight]
        node.outputs = [out]
        node.work = [
            Work(
                "cube",
                mm=(mm[0], mm[1], mm[2], Lin(one=n_total)),
                stream_bytes=weight.nbytes,
                kind=w0.work[0].kind,
            )
        ]
        node.fused_from = ()  # a merged GEMM is one GEMM, not a fusion of different op types
        node.units, node.icache, node.rule = 1, False, ""
        merged[w0.id] = node
        skip.update(m.id for m in members[1:])
        result.fired[rule.name] = result.fired.get(rule.name, 0) + 1
    for n in graph.nodes:
        if n.id in merged:
            sw.out.append(merged[n.id])
        elif n.id not in skip:
            sw.out.append(n)
    return sw.finish(graph)


MERGEABLE_GEMMS = ("MatMulV2", "QuantBatchMatmulV3")  # siblings rules merge these (same op type) on one input


def _groups(rule: Rule, graph: Graph, ctx: FusionContext, result: FusionResult) -> Graph:
    """Per layer, every kernel of a group's roles -> that group's one fused kernel, issued where its last member
    was, once everything it reads exists (a MoE layer's loop over the experts -> MoeInitRouting, GroupedMatmul,
    SwiGlu, GroupedMatmul, MoeFinalizeRouting). The members' work is kept: a grouped GEMM does each expert's GEMM,
    in one launch."""
    sw = _Sweep(graph)
    why_off = _constraint(rule, ctx)
    members: dict[tuple[int, int], list[Node]] = {}
    for n in graph.nodes:
        for g, group in enumerate(rule.groups):
            if n.role in group.roles:
                members.setdefault((n.layer, g), []).append(n)
    layers = {layer for layer, _ in members}
    complete = {layer for layer in layers if all((layer, g) in members for g in range(len(rule.groups)))}
    for layer in sorted(layers - complete):
        first = min(n.id for (ly, _), ns in members.items() if ly == layer for n in ns)
        result.near_misses.append(NearMiss(rule.name, ctx.phase, layer, first, "not every group's roles are here"))
    if why_off:
        if complete:
            first = min(n.id for (ly, _), ns in members.items() if ly in complete for n in ns)
            result.near_misses.append(NearMiss(rule.name, ctx.phase, min(complete), first, why_off))
            result.disabled.setdefault(rule.name, why_off)
        return graph
    at: dict[int, tuple[int, int]] = {}  # last member's id -> its (layer, group)
    taken: set[int] = set()
    for (layer, g), ns in members.items():
        if layer in complete:
            at[ns[-1].id] = (layer, g)
            taken.update(n.id for n in ns)
    for n in graph.nodes:
        if n.id in at:
            layer, g = at[n.id]
            ns = [sw.current(m) for m in members[(layer, g)]]
            fused = rule.groups[g].fused
            sw.out.append(sw.fuse(rule, ns, fused, fused, [], -1))
        elif n.id not in taken:
            sw.out.append(n)
    if complete:
        result.fired[rule.name] = result.fired.get(rule.name, 0) + len(complete)
    return sw.finish(graph)


_PASSES = {"chain": _chain, "siblings": _siblings, "grouped": _groups}


def apply_fusion(graph: Graph, rules: list[Rule], ctx: FusionContext) -> FusionResult:
    """The rules' passes in order. Passes never mutate their input graph, so the graph after each prefix of `rules`
    is remembered (per source graph, context and rule objects) and a later call with the same prefix starts from
    it: `analyze`'s what-if re-simulates a run with one more rule at a time, and `build_graph` / the built-in rules
    are cached, so each re-simulation runs only the passes of the new rules."""
    start, g = 0, Graph(list(graph.nodes), ctx.phase)
    result = FusionResult(graph=graph)
    snap = _longest_prefix(graph, rules, ctx)
    if snap is not None:
        start, g = len(snap.rules), snap.graph
        near, disabled = _retexted(snap, ctx)
        result = FusionResult(graph, dict(snap.fired), near, disabled)
    for i in range(start, len(rules)):
        rule = rules[i]
        g = _PASSES[rule.kind](rule, g, ctx, result)
        _remember(
            _Prefix(
                graph,
                ctx,
                tuple(rules[: i + 1]),
                g,
                dict(result.fired),
                tuple(result.near_misses),
                dict(result.disabled),
            )
        )
    result.graph = Graph(list(g.nodes), g.phase, list(g.notes))  # the remembered graph stays as it is
    return result


@dataclass(frozen=True)
class _Prefix:
    """The graph after the first rules of a rule list (strong references: the ids in the key stay unique)."""

    source: Graph
    ctx: FusionContext
    rules: tuple[Rule, ...]
    graph: Graph
    fired: dict[str, int]
    near_misses: tuple[NearMiss, ...]
    disabled: dict[str, str]

    @property
    def key(self) -> tuple[object, ...]:
        return _prefix_key(self.source, self.ctx, self.rules)


def _prefix_key(graph: Graph, ctx: FusionContext, rules: Sequence[Rule]) -> tuple[object, ...]:
    """A pass sees its context only through the phase, the SoC and which constraint, if any, switches each rule off
    (`_constraint`; its text, which names the sequence length, is put right on a hit: `_retexted`): two contexts
    that agree on those give the same graph, so a sweep over batch sizes and prompt lengths reuses it."""
    kinds = tuple(_constraint_kind(r, ctx) for r in rules)
    return (id(graph), ctx.phase, ctx.soc_version, ctx.dtype, tuple(map(id, rules)), kinds)


def _retexted(snap: _Prefix, ctx: FusionContext) -> tuple[list[NearMiss], dict[str, str]]:
    """The snapshot's near misses and switched-off rules with each constraint's text as `ctx` words it."""
    near, disabled = list(snap.near_misses), dict(snap.disabled)
    for rule in snap.rules:
        old, new = _constraint(rule, snap.ctx), _constraint(rule, ctx)
        if old is None or new is None or old == new:
            continue
        near = [replace(m, reason=new) if m.rule == rule.name and m.reason == old else m for m in near]
        if disabled.get(rule.name) == old:
            disabled[rule.name] = new
    return near, disabled


_PREFIXES: OrderedDict[tuple[object, ...], _Prefix] = OrderedDict()
_PREFIX_LIMIT = 256  # a few runs' (or a sweep's models x fusions) worth of prefixes (~1-5k shared nodes each)


_PREFIX_LOCK = threading.Lock()


def forget_prefixes() -> None:
    """Drop the remembered prefixes (benchmarks: measure a cold start)."""
    with _PREFIX_LOCK:
        _PREFIXES.clear()


def _longest_prefix(graph: Graph, rules: list[Rule], ctx: FusionContext) -> _Prefix | None:
    with _PREFIX_LOCK:
        for k in range(len(rules), 0, -1):
            snap = _PREFIXES.get(_prefix_key(graph, ctx, rules[:k]))
            if (
                snap is not None
                and snap.source is graph
                and all(a is b for a, b in zip(snap.rules, rules[:k], strict=True))
            ):
                _PREFIXES.move_to_end(snap.key)
                return snap
    return None


def _remember(prefix: _Prefix) -> None:
    with _PREFIX_LOCK:
        _PREFIXES[prefix.key] = prefix
        _PREFIXES.move_to_end(prefix.key)
        while len(_PREFIXES) > _PREFIX_LIMIT:
            _PREFIXES.popitem(last=False)
