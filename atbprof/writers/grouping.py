"""Grouping shared by the trace writers: runs of equal keys, busy intervals and flat-track clamping.

All of it is incremental (ops arrive in batches in device order) and keeps only the open run / interval.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

NO_END = int(np.iinfo(np.int64).min)
LEVELS = ("step", "layer", "block")
"""The Model process's tracks: one slice per step, per layer of a step, per block (attention, ffn...) of a layer."""
BLOCK_NAMES = {"attn": "attention", "ffn": "ffn", "head": "head"}


def sequential(start: np.ndarray, end: np.ndarray, last_end: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Clamp slices of one flat track so none starts before an earlier one ended (Perfetto needs nesting)."""
    prev = np.maximum.accumulate(np.concatenate(([last_end], end[:-1])))
    s = np.maximum(start, prev)
    e = np.maximum(end, s)
    return s, e, max(last_end, int(e.max()))


class Runs:
    """Runs of equal keys in op order with min start, max end, byte and busy sums and a first-row payload.

    Columns: keys..., payload, start, end, bytes, busy. The last run stays open (the next batch may continue
    it); `feed` returns the completed runs and, per run, the chunk row whose arrival completed it.
    """

    def __init__(self) -> None:
        self.open: list[np.ndarray] | None = None

    def feed(self, keys: list[Any], payload: Any, vals: list[Any]) -> tuple[list[Any], Any]:
        chg = np.zeros(len(payload), dtype=bool)
        for k in keys:
            chg[1:] |= k[1:] != k[:-1]
        first = np.concatenate(([0], np.flatnonzero(chg)))
        s, e, nbytes, busy = vals
        cols = [c[first] for c in (*keys, payload)]
        cols += [np.minimum.reduceat(s, first), np.maximum.reduceat(e, first)]
        cols += [np.add.reduceat(nbytes, first), np.add.reduceat(busy, first)]
        at, o = first[1:], self.open
        if o is not None and all(o[i][0] == cols[i][0] for i in range(len(keys))):
            cols[len(keys)][0] = o[len(keys)][0]
            cols[-4][0], cols[-3][0] = min(cols[-4][0], o[-4][0]), max(cols[-3][0], o[-3][0])
            cols[-2][0] += o[-2][0]
            cols[-1][0] += o[-1][0]
        elif o is not None:
            cols, at = [np.concatenate((a, b)) for a, b in zip(o, cols, strict=True)], first
        self.open = [c[-1:].copy() for c in cols]
        return [c[:-1] for c in cols], at

    def flush(self) -> list[np.ndarray] | None:
        out, self.open = self.open, None
        return out


class BusyIntervals:
    """Merged busy intervals of the device (touching tasks coalesce) for Overlap Analysis' Computing / Free."""

    def __init__(self) -> None:
        self.open: tuple[int, int] | None = None  # the interval the next batch may extend
        self.prev = np.zeros(0, np.int64)  # per row of the last batch: the latest end before it

    def feed(self, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Intervals closed by this batch: (row that closed it, Computing start, end, next start = Free end)."""
        carry_end = NO_END if self.open is None else self.open[1]
        cm = np.maximum(np.maximum.accumulate(e), carry_end)
        prev = self.prev = np.concatenate(([carry_end], cm[:-1]))
        brk = np.flatnonzero(s > prev)
        starts = s[brk] if self.open is None else np.concatenate(([self.open[0]], s[brk]))
        closed = brk if self.open is not None else brk[1:]
        self.open = (int(starts[-1]), int(cm[-1]))
        return closed, starts[:-1], prev[closed], s[closed]


class ModelGroups:
    """The Steps / Layers / Blocks slices of the Model process, completed as batches stream in (both trace writers
    draw them; only how they write a slice differs). Group columns: keys..., payload, start, end, bytes, busy."""

    def __init__(self) -> None:
        self.codes: dict[str, dict[str, int]] = {"role": {}, "phase": {}}  # block / phase name -> code
        self.runs = {level: Runs() for level in LEVELS}
        self.last_end = dict.fromkeys(LEVELS, NO_END)

    def _code(self, col: pa.Array, kind: str, fn: Callable[[str], str]) -> np.ndarray:
        table = self.codes[kind]
        codes = np.array([table.setdefault(fn(v), len(table)) for v in col.dictionary.to_pylist()], np.int64)
        return codes[col.indices.to_numpy(zero_copy_only=False)]

    def feed(self, b: pa.RecordBatch, s: np.ndarray, e: np.ndarray) -> list[tuple[str, list[Any], np.ndarray]]:
        """(level, columns of the groups this batch completed, the batch row completing each) for every level."""
        c = b.column
        step, layer = c("step").to_numpy().astype(np.int64), c("layer").to_numpy().astype(np.int64)
        block = self._code(c("role"), "role", lambda r: BLOCK_NAMES.get(r.split(".")[0], r.split(".")[0]))
        phase = self._code(c("phase"), "phase", str)
        vals = [s, e, c("hbm_read_bytes").to_numpy() + c("hbm_write_bytes").to_numpy(), c("task_dur_ns").to_numpy()]
        keys = {"step": ([step], phase), "layer": ([step, layer], block), "block": ([step, layer, block], block)}
        return [(level, *self.runs[level].feed(*keys[level], vals)) for level in LEVELS]

    def flush(self) -> Iterator[tuple[str, list[Any]]]:
        """The groups still open at the end of the run, per level."""
        for level in LEVELS:
            cols = self.runs[level].flush()
            if cols is not None:
                yield level, cols

    def spans(self, level: str, cols: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Start and end of each group, clamped so the slices of a track do not overlap."""
        start, end, self.last_end[level] = sequential(cols[-4], cols[-3], self.last_end[level])
        return start, end

    def step_labels(self, cols: list[Any]) -> list[str]:
        """ "Step N (phase)" per step group: the name the host step frames have too."""
        phase = {v: k for k, v in self.codes["phase"].items()}
        rows = zip(cols[0].tolist(), cols[1].tolist(), strict=True)
        return [f"Step {s} ({phase[p]})" for s, p in rows]

    @property
    def block_names(self) -> list[str]:
        """Block names by code (the payload of layer and block groups)."""
        return list(self.codes["role"])
