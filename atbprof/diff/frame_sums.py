"""What the rows of a diff and its matching summary read of one side: sums per (step frame, row) and which matched
groups each frame holds. Built from the ops of whole frames - a table held whole at once, or a run read in parts
part by part (diff/parts.py) - so the two give the same figures: a frame's sums run over its ops in timeline order
either way, and a frame lies in one part.

Held per frame, not per op: a row's sums are `rows` floats a frame, which groups a frame holds one bit a group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from atbprof.diff.groups import GroupInfo
from atbprof.diff.report import By


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


@dataclass(frozen=True)
class Rows:
    """The rows of a diff: their keys (`--by`) in the order the groups first give them, the row of each group, and
    which groups have no counterpart (added or removed)."""

    names: list[str]
    of_group: np.ndarray
    one_sided: np.ndarray  # per group, and one more entry (True) for ops in no group

    @classmethod
    def of(cls, groups: Sequence[GroupInfo], by: By) -> Rows:
        # the matchers share one GroupInfo between groups of the same make-up: one key per distinct object
        key_of = {id(g): row_key(g, by) for g in {id(g): g for g in groups}.values()}
        keys = [key_of[id(g)] for g in groups]
        names = list(dict.fromkeys(keys))
        position = {k: i for i, k in enumerate(names)}
        of_group = np.array([position[k] for k in keys], dtype=np.int64)
        one_sided = np.array([g.structure in ("removed", "added") for g in groups] + [True], dtype=bool)
        return cls(names, of_group, one_sided)


GroupCharges = Callable[[int], tuple[np.ndarray, np.ndarray]]
"""A frame's charged time per group (ns) and whether the frame holds the group: the per-instance test of a diff of
one step a side (diff/rows.py)."""


@dataclass(frozen=True)
class FrameSums:
    """Per frame of one side: charged time, kernel time and ops per row (frames x rows), the groups it holds (packed
    bits, frames x bytes) and its ops in groups with and without a counterpart."""

    charged: np.ndarray
    kernel: np.ndarray
    count: np.ndarray
    present: np.ndarray
    matched: np.ndarray
    unmatched: np.ndarray
    group_charges: GroupCharges

    def holding(self, frames: np.ndarray, groups: int) -> np.ndarray:
        """(len(frames), groups) bool: which groups each of these frames holds."""
        return np.unpackbits(self.present[frames], axis=1, count=groups).astype(bool)


def frame_sums(
    frame_of_op: np.ndarray, group: np.ndarray, charged: np.ndarray, dur: np.ndarray, frames: int, rows: Rows
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(charged, kernel, count, present, matched, unmatched) of the ops of `frames` whole frames (timeline order;
    `group` -1 where an op is in none)."""
    n_rows, n_groups = len(rows.names), len(rows.of_group)
    ok = group >= 0
    f, g = frame_of_op[ok], group[ok]
    idx = f * n_rows + rows.of_group[g]
    size = frames * n_rows
    out_charged = np.bincount(idx, weights=charged[ok], minlength=size).reshape(frames, n_rows)
    out_kernel = np.bincount(idx, weights=dur[ok], minlength=size).reshape(frames, n_rows)
    out_count = np.bincount(idx, minlength=size).reshape(frames, n_rows).astype(np.float64)
    held = np.zeros((frames, n_groups), dtype=bool)
    held[f, g] = True
    present = np.packbits(held, axis=1)
    one_sided = rows.one_sided[np.where(ok, group, n_groups)]
    matched = np.bincount(frame_of_op[~one_sided], minlength=frames)
    unmatched = np.bincount(frame_of_op[one_sided], minlength=frames)
    return out_charged, out_kernel, out_count, present, matched, unmatched


def sums_of_ops(
    frame_of_op: np.ndarray, group: np.ndarray, charged: np.ndarray, dur: np.ndarray, frames: int, rows: Rows
) -> FrameSums:
    """The FrameSums of a side whose ops are held (timeline order)."""

    def group_charges(frame: int) -> tuple[np.ndarray, np.ndarray]:
        mine = frame_of_op == frame
        return charges_per_group(group[mine], charged[mine], len(rows.of_group))

    return FrameSums(*frame_sums(frame_of_op, group, charged, dur, frames, rows), group_charges)


def charges_per_group(group: np.ndarray, charged: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Charged time per group of these ops (timeline order) and which groups they hold."""
    ok = group >= 0
    return (
        np.bincount(group[ok], weights=charged[ok], minlength=groups),
        np.bincount(group[ok], minlength=groups) > 0,
    )
