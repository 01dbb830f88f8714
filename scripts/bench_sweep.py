#!/usr/bin/env python3
"""`atbprof sweep` and `atbprof plot` against issue 16's targets.

    python scripts/bench_sweep.py              # the 1,008-point sweep locally and on a local Ray head, plots
    python scripts/bench_sweep.py --no-ray     # without the Ray head

1. A 1,008-point sweep of summaries: LLaMA-2-7B, 13B and 70B-TP8 (zipped with parallel.tp 1, 1, 8) x batch
   1-32 x context 256-16,384 x fusion none/default x 910B2/910B4 x eager/graph, 128 decode tokens each; points
   that do not fit are rows saying so. Wall time of `atbprof sweep` in a fresh process (its default process pool,
   one worker per core), points/s. Target: under 60 s on the 2-core machine.
2. The same sweep on a real local Ray head (`ray start --head` on loopback, 2 CPUs, started and stopped here):
   points/s, and its sweep.parquet compared with the local one (equal tables expected).
3. `atbprof plot` of a run of about 4 million ops (LLaMA-2-7B, fusion none, 2,500 decode tokens, no trace):
   median wall time of 3 fresh processes. Target: under 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ATBPROF = BIN / "atbprof"
RAY = BIN / "ray"

SWEEP = """\
name: bench-sweep
base: {base}
set: {{workload.decode_tokens: 128, model.rope_scaling_factor: 5}}  # up to 16,384 tokens on LLaMA-2's 4,096
grid:
  workload.batch_size: [1, 2, 4, 8, 16, 32]
  workload.prompt_len: [256, 512, 1024, 2048, 4096, 8192, 16384]
  fusion: [none, default]
  device.preset: [910B2, 910B4]
  execution.mode: [eager, graph]
zip:
  - {{model.preset: [llama2-7b, llama2-13b, llama2-70b], parallel.tp: [1, 1, 8]}}
"""


def timed(cmd: list[str | Path]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{cmd[:3]} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-ray", action="store_true")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp_name:
        tmp = Path(tmp_name)
        spec = tmp / "sweep.yaml"
        spec.write_text(SWEEP.format(base=ROOT / "fixtures" / "llama2-7b-910b2.yaml"))
        wall = timed([ATBPROF, "sweep", "--spec", spec, "--out", tmp / "local", "--format", "json"])
        doc = json.loads((tmp / "local" / "sweep.json").read_text())["report"]
        n = doc["points"]
        figures["sweep"] = {
            "points": n,
            "ran": doc["ran"],
            "not_fitting": doc["not_fitting"],
            "failed": doc["failed"],
            "wall_s": round(wall, 2),
            "points_per_s": round(n / wall, 1),
        }
        print(
            f"sweep, local pool: {n} points ({doc['ran']} ran, {doc['not_fitting']} do not fit, "
            f"{doc['failed']} failed) in {wall:.1f} s = {n / wall:.1f} points/s (target: < 60 s)",
            flush=True,
        )
        if not args.no_ray and RAY.exists():
            from atbprof.scale.local_head import local_head

            with local_head(RAY) as address:  # stops only this head, not any other Ray cluster on the machine
                wall = timed([ATBPROF, "sweep", "--spec", spec, "--out", tmp / "ray", "--ray", address])
            same = pq.read_table(tmp / "ray" / "sweep.parquet").equals(pq.read_table(tmp / "local" / "sweep.parquet"))
            figures["sweep_ray"] = {"wall_s": round(wall, 2), "points_per_s": round(n / wall, 1), "equal": same}
            print(
                f"sweep, local Ray head (2 CPUs): {wall:.1f} s = {n / wall:.1f} points/s; table equal: {same}",
                flush=True,
            )
        run = tmp / "big"
        cfg = ROOT / "fixtures" / "llama2-7b-910b2.yaml"
        t0 = time.perf_counter()
        subprocess.run(
            [
                ATBPROF,
                "run",
                "--config",
                cfg,
                "--fusion",
                "none",
                "--set",
                "workload.decode_tokens=2500",
                "--set",
                "output.trace=false",
                "--out",
                run,
                "--format",
                "json",
            ],
            check=True,
            capture_output=True,
        )
        ops = pq.ParquetFile(run / "ops.parquet").metadata.num_rows
        print(f"run of {ops:,} ops made in {time.perf_counter() - t0:.1f} s", flush=True)
        walls = []
        for i in range(3):
            walls.append(timed([ATBPROF, "plot", run, "--out", tmp / f"plots{i}"]))
        med = statistics.median(walls)
        figures["plot"] = {"ops": ops, "median_s": round(med, 2), "runs_s": [round(w, 2) for w in walls]}
        print(f"plot of the {ops:,}-op run: median {med:.2f} s of {[round(w, 2) for w in walls]} (target: < 3 s)")
        shutil.rmtree(run, ignore_errors=True)
    if args.json:
        figures["load"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
