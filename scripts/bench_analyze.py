#!/usr/bin/env python3
"""`atbprof analyze` speed, side by side with the peers, in one invocation (medians of --repeat runs).

    python scripts/bench_analyze.py                 # installs the peers into a private venv on first use

1. Kineto JSON import: atbprof's importer vs HolisticTraceAnalysis' `parse_trace_file` on the same files.
2. The Qwen3 torch_npu sample: `atbprof analyze` vs `msprof-analyze advisor all` (wall time of the commands),
   with the floor any Python command on this stack pays (a typer command that does nothing, numpy and pyarrow
   imported) and the work itself in process.
3. torch_npu's db export (the CNN db sample): import, against the text export of the same script (target < 0.5 s).
4. Simulated runs of ~1,000,000 ops: `analyze()` on the loaded profile (target: under 1 s), a `fusion none` run and
   a seed 000 baseline run (its what-if re-simulates twice). Each call starts cold: the fusion-prefix cache that a
   previous call (or the simulation of the run itself, in this process) filled is cleared first, as in a fresh
   `atbprof analyze` process.

The peers are not atbprof dependencies: HolisticTraceAnalysis 0.5.0 goes into .bench-venv (with --no-deps plus
pandas/numpy/psutil/pyyaml, as its docs advise); msprof-analyze comes from the test extra or that venv too.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "anchors"
sys.path.insert(0, str(ROOT))

from atbprof.analyze import analyze  # noqa: E402
from atbprof.config import load_config  # noqa: E402
from atbprof.fusion import passes  # noqa: E402
from atbprof.importers import Profile, load_profile  # noqa: E402
from atbprof.run import run_simulation  # noqa: E402

PEER_VENV = ROOT / ".bench-venv"
KINETO = [
    "kineto_tbplugin_resnet50_worker0.pt.trace.json.gz",
    "hta_trace_diff_control.json.gz",
    "hta_ns_resolution_rank0.pt.trace.json.gz",
]
QWEN3 = SHARED / "ascend_samples" / "msinsight_qwen3_0.6b_level2_rank0"


PEER_PINS = ["pandas>=2,<3", "numpy", "psutil", "pyyaml", "msprof-analyze==26.2.0"]
"""The peers' own dependencies, pinned to what they work with (HTA 0.5 fails on the large GPU trace under pandas 3:
`transform_correlation_to_index` casts to int16), as the `peers` extra pins them."""


def peer_python() -> Path:
    py = PEER_VENV / "bin" / "python"
    pip = [str(py), "-m", "pip", "install", "-q"]
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
        subprocess.run([*pip, "--no-deps", "holistictraceanalysis==0.5.0"], check=True)
        subprocess.run([*pip, *PEER_PINS], check=True)
    pandas = subprocess.run([str(py), "-c", "import pandas; print(pandas.__version__)"], capture_output=True, text=True)
    if not pandas.stdout.startswith("2."):  # a venv made before the pin: brought back to what the peers work with
        subprocess.run([*pip, *PEER_PINS], check=True)
    return py


def median_times(fn, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median wall and CPU seconds (CPU: this process and its children; steadier on a shared machine)."""
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), _cpu()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(_cpu() - c)
    return statistics.median(walls), statistics.median(cpus)


def _cpu() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def peer_medians(py: Path, setup: str, call: str, repeat: int, warm: bool = False) -> tuple[float, float]:
    """Median wall and CPU seconds of `call` run `repeat` times in the peer venv's Python, after `setup` (`warm`:
    and one untimed call, as an in-process figure of ours is warm)."""
    code = (
        "import json,statistics,time,logging,warnings\nlogging.disable(logging.CRITICAL)\n"
        f"warnings.filterwarnings('ignore')\n{setup}\n{call + chr(10) if warm else ''}ts=[];cs=[]\n"
        f"for _ in range({repeat}):\n t=time.perf_counter(); c=time.process_time(); {call}; "
        "ts.append(time.perf_counter()-t); cs.append(time.process_time()-c)\n"
        "print(json.dumps([statistics.median(ts), statistics.median(cs)]))"
    )
    out = subprocess.run([str(py), "-c", code], check=True, capture_output=True, text=True).stdout
    wall, cpu = json.loads(out.strip().splitlines()[-1])
    return float(wall), float(cpu)


def hta_seconds(py: Path, trace: Path, repeat: int) -> tuple[float, float]:
    return peer_medians(
        py, "from hta.common.trace import parse_trace_file", f"parse_trace_file({str(trace)!r})", repeat, warm=True
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["kineto", "qwen3", "db", "million"], help="run one part")
    ap.add_argument("--json", type=Path, help="also write the Kineto import's figures here")
    args = ap.parse_args()
    py = peer_python() if args.only in (None, "kineto", "qwen3") else None
    if args.only in (None, "kineto"):
        assert py is not None
        bench_kineto(py, args.repeat, args.json)
    if args.only in (None, "qwen3"):
        bench_qwen3(args.repeat)
    if args.only in (None, "db"):
        bench_db(args.repeat)
    if args.only in (None, "million"):
        bench_million(args.repeat)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_kineto(py: Path, repeat: int, out: Path | None = None) -> None:
    """Both sides warm and in turn, `repeat` rounds of an untimed then a timed call of ours, then the same of HTA's
    (in a process of its own each round): a drift of the machine's speed hits both alike, and each timed call comes
    right after its side's untimed one. Medians."""
    print("1. Kineto import: atbprof vs HolisticTraceAnalysis parse_trace_file (median wall / CPU seconds, in turn)")
    rows = []
    for name in KINETO:
        trace = SHARED / "traces" / name
        before = load()
        rounds = [(*warm_seconds(trace), *hta_seconds(py, trace, 1)) for _ in range(repeat)]
        ours, ours_cpu, theirs, theirs_cpu = (statistics.median(r[i] for r in rounds) for i in range(4))
        print(
            f"   {name:50s} atbprof {ours:.3f} / {ours_cpu:.3f} s  HTA {theirs:.3f} / {theirs_cpu:.3f} s  "
            f"ratio {theirs / ours:4.1f}x wall, {theirs_cpu / ours_cpu:4.1f}x CPU   load {before} / {load()}"
        )
        row = {"trace": name, "atbprof_s": ours, "hta_s": theirs, "ratio": theirs / ours}
        rows.append(row | {"atbprof_cpu_s": ours_cpu, "hta_cpu_s": theirs_cpu, "load": [before, load()]})
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"bench": "kineto", "rows": rows}, indent=1) + "\n")


def warm_seconds(trace: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one import of ours right after an untimed one, as HTA's side is timed."""
    load_profile(trace)
    return median_times(lambda: load_profile(trace), 1)


def bench_qwen3(repeat: int) -> None:
    print("2. Qwen3 torch_npu sample: atbprof analyze vs msprof-analyze advisor all (wall / CPU s, commands)")
    atb = [sys.executable, "-m", "atbprof", "analyze", str(QWEN3), "--format", "json"]
    advisor = [str(PEER_VENV / "bin" / "msprof-analyze"), "advisor", "all", "-d", str(QWEN3), "-o"]
    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):  # interleaved, so both see the same machine load
            ours.append(median_times(lambda: subprocess.run(atb, check=True, capture_output=True), 1))
            theirs.append(median_times(lambda: subprocess.run([*advisor, tmp], capture_output=True, input=b"y\n"), 1))
    mine, mine_cpu = (statistics.median(x) for x in zip(*ours, strict=True))
    peer, peer_cpu = (statistics.median(x) for x in zip(*theirs, strict=True))
    print(
        f"   atbprof analyze {mine:.2f} / {mine_cpu:.2f} s   msprof-analyze advisor all {peer:.2f} / {peer_cpu:.2f} s"
        f"   ratio {peer / mine:4.1f}x wall, {peer_cpu / mine_cpu:4.1f}x CPU"
    )
    # where the command's time goes: what any Python command on this stack pays before doing anything, vs the work
    empty_app = (
        "import numpy, pyarrow, pyarrow.compute, orjson, typer\napp = typer.Typer()\n"
        "@app.command()\ndef analyze(path: str, format: str = 'rich') -> None: pass\n"
        "@app.command()\ndef diff() -> None: pass\napp()"
    )
    floors = {
        "python + import numpy, pyarrow, pyarrow.compute": [
            sys.executable,
            "-c",
            "import numpy, pyarrow, pyarrow.compute",
        ],
        "a typer command that does nothing, with those imported": [
            sys.executable,
            "-c",
            empty_app,
            "analyze",
            str(QWEN3),
            "--format",
            "json",
        ],
    }
    for label, cmd in floors.items():
        floor_wall, _ = median_times(lambda c=cmd: subprocess.run(c, check=True), repeat)
        print(f"   floor: {label} {floor_wall:.3f} s (10x needs the whole command under {peer / 10:.3f} s)")
    from atbprof.render.analyze import analysis_json

    def work() -> None:
        orjson.dumps(analysis_json(analyze(load_profile(QWEN3))))

    work()
    work_wall, _ = median_times(work, repeat)
    print(f"   the work: load + analyze + JSON report in process {work_wall:.3f} s")


def bench_db(repeat: int) -> None:
    print("3. torch_npu db export (CNN sample, 191 kernels + 860 framework ops): import, median wall / CPU s")
    for label, path in (
        ("db (ascend_pytorch_profiler_0.db)", SHARED / "ascend_samples" / "msinsight_imagenet_cnn_db_level1_rank0"),
        ("text (kernel_details.csv)", SHARED / "ascend_samples" / "msinsight_imagenet_cnn_level1_rank0"),
    ):
        load_profile(path)
        wall, cpu = median_times(lambda p=path: load_profile(p), repeat)
        print(f"   {label:36s} {wall:.3f} s wall, {cpu:.3f} s CPU (db target < 0.5 s)")


def bench_million(repeat: int) -> None:
    print("4. analyze() on simulated runs of ~1M ops (LLaMA-2-7B; cold fusion cache per call)")
    runs = [
        ("llama2-7b-910b2.yaml", ["fusion=none", "workload.decode_tokens=605"], "fusion none"),
        ("seed000-baseline.yaml", ["workload.decode_tokens=1188"], "seed 000 baseline"),
    ]
    for config, overrides, label in runs:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_config(ROOT / "fixtures" / config, [*overrides, "output.trace=false"])
            run = run_simulation(cfg, Path(tmp) / "r")
            profile = load_profile(run.out_dir)

            def cold(whatif: bool, p: Profile = profile) -> None:
                passes.forget_prefixes()
                analyze(p, whatif=whatif)

            with_whatif, with_cpu = median_times(lambda: cold(True), repeat)
            without, without_cpu = median_times(lambda: cold(False), repeat)
            print(
                f"   {label:38s} {profile.ops.num_rows:,} ops: analyze {with_whatif:.2f} / {with_cpu:.2f} s "
                f"(wall / CPU, with the exact what-if), {without:.2f} / {without_cpu:.2f} s without"
            )


if __name__ == "__main__":
    main()
