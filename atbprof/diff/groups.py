"""Matched groups: the unit a diff compares. A group is a set of base ops and a set of new ops that do the same
work in one step (1:1 for an unchanged kernel, N:1 for a fusion, 1:N for a split, N:0 / 0:N for removed / added).

Both matchers (runs of ours: graphs.py; any input: align.py) produce a `Matching`: a group code for every op of
each side (timeline order, -1 = not matched; none kept for runs read in parts, whose ops are summed per frame as
they are read) and one `GroupInfo` per code. Frames are paired by `pairs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STRUCTURE = ("same", "fused", "split", "added", "removed", "replaced")


@dataclass(frozen=True)
class GroupInfo:
    base_types: tuple[str, ...]  # op types of the base ops, in order
    new_types: tuple[str, ...]
    structure: str  # one of STRUCTURE
    rule: str  # fusion rule that explains it ("" if none / unknown)
    layer: int  # -1 model-level, -2 unknown
    roles: str  # "attn.norm" or "attn.residual+ffn.norm -> ffn.norm"
    category: str
    shape: str  # input shapes of the first op (KernelCompare key)

    def label(self) -> str:
        """ "Add + RmsNorm (2 kernels) -> AddRmsNorm" for structural changes, the op type otherwise."""
        if self.structure in ("same", "added", "removed") and len(self.base_types + self.new_types) <= 2:
            return (self.base_types or self.new_types)[0]  # one kernel type: its row holds all its instances

        def side(types: tuple[str, ...]) -> str:
            if not types:
                return "(none)"
            text = " + ".join(types)
            return f"{text} ({len(types)} kernels)" if len(types) > 1 else text

        return f"{side(self.base_types)} -> {side(self.new_types)}"


@dataclass(frozen=True)
class Matching:
    method: str  # "graph" (runs of ours: the unfused graph's node ids) | "alignment"
    base_group: np.ndarray | None  # per base op, timeline order (None: summed as read, diff/parts.py)
    new_group: np.ndarray | None
    groups: list[GroupInfo]
    pairs: np.ndarray  # (k, 2): base frame, new frame
    notes: tuple[str, ...] = ()


def structure_of(base_types: tuple[str, ...], new_types: tuple[str, ...]) -> str:
    nb, nn = len(base_types), len(new_types)
    if nb == 0:
        return "added"
    if nn == 0:
        return "removed"
    if nb == 1 and nn == 1:
        return "same" if base_types == new_types else "replaced"
    if nn == 1:
        return "fused"
    if nb == 1:
        return "split"
    return "replaced"


def pair_frames(
    base_steps: np.ndarray, new_steps: np.ndarray, base_phase: list[str], new_phase: list[str]
) -> tuple[np.ndarray, str]:
    """Frames to compare: by step number when the two share step numbers, else in order within each phase."""
    common = np.intersect1d(base_steps, new_steps)
    if len(common):
        bi = np.searchsorted(base_steps, common) if _sorted(base_steps) else _index(base_steps, common)
        ni = np.searchsorted(new_steps, common) if _sorted(new_steps) else _index(new_steps, common)
        return np.stack([bi, ni], axis=1).astype(np.int64), "by step number"
    out: list[tuple[int, int]] = []
    for ph in dict.fromkeys(base_phase):
        b = [i for i, p in enumerate(base_phase) if p == ph]
        n = [i for i, p in enumerate(new_phase) if p == ph]
        out.extend(zip(b, n, strict=False))
    return np.array(out, dtype=np.int64).reshape(-1, 2), "in order (the inputs share no step numbers)"


def _sorted(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or (np.diff(a) > 0).all())


def _index(a: np.ndarray, values: np.ndarray) -> np.ndarray:
    pos = {int(v): i for i, v in enumerate(a.tolist())}
    return np.array([pos[int(v)] for v in values.tolist()], dtype=np.int64)
