#!/usr/bin/env python3
"""Trace writer throughput: events per second of the Chrome JSON writer (and the Perfetto protobuf writer).

    python scripts/bench_trace.py            # LLaMA-2-7B unfused on 910B2, 400 decode steps (~660k ops)

The op batches are simulated first (not timed); each writer then writes them to a temp dir; medians of --repeat
runs, side by side in one invocation. Target for the JSON writer: >= 1,000,000 events/s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atbprof.config import load_config  # noqa: E402
from atbprof.sim.simulate import Simulation  # noqa: E402
from atbprof.writers.base import TraceMeta  # noqa: E402
from atbprof.writers.chrome import ChromeTraceWriter  # noqa: E402


def writers() -> dict[str, type]:
    out: dict[str, type] = {"chrome json": ChromeTraceWriter}
    try:
        from atbprof.writers.perfetto import PerfettoTraceWriter

        out["perfetto pftrace"] = PerfettoTraceWriter
    except ImportError:
        pass
    return out


def count_events(path: Path) -> int:
    if path.suffix == ".gz":
        return gzip.decompress(path.read_bytes()).count(b'\n{"')
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    return len(Trace.FromString(path.read_bytes()).packet)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cfg = load_config(
        ROOT / "fixtures" / "llama2-7b-910b2.yaml", ["fusion=none", f"workload.decode_tokens={args.steps}"]
    )
    sim = Simulation(cfg)
    batches = list(sim.batches())
    steps = sim.steps_table()
    ops = sum(b.num_rows for b in batches)
    meta = TraceMeta(cfg.name, sim.device.name, sim.device.soc_version, cfg.execution.mode, (2,))
    print(f"{ops:,} ops (LLaMA-2-7B, fusion none, {args.steps} decode steps); median of {args.repeat} runs")
    for name, cls in writers().items():
        times = []
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.repeat):
                w = cls()
                t = time.perf_counter()
                w.open(Path(tmp), meta)
                for b in batches:
                    w.write_batch(b)
                w.close(steps)
                times.append(time.perf_counter() - t)
            out = Path(tmp) / cls.filename
            events = count_events(out)
            size = out.stat().st_size
        sec = statistics.median(times)
        print(
            f"  {name:18s} {events:>11,} events {sec:6.2f} s  {events / sec:>11,.0f} events/s  "
            f"{ops / sec:>9,.0f} ops/s  {size / 1e6:6.1f} MB"
        )


if __name__ == "__main__":
    main()
