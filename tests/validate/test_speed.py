"""Not a benchmark: a guard against accidentally quadratic rules (200k events take ~1 s; the bound is loose)."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import orjson

from atbprof.validate import validate_trace


def kineto_like(n_steps: int) -> list[dict[str, object]]:
    """Nested cpu ops launching kernels on two streams, with s/f flows and a memory counter (14 events a step)."""
    events: list[dict[str, object]] = [{"name": "process_name", "ph": "M", "pid": 100, "args": {"name": "python"}}]
    for step in range(n_steps):
        t = 1000.0 + 60.0 * step
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 100, "tid": 101, "ts": t, "dur": 40})
        for k in range(3):
            corr = 3 * step + k
            cs = t + 1 + 12 * k
            tid = 7 + k % 2
            events += [
                {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 100, "tid": 101, "ts": cs, "dur": 10},
                {"ph": "X", "name": "cudaLaunchKernel", "pid": 100, "tid": 101, "ts": cs + 2, "dur": 5},
                {"ph": "s", "id": corr, "pid": 100, "tid": 101, "ts": cs + 2, "cat": "ac2g", "name": "ac2g"},
                {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 1, "tid": tid, "ts": cs + 8, "dur": 9.5},
                {"ph": "f", "id": corr, "pid": 1, "tid": tid, "ts": cs + 8, "cat": "ac2g", "name": "ac2g", "bp": "e"},
            ]
        events.append({"ph": "C", "name": "memory", "pid": 100, "ts": t + 40, "args": {"bytes": step}})
    return events


def test_200k_events_validate_quickly(tmp_path: Path) -> None:
    path = tmp_path / "big.json.gz"
    events = kineto_like(200_000 // 17)
    path.write_bytes(gzip.compress(orjson.dumps({"traceEvents": events}), 1))
    start = time.process_time()  # CPU time: a loaded machine stretches the wall clock, not the work
    report = validate_trace(path)
    elapsed = time.process_time() - start
    assert not report.loses_data, report.findings
    assert report.summary.flows == 3 * (200_000 // 17)
    assert elapsed < 30, f"{len(events):,} events took {elapsed:.1f} s"
