#!/usr/bin/env python3
"""`atbprof run` of a serving workload of 10,000 requests: wall time and peak memory, each in a fresh process.

    python scripts/bench_serving.py                               # both schedulers, graph and eager
    python scripts/bench_serving.py --json benchmarks/serving.json

The workload: LLaMA-3.1-8B on one 910B2 (fixtures/serving-llama3.1-8b-910b2.yaml), 10,000 ShareGPT-like requests
at 10 requests/s (near the engine's capacity: long queues, large batches) and all at once (rate 0: the closed-loop
maximum), the trace off (the tables and run.json are written). Each case --repeat times; medians. Target (issue 31):
10,000 requests in under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ATBPROF = Path(sys.executable).parent / "atbprof"
CONFIG = ROOT / "fixtures" / "serving-llama3.1-8b-910b2.yaml"
CASES = [
    (scheduler, mode, rate)
    for scheduler in ("prefill_first", "chunked")
    for mode in ("graph", "eager")
    for rate in (10, 0)
]


def timed(cmd: list[str]) -> tuple[float, float, dict]:
    """(wall seconds, peak RSS MB, the JSON it printed) of one command in a fresh process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{cmd} failed:\n{err.decode(errors='replace')[-2000:]}")
        out.seek(0)
        return wall, usage.ru_maxrss / 1024, json.loads(out.read())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    rows = []
    print(f"{'scheduler':>14} {'mode':>6} {'rate':>5} {'wall s':>7} {'RSS MB':>7} {'iterations':>10}  load")
    with tempfile.TemporaryDirectory() as tmp:
        for scheduler, mode, rate in CASES:
            walls, peaks = [], []
            for _ in range(args.repeat):
                cmd = [
                    str(ATBPROF), "run", "--config", str(CONFIG), "--out", f"{tmp}/run", "--force", "--format", "json",
                    "--set", f"workload.requests={args.requests}", "--set", f"workload.rate_qps={rate}",
                    "--set", f"workload.scheduler={scheduler}", "--set", f"execution.mode={mode}",
                    "--set", "output.trace=false",
                ]  # fmt: skip
                wall, peak, doc = timed(cmd)
                walls.append(wall)
                peaks.append(peak)
            s = doc["summary"]["serving"]
            row = {
                "scheduler": scheduler,
                "mode": mode,
                "rate_qps": rate,
                "requests": args.requests,
                "wall_s": round(statistics.median(walls), 2),
                "peak_mb": round(max(peaks)),
                "iterations": s["iterations"],
                "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            }
            rows.append(row)
            print(
                f"{scheduler:>14} {mode:>6} {rate:>5} {row['wall_s']:>7.2f} {row['peak_mb']:>7} {s['iterations']:>10}"
                f"  {row['load']}",
                flush=True,
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"bench": "serving", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
