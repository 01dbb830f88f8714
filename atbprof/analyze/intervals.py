"""Sets of time intervals as sorted, disjoint arrays: what a set covers of other intervals, in one vectorised pass.
Shared by the idle split (idle_causes.py) and the trace what-if (whatif_trace.py)."""

from __future__ import annotations

import numpy as np


def union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the same time as [start, end)."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]  # an interval that starts after everything before it ended opens a merged one
    return s[new], np.maximum.reduceat(reach, np.flatnonzero(new))


def covered(lo: np.ndarray, hi: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length of each [lo, hi) that the disjoint sorted intervals (starts, ends) cover."""
    if not len(starts):
        return np.zeros(len(lo), np.int64)
    cum = np.concatenate([[0], np.cumsum(ends - starts)])

    def upto(t: np.ndarray) -> np.ndarray:  # covered length in (-inf, t)
        k = np.searchsorted(starts, t, side="right")  # intervals starting at or before t
        at = np.clip(k - 1, 0, None)
        inside = np.minimum(np.clip(t - starts[at], 0, None), (ends - starts)[at])
        return np.where(k > 0, cum[at] + inside, 0)

    return upto(hi) - upto(lo)
