"""Which device kernels each framework-level finding's calls launched: a kernel belongs to the outermost framework
call during which its launch was made (a Kineto `cudaLaunchKernel` / `hipLaunchKernel` inside `aten::pow`'s span on
the launching thread). Gives a framework finding its device time beside its host time. Pure: tables in, arrays out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from atbprof.analyze.view import int_column


def kernels_of_calls(findings: pa.Table, framework: pa.Table | None, ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per finding row: the device time (ns) and the number of the kernels its member calls launched; NaN and 0 on
    device-level rows, and where the profile has no launch records."""
    k = findings.num_rows
    device = np.full(k, np.nan)
    count = np.zeros(k, np.int64)
    launch = ops.column("host_launch_start_ns") if "host_launch_start_ns" in ops.column_names else None
    if framework is None or not framework.num_rows or launch is None or launch.null_count == len(launch):
        return device, count
    valid = np.asarray(launch.is_valid().to_numpy(zero_copy_only=False), bool)
    at = launch.to_numpy(zero_copy_only=False)[valid].astype(np.int64)
    dur = ops.column("task_dur_ns").to_numpy(zero_copy_only=False)[valid].astype(np.int64)
    order = np.argsort(at, kind="stable")
    at, dur = at[order], dur[order]
    busy = np.append(0, np.cumsum(dur))
    index = int_column(framework, "index", 0)
    start = int_column(framework, "start_ns", 0)
    end = start + int_column(framework, "dur_ns", 0)
    by_index = np.argsort(index, kind="stable")
    levels = findings.column("level").to_pylist()
    for i, members in enumerate(findings.column("op_indices").to_pylist()):
        if levels[i] != "framework" or not members:
            continue
        pos = np.searchsorted(index[by_index], members)
        rows = by_index[np.clip(pos, 0, len(index) - 1)]
        rows = rows[index[rows] == np.asarray(members)]
        lo = np.searchsorted(at, start[rows], side="left")
        hi = np.searchsorted(at, end[rows], side="right")
        device[i] = float((busy[hi] - busy[lo]).sum())
        count[i] = int((hi - lo).sum())
    return device, count


def with_device_time(findings: pa.Table, framework: pa.Table | None, ops: pa.Table) -> pa.Table:
    """`findings` with `device_ns` / `device_kernels` filled for its framework-level rows (where known)."""
    device, count = kernels_of_calls(findings, framework, ops)
    known = ~np.isnan(device)
    if not known.any():
        return findings
    out = findings.set_column(
        findings.schema.get_field_index("device_ns"), "device_ns", pa.array(device, pa.float64(), mask=~known)
    )
    return out.set_column(
        out.schema.get_field_index("device_kernels"), "device_kernels", pa.array(count, pa.int64(), mask=~known)
    )
