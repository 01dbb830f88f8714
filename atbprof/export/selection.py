"""Which steps and layers of a run go into an export's timeline JSON (trace_view.json / msprof_*.json).

The same rules as the run's own trace (writers/selection.py): `output.trace_steps` / `trace_layers` of the run's
config, else the whole steps that fit in `output.trace_max_mb` of estimated JSON; `atbprof export --trace-steps /
--trace-layers / --trace-max-mb` override them. The tables (kernel_details.csv, op_summary, op_statistic,
step_trace_time) always hold every op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from atbprof.export.common import RunSource
from atbprof.export.timeline import BusyTracker, BusyUpdate
from atbprof.writers.selection import TraceSelection, select_trace

# measured on seed000-baseline runs (28,033 and 4,522 ops): timeline JSON bytes per op
EXPORT_BYTES_PER_OP = {
    ("ascend-pt", "eager"): 1440,
    ("ascend-pt", "graph"): 500,
    ("msprof", "eager"): 880,
    ("msprof", "graph"): 450,
}


@dataclass(frozen=True)
class TraceChoice:
    """What the user asked for (None: the run's own config decides)."""

    steps: str | None = None
    layers: str | None = None
    max_mb: float | None = None


def export_selection(source: RunSource, target: str, choice: TraceChoice) -> TraceSelection:
    output = source.doc.get("config", {}).get("output", {}) if isinstance(source.doc.get("config"), dict) else {}
    steps = choice.steps if choice.steps is not None else output.get("trace_steps")
    layers = choice.layers if choice.layers is not None else output.get("trace_layers")
    max_mb = choice.max_mb if choice.max_mb is not None else output.get("trace_max_mb", 600)
    order = np.argsort(source.steps.column("step").to_numpy())
    per_step = source.steps.column("op_count").to_numpy()[order]
    in_layers = _layer_ops(source, len(per_step)) if layers is not None else np.zeros(len(per_step), np.int64)
    n_layers = int(source.doc.get("model", {}).get("layers", 0)) if isinstance(source.doc.get("model"), dict) else 0
    per_op = EXPORT_BYTES_PER_OP[(target, source.execution_mode)]
    return select_trace(
        per_step.tolist(),
        in_layers.tolist(),
        n_layers,
        source.execution_mode,
        steps,
        layers,
        max_mb,
        per_op=per_op,
        keys=("--trace-steps", "--trace-layers"),
    )


def _layer_ops(source: RunSource, n_steps: int) -> np.ndarray:
    """Per step, the ops inside decoder layers (two int32 columns of ops.parquet)."""
    t = pq.read_table(source.ops_path, columns=["step", "layer"], page_checksum_verification=True)
    inside = t.filter(pc.greater_equal(t.column("layer"), 0))
    counts = np.bincount(inside.column("step").to_numpy(), minlength=n_steps)
    return counts[:n_steps].astype(np.int64)


class TimelineSlice:
    """Feeds the timeline writer only the selected ops, with busy intervals of its own (Overlap Analysis of what it
    shows); the tables keep the whole run's."""

    def __init__(self, selection: TraceSelection) -> None:
        self.selection = selection
        self.whole = selection.describe() is None
        self.tracker = BusyTracker()

    def steps(self, steps: pa.Table) -> pa.Table:
        return steps if self.whole else self.selection.steps_table(steps)

    def batch(self, b: pa.RecordBatch, busy: BusyUpdate) -> tuple[pa.RecordBatch, BusyUpdate]:
        if self.whole:
            return b, busy
        kept = self.selection.filter(b)
        start = kept.column("task_start_ns").to_numpy()
        return kept, self.tracker.feed(start, start + kept.column("task_dur_ns").to_numpy())

    def closing_tracker(self, whole_run: BusyTracker) -> BusyTracker:
        return whole_run if self.whole else self.tracker
