"""Rows of a diff: matched groups summed per step and aggregated by a key (`--by`), each classified as added,
removed, fused, split, faster, slower or unchanged (HTA's vocabulary plus fused/split)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from atbprof.analyze.attribute import NO_DEVICE_OP
from atbprof.arrays import distinct
from atbprof.diff.groups import GroupInfo, Matching
from atbprof.diff.measure import Side
from atbprof.diff.report import By, DiffRow
from atbprof.diff.stats import Comparison, compare


def row_key(g: GroupInfo, by: By) -> str:
    if by == "category":
        return g.category
    if by == "layer":
        return {-1: "model-level", -2: "(unknown layer)"}.get(g.layer, f"layer {g.layer}")
    if by == "role":
        return g.roles or "(no role)"
    if by == "shape":
        return f"{g.label()} [{g.shape}]" if g.shape else g.label()
    return g.label()


def _sums(
    side: Side, group: np.ndarray, pair_of_frame: np.ndarray, row_of_group: np.ndarray, n_pairs: int, n_rows: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(charged, kernel, count) per (pair, row), shape pairs x rows, and the (pair, group) keys present."""
    pair = pair_of_frame[side.charges.frame_of_op]
    ok = (pair >= 0) & (group >= 0)
    p, g = pair[ok], group[ok]
    idx = p * n_rows + row_of_group[g]
    size = n_pairs * n_rows
    charged = np.bincount(idx, weights=side.charges.charged[ok], minlength=size).reshape(n_pairs, n_rows)
    kernel = np.bincount(idx, weights=side.charges.dur[ok], minlength=size).reshape(n_pairs, n_rows)
    count = np.bincount(idx, minlength=size).reshape(n_pairs, n_rows).astype(np.float64)
    return charged, kernel, count, p * len(row_of_group) + g


def _instances(side: Side, group: np.ndarray, in_pair: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(charged µs of each matched group instance, present) on one side over the compared steps."""
    ok = in_pair & (group >= 0)
    total = np.bincount(group[ok], weights=side.charges.charged[ok], minlength=n_groups) / 1e3
    present = np.bincount(group[ok], minlength=n_groups) > 0
    return total, present


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


def diff_rows(base: Side, new: Side, m: Matching, scope_pairs: np.ndarray, by: By, threshold: float) -> list[DiffRow]:
    n_pairs, n_groups = len(scope_pairs), len(m.groups)
    if not n_pairs or not n_groups:
        return []
    pb = np.full(len(base.charges.frame_starts), -1, dtype=np.int64)
    pn = np.full(len(new.charges.frame_starts), -1, dtype=np.int64)
    pb[scope_pairs[:, 0]] = np.arange(n_pairs)
    pn[scope_pairs[:, 1]] = np.arange(n_pairs)
    # the matchers share one GroupInfo between groups of the same make-up: one key per distinct object
    key_of = {id(g): row_key(g, by) for g in {id(g): g for g in m.groups}.values()}
    keys = [key_of[id(g)] for g in m.groups]
    names = list(dict.fromkeys(keys))
    position = {k: i for i, k in enumerate(names)}
    row_of_group = np.array([position[k] for k in keys], dtype=np.int64)
    n_rows = len(names)
    cb, kb, nb, keys_b = _sums(base, m.base_group, pb, row_of_group, n_pairs, n_rows)
    cn, kn, nn, keys_n = _sums(new, m.new_group, pn, row_of_group, n_pairs, n_rows)
    # instances: distinct (pair, group) present on either side (a mask, not np.unique: linear in the ops)
    mask = np.zeros(n_pairs * n_groups, dtype=bool)
    mask[keys_b] = True
    mask[keys_n] = True
    present = np.flatnonzero(mask)
    used_groups = distinct(present % n_groups)
    instances = np.bincount(
        (present // n_groups) * n_rows + row_of_group[present % n_groups], minlength=n_pairs * n_rows
    ).reshape(n_pairs, n_rows)
    series = {"cb": cb, "cn": cn, "kb": kb, "kn": kn, "nb": nb, "nn": nn, "inst": instances}
    exact = base.exact and new.exact
    by_instances = n_pairs < 2 and not exact
    if by_instances:
        vb, okb = _instances(base, m.base_group, pb[base.charges.frame_of_op] >= 0, n_groups)
        vn, okn = _instances(new, m.new_group, pn[new.charges.frame_of_op] >= 0, n_groups)
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
