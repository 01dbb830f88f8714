"""The op-table columns `analyze` reads: a run's table is loaded with these only (a 4 M-op run holds about half the
memory it would whole). A test analyzes runs both ways and asserts identical reports, so a column an analyzer starts
to read and this list lacks fails there, not silently."""

from __future__ import annotations

ANALYZE_COLUMNS = (
    "op_index",
    "step",
    "phase",
    "layer",
    "node_id",
    "role",
    "op_name",
    "op_type",
    "task_type",
    "stream_id",
    "task_start_ns",
    "task_dur_ns",
    "host_launch_start_ns",
    "host_launch_dur_ns",
    "block_dim",
    "mix_block_dim",
    "input_shapes",
    "input_dtypes",
    "output_shapes",
    "output_dtypes",
    "vec_time_ns",
    "mac_ratio",
    "vec_ratio",
    "scalar_ratio",
    "mte1_ratio",
    "mte2_ratio",
    "mte3_ratio",
    "fixpipe_ratio",
    "bound",
    "rank",
)
"""Not read: task ids and waits, FLOPs and bytes, the other pipe times, fused_from, and the parallel columns other
than rank (the cluster analyses read their own)."""

DIFF_COLUMNS = (*ANALYZE_COLUMNS, "fused_from")
"""The op-table columns `diff` reads without --trace (which draws every column): analyze's and the fused ops' origins
(a fused kernel pairs with the unfused ops it replaced). A test diffs runs both ways and asserts identical reports."""
