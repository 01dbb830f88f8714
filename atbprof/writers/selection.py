"""Which steps and layers go into the trace: the Perfetto UI holds ~2 GB, a trace takes 2-4x its size there.

ops.parquet always has every op; the trace keeps the detail the user asks for (`--trace-steps`, `--trace-layers`)
or, by default, the whole steps that fit in `output.trace_max_mb` of estimated JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.errors import ConfigError, UsageError

# measured on traces/examples: JSON bytes per device task with its host launch, flow, overlap and model slices
BYTES_PER_OP = {"eager": 1070, "graph": 810}


def parse_ranges(text: str, key: str) -> list[tuple[int, int | None]]:
    """'0-3,10,20-' -> [(0, 3), (10, 10), (20, None)] (inclusive; an open end runs to the last). `key` names the
    config key or the command-line option (`--trace-steps`) in messages."""
    option = key.startswith("--")
    error, named = (UsageError, f"{key} {text!r}") if option else (ConfigError, f"{key} = {text!r}")
    out: list[tuple[int, int | None]] = []
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        try:
            a = int(lo)
            b = (int(hi) if hi.strip() else None) if dash else a
        except ValueError:
            raise error(f"{named}: expected ranges like 0-3,10,20- (non-negative integers)") from None
        if a < 0 or (b is not None and b < a):
            raise error(f"{named}: range {part!r} is empty or negative (write low-high, e.g. 2-5)")
        out.append((a, b))
    return out


MAX_TRACE_RANKS = 64
"""Ranks in one trace: they share the Perfetto UI's size budget (`run --trace-ranks`, `analyze CLUSTER --trace`)."""


def members(ranges: list[tuple[int, int | None]], universe: np.ndarray) -> np.ndarray:
    """The values of `universe` that `ranges` (parse_ranges) name, in `universe`'s order."""
    keep = np.zeros(len(universe), dtype=bool)
    for a, b in ranges:
        keep |= (universe >= a) & (universe <= (universe.max(initial=0) if b is None else b))
    return universe[keep]


@dataclass(frozen=True)
class TraceSelection:
    steps: np.ndarray  # step numbers in the trace (sorted)
    layers: np.ndarray | None  # decoder layers in the trace (model-level ops always stay); None = all
    estimated_bytes: int
    full_bytes: int
    total_steps: int
    auto_capped: bool

    def filter(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        mask = pc.is_in(batch.column("step"), pa.array(self.steps, pa.int32()))
        if self.layers is not None:
            layer = batch.column("layer")
            mask = pc.and_(mask, pc.or_(pc.equal(layer, -1), pc.is_in(layer, pa.array(self.layers, pa.int32()))))
        return batch.filter(mask)

    def steps_table(self, steps: pa.Table) -> pa.Table:
        return steps.filter(pc.is_in(steps.column("step"), pa.array(self.steps, pa.int32())))

    def describe(self) -> str | None:
        """A note for the run summary when the trace is not the whole run."""
        if len(self.steps) == self.total_steps and self.layers is None:
            return None
        span = compact_ranges(self.steps)
        what = f"steps {span} of {self.total_steps}"
        if self.layers is not None:
            what += (
                f", layers {compact_ranges(self.layers)} (+ model-level ops; Overlap Analysis covers these ops only)"
            )
        why = (
            f"the whole run would be ~{self.full_bytes / 1e6:,.0f} MB of JSON, more than output.trace_max_mb; "
            "choose with --trace-steps / --trace-layers"
            if self.auto_capped
            else "--trace-steps / --trace-layers"
        )
        return (
            f"the trace covers {what} (~{self.estimated_bytes / 1e6:,.0f} MB of JSON; {why}); ops.parquet has every op"
        )


def compact_ranges(values: np.ndarray) -> str:
    """Sorted integers as ranges: [0, 1, 2, 5] -> '0-2,5'."""
    if not len(values):
        return "none"
    parts, start, prev = [], int(values[0]), int(values[0])
    for v in (int(x) for x in values[1:]):
        if v != prev + 1:
            parts.append(f"{start}-{prev}" if prev > start else str(start))
            start = v
        prev = v
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts)


def select_trace(
    ops_per_step: Sequence[int],
    layer_ops: Sequence[int],
    n_layers: int,
    mode: str,
    steps: str | None,
    layers: str | None,
    max_mb: float | None,
    *,
    per_op: int | None = None,
    keys: tuple[str, str] = ("output.trace_steps", "output.trace_layers"),
) -> TraceSelection:
    """`ops_per_step[s]`: tasks of step s; `layer_ops[s]`: of those, tasks inside decoder layers (the rest are
    model-level); the selection estimates its size from `per_op` bytes (default BYTES_PER_OP of the mode).
    `keys` name the two range options in messages."""
    per_op = per_op or BYTES_PER_OP[mode]
    counts = np.asarray(ops_per_step, dtype=np.int64)
    in_layers = np.asarray(layer_ops, dtype=np.int64)
    all_steps = np.arange(len(counts))
    layer_sel = None
    ops = counts.copy()
    if layers is not None:
        layer_sel = members(parse_ranges(layers, keys[1]), np.arange(n_layers))
        ops = counts - in_layers + in_layers * len(layer_sel) // max(n_layers, 1)
    full = int(counts.sum()) * per_op
    auto = False
    if steps is not None:
        chosen = members(parse_ranges(steps, keys[0]), all_steps)
    else:
        chosen = all_steps
        if max_mb is not None and ops.sum() * per_op > max_mb * 1e6:
            fits = int(np.searchsorted(np.cumsum(ops * per_op), max_mb * 1e6, side="right"))
            chosen = all_steps[: max(fits, 1)]
            auto = True
    est = int(ops[chosen].sum()) * per_op
    return TraceSelection(chosen, layer_sel, est, full, len(counts), auto)
