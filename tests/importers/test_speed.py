"""Import speed on real data scaled up: a guard against slow paths creeping in, timed in this process's CPU time
(a loaded machine stretches the wall clock, not the work done: wall-clock floors failed when two suites ran side by
side). The floors sit well below what the
importers reach on a 2-core dev box (~250-490k kernel_details rows/s, ~400-540k Kineto events/s on the real
traces); HolisticTraceAnalysis loads ~65-90k events/s there (scripts/bench_analyze.py)."""

from __future__ import annotations

import csv
import gzip
import time
from pathlib import Path

import orjson

from atbprof.importers import load_profile
from tests.importers.conftest import MSTT, OUT, QWEN, TRACES, shared

CSV_ROWS_PER_S = 100_000  # 1M rows in < 10 s even on a slow CI runner
KINETO_EVENTS_PER_S = 100_000  # above HTA (~65-90k events/s)


def _seconds(path: Path) -> float:
    load_profile(shared(MSTT / "kernel_details_fa_matmul_pipeutil.csv"))  # warm-up: pyarrow's kernel registry
    start = time.process_time()
    load_profile(path)
    return time.process_time() - start


def test_kernel_details_rows_per_second(tmp_path: Path) -> None:
    with open(shared(QWEN / OUT / "kernel_details.csv"), newline="") as fh:
        header, *rows = list(csv.reader(fh))
    at = header.index("Start Time(us)")
    copies = 200_000 // len(rows) + 1
    path = tmp_path / "kernel_details.csv"
    with open(path, "w", newline="") as fh:  # each copy one second later: distinct tasks, as a longer capture
        out = csv.writer(fh)
        out.writerow(header)
        for k in range(copies):
            for row in rows:
                whole, _, rest = row[at].partition(".")
                out.writerow([*row[:at], f"{int(whole) + k * 1_000_000}.{rest}", *row[at + 1 :]])
    n = copies * len(rows)
    seconds = _seconds(path)
    print(f"kernel_details: {n} rows in {seconds:.2f} s = {n / seconds:,.0f} rows/s")
    assert n / seconds > CSV_ROWS_PER_S


def test_kineto_events_per_second(tmp_path: Path) -> None:
    """The ns-resolution HTA trace three times over (float ts with ns digits: the exact-text path)."""
    doc = orjson.loads(gzip.decompress(shared(TRACES / "hta_ns_resolution_rank0.pt.trace.json.gz").read_bytes()))
    events = doc["traceEvents"]
    shift = 600_000.0  # µs: each copy after the previous one
    doc["traceEvents"] = events + [
        {**e, "ts": e["ts"] + k * shift} if isinstance(e.get("ts"), float) else e for k in (1, 2) for e in events
    ]
    path = tmp_path / "trace.json"
    path.write_bytes(orjson.dumps(doc))
    n = len(doc["traceEvents"])
    seconds = _seconds(path)
    print(f"kineto: {n} events in {seconds:.2f} s = {n / seconds:,.0f} events/s")
    assert n / seconds > KINETO_EVENTS_PER_S


def test_real_kineto_file_rate() -> None:
    path = shared(TRACES / "hta_trace_diff_control.json.gz")
    n = len(orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"])
    seconds = _seconds(path)
    print(f"{path.name}: {n} events in {seconds:.2f} s = {n / seconds:,.0f} events/s")
    assert n / seconds > KINETO_EVENTS_PER_S
