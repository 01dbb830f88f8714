#!/usr/bin/env python3
"""Numerics of one LLaMA-2-7B decoder layer at prompt 512 (`atbprof run --numerics`'s extra work).

    python scripts/bench_numerics.py             # default subset (128 query rows) and all 512 rows, 3 runs each

Each case runs in a fresh subprocess (weights generated, prefill + one decode step, unfused / fused / float64,
every fused kernel and rule probed); cases alternate so machine noise hits both; medians of --repeat runs with
peak RSS. Target: < 30 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {"default subset (128 query rows)": [], "all 512 rows": ["numerics.query_rows=null"]}
CHILD = """
import json, resource, sys, time
from atbprof.config import load_config
from atbprof.numerics.runner import run_numerics
from atbprof.sim.simulate import Simulation
cfg = load_config(sys.argv[1], ["numerics.enabled=true", "workload.decode_tokens=1", *sys.argv[2:]])
sim = Simulation(cfg)
t = time.perf_counter()
report = run_numerics(sim)
secs = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"s": secs, "rss": rss, "rules": report.rules, "kernels": len(report.kernels)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--config", default=str(ROOT / "fixtures" / "llama2-7b-910a.yaml"))
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {c: [] for c in CASES}
    for _ in range(args.repeat):
        for case, overrides in CASES.items():
            out = subprocess.run(
                [sys.executable, "-c", CHILD, args.config, *overrides],
                check=True, capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            runs[case].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"numerics, LLaMA-2-7B layer 0, prompt 512 + 1 decode step; medians of {args.repeat}")
    print(f"{'case':36} {'seconds':>8} {'runs':>24} {'peak RSS MB':>12}")
    for case, rs in runs.items():
        secs = [r["s"] for r in rs]
        print(
            f"{case:36} {statistics.median(secs):8.2f} {' '.join(f'{s:.1f}' for s in secs):>24} "
            f"{statistics.median(r['rss'] for r in rs):12.0f}"
        )
    print("rules:", runs[next(iter(CASES))][0]["rules"])


if __name__ == "__main__":
    main()
