"""`diff(base, new)`: what changed between two runs or profiles, op by op and in total, with statistics."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from atbprof.analyze.api import framework_timeline
from atbprof.analyze.attribute import NO_DEVICE_OP
from atbprof.analyze.charges import has_launches, launch_latency_ns
from atbprof.analyze.chunked import CHUNK_OPS, CHUNKED_FROM
from atbprof.analyze.columns import DIFF_COLUMNS
from atbprof.analyze.patterns import PatternSet, load_patterns
from atbprof.diff.align import match_aligned
from atbprof.diff.frame_sums import FrameSums, Rows, sums_of_ops
from atbprof.diff.graphs import graph_groups, match_runs, matching_of
from atbprof.diff.groups import Matching
from atbprof.diff.headline import categories, headline
from atbprof.diff.measure import Side, common_step_definition, measure, step_frames_of
from atbprof.diff.numerics import numerics_change, report_of
from atbprof.diff.parts import Plan, measure_runs, plan_parts
from atbprof.diff.report import By, DiffReport, DiffRow, DiffSide, Headline, RegressionCheck
from atbprof.diff.report import Matching as MatchingSummary
from atbprof.diff.rows import diff_rows
from atbprof.errors import InputError
from atbprof.importers.base import Profile, import_warnings

DEFAULT_THRESHOLD_PCT = 1.0


@dataclass(frozen=True)
class DiffResult:
    report: DiffReport
    base: Side
    new: Side
    matching: Matching

    def step_pairs(self) -> list[tuple[int, int]]:
        """(base step, new step) of every compared pair, for the combined trace."""
        fb, fn = self.base.charges.frame_step, self.new.charges.frame_step
        return [(int(fb[a]), int(fn[b])) for a, b in self.matching.pairs.tolist()]


def _side(s: Side) -> DiffSide:
    return DiffSide(
        kind=s.profile.kind,
        path=s.profile.source,
        name=s.name,
        ops=s.ops,
        steps=len(s.frame_phase),
        phases=list(dict.fromkeys(s.frame_phase)),
    )


def _phases_text(s: Side) -> str:
    steps = s.charges.frame_step
    if not len(steps):
        return "no steps (no ops)"
    counts = {p: s.frame_phase.count(p) for p in dict.fromkeys(s.frame_phase)}
    return f"steps {int(steps.min())}..{int(steps.max())} (" + ", ".join(f"{v} {k}" for k, v in counts.items()) + ")"


def parse_name_map(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise InputError(f"--map {item!r}: expected OLD=NEW (a base op type and the new op type it became)")
        out[old] = new
    return out


def diff(
    base: Profile,
    new: Profile,
    *,
    by: By | None = None,
    top: int = 20,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    fail_if_slower_pct: float | None = None,
    name_map: dict[str, str] | None = None,
    patterns_file: str | None = None,
    force: bool = False,
) -> DiffResult:
    """Compare `new` against `base` (any two profiles). Pure: the profiles are not modified. Unlike inputs (inference
    against training, two different models) are refused unless `force` (diff/like.py). `by` None: by op type, or
    by category when the two ran on different vendors' devices (their kernel names differ by library)."""
    from atbprof.diff.like import check_comparable, cross_vendor

    patterns = load_patterns(patterns_file)
    notes: list[str] = check_comparable(base, new, patterns, force)
    vendors = cross_vendor(base, new)
    if vendors is not None:
        libraries = (
            f"the inputs ran on {vendors[0]} and {vendors[1]} devices, whose kernels come from different libraries "
            "(cuBLAS vs hipBLASLt, flash_fwd vs attn_fwd): a kernel name on one side is no kernel on the other"
        )
        if by is None:
            by = "category"
            notes.append(f"{libraries}, so the rows compare by role (category); --by op-type compares the names")
        elif by == "op-type":
            notes.append(f"{libraries}: renamed kernels show as removed and added; --by category compares by role")
    by = by or "op-type"
    notes += [f"{p.source}: {w}" for p in (base, new) for w in import_warnings(p)]
    sides = []
    steps_as = common_step_definition(base, new)
    # idle gaps are blamed on launches only when both inputs record them, at one latency (a run's host model)
    launches = (
        has_launches(base.ops) and has_launches(new.ops),
        max(launch_latency_ns(base.meta), launch_latency_ns(new.meta)),
    )
    for p in (base, new):
        if not p.ops.num_rows and p.framework is not None and p.framework.num_rows:
            # a CPU-only trace: the top-level framework ops are the timeline to compare (as analyze does)
            p = replace(p, ops=framework_timeline(p.framework), meta={**p.meta, "host_timeline": True})
            notes.append(f"{p.source}: no device kernels; its top-level framework ops (host) are compared")
        sides.append(measure(p, patterns, steps_as, launches))
    return _compare_sides(
        base,
        new,
        sides[0],
        sides[1],
        notes,
        by,
        steps_as,
        top=top,
        threshold_pct=threshold_pct,
        fail_if_slower_pct=fail_if_slower_pct,
        name_map=name_map,
        patterns=patterns,
        vendors=vendors,
        force=force,
    )


def _compare_sides(
    base: Profile,
    new: Profile,
    a: Side,
    b: Side,
    notes: list[str],
    by: By,
    steps_as: str,
    *,
    top: int,
    threshold_pct: float,
    fail_if_slower_pct: float | None,
    name_map: dict[str, str] | None,
    patterns: PatternSet,
    vendors: tuple[str, str] | None,
    force: bool,
    matching: Matching | None = None,
    sums: tuple[FrameSums, FrameSums, Rows] | None = None,
) -> DiffResult:
    """The diff of two measured sides (`base`, `new`: the inputs they were measured from; `notes` so far).
    `matching` and `sums` (each side's frame sums, the rows they are summed by): as found while the sides were
    read in parts (diff/parts.py); None: found here from the ops the sides hold."""
    for s in (a, b):
        if not len(s.frame_phase):
            raise InputError(f"{s.profile.source}: no ops to compare (an empty profile)")
    m = matching
    if m is None:
        m = match_runs(a, b, force) if a.ours and b.ours and not name_map else None
    if m is None:
        if a.ours and b.ours and force and not name_map:
            notes.append("compared runs of different models at --force: matched by alignment, not by their graphs")
        relabel = None
        if vendors is not None and by != "op-type" and not name_map:
            from atbprof.diff.like import kernel_roles

            relabel = (kernel_roles(base, patterns), kernel_roles(new, patterns))
            notes.append("kernels aligned by role (attention, matmul, norm, communication, memory, elementwise)")
        m = match_aligned(a, b, name_map or {}, relabel)
    if not len(m.pairs):
        raise InputError(
            f"no common steps: {base.source} has {_phases_text(a)}, {new.source} has {_phases_text(b)}. "
            "Compare inputs that record the same phase (e.g. both with decode steps) - re-run or re-profile one "
            "so that both cover it"
        )
    phases_b = np.array([a.frame_phase[i] for i in m.pairs[:, 0]], dtype=object)
    scope = "decode" if (phases_b == "decode").any() else str(phases_b[0])
    scope_pairs = m.pairs[phases_b == scope]
    head = headline(a, b, m.pairs, scope, threshold_pct)
    cats = categories(a, b, scope_pairs, threshold_pct)
    if sums is None:
        rows_of = Rows.of(m.groups, by)
        sides = (_sums_of(a, m.base_group, rows_of), _sums_of(b, m.new_group, rows_of))
    else:
        sides, rows_of = (sums[0], sums[1]), sums[2]
    rows = diff_rows(a, b, m, sides, rows_of, scope_pairs, threshold_pct)
    matching_summary = _matching_summary(a, b, m, sides, scope, scope_pairs, rows)
    check = _regression(head, fail_if_slower_pct)
    regression = bool(check and check.failed)
    notes = [*m.notes, *notes]
    if steps_as == "ops":
        without = [p.source for p in (base, new) if step_frames_of(p) == "ops"]
        if len(without) < 2:
            notes.append(
                f"steps compared as the span of their kernels (first start to last end) on both sides: "
                f"{without[0]} has no host step frames (ProfilerStep), so the other side's are not used"
            )
    if not a.tokens_known or not b.tokens_known:
        notes.append("tokens/s assumes one token per step where the profile does not record the batch")
    unpaired = (matching_summary.base_unpaired_steps, matching_summary.new_unpaired_steps)
    if any(unpaired):
        notes.append(
            f"steps without a partner are left out: {unpaired[0]} of the base, {unpaired[1]} of the new "
            f"({len(m.pairs)} pairs compared)"
        )
    aligned = _aligned_share(m) if m.method == "alignment" else 1.0
    if aligned < 0.5:
        notes.append(
            f"only {aligned:.0%} of the ops align one to one: are these the same model and software? "
            "(--map OLD=NEW maps renamed kernels)"
        )
    if scope != "decode":
        notes.append(f"no decode steps in common: figures are per step of phase '{scope}'")
    assumptions = [
        "delta = new - base: negative is faster; saved = base - new",
        f"time per group = kernel time + the device idle wait before it (launch/wait), per step of '{scope}'",
        f"significant = the 95 % interval of the difference excludes 0 and |change| >= {threshold_pct:g} % "
        "(steps paired; a single step a side: beyond the threshold and 3x the per-step noise)",
        f"base categories: {a.categories_rule}",
    ]
    if b.categories_rule != a.categories_rule:
        assumptions.append(f"new categories: {b.categories_rule}")
    numerics = numerics_change(
        report_of(base.meta, base.source) if a.ours else None, report_of(new.meta, new.source) if b.ours else None
    )
    if a.step_kind != "inference" or b.step_kind != "inference":
        # a training step (or a CPU-only one) yields no tokens: no tokens/s
        head = head.model_copy(update={"tokens_per_s": None})
        notes.append(f"training / host steps (base: {a.step_kind}, new: {b.step_kind}): no tokens/s")
    summary_line = _summary(a, b, head, rows, scope)
    if numerics is not None and numerics.worse_rules:
        summary_line += f"; numerics worse for {', '.join(numerics.worse_rules)}"
    report = DiffReport(
        steps_compared_as=steps_as,
        base=_side(a),
        new=_side(b),
        summary=summary_line,
        headline=head,
        categories=cats,
        by=by,
        rows=_top_rows(rows, top),
        matching=matching_summary,
        threshold_pct=threshold_pct,
        assumptions=assumptions,
        notes=notes,
        regression=regression,
        regression_check=check,
        numerics=numerics,
    )
    return DiffResult(report, a, b, m)


def parse_percent(text: str, option: str) -> float:
    """'2%' or '2' -> 2.0."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        raise InputError(f"{option} {text!r}: expected a percentage such as 2% or 0.5") from None
    if value < 0:
        raise InputError(f"{option} {text!r}: must not be negative")
    return value


def diff_paths(
    base: Path,
    new: Path,
    *,
    trace: Path | None = None,
    force: bool = False,
    part_ops: int = CHUNK_OPS,
    parts_from: int = CHUNKED_FROM,
    **options: object,
) -> DiffResult:
    """Load both inputs, diff them and, with `trace`, write both side by side (aligned per step) as one trace. Two
    runs of ours, either of more than `parts_from` ops, are read in parts of about `part_ops` (diff/parts.py)."""
    from atbprof.importers import load_profile

    if trace is not None:  # before any work: a --trace that may not be written stops here
        from atbprof.outputs import check_output_file

        check_output_file(trace, "diff-trace", force=force, inputs=[base, new])
    if trace is None and not options.get("name_map"):  # a trace draws the ops, renamed kernels align them
        plans = plan_parts(base, new, part_ops=part_ops, parts_from=parts_from)
        if plans is not None:
            return _diff_planned(plans, force=force, **options)  # type: ignore[arg-type]
    # diff compares device kernels (framework ops are read only when a trace has none); the two inputs load side
    # by side (gunzip and the JSON decoders run partly outside the GIL); the base's error wins if both fail
    # a run of ours is read with the columns diff uses (a 4 M-op table whole is ~1.9 GB); --trace draws them all
    columns = None if trace is not None else DIFF_COLUMNS
    with ThreadPoolExecutor(max_workers=2) as pool:
        loading = [pool.submit(load_profile, path, framework=False, columns=columns) for path in (base, new)]
        profiles = [f.result() for f in loading]
    result = diff(profiles[0], profiles[1], force=force, **options)  # type: ignore[arg-type]
    if trace is not None:
        from atbprof.writers.diff_trace import write_diff_trace

        written = write_diff_trace(
            result.base.profile,
            result.new.profile,
            result.step_pairs(),
            trace,
            force=force,
        )
        from atbprof.hints import shown

        note = f"trace: {shown(written.path)} ({len(written.pairs)} step pairs side by side)"
        if written.note:
            note += f"; {written.note}"
        result.report.notes.append(note)
    return result


def _diff_planned(
    plans: tuple[Plan, Plan],
    *,
    by: By | None = None,
    top: int = 20,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    fail_if_slower_pct: float | None = None,
    name_map: dict[str, str] | None = None,
    patterns_file: str | None = None,
    force: bool = False,
) -> DiffResult:
    """`diff` of two runs read in parts (diff/parts.py): the report of the tables held whole. (`name_map`: none -
    renamed kernels are aligned, from tables held whole.)"""
    assert not name_map
    patterns = load_patterns(patterns_file)
    found = graph_groups(plans[0].profile, plans[1].profile)
    assert found is not None  # plan_parts reads in parts runs of one model with their configs only
    groups, luts_b, luts_n = found
    rows_of = Rows.of(groups, by or "op-type")  # runs of ours ran on one vendor's devices: by op type unless asked
    a, b, sums_b, sums_n, notes, steps_as = measure_runs(plans, patterns, force, (luts_b, luts_n), rows_of)
    return _compare_sides(
        plans[0].profile,
        plans[1].profile,
        a,
        b,
        notes,
        by or "op-type",
        steps_as,
        top=top,
        threshold_pct=threshold_pct,
        fail_if_slower_pct=fail_if_slower_pct,
        name_map=None,
        patterns=patterns,
        vendors=None,
        force=force,
        matching=matching_of(a, b, groups, None, None),
        sums=(sums_b, sums_n, rows_of),
    )


def _sums_of(side: Side, group: np.ndarray | None, rows: Rows) -> FrameSums:
    held = side.op_arrays()
    assert group is not None  # a matcher of held ops gives each its group
    return sums_of_ops(held.charges.frame_of_op, group, held.charges.charged, held.charges.dur, side.frames, rows)


def _matching_summary(
    a: Side,
    b: Side,
    m: Matching,
    sums: tuple[FrameSums, FrameSums],
    scope: str,
    scope_pairs: np.ndarray,
    rows: list[DiffRow],
) -> MatchingSummary:
    fb = np.zeros(a.frames, dtype=bool)
    fn = np.zeros(b.frames, dtype=bool)
    fb[m.pairs[:, 0]] = True
    fn[m.pairs[:, 1]] = True
    # an op matches when its group has a counterpart on the other side: a removed (added) group's ops are unmatched
    sb, sn = sums
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.classification] = counts.get(r.classification, 0) + 1
    return MatchingSummary(
        method=m.method,
        pairs=len(m.pairs),
        scope=scope,
        scope_pairs=len(scope_pairs),
        base_matched_ops=int(sb.matched[fb].sum()),
        new_matched_ops=int(sn.matched[fn].sum()),
        base_unmatched_ops=int(sb.unmatched[fb].sum()),
        new_unmatched_ops=int(sn.unmatched[fn].sum()),
        base_unpaired_steps=int((~fb).sum()),
        base_outside_steps_ops=a.charges.outside_ops,
        new_outside_steps_ops=b.charges.outside_ops,
        new_unpaired_steps=int((~fn).sum()),
        counts=counts,
    )


def _aligned_share(m: Matching) -> float:
    """Share of the base ops in 1:1 groups of the same op type."""
    assert m.base_group is not None  # the alignment groups held ops
    same = np.array([g.structure == "same" for g in m.groups] + [False])
    ops = m.base_group[m.base_group >= 0]
    return float(same[ops].mean()) if len(ops) else 0.0


def _top_rows(rows: list[DiffRow], top: int) -> list[DiffRow]:
    """The first `top` rows, and always the row of the step time no kernel owns (the rows add up to the step)."""
    owned = [r for r in rows if r.name != NO_DEVICE_OP]
    return owned[: max(top, 1)] + [r for r in rows if r.name == NO_DEVICE_OP]


def _regression(head: Headline, limit: float | None) -> RegressionCheck | None:
    if limit is None:
        return None
    figures = {"decode_ms_per_token": head.decode_ms_per_token, "ttft_ms": head.ttft_ms}
    present = {k: f for k, f in figures.items() if f is not None}
    tested = [k for k, f in present.items() if f.method != "untestable"]
    failed = [
        k
        for k in tested
        if present[k].significant and present[k].delta_pct is not None and present[k].delta_pct > limit  # type: ignore[operator]
    ]
    not_tested = [k for k in present if k not in tested]
    return RegressionCheck(limit_pct=limit, tested=tested, not_tested=not_tested, failed=failed)


def _summary(a: Side, b: Side, head: Headline, rows: list[DiffRow], scope: str) -> str:
    same = a.name == b.name and a.profile.source != b.profile.source
    parts = [f"{a.profile.source} -> {b.profile.source}" if same else f"{a.name} -> {b.name}"]
    f = head.decode_ms_per_token
    if f is not None:
        sig = "significant" if f.significant else ("untestable" if f.method == "untestable" else "not significant")
        pct = f"{f.delta_pct:+.1f} %" if f.delta_pct is not None else "n/a"
        what = "decode" if scope == "decode" else f"{a.step_kind} step"
        unit = "ms/token" if scope == "decode" else "ms/step"
        parts.append(f"{what} {f.base:.2f} -> {f.new:.2f} {unit} ({pct}, {sig})")
    fused = [r for r in rows if r.classification == "fused"]
    if fused:
        n = sum(r.instances_per_step for r in fused)
        saved = -sum(r.delta_us for r in fused) / 1e3
        parts.append(f"{n:g} fused groups per step save {saved:.2f} ms")
    return "; ".join(parts)
