#!/usr/bin/env python3
"""`atbprof analyze` of a cluster export, at 32 / 128 / 1,024 ranks, side by side with msprof-analyze's cluster mode.

    python scripts/bench_cluster.py                       # 32 and 128 ranks, with msprof-analyze on both
    python scripts/bench_cluster.py --ranks 32,128,1024   # adds the 1,024-rank cluster (its export takes ~5 min)

The clusters are simulated LLaMA-2-70B serving runs (910B2, tp 8 x pp 4 x dp N/32, batch 8, prompt 1024, 8 decode
tokens, graph mode) exported as torch_npu writes a job: one *_ascend_pt directory per rank with step_trace_time.csv,
communication.json, communication_matrix.json and the parallel groups; one rank per pipeline stage also gets its
kernel tables (`--kernel-ranks`), as a user profiles a few ranks in full. They are cached under .bench-cache/, keyed
by the config, so a second invocation only times the analysis.

What is measured, each command in a fresh process (wall time, medians of --repeat runs; peak RSS from wait4):
  * `atbprof analyze CLUSTER --format json` in process (--workers 0) and with --workers 2;
  * `msprof-analyze cluster -d CLUSTER -m all` on the same directory (its output directory removed between runs),
    up to --peer-max ranks (it is the slow side).
Targets (issue 15): 1,024 ranks analysed in under 60 s; peak RSS bounded (1,024 ranks within 4x of 128 ranks'); at
least 10x faster than msprof-analyze on the same cluster.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache"
BIN = Path(sys.executable).parent
ATBPROF = BIN / "atbprof"


def peer() -> str | None:
    beside = BIN / "msprof-analyze"
    return str(beside) if beside.exists() else shutil.which("msprof-analyze")


def config(ranks: int) -> str:
    if ranks % 32:
        raise SystemExit(f"--ranks: {ranks} is not a multiple of 32 (tp 8 x pp 4)")
    return (
        f"name: bench-cluster-{ranks}\n"
        "model: {preset: llama2-70b}\n"
        "device: {preset: 910B2}\n"
        f"parallel: {{tp: 8, pp: 4, dp: {ranks // 32}}}\n"
        "workload: {batch_size: 8, prompt_len: 1024, decode_tokens: 8}\n"
        "execution: {mode: graph}\n"
    )


def cluster(ranks: int) -> Path:
    """The export root of the `ranks`-rank cluster, built once per config."""
    text = config(ranks)
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    base = CACHE / f"cluster-{ranks}-{key}"
    done = base / "export.json"
    if done.exists():
        return Path(json.loads(done.read_text())["root"])
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    (base / "cfg.yaml").write_text(text)
    t0 = time.perf_counter()
    subprocess.run(
        [ATBPROF, "run", "--config", base / "cfg.yaml", "--out", base / "run", "--format", "json"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    t1 = time.perf_counter()
    stages = ",".join(str(8 * s) for s in range(4))  # rank 0 of each stage's first tp group
    out = subprocess.run(
        [
            *(ATBPROF, "export", base / "run", "--to", "ascend-pt", "--out", base / "export"),
            *("--kernel-ranks", stages, "--format", "json"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    t2 = time.perf_counter()
    root = json.loads(out.stdout)["root"]
    shutil.rmtree(base / "run")  # the run is not needed once exported (a 1,024-rank one is ~360 MB)
    done.write_text(json.dumps({"root": root}))
    print(f"  built {ranks} ranks: run {t1 - t0:.1f} s, export {t2 - t1:.1f} s", flush=True)
    return Path(root)


def timed(cmd: list[str | Path], cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one command in a fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd[0]} exited {proc.returncode}:\n{err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def median_of(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in runs), max(r for _, r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="32,128", help="cluster sizes, multiples of 32 (default: 32,128)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command (1 for clusters over 128 ranks)")
    ap.add_argument("--peer-max", type=int, default=128, help="largest cluster msprof-analyze is timed on")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    sizes = [int(s) for s in args.ranks.split(",")]
    msprof = peer()
    results = []
    print(
        f"{'ranks':>6} {'atbprof s':>10} {'RSS MB':>7} {'--workers 2 s':>14} {'RSS MB':>7} {'msprof-analyze s':>17}"
        f" {'RSS MB':>7} {'speed-up':>9}"
    )
    for n in sizes:
        root = cluster(n)
        repeat = args.repeat if n <= 128 else 1
        ours = [timed([ATBPROF, "analyze", root, "--format", "json", "--workers", "0"]) for _ in range(repeat)]
        pooled = [timed([ATBPROF, "analyze", root, "--format", "json", "--workers", "2"]) for _ in range(repeat)]
        theirs: list[tuple[float, float]] = []
        if msprof and n <= args.peer_max:
            for _ in range(repeat):
                shutil.rmtree(root / "cluster_analysis_output", ignore_errors=True)
                theirs.append(timed([msprof, "cluster", "-d", root, "-m", "all"], cwd=root.parent))
            shutil.rmtree(root / "cluster_analysis_output", ignore_errors=True)
        row = {"ranks": n, "atbprof": median_of(ours), "atbprof_workers_2": median_of(pooled)}
        if theirs:
            row["msprof_analyze"] = median_of(theirs)
            row["speed_up"] = row["msprof_analyze"][0] / row["atbprof"][0]
        results.append(row)
        peer_cells = (
            f"{row['msprof_analyze'][0]:>17.2f} {row['msprof_analyze'][1]:>7.0f} {row['speed_up']:>8.1f}x"
            if theirs
            else f"{'-':>17} {'-':>7} {'-':>9}"
        )
        print(
            f"{n:>6} {row['atbprof'][0]:>10.2f} {row['atbprof'][1]:>7.0f} {row['atbprof_workers_2'][0]:>14.2f}"
            f" {row['atbprof_workers_2'][1]:>7.0f} {peer_cells}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
