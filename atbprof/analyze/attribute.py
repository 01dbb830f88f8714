"""Where the measured time went, adding up to 100 % of the span (HTA-style device-timeline attribution).

Each op is charged the time the device timeline advanced while it ran: the idle gap before it (the device waited
for it - charged to the op waited for) plus the part of its duration no earlier op on any stream already covered.
Within a step these charges add up to first-start..last-end; the rest of the step (host lead-in before the first
launch, the token sync after the last kernel: runs of ours) is `other`. This is the simulator's own attribution
(atbprof/sim/summary.py) generalised to several streams, so on runs of ours the rows equal run.json's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.categories import CATEGORY_NAMES, ROLES_RULE, by_roles, categorise, norm_symbols
from atbprof.analyze.charges import Charges, charge, has_launches
from atbprof.analyze.idle_causes import IDLE_CAUSES, host_ops_of, split_idle
from atbprof.analyze.patterns import PatternSet
from atbprof.analyze.report import (
    IDLE_PREFIX,
    Breakdown,
    Idle,
    NormCost,
    OutsideSteps,
    PhaseBreakdown,
    Row,
    TrainingPhase,
)
from atbprof.analyze.training import TRAINING_PHASES, training_phases
from atbprof.analyze.view import OpView, has_values
from atbprof.arrays import distinct

NO_DEVICE_OP = "(no device op: host lead-in, sync, gaps)"
_RATIO_COMPUTE = ("mac_ratio", "vec_ratio", "scalar_ratio")
_RATIO_MEMORY = ("mte1_ratio", "mte2_ratio", "mte3_ratio", "fixpipe_ratio")


def _bounds(view: OpView, column: bool | None = None) -> tuple[np.ndarray, list[str]]:
    """Bound of each op (view order): the column when recorded (`column`: when the whole table records it, for a
    part of it), else from pipe ratios, else unknown."""
    codes, names = view.codes("bound")
    if column if column is not None else (codes >= 0).any():
        return np.where(codes >= 0, codes, len(names)), [*names, "unknown"]
    ratios = {c: view.table.column(c) for c in (*_RATIO_COMPUTE, *_RATIO_MEMORY) if has_values(view.table, c)}
    if not ratios:
        return np.zeros(len(view), dtype=np.int64), ["unknown"]

    def best(cols: tuple[str, ...]) -> np.ndarray:
        got = [np.asarray(pc.fill_null(ratios[c], np.nan).to_numpy(), float) for c in cols if c in ratios]
        if not got:
            return np.full(view.table.num_rows, np.nan)
        stacked = np.stack(got)
        return np.where(np.isnan(stacked).all(axis=0), np.nan, np.nanmax(np.nan_to_num(stacked, nan=-1.0), axis=0))

    comp, mem = best(_RATIO_COMPUTE), best(_RATIO_MEMORY)
    code = np.where(np.isnan(comp) & np.isnan(mem), 2, np.where(np.nan_to_num(comp) >= np.nan_to_num(mem), 0, 1))
    return (code if view.identity else code[view.rows]), ["compute", "memory", "unknown"]


def _norm_ops(view: OpView, findings: pa.Table, patterns: PatternSet, has_roles: bool) -> tuple[np.ndarray, np.ndarray]:
    """(norm-related ops, ops of which only the vector share counts), view order - seed 000's Add & Norm blocks."""
    names = view.type_names
    folded_type = np.array(["Norm" in t for t in names] + [False], dtype=bool)[view.type_codes]
    if has_roles:
        # the simulator's rule: norm kernels and the residual Adds that feed them, plus the vector share of a norm
        # folded into a MatMul
        codes, roles = view.codes("role")
        norm_role = np.array([r.endswith((".norm", ".residual")) for r in roles] + [False], dtype=bool)[codes]
        return norm_role, folded_type & ~norm_role
    kernel = findings.filter(pc.equal(findings.column("level"), "kernel"))
    # the norms and the Adds in front of them; not a Norm->MatMul's MatMul, nor the catalogue's other fusions
    kernel = kernel.filter(pc.invert(pc.is_in(kernel.column("kind"), pa.array(["norm_matmul", "fused_op"]))))
    members = pc.list_flatten(kernel.column("op_indices")).to_numpy() if kernel.num_rows else np.zeros(0, np.int64)
    norm = np.isin(view.op_index, members)
    lut = np.append(patterns.kernel.lookup(names), np.uint8(0))
    fused_mm = np.array(["MatMul" in t or "Matmul" in t for t in names] + [False], dtype=bool)[view.type_codes]
    is_norm_kernel = np.isin(lut[view.type_codes], np.array(sorted(norm_symbols(patterns)), dtype=np.uint8))
    folded = norm & fused_mm & is_norm_kernel
    return norm & ~folded, folded


class _Sums:
    """Counts, device time and charged time per (phase, code): one bincount each over all ops."""

    def __init__(
        self, phase: np.ndarray, n_phase: int, codes: np.ndarray, n_codes: int, charged: np.ndarray, dur: np.ndarray
    ) -> None:
        key = phase * n_codes + codes
        size = n_phase * n_codes
        self.count = np.bincount(key, minlength=size).reshape(n_phase, n_codes)
        self.charged = np.bincount(key, weights=charged, minlength=size).reshape(n_phase, n_codes)
        self.device = np.bincount(key, weights=dur, minlength=size).reshape(n_phase, n_codes)

    def remapped(self, phases: np.ndarray, n_phase: int, codes: np.ndarray, n_codes: int) -> _Sums:
        """The sums on other axes: phase i -> phases[i], code j -> codes[j] (a part's names -> the merged names;
        distinct names map to distinct positions)."""
        out = _Sums.__new__(_Sums)
        for name in ("count", "charged", "device"):
            values = getattr(self, name)
            grid = np.zeros((n_phase, n_codes), dtype=values.dtype)
            grid[np.ix_(phases, codes)] = values
            setattr(out, name, grid)
        return out

    def add(self, other: _Sums) -> None:
        self.count = self.count + other.count
        self.charged = self.charged + other.charged
        self.device = self.device + other.device

    def rows(self, phase: int, names: list[str], span: float, steps: int, top: int | None = None) -> list[Row]:
        ch, dv, ct = self.charged[phase], self.device[phase], self.count[phase]
        order = [i for i in np.argsort(-ch, kind="stable").tolist() if ct[i]]
        rows = [_row(names[i], int(ct[i]), float(dv[i]), float(ch[i]), span, steps) for i in order]
        if top is not None and len(rows) > top:
            rest = order[top:]
            rows = [
                *rows[:top],
                _row(
                    f"({len(rest)} more)",
                    int(ct[rest].sum()),
                    float(dv[rest].sum()),
                    float(ch[rest].sum()),
                    span,
                    steps,
                ),
            ]
        return rows


def _idle_causes(
    ch: Charges, overhead: np.ndarray, host_calls: pa.Table | None, framework: pa.Table | None
) -> np.ndarray | None:
    """(frames, 4) ns of each frame's uncharged time per cause (IDLE_CAUSES); None for runs of ours. What the
    intervals miss of a frame's overhead (clipping at the frame's edges) is unexplained, so a frame's causes add
    up to its overhead exactly."""
    if ch.framed_by == "run":
        return None
    found = ch.idle_intervals()
    if found is None:
        return None
    lo, hi, frame = found
    split = split_idle(lo, hi, host_calls, host_ops_of(framework)).astype(np.float64)
    out = np.zeros((len(overhead), len(IDLE_CAUSES)))
    np.add.at(out, frame, split)
    out[:, -1] += overhead - out.sum(axis=1)
    return out


def _cause_rows(per_cause: np.ndarray, span: float, steps: int) -> list[Row]:
    return [
        _row(IDLE_PREFIX + name, 0, 0.0, float(v), span, steps)
        for name, v in zip(IDLE_CAUSES, per_cause.tolist(), strict=True)
        if abs(v) >= 0.5
    ]


def _row(name: str, count: int, device_ns: float, charged_ns: float, span_ns: float, steps: int) -> Row:
    return Row(
        name=name,
        count=count,
        device_us=round(device_ns / 1e3, 3),
        charged_us=round(charged_ns / 1e3, 3),
        per_step_ms=round(charged_ns / 1e6 / max(steps, 1), 4),
        share=round(charged_ns / span_ns, 4) if span_ns else 0.0,
    )


@dataclass
class Totals:
    """What `attribute` sums over the ops, per phase, before any rounding: the totals of parts of one table (chunks
    of whole steps) merge into the totals of the whole (`merge_totals`). Every sum is of whole nanoseconds, so the
    merged sums equal the whole table's exactly, in any order."""

    phase_names: list[str]
    present: list[str]  # phases that have a frame, first seen first
    ops: int
    has_launch: bool
    heuristic: str
    categories: _Sums  # phase x CATEGORY_NAMES
    norm: np.ndarray  # (3, phases): norm kernel ns, their launch / wait ns, norm ops
    frames: np.ndarray  # (3, phases): frames, wall ns, overhead ns
    causes: np.ndarray | None  # (IDLE_CAUSES, phases): a profile's idle by cause; None for runs of ours
    type_names: list[str]  # the op types, then "(unknown)"
    types: _Sums
    waited: _Sums  # phase x (type_names + "(no wait)"): the gaps the host's launch explains, by the op waited for
    gaps: np.ndarray  # (2, phases): host-dispatch wait ns, other gap ns
    layers: _Sums | None  # phase x (layer + 2), None without layers
    bound_names: list[str]
    bounds: _Sums
    training: np.ndarray | None  # (2, phases, TRAINING_PHASES): charged ns, ops; None without backward kernels
    span_ns: float
    framed_by: str
    outside_ns: float
    outside_ops: int
    empty_frames: int


def attribute(
    ops: pa.Table,
    steps: pa.Table | None,
    findings: pa.Table,
    patterns: PatternSet,
    top: int = 10,
    launch_latency_ns: int = 0,
    view: OpView | None = None,
    frames: pa.Table | None = None,
    host_calls: pa.Table | None = None,
    framework: pa.Table | None = None,
) -> Breakdown:
    """The breakdown of `ops` (OPS_SCHEMA); `steps` (STEPS_SCHEMA, runs of ours) frames each step with its host
    lead-in and sync, else `frames` (STEP_FRAMES_SCHEMA: a profile's ProfilerStep ranges) do; `findings`
    (FINDINGS_SCHEMA) name the norm-related ops of profiles without roles. In a profile the step time no op is
    charged is split by cause (idle_causes.py) from `host_calls` (HOST_CALLS_SCHEMA) and the top-level ops of
    `framework`; in a run of ours it is the step's host lead-in and token sync, seed 000's `other`."""
    totals = attribute_totals(
        ops, steps, findings, patterns, launch_latency_ns, view, frames, host_calls=host_calls, framework=framework
    )
    return breakdown_of(totals, top, launch_latency_ns)


def attribute_totals(
    ops: pa.Table,
    steps: pa.Table | None,
    findings: pa.Table,
    patterns: PatternSet,
    launch_latency_ns: int = 0,
    view: OpView | None = None,
    frames: pa.Table | None = None,
    *,
    host_calls: pa.Table | None = None,
    framework: pa.Table | None = None,
    flags: tuple[bool, bool, bool] | None = None,
) -> Totals:
    """`attribute`'s sums over `ops` (see there). `flags`: (has roles, has launch records, has a bound column) of
    the whole table when `ops` is a part of it (a part without them is read as the whole is); default: of `ops`."""
    view = view or OpView.build(ops)
    n = len(view)
    has_roles, has_launch, bound_column = flags or (
        has_values(ops, "role"),
        has_launches(ops),
        has_values(ops, "bound"),
    )
    if has_roles:
        category, heuristic = by_roles(view), ROLES_RULE
    else:
        category, heuristic = categorise(view, patterns, findings, host_calls, framework)
    ch = charge(view, steps, frames, launch_latency_ns)
    order, gap, prev_end, charged = ch.order, ch.gap, ch.prev_end, ch.charged

    def tl(a: np.ndarray) -> np.ndarray:
        return a if order is None else a[order]

    dur, phase_names = ch.dur, ch.phase_names
    frame_phase, wall, op_phase = ch.frame_phase, ch.wall, ch.op_phase
    overhead = ch.overhead
    n_phase = len(phase_names)
    present = [phase_names[c] for c in distinct(frame_phase).tolist()]
    cat_sums = _Sums(op_phase, n_phase, tl(category), len(CATEGORY_NAMES), charged, dur)
    norm, folded = (tl(m) for m in _norm_ops(view, findings, patterns, has_roles))
    norm_kernel = np.bincount(
        op_phase,
        weights=np.where(norm, dur, 0.0) + np.where(folded, tl(view.ints("vec_time_ns", fill=0)), 0),
        minlength=n_phase,
    )
    waited = tl(view.ints("host_launch_dur_ns", fill=0)) if has_launch else gap
    norm_wait = np.bincount(op_phase, weights=np.where(norm, waited, 0), minlength=n_phase)
    norm_ops = np.bincount(op_phase, weights=norm | folded, minlength=n_phase)
    frame_steps = np.bincount(frame_phase, minlength=n_phase)
    frame_wall = np.bincount(frame_phase, weights=wall, minlength=n_phase)
    frame_over = np.bincount(frame_phase, weights=overhead, minlength=n_phase)
    causes = _idle_causes(ch, overhead, host_calls, framework) if n else None
    cause_sums = (
        np.stack([np.bincount(frame_phase, weights=causes[:, k], minlength=n_phase) for k in range(len(IDLE_CAUSES))])
        if causes is not None
        else None
    )
    types = tl(view.type_codes)
    types = np.where(types >= 0, types, len(view.type_names))
    type_names = [*view.type_names, "(unknown)"]
    by_type = _Sums(op_phase, n_phase, types, len(type_names), charged, dur)
    layer = tl(view.ints("layer", fill=-2))
    by_layer = _Sums(op_phase, n_phase, layer + 2, int(layer.max()) + 3, charged, dur) if (layer > -2).any() else None
    bcodes, bnames = _bounds(view, bound_column)
    by_bound = _Sums(op_phase, n_phase, tl(bcodes), len(bnames), charged, dur)
    # idle: waiting for a launch (the op's launch had not reached the device when the device became free) vs other
    in_gap = gap > 0
    if has_launch:
        launch_end = tl(view.ints("host_launch_start_ns", fill=0) + view.ints("host_launch_dur_ns", fill=0))
        host = in_gap & (launch_end + launch_latency_ns > prev_end)
    else:
        host = in_gap
    gapf = gap.astype(np.float64)
    waited_sums = _Sums(op_phase, n_phase, np.where(host, types, len(type_names)), len(type_names) + 1, gapf, gapf)
    gap_sums = np.stack(
        [
            np.bincount(op_phase, weights=np.where(host, gapf, 0.0), minlength=n_phase),
            np.bincount(op_phase, weights=np.where(in_gap & ~host, gapf, 0.0), minlength=n_phase),
        ]
    )
    training = training_phases(view, patterns)
    train_sums = None
    if training is not None:
        key = op_phase * len(TRAINING_PHASES) + tl(training)
        size = n_phase * len(TRAINING_PHASES)
        train_sums = np.stack(
            [
                np.bincount(key, weights=charged, minlength=size).reshape(n_phase, -1),
                np.bincount(key, minlength=size).reshape(n_phase, -1).astype(np.float64),
            ]
        )
    return Totals(
        phase_names=phase_names,
        present=present,
        ops=n,
        has_launch=has_launch,
        heuristic=heuristic,
        categories=cat_sums,
        norm=np.stack([norm_kernel, norm_wait, norm_ops.astype(np.float64)]),
        frames=np.stack([frame_steps.astype(np.float64), frame_wall, frame_over]),
        causes=cause_sums,
        type_names=type_names,
        types=by_type,
        waited=waited_sums,
        gaps=gap_sums,
        layers=by_layer,
        bound_names=bnames,
        bounds=by_bound,
        training=train_sums,
        span_ns=float(wall.sum()),
        framed_by=ch.framed_by,
        outside_ns=ch.outside_ns,
        outside_ops=ch.outside_ops,
        empty_frames=ch.empty_frames,
    )


def _union(lists: list[list[str]], last: str | None = None) -> tuple[list[str], list[np.ndarray]]:
    """Names in first-seen order (`last` kept last, as the parts put it) and each list's positions in them."""
    names: dict[str, int] = {}
    for got in lists:
        for name in got:
            if name != last:
                names.setdefault(name, len(names))
    if last is not None:
        names[last] = len(names)
    return list(names), [np.array([names[x] for x in got], dtype=np.int64) for got in lists]


def merge_totals(parts: list[Totals]) -> Totals:
    """The totals of a table from those of its parts (chunks of whole steps, in order): a part's names (phases,
    op types, bounds) map to the merged ones by name, in the order the whole table's dictionaries have them."""
    if len(parts) == 1:
        return parts[0]
    phases, phase_at = _union([p.phase_names for p in parts], "all")
    types, type_at = _union([p.type_names for p in parts], "(unknown)")
    bounds, bound_at = _union([p.bound_names for p in parts], "unknown")
    n_phase, n_cat = len(phases), len(CATEGORY_NAMES)
    wide = max((p.layers.count.shape[1] for p in parts if p.layers is not None), default=0)

    def sums(get: Any, codes: Any, n_codes: int) -> _Sums:
        return _summed([get(p).remapped(phase_at[i], n_phase, codes(i), n_codes) for i, p in enumerate(parts)])

    def per_phase(get: Any) -> np.ndarray:
        out = np.zeros((*get(parts[0]).shape[:-1], n_phase))
        for i, p in enumerate(parts):
            out[..., phase_at[i]] += get(p)  # a part's phases are distinct: one position each
        return out

    causes = [p.causes for p in parts if p.causes is not None]
    trained = [(i, p.training) for i, p in enumerate(parts) if p.training is not None]
    training = None
    if trained:
        training = np.zeros((2, n_phase, len(TRAINING_PHASES)))
        for i, part in trained:
            training[:, phase_at[i]] += part
    present, _ = _union([p.present for p in parts])
    layers = [
        p.layers.remapped(phase_at[i], n_phase, np.arange(p.layers.count.shape[1]), wide)
        for i, p in enumerate(parts)
        if p.layers is not None
    ]
    return Totals(
        phase_names=phases,
        present=present,
        ops=sum(p.ops for p in parts),
        has_launch=parts[0].has_launch,
        heuristic=parts[0].heuristic,
        categories=sums(lambda p: p.categories, lambda i: np.arange(n_cat), n_cat),
        norm=per_phase(lambda p: p.norm),
        frames=per_phase(lambda p: p.frames),
        causes=per_phase(
            lambda p: p.causes if p.causes is not None else np.zeros((len(IDLE_CAUSES), len(p.phase_names)))
        )
        if causes
        else None,
        type_names=types,
        types=sums(lambda p: p.types, lambda i: type_at[i], len(types)),
        waited=sums(lambda p: p.waited, lambda i: np.append(type_at[i], len(types)), len(types) + 1),
        gaps=per_phase(lambda p: p.gaps),
        layers=_summed(layers) if layers else None,
        bound_names=bounds,
        bounds=sums(lambda p: p.bounds, lambda i: bound_at[i], len(bounds)),
        training=training,
        span_ns=float(sum(p.span_ns for p in parts)),
        framed_by=parts[0].framed_by,
        outside_ns=float(sum(p.outside_ns for p in parts)),
        outside_ops=sum(p.outside_ops for p in parts),
        empty_frames=sum(p.empty_frames for p in parts),
    )


def _summed(parts: list[_Sums]) -> _Sums:
    """The sum of sums on the same axes (the first one, a fresh remapped copy, takes the others)."""
    total = parts[0]
    for part in parts[1:]:
        total.add(part)
    return total


def breakdown_of(totals: Totals, top: int = 10, launch_latency_ns: int = 0) -> Breakdown:
    """The breakdown the totals add up to: rows per phase, the scope's tables (op type, layer, bound), idle."""
    t = totals
    n = t.ops
    phase_names = t.phase_names
    phases_order: list[str] = [p for p in ("prefill", "decode", "all") if p in t.present]
    phases_order += sorted(set(t.present) - set(phases_order))
    frame_steps, frame_wall, frame_over = t.frames
    norm_kernel, norm_wait, norm_ops = t.norm
    cause_sums = t.causes
    phases = []
    for ph in phases_order:
        c = phase_names.index(ph)
        n_steps, span = int(frame_steps[c]), float(frame_wall[c])
        by_name = {r.name: r for r in t.categories.rows(c, list(CATEGORY_NAMES), span, n_steps)}
        if cause_sums is None:  # runs of ours: the host lead-in and token sync are seed 000's `other`
            other = by_name.get("other") or _row("other", 0, 0.0, 0.0, span, n_steps)
            by_name["other"] = _row(
                "other",
                other.count,
                other.device_us * 1e3,
                other.charged_us * 1e3 + float(frame_over[c]),
                span,
                n_steps,
            )
        cats = [by_name[k] for k in CATEGORY_NAMES if k in by_name]
        if cause_sums is not None:
            cats += _cause_rows(cause_sums[:, c], span, n_steps)
        kern, wait = float(norm_kernel[c]), float(norm_wait[c])
        total = kern + wait
        phases.append(
            PhaseBreakdown(
                phase=ph,
                steps=n_steps,
                span_us=round(span / 1e3, 3),
                per_step_ms=round(span / 1e6 / max(n_steps, 1), 4),
                categories=cats,
                norm=NormCost(
                    total_us=round(total / 1e3, 3),
                    kernel_us=round(kern / 1e3, 3),
                    launch_us=round(wait / 1e3, 3),
                    launch_source="host launch" if t.has_launch else "device wait before the op",
                    kernel_share=round(kern / total, 4) if total else 0.0,
                    launch_share=round(wait / total, 4) if total else 0.0,
                    span_share=round(total / span, 4) if span else 0.0,
                    per_step_ms=round(total / 1e6 / max(n_steps, 1), 4),
                    ops=int(norm_ops[c]),
                ),
            )
        )
    scope = "decode" if "decode" in phases_order else phases_order[0] if phases_order else "all"
    sc = phase_names.index(scope) if scope in phase_names else 0
    s_steps, s_span = int(frame_steps[sc]) if n else 0, float(frame_wall[sc]) if n else 0.0
    by_type = t.types.rows(sc, t.type_names, s_span, s_steps, top)
    by_layer: list[Row] = []
    if t.layers is not None:
        k = t.layers.count.shape[1]
        names = ["(unknown)", "model-level (-1)", *[f"layer {i}" for i in range(k - 2)]]
        by_layer = t.layers.rows(sc, names, s_span, s_steps, top)
    by_bound = t.bounds.rows(sc, t.bound_names, s_span, s_steps)
    # the step time no kernel is charged is rows of each table too, so every table adds up to the span as the
    # category rows do: a profile's idle rows by cause, a run's host lead-in and sync as one row (its `other`)
    unowned = float(frame_over[sc]) if n else 0.0
    scope_causes = _cause_rows(cause_sums[:, sc], s_span, s_steps) if cause_sums is not None else []
    if unowned > 0:
        idle_rows = scope_causes or [_row(NO_DEVICE_OP, 0, 0.0, unowned, s_span, s_steps)]
        by_type, by_bound = [*by_type, *idle_rows], [*by_bound, *idle_rows]
        by_layer = [*by_layer, *idle_rows] if by_layer else by_layer
    if t.has_launch:
        classified = (
            "host launch records: a gap is a host-dispatch wait when the op's launch (+ launch latency) "
            "ended after the device became free"
        )
    else:
        classified = (
            "no host launch records: every gap between kernels inside a step is taken as a wait for the "
            "next launch (eager dispatch)"
        )
    waited_rows = t.waited.rows(sc, [*t.type_names, "(no wait)"], s_span, s_steps, None)
    waited_rows = [r for r in waited_rows if r.name != "(no wait)"]
    if len(waited_rows) > top:
        rest = waited_rows[top:]
        waited_rows = [
            *waited_rows[:top],
            _row(
                f"({len(rest)} more)",
                sum(r.count for r in rest),
                sum(r.device_us for r in rest) * 1000.0,
                sum(r.charged_us for r in rest) * 1000.0,
                s_span,
                s_steps,
            ),
        ]
    idle = Idle(
        host_wait_us=round(float(t.gaps[0, sc]) / 1e3, 3) if n else 0.0,
        other_gap_us=round(float(t.gaps[1, sc]) / 1e3, 3) if n else 0.0,
        frame_us=round(float(frame_over[sc]) / 1e3, 3) if n else 0.0,
        classified_by=classified,
        waited_for=waited_rows,
        causes=scope_causes,
    )
    train_rows: list[TrainingPhase] = []
    if t.training is not None:
        t_charged, t_ops = t.training[0, sc], t.training[1, sc]
        for i, name in enumerate(TRAINING_PHASES):
            r = _row(name, int(t_ops[i]), 0.0, float(t_charged[i]), s_span, s_steps)
            train_rows.append(
                TrainingPhase(
                    phase=name, ops=r.count, charged_us=r.charged_us, per_step_ms=r.per_step_ms, share=r.share
                )
            )
    return Breakdown(
        scope=scope,
        steps=s_steps,
        span_us=round(t.span_ns / 1e3, 3),
        steps_from=t.framed_by,
        outside_steps=OutsideSteps(us=round(t.outside_ns / 1e3, 3), ops=t.outside_ops, empty_frames=t.empty_frames),
        step_kind="training" if t.training is not None else "inference",
        training=train_rows,
        categories_heuristic=t.heuristic,
        phases=phases,
        by_op_type=by_type,
        by_layer=by_layer,
        by_bound=by_bound,
        idle=idle,
    )
