"""Rows of a diff: matched groups summed per step and aggregated by a key (`--by`), each classified as added,
removed, fused, split, faster, slower or unchanged (HTA's vocabulary plus fused/split)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from atbprof.analyze.attribute import NO_DEVICE_OP
from atbprof.diff.frame_sums import FrameSums, Rows
from atbprof.diff.groups import GroupInfo, Matching
from atbprof.diff.measure import Side
from atbprof.diff.report import DiffRow
from atbprof.diff.stats import Comparison, compare

PAIRS_PER_BLOCK = 1024


def _by_instances(c: Comparison, vb: np.ndarray, vn: np.ndarray, threshold: float) -> Comparison:
    """One step a side: the row's change tested on its repeated instances inside the step (layers repeat). The
    matcher pairs each base instance with its new one, so the test is a paired t on the per-instance differences,
    its interval scaled to the per-step sum by the number of pairs. Fewer than two pairs: untestable."""
    if len(vb) < 2:
        return c
    per = compare(vb, vn, paired=True, threshold_pct=threshold)
    if per.ci_low is None or per.ci_high is None:
        return c
    k = len(vb)
    lo, hi = per.ci_low * k, per.ci_high * k
    big = abs(c.delta) >= abs(c.base) * threshold / 100.0 and c.delta != 0.0
    sig = big and (lo > 0 or hi < 0) and np.sign(c.delta) == np.sign(per.delta)
    return replace(c, ci_low=lo, ci_high=hi, significant=bool(sig), method="paired-t (instances)")


def diff_rows(
    base: Side,
    new: Side,
    m: Matching,
    sums: tuple[FrameSums, FrameSums],
    rows_of: Rows,
    scope_pairs: np.ndarray,
    threshold: float,
) -> list[DiffRow]:
    """The rows of the matched groups over the frames of `scope_pairs`, from each side's frame sums."""
    n_pairs, n_groups = len(scope_pairs), len(m.groups)
    if not n_pairs or not n_groups:
        return []
    names, row_of_group = rows_of.names, rows_of.of_group
    n_rows = len(names)
    sb, sn = sums
    fb, fn = scope_pairs[:, 0], scope_pairs[:, 1]
    # instances: the groups either side holds in each pair of frames (a block of pairs at a time: a pair holds a
    # byte per group unpacked)
    used = np.zeros(n_groups, dtype=bool)
    instances = np.zeros((n_pairs, n_rows), dtype=np.int64)
    members_of = [np.flatnonzero(row_of_group == r) for r in range(n_rows)]
    for lo in range(0, n_pairs, PAIRS_PER_BLOCK):
        hi = min(lo + PAIRS_PER_BLOCK, n_pairs)
        held = sb.holding(fb[lo:hi], n_groups) | sn.holding(fn[lo:hi], n_groups)
        used |= held.any(axis=0)
        for r, in_row in enumerate(members_of):
            instances[lo:hi, r] = held[:, in_row].sum(axis=1)
    used_groups = np.flatnonzero(used)
    series = {
        "cb": sb.charged[fb],
        "cn": sn.charged[fn],
        "kb": sb.kernel[fb],
        "kn": sn.kernel[fn],
        "nb": sb.count[fb],
        "nn": sn.count[fn],
        "inst": instances,
    }
    exact = base.exact and new.exact
    by_instances = n_pairs < 2 and not exact
    if by_instances:  # one pair of frames
        vb, okb = sb.group_charges(int(fb[0]))
        vn, okn = sn.group_charges(int(fn[0]))
        vb, vn = vb / 1e3, vn / 1e3
    structures: list[set[str]] = [set() for _ in range(n_rows)]
    members: list[GroupInfo | None] = [None] * n_rows
    for g in used_groups.tolist():
        info = m.groups[g]
        structures[row_of_group[g]].add(info.structure)
        members[row_of_group[g]] = members[row_of_group[g]] or info
    rows = []
    for r, name in enumerate(names):
        info = members[r]
        if info is None:
            continue
        c = compare(
            series["cb"][:, r] / 1e3, series["cn"][:, r] / 1e3, paired=True, threshold_pct=threshold, exact=exact
        )
        if by_instances:
            both = (row_of_group == r) & okb & okn  # instances matched one to one
            c = _by_instances(c, vb[both], vn[both], threshold)
        inst = float(series["inst"][:, r].mean())
        structural = {s for s in structures[r] if s not in ("same", "replaced")}
        if len(structures[r]) == 1 and structural:
            klass = structural.pop()
        elif structures[r] == {"replaced"} and len(info.base_types) != len(info.new_types):
            klass = "fused" if len(info.new_types) < len(info.base_types) else "split"
        elif c.significant:
            klass = "faster" if c.delta < 0 else "slower"
        else:
            klass = "unchanged"
        kb_us, kn_us = float(series["kb"][:, r].mean()) / 1e3, float(series["kn"][:, r].mean()) / 1e3
        single = len(structures[r]) == 1
        rows.append(
            DiffRow(
                name=name,
                classification=klass,  # type: ignore[arg-type]
                base_types=list(info.base_types) if single else [],
                new_types=list(info.new_types) if single else [],
                rule=info.rule if single else "",
                instances_per_step=round(inst, 3),
                base_ops_per_step=round(float(series["nb"][:, r].mean()), 3),
                new_ops_per_step=round(float(series["nn"][:, r].mean()), 3),
                **_figures(c),
                base_kernel_us=round(kb_us, 3),
                new_kernel_us=round(kn_us, 3),
                wait_delta_us=round(c.delta - (kn_us - kb_us), 3),
                per_instance_delta_us=round(c.delta / inst, 3) if inst else None,
            )
        )
    order = {"fused": 0, "split": 1, "removed": 2, "added": 3, "slower": 4, "faster": 5, "unchanged": 6}
    rows.sort(key=lambda row: (order[row.classification], -abs(row.delta_us), row.name))
    unowned = _unowned_row(base, new, scope_pairs, threshold, exact)
    return [*rows, unowned] if unowned is not None else rows


def _figures(c: Comparison) -> dict[str, Any]:
    """A comparison's per-step figures as DiffRow fields (µs)."""
    return {
        "base_us": round(c.base, 3),
        "new_us": round(c.new, 3),
        "delta_us": round(c.delta, 3),
        "delta_pct": None if c.delta_pct is None else round(c.delta_pct, 2),
        "ci_low_us": None if c.ci_low is None else round(c.ci_low, 3),
        "ci_high_us": None if c.ci_high is None else round(c.ci_high, 3),
        "significant": c.significant,
    }


def _unowned_row(base: Side, new: Side, pairs: np.ndarray, threshold: float, exact: bool) -> DiffRow | None:
    """The step time no kernel is charged (host lead-in, sync, idle a launch does not explain) as a row, so the
    rows add up to the headline's step delta."""
    ob, on = base.charges.overhead[pairs[:, 0]] / 1e3, new.charges.overhead[pairs[:, 1]] / 1e3
    if not (ob.any() or on.any()):
        return None
    c = compare(ob, on, paired=True, threshold_pct=threshold, exact=exact)
    klass = ("faster" if c.delta < 0 else "slower") if c.significant else "unchanged"
    return DiffRow(
        name=NO_DEVICE_OP,
        classification=klass,  # type: ignore[arg-type]
        base_types=[],
        new_types=[],
        rule="",
        instances_per_step=0.0,
        base_ops_per_step=0.0,
        new_ops_per_step=0.0,
        **_figures(c),
        base_kernel_us=0.0,
        new_kernel_us=0.0,
        wait_delta_us=round(c.delta, 3),
        per_instance_delta_us=None,
    )
