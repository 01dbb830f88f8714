"""Which device kernels host calls launched, from a profile's launch records: a kernel belongs to the call during
which its launch was made (a Kineto `cudaLaunchKernel` / `hipLaunchKernel` inside `aten::pow`'s span). Gives a
framework-level finding its device time beside its host time, and the what-if on a device atbprof has no model of
what a chain's kernels cost and how far the host was ahead of them. Pure: tables in, arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from atbprof.analyze.view import RowsOf, int_column


@dataclass(frozen=True)
class LaunchIndex:
    """The kernels with a launch record, in the order of their launch calls."""

    at: np.ndarray  # launch call start (ns)
    dur: np.ndarray  # the kernel's duration
    queued: np.ndarray  # how long it waited between its launch call's end and its start (>= 0)
    busy: np.ndarray  # running sum of `dur` (len + 1)

    @classmethod
    def of(cls, ops: pa.Table) -> LaunchIndex | None:
        """None where the profile records no launches."""
        if "host_launch_start_ns" not in ops.column_names:
            return None
        launch = ops.column("host_launch_start_ns")
        if launch.null_count == len(launch):
            return None
        valid = np.asarray(launch.is_valid().to_numpy(zero_copy_only=False), bool)
        at = launch.to_numpy(zero_copy_only=False)[valid].astype(np.int64)
        dur = ops.column("task_dur_ns").to_numpy(zero_copy_only=False)[valid].astype(np.int64)
        start = ops.column("task_start_ns").to_numpy(zero_copy_only=False)[valid].astype(np.int64)
        cost = ops.column("host_launch_dur_ns").fill_null(0).to_numpy(zero_copy_only=False)[valid].astype(np.int64)
        order = np.argsort(at, kind="stable")
        queued = np.maximum(start - (at + cost), 0)[order]
        return cls(at[order], dur[order], queued, np.append(0, np.cumsum(dur[order])))

    def within(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per window [a, b]: the (first, past-last) positions of the kernels launched in it."""
        return np.searchsorted(self.at, a, side="left"), np.searchsorted(self.at, b, side="right")

    def device_ns(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return (self.busy[hi] - self.busy[lo]).astype(float)

    def longest(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.array([self.dur[i:j].max() if j > i else 0 for i, j in zip(lo, hi, strict=True)], float)

    def shortest(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        return np.array([self.dur[i:j].min() if j > i else 0 for i, j in zip(lo, hi, strict=True)], float)

    def ahead(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """How long the host was ahead of the device: the shortest queue wait of the kernels (host time that
        could go without the device noticing)."""
        return np.array([self.queued[i:j].min() if j > i else 0 for i, j in zip(lo, hi, strict=True)], float)


def kernels_of_calls(findings: pa.Table, framework: pa.Table | None, ops: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Per finding row: the device time (ns) and the number of the kernels its member calls launched; NaN and 0 on
    device-level rows, and where the profile has no launch records."""
    k = findings.num_rows
    device = np.full(k, np.nan)
    count = np.zeros(k, np.int64)
    launches = LaunchIndex.of(ops)
    if framework is None or not framework.num_rows or launches is None:
        return device, count
    calls = RowsOf(int_column(framework, "index", 0))
    start = int_column(framework, "start_ns", 0)
    end = start + int_column(framework, "dur_ns", 0)
    levels = findings.column("level").to_pylist()
    for i, members in enumerate(findings.column("op_indices").to_pylist()):
        if levels[i] != "framework" or not members:
            continue
        rows = calls.rows(members)
        lo, hi = launches.within(start[rows], end[rows])
        device[i] = float(launches.device_ns(lo, hi).sum())
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
