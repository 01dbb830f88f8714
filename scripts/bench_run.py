#!/usr/bin/env python3
"""End-to-end `atbprof run` throughput: graph build, fusion, device model, Parquet and trace writing.

    python scripts/bench_run.py                 # LLaMA-2-13B 2048 tokens, LLaMA-2-70B TP8 and TP4xPP2, 3 repeats
    python scripts/bench_run.py --quick         # 7B, 128 tokens (a smoke run)

Reports simulated ops per second (target: >= 1,000,000 on a 2-core machine) for the fully decomposed graph
(`fusion none`, the most ops) and the `default` strategy, with and without the Chrome trace, and the peak RSS at
256 vs 1024 decode tokens (memory must stay flat: batches are streamed); then LLaMA-2-70B tensor parallel 8 on
8 x 910B4 (fixtures/llama2-70b-910b4-tp8.yaml), every rank's ops in ops.parquet, at 256 and 1024 decode tokens
(the same targets), and the same model as TP4 x PP2 on 8 x 910B2 (fixtures/llama2-70b-910b2-tp4-pp2.yaml: two
stage graphs, two microbatch passes a step). Each measurement runs in a fresh
subprocess so peak RSS is per run; numbers are medians of --repeat runs, side by side in one invocation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from atbprof.config import load_config
from atbprof.run import run_simulation
cfg = load_config(sys.argv[2], sys.argv[4:])
t = time.perf_counter()
res = run_simulation(cfg, Path(sys.argv[3]), force=True)
el = time.perf_counter() - t
size = sum(p.stat().st_size for p in Path(sys.argv[3]).iterdir())
print(json.dumps({"seconds": el, "ops": res.summary.ops_total,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "bytes": size}))
"""


def measure(config: Path, out: Path, overrides: list[str]) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(ROOT), str(config), str(out), *overrides],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_run(config: Path, out: Path, overrides: list[str], repeat: int) -> tuple[float, list[dict[str, float]]]:
    """Median seconds of `repeat` fresh-process runs, and the runs."""
    runs = [measure(config, out, overrides) for _ in range(repeat)]
    return statistics.median(r["seconds"] for r in runs), runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    model, tokens = ("llama2-7b", 128) if args.quick else ("llama2-13b", 2048)  # 70B needs several cards (issue 14)
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.yaml"
        config.write_text(
            f"name: bench\nmodel: {{preset: {model}}}\ndevice: {{preset: 910B2}}\n"
            f"workload: {{batch_size: 1, prompt_len: 512, decode_tokens: {tokens}}}\n"
        )
        cases = [
            ("none, parquet + trace", ["fusion=none"]),
            ("none, parquet only", ["fusion=none", "output.trace=false"]),
            ("default, parquet + trace", ["fusion=default"]),
            ("default, graph mode, parquet + trace", ["fusion=default", "execution.mode=graph"]),
        ]
        print(f"{model}, 910B2, prompt 512, {tokens} decode tokens; median of {args.repeat} runs")
        print(f"{'case':40s} {'ops':>10s} {'seconds':>8s} {'ops/s':>11s} {'peak RSS':>9s} {'output':>9s}")
        for label, ov in cases:
            sec, runs = median_run(config, Path(tmp) / "out", ov, args.repeat)
            ops = runs[0]["ops"]
            print(
                f"{label:40s} {ops:10,.0f} {sec:8.2f} {ops / sec:11,.0f} {max(r['rss_mb'] for r in runs):7.0f}MB"
                f" {runs[0]['bytes'] / 1e6:7.0f}MB",
                flush=True,
            )
        print()
        print("memory vs decode tokens (fusion none, parquet + trace):")
        for n in (256, 1024) if not args.quick else (32, 128):
            r = measure(config, Path(tmp) / "out", ["fusion=none", f"workload.decode_tokens={n}"])
            print(f"  {n:5d} tokens: {r['ops']:10,.0f} ops, peak RSS {r['rss_mb']:.0f} MB, {r['seconds']:.2f} s")
        if not args.quick:
            for fixture, title in (
                ("llama2-70b-910b4-tp8.yaml", "LLaMA-2-70B TP8 on 8 x 910B4 (all 8 ranks in ops.parquet, graph"),
                ("llama2-70b-910b2-tp4-pp2.yaml", "LLaMA-2-70B TP4 x PP2 on 8 x 910B2 (2 microbatches, graph"),
            ):
                print()
                print(f"{title}, trace of rank 0):")
                for n in (256, 1024):
                    sec, runs = median_run(
                        ROOT / "fixtures" / fixture, Path(tmp) / "out", [f"workload.decode_tokens={n}"], args.repeat
                    )
                    ops = runs[0]["ops"]
                    print(
                        f"  {n:5d} tokens: {ops:10,.0f} ops, {sec:6.2f} s, {ops / sec:11,.0f} ops/s, peak RSS "
                        f"{max(r['rss_mb'] for r in runs):.0f} MB, output {runs[0]['bytes'] / 1e6:.0f} MB",
                        flush=True,
                    )
    _ = time


if __name__ == "__main__":
    main()
