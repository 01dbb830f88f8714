"""Detect unfused norms (and the norms already fused) in an op table and a framework table.

Each (step, stream) group of ops becomes a string of class symbols (one byte per op, see patterns.py); groups are
joined with a separator no pattern can cross, and every pattern is one compiled-regex scan over the whole string.
Matches then go through the pattern's check: a data edge in the run's graph for runs of ours (`edges`), the
tensor shapes for other profiles (they record no data edges). Pure: tables in, a FINDINGS_SCHEMA table out.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import numpy as np
import pyarrow as pa

from atbprof.analyze.patterns import OTHER, SEPARATOR, CompiledLevel, CompiledPattern, PatternSet, token_classes
from atbprof.analyze.report import FINDINGS_SCHEMA
from atbprof.analyze.view import OpView, dict_codes, has_values, int_column
from atbprof.arrays import distinct
from atbprof.importers.optypes import ELEMENTWISE_WRAPPERS, kernel_functor

EVIDENCE_SEQUENCE = "op-type sequence on one stream"
EVIDENCE_EDGE = "data edge in the run's graph"
EVIDENCE_EDGE_ONLY = "data edge in the run's graph; the MatMul is the norm's only reader"
EVIDENCE_SHAPE = "next kernel on the stream with output shape = its input shape (the profile has no data edges)"
EVIDENCE_SHAPE_ONLY = EVIDENCE_SHAPE[:-1] + "; other readers of the norm unknown)"
EVIDENCE_NO_SHAPE = "next kernel on the stream (the profile records no shapes to confirm the data edge)"
EVIDENCE_FRAMEWORK = "outermost framework ops in sequence on one thread"


def member_ranges(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All positions of the half-open ranges [starts, ends), concatenated, and the offsets of each range."""
    lengths = ends - starts
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    members = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1] - starts, lengths)
    return members, offsets


def _without(members: np.ndarray, offsets: np.ndarray, skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`member_ranges` output less the positions where `skip` is set (a pattern's `between` ops)."""
    keep = ~skip[members]
    kept = np.add.reduceat(keep.astype(np.int64), offsets[:-1]) if len(members) else np.zeros(0, np.int64)
    return members[keep], np.concatenate(([0], np.cumsum(kept))).astype(np.int64)


@lru_cache(maxsize=4096)  # a profile has few distinct shape strings
def first_tensor(shapes: str | None) -> tuple[int, ...] | None:
    """'4096,1,1024;1024' -> (4096, 1, 1024); None when absent or not numeric."""
    if not shapes:
        return None
    head = shapes.strip('"').split(";")[0].strip().strip('"')
    try:
        return tuple(int(d) for d in head.split(",")) if head else None
    except ValueError:
        return None


def same_tensor(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> bool:
    """Equal, or equal up to a view (same element count and last dimension: a reshape is free)."""
    if a is None or b is None:
        return False
    return a == b or (a[-1:] == b[-1:] and int(np.prod(a)) == int(np.prod(b)))


def scan(
    level: CompiledLevel, view: OpView, across: bool = False
) -> tuple[list[tuple[CompiledPattern, np.ndarray, np.ndarray]], np.ndarray]:
    """(pattern, first position, end position) of every match, in view order; claimed ops are hidden from later
    patterns. Also the class symbol of each op (a pattern's `between` ops inside a match are not its members).
    `across`: the patterns matched over a step's streams merged (the view then has one group per step).

    Each distinct (step, stream) string is matched once and its matches repeated at every group with that string:
    the decode steps of a run (or of a profile of many steps) issue the same kernels step after step."""
    n = len(view)
    lut = np.append(level.lookup(view.type_names), np.uint8(OTHER))  # code -1 (null type) -> other
    symbols = _functor_symbols(level, view, lut[view.type_codes])
    starts = np.zeros(0, np.int64)  # each (step, stream) group's first position
    if n:
        starts = np.concatenate(([0], np.flatnonzero(view.group_first[1:]) + 1)).astype(np.int64)
    ends = np.append(starts[1:], n).astype(np.int64) if n else starts
    raw = symbols.tobytes()
    uid_of: dict[bytes, int] = {}
    group_uid = np.array(
        [uid_of.setdefault(raw[a:b], len(uid_of)) for a, b in zip(starts, ends, strict=True)], np.int64
    )
    distinct = list(uid_of)
    buf = bytearray(bytes([SEPARATOR]).join(distinct))
    base = np.concatenate(([0], np.cumsum([len(d) + 1 for d in distinct]))).astype(np.int64)  # each one's offset
    writable = np.frombuffer(buf, dtype=np.uint8)
    # the groups of each distinct string, in view order
    by_uid = np.argsort(group_uid, kind="stable")
    per_uid = np.bincount(group_uid, minlength=len(distinct))
    first_of_uid = np.concatenate(([0], np.cumsum(per_uid))).astype(np.int64)
    present = np.bincount(symbols, minlength=256) > 0
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    out = []
    for cp in level.patterns:
        if cp.spec.across_streams != across:
            continue
        if any(not present[list(token)].any() for token in cp.required):  # a token it needs never occurs
            out.append((cp, *empty))
            continue
        # the gap-tolerant regex is several times slower: use it only when a gap op occurs at all
        regex = cp.regex if present[list(cp.gap_symbols)].any() else cp.plain
        if cp.single is not None:  # one op of a class (a fused kernel): where its symbols are, without the regex
            at = np.flatnonzero(np.isin(writable, np.array(cp.single, np.uint8)))
            spans = np.stack([at, at + 1], axis=1).astype(np.int64)
        else:
            spans = np.array([m.span() for m in regex.finditer(buf)], dtype=np.int64).reshape(-1, 2)
        if not len(spans):
            out.append((cp, *empty))
            continue
        # a user regex such as [^A] could match the separator: such a match spans two strings
        uid = np.searchsorted(base, spans[:, 0], side="right") - 1
        ok = (np.searchsorted(base, spans[:, 1] - 1, side="right") - 1 == uid) & (writable[spans[:, 0]] != SEPARATOR)
        ok &= writable[spans[:, 1] - 1] != SEPARATOR
        spans, uid = spans[ok], uid[ok]
        if cp.spec.claims and len(spans):
            writable[member_ranges(spans[:, 0], spans[:, 1])[0]] = OTHER
            if cp.leaves_symbol is not None:  # its ends: the Add in front, the MatMul after
                writable[spans[:, 0]] = cp.leaves_symbol
                writable[spans[:, 1] - 1] = cp.leaves_symbol
                present[cp.leaves_symbol] = True
        # every group with that string gets the match, at its own position
        offset, length = spans[:, 0] - base[uid], spans[:, 1] - spans[:, 0]
        copies = per_uid[uid]
        which = np.repeat(np.arange(len(spans)), copies)
        nth = np.arange(int(copies.sum())) - np.repeat(np.cumsum(copies) - copies, copies)
        group = by_uid[first_of_uid[uid[which]] + nth]
        first = starts[group] + offset[which]
        order = np.argsort(first, kind="stable")
        out.append((cp, first[order], (first + length[which])[order]))
    return out, symbols


def _functor_symbols(level: CompiledLevel, view: OpView, symbols: np.ndarray) -> np.ndarray:
    """`symbols`, with PyTorch's generic elementwise / reduce kernels classed by the aten op their name carries
    (optypes.kernel_functor: `reduce_kernel<…MeanOps…>` is a mean), so a chain seen only as kernels - a decode
    replayed from a graph, a trace without framework ops - is found like its aten calls are."""
    generic = [i for i, t in enumerate(view.type_names) if t in ELEMENTWISE_WRAPPERS]
    if not generic:
        return symbols
    at = np.flatnonzero(np.isin(view.type_codes, np.array(generic, np.int64)))
    name_codes, names = view.codes("op_name")
    used = distinct(name_codes[at])
    used = used[used >= 0]
    if not len(used):
        return symbols
    functors = [kernel_functor(names[c]) or "" for c in used.tolist()]
    found = np.array([bool(f) for f in functors], bool)
    classes = np.where(found, level.lookup(functors), np.uint8(OTHER)).astype(np.uint8)
    per_name = np.full(len(names) + 1, np.uint8(OTHER), np.uint8)
    per_name[used] = classes
    named = per_name[name_codes[at]]
    out = symbols.copy()
    out[at] = np.where(named != OTHER, named, symbols[at])
    return out


EVIDENCE = (
    EVIDENCE_SEQUENCE,
    EVIDENCE_EDGE,
    EVIDENCE_EDGE_ONLY,
    EVIDENCE_SHAPE,
    EVIDENCE_SHAPE_ONLY,
    EVIDENCE_NO_SHAPE,
    EVIDENCE_FRAMEWORK,
)


def _edge_map(edges: pa.Table) -> dict[tuple[str, int], tuple[int, ...]]:
    phases = edges.column("phase").to_pylist()
    nodes = edges.column("node_id").to_pylist()
    consumers = edges.column("consumers").to_pylist()
    return {(p, n): tuple(c) for p, n, c in zip(phases, nodes, consumers, strict=True)}


def _per_pair(
    a: np.ndarray, b: np.ndarray, decide: Callable[[int, int], tuple[bool, int]]
) -> tuple[np.ndarray, np.ndarray]:
    """Apply `decide` once per distinct (a, b) pair - a run repeats the same few node/shape pairs every step."""
    pairs, inverse = _unique_pairs(a.astype(np.int64), b.astype(np.int64))
    decided = [decide(int(x), int(y)) for x, y in pairs.tolist()]
    keep = np.array([d[0] for d in decided], dtype=bool)
    evidence = np.array([d[1] for d in decided], dtype=np.int8)
    inverse = inverse.ravel()
    return keep[inverse], evidence[inverse]


def _unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(stack([a, b], axis=1), axis=0, return_inverse=True), through one int64 key when the value ranges
    allow (several times faster than sorting rows)."""
    if len(a) == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0, np.int64)
    a0, b0 = int(a.min()), int(b.min())
    width = int(b.max()) - b0 + 1
    if (int(a.max()) - a0 + 1) * width >= 2**62:
        pairs, inverse = np.unique(np.stack([a, b], axis=1), axis=0, return_inverse=True)
        return pairs, inverse.ravel()
    keys, inverse = np.unique((a - a0) * width + (b - b0), return_inverse=True)
    return np.stack([keys // width + a0, keys % width + b0], axis=1), inverse.ravel()


def _check(
    cp: CompiledPattern, view: OpView, first: np.ndarray, end: np.ndarray, edges: dict[tuple[str, int], tuple[int, ...]]
) -> tuple[np.ndarray, np.ndarray]:
    """Which matches [first, end) pass the pattern's check, and the evidence (index into EVIDENCE) of each."""
    k = len(first)
    last = end - 1
    check = cp.spec.check
    if check == "none" or not k:
        return np.ones(k, dtype=bool), np.zeros(k, dtype=np.int8)
    only = check == "feeds_only"
    node_a, node_b = view.ints("node_id", first), view.ints("node_id", last)
    if edges and (node_a >= 0).all():
        phase_codes, phases = view.codes("phase")
        phase_a = phase_codes[first]
        # (phase, node) packed into one integer so that distinct (producer, consumer) pairs can be found at once
        packed = phase_a * (1 << 32) + node_a

        def by_edge(producer: int, consumer: int) -> tuple[bool, int]:
            code, node = divmod(producer, 1 << 32)
            readers = edges.get((phases[code] if code >= 0 else "", node), ())
            reads = consumer in readers and (not only or readers == (consumer,))
            return reads, 2 if only else 1

        return _per_pair(packed, node_b, by_edge)
    out_codes, out_names = view.codes("output_shapes")
    in_codes, in_names = view.codes("input_shapes")

    def by_shape(out_code: int, in_code: int) -> tuple[bool, int]:
        a = first_tensor(out_names[out_code]) if out_code >= 0 else None
        b = first_tensor(in_names[in_code]) if in_code >= 0 else None
        if a is None or b is None:
            return True, 5  # adjacency alone; the evidence says the shapes could not confirm it
        return same_tensor(a, b), 4 if only else 3

    return _per_pair(out_codes[first], in_codes[last], by_shape)


def _last_dims(view: OpView, positions: np.ndarray) -> pa.Array:
    """Last dimension of the first output tensor at positions (null when unknown), parsing each string once."""
    codes, names = view.codes("output_shapes")
    per_name = np.array([(first_tensor(s) or (-1,))[-1] for s in names] + [-1], dtype=np.int64)
    dims = per_name[codes[positions]]
    return pa.array(dims, pa.int64(), mask=dims < 0)


def _table(
    level: str,
    cp: CompiledPattern,
    view: OpView,
    first: np.ndarray,
    last: np.ndarray,
    evidence: np.ndarray,
    kernel_level: bool,
    skip: np.ndarray | None = None,
) -> pa.Table:
    k = len(first)
    members, offsets = member_ranges(first, last)
    if skip is not None:
        members, offsets = _without(members, offsets, skip)
    starts = offsets[:-1]
    kernel = np.add.reduceat(view.dur[members], starts) if k else np.zeros(0, np.int64)
    longest = np.maximum.reduceat(view.dur[members], starts) if k else np.zeros(0, np.int64)
    wait = np.add.reduceat(view.gap[members], starts) if k else np.zeros(0, np.int64)
    inner = wait - view.gap[first]
    launch: pa.Array = pa.nulls(k, pa.int64())
    if kernel_level and has_values(view.table, "host_launch_dur_ns"):
        per_op = view.ints("host_launch_dur_ns", fill=0)
        launch = pa.array(np.add.reduceat(per_op[members], starts) if k else np.zeros(0, np.int64))
    anchor = first if cp.spec.anchor == 0 else last - 1
    names = [*view.type_names, ""]
    if "{0}" in cp.spec.fused_as:  # one fused name per op type of the first member
        fused = pa.array([cp.spec.fused_as.format(t) for t in names]).take(pa.array(view.type_codes[first]))
    elif cp.spec.fused_as:
        fused = pa.repeat(pa.scalar(cp.spec.fused_as), k)
    else:
        fused = pa.array(names).take(pa.array(view.type_codes[anchor]))
    step = view.step[anchor]
    stream = view.stream[anchor]

    def const(value: str) -> pa.Array:
        return pa.repeat(pa.scalar(value, pa.string()), k)

    def column(name: str, positions: np.ndarray, typ: pa.DataType) -> pa.Array:
        return view.arrow(name, positions, typ) if kernel_level else pa.nulls(k, typ)

    columns: dict[str, pa.Array | np.ndarray] = {
        "level": const(level),
        "kind": const(cp.spec.kind),
        "pattern": const(cp.spec.name),
        "fused_as": fused,
        "rule": const(cp.spec.rule),
        "step": pa.array(step, pa.int32(), mask=step < 0),
        "phase": column("phase", anchor, pa.string()),
        "stream_id": pa.array(stream, pa.int64(), mask=stream < 0),
        "layer": column("layer", anchor, pa.int32()),
        "role": column("role", anchor, pa.string()),
        "start_ns": view.start[first],
        "op_indices": pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(view.op_index[members])),
        "kernel_ns": kernel,
        "max_kernel_ns": longest,
        "last_kernel_ns": view.dur[last - 1],
        "wait_ns": wait,
        "inner_wait_ns": inner,
        "launch_ns": launch,
        "time_ns": kernel + wait,
        # framework level: the first call's inputs (the chain's input tensor: what a fused call would read)
        "shape": column("input_shapes", anchor, pa.string())
        if kernel_level
        else view.arrow("input_shapes", first, pa.string()),
        "dtype": column("input_dtypes", anchor, pa.string()),
        # the MatMul's N: a Norm->MatMul's, or that of the Norm+MatMul kernel an Add folds into
        "out_width": _last_dims(view, last - 1)
        if cp.spec.kind == "norm_matmul" or cp.spec.fused_as.endswith("MatMul")
        else pa.nulls(k, pa.int64()),
        "evidence": pa.array(EVIDENCE, pa.string()).take(pa.array(evidence.astype(np.int32))),
        "est_fused_ns": pa.nulls(k, pa.float64()),
        "est_saving_ns": pa.nulls(k, pa.float64()),
        "device_ns": pa.nulls(k, pa.float64()),
        "device_kernels": pa.nulls(k, pa.int64()),
    }
    arrays = [pa.array(columns[f.name], f.type) for f in FINDINGS_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=FINDINGS_SCHEMA)


def detect_kernels(
    ops: pa.Table, patterns: PatternSet, edges: pa.Table | None = None, view: OpView | None = None
) -> pa.Table:
    """Findings in the device op table (OPS_SCHEMA). `edges`: the run's graph (see graph_edges.py), if known;
    `view`: the table's OpView when the caller already built it."""
    parts = detect_parts(ops, patterns, edges, view)
    return pa.concat_tables([t for _, t in parts]) if parts else FINDINGS_SCHEMA.empty_table()


def detect_parts(
    ops: pa.Table,
    patterns: PatternSet,
    edges: pa.Table | None = None,
    view: OpView | None = None,
    merge: bool | None = None,
) -> list[tuple[tuple[int, int], pa.Table]]:
    """`detect_kernels`' findings as ((pass, pattern number), table) parts in its order: the parts of chunks of
    whole steps, gathered by key, concatenate to the findings of the whole table. `merge`: match the patterns
    across streams (None: when this table calls for it, `merge_wanted`)."""
    view = view or OpView.build(ops)
    edge_map = _edge_map(edges) if edges is not None else {}
    parts = []
    if merge is None:
        merge = merge_wanted(patterns.kernel, len(distinct(view.stream)), view.type_names)
    # MC2: a MatMul and its collective on two streams
    merged = OpView.build(ops, stream_col="") if merge else None  # no stream column: a step's ops in one group
    number = {id(cp): k for k, cp in enumerate(patterns.kernel.patterns)}
    for where, across in ((view, False), *(((merged, True),) if merged is not None else ())):
        matches, symbols = scan(patterns.kernel, where, across)
        for cp, first, last in matches:
            keep, evidence = _check(cp, where, first, last, edge_map)
            if not keep.any():  # most patterns find nothing: no table to build
                continue
            skip = np.isin(symbols, cp.between_symbols) if cp.between_symbols else None
            table = _table("kernel", cp, where, first[keep], last[keep], evidence[keep], True, skip)
            parts.append(((int(across), number[id(cp)]), table))
    return parts


def merge_wanted(level: CompiledLevel, streams: int, type_names: list[str]) -> bool:
    """Match the level's across-stream patterns over each step's streams merged in start order: when it has such
    patterns, the table has more than one stream, and an op of each class they need."""
    across = [cp for cp in level.patterns if cp.spec.across_streams]
    if not across or streams < 2:
        return False
    present = {int(x) for x in level.lookup(type_names).tolist()}
    return any(
        all(any(level.symbols[c] in present for c in token) for token in token_classes(cp.spec.regex)) for cp in across
    )


def outermost_ops(framework: pa.Table, known: CompiledLevel | None = None) -> pa.Table:
    """Framework ops (names with '::', or names a class of `known` matches: apex's FusedRMSNormAffineFunction,
    flash-attn's DropoutAddLayerNormFn are autograd functions) that no other framework op encloses, as a small op
    table.

    The aten::pow inside aten::rms_norm's composite implementation (or aten::copy_ inside aten::to) is part of its
    parent call: counting it would count that call twice, and would call a fused op decomposed."""
    n = framework.num_rows
    codes, names = dict_codes(framework.column("name"))
    classed = known.lookup(names) != OTHER if known is not None else np.zeros(len(names), dtype=bool)
    is_op = np.append(np.array(["::" in s for s in names], dtype=bool) | classed, False)[codes]
    index = int_column(framework, "index", 0)
    parent = int_column(framework, "parent", -1)
    depth = int_column(framework, "depth", 0)
    order = np.argsort(index, kind="stable")
    pos = np.searchsorted(index[order], parent)
    found = (parent >= 0) & (pos < n)
    parent_row = np.full(n, -1, dtype=np.int64)
    parent_row[found] = order[np.minimum(pos[found], n - 1)]
    parent_row[found & (index[parent_row] != parent)] = -1
    covered = np.zeros(n, dtype=bool)
    for d in distinct(depth[parent_row >= 0]).tolist():  # parents are shallower: fill depth by depth
        rows = np.flatnonzero((depth == d) & (parent_row >= 0))
        p = parent_row[rows]
        covered[rows] = covered[p] | is_op[p]
    keep = is_op & ~covered
    pid, tid = int_column(framework, "pid", 0), int_column(framework, "tid", 0)
    pairs = np.stack([pid[keep], tid[keep]], axis=1)
    thread = np.unique(pairs, axis=0, return_inverse=True)[1].ravel() if len(pairs) else np.zeros(0, np.int64)
    return pa.table(
        {
            "op_index": pa.array(index[keep]),
            "step": pa.array(int_column(framework, "step")[keep], pa.int32()),
            "stream_id": pa.array(thread, pa.int32()),
            "task_start_ns": pa.array(int_column(framework, "start_ns", 0)[keep]),
            "task_dur_ns": pa.array(int_column(framework, "dur_ns", 0)[keep]),
            "op_type": framework.column("name").take(pa.array(np.flatnonzero(keep))),
            # what the call read: a finding's `shape` (the trace what-if prices a fused kernel's bytes from it)
            "input_shapes": framework.column("input_shapes").take(pa.array(np.flatnonzero(keep)))
            if "input_shapes" in framework.column_names
            else pa.nulls(int(keep.sum()), pa.string()),
        }
    )


def detect_framework(framework: pa.Table, patterns: PatternSet) -> pa.Table:
    """Findings among the outermost framework ops (FRAMEWORK_SCHEMA), per (step, thread)."""
    view = OpView.build(outermost_ops(framework, patterns.framework))
    matches, symbols = scan(patterns.framework, view)
    parts = [
        _table(
            "framework",
            cp,
            view,
            first,
            last,
            np.full(len(first), len(EVIDENCE) - 1),
            False,
            np.isin(symbols, cp.between_symbols) if cp.between_symbols else None,
        )
        for cp, first, last in matches
    ]
    return pa.concat_tables(parts) if parts else FINDINGS_SCHEMA.empty_table()


def detect(ops: pa.Table, framework: pa.Table | None, patterns: PatternSet, edges: pa.Table | None = None) -> pa.Table:
    """All findings: device kernels, then framework ops (when the profile has them)."""
    kernel = detect_kernels(ops, patterns, edges)
    if framework is None or not framework.num_rows:
        return kernel
    return pa.concat_tables([kernel, detect_framework(framework, patterns)])
