#!/usr/bin/env python3
"""Fuzz the CLI with mutated configs and mutated real inputs; count clean errors, crashes, hangs, wrong acceptances.

    python scripts/fuzz.py                          # 5,000 configs + 5,000 inputs (about 15-25 min on 2 cores)
    python scripts/fuzz.py --configs 200 --inputs 200 --seed 3
    python scripts/fuzz.py --configs 0 --inputs 0 --readers 5000   # only the newer commands' inputs
    python scripts/fuzz.py --configs 0 --inputs 0 --signals 50        # sweeps interrupted, then resumed
    python scripts/fuzz.py --keep fuzz-failures     # write every crash / hang / wrong acceptance there

Configs: the fixtures, mutated (values replaced by out-of-range, wrongly typed, huge, inf/nan, text; lines dropped,
duplicated, swapped; bytes inserted, non-UTF-8, truncated; aliases, deep nesting, duplicate keys) and run with
`atbprof run` (`--set output.max_ops=2000000` bounds the work of a valid mutation). Inputs: the samples under
../shared/anchors and a small run of ours, mutated (bytes flipped, inserted, deleted; truncated; lines duplicated;
numbers negated, scaled, swapped; gzip re-packed; the GPU serving traces too) and given to `atbprof analyze` (and
`validate` for JSON traces). Readers (`--readers N`, the newer commands): a run of ours with a damaged op table,
steps table or run.json given to `plot`, `report` and `analyze`; a sweep directory with a damaged sweep.parquet or
sweep.json given to `plot` and `report`; mutated sweep spec files run with `atbprof sweep` (a tiny base, in this
process); the shared 4-rank Qwen3 cluster with one file mutated given to `analyze`; the Qwen3 kernel_details.csv
mutated given to `predict` and `calibrate`. A plot or report that succeeds where `analyze` refuses the same run or
sweep is a wrong acceptance (nothing is drawn from what analyze would refuse).

Outcomes: `ok` (exit 0, and the JSON report is sane: finite numbers, no negative times), `clean error` (exit 1-3,
one `error:` message on stderr, no traceback; exit 1 only where the command defines it), `crash` (exit 70, any
other code, a traceback, or an exception escaping), `hang` (no answer within --timeout s), `wrong acceptance`
(exit 0 with a report that is not sane). Target: 0 crashes and 0 hangs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "anchors"
FIXTURES = ROOT / "fixtures"
INPUT_MAX_BYTES = 12_000_000  # bigger samples are mutated less often (slow to re-read thousands of times)

VALUES = [
    "-1",
    "0",
    "1",
    "-0.0",
    "1e-300",
    "1e300",
    ".inf",
    "-.inf",
    ".nan",
    "true",
    "false",
    "null",
    "~",
    "''",
    "x",
    "2147483648",
    "9223372036854775808",
    "1208925819614629174706176",
    "[]",
    "{}",
    "[1, -1]",
    "{a: 1}",
    "'0-3,x'",
    "4096",
    "1048576",
    "100000",
    "0x10",
    "1_000",
    '"\\u0000"',
    "*undefined",
    "!!binary aGk=",
    "3.5",
    "'../../x'",
]
KEYS = [
    "batch_size",
    "prompt_len",
    "decode_tokens",
    "hidden_size",
    "num_hidden_layers",
    "vocab_size",
    "seed",
    "name",
    "preset",
    "mode",
    "strategy",
    "enable",
    "shape_buckets",
    "trace_steps",
    "trace_layers",
    "trace_max_mb",
    "host_dispatch_us",
    "queue_depth",
    "kernel_cv",
    "num_key_value_heads",
    "dtype",
    "spec",
    "hf_config",
]


class Timeout(BaseException):
    """Raised by the alarm: not an Exception, so atbprof's handler cannot mistake it for a bug of its own."""


def _alarm(signum: int, frame: object) -> None:
    raise Timeout


# -- mutations -------------------------------------------------------------------------------------------------------


def mutate_text(text: str, rng: random.Random) -> bytes:
    lines = text.splitlines(keepends=True) or [""]
    kind = rng.randrange(12)
    if kind == 0 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
    elif kind == 1:
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == 2 and len(lines) > 1:
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind in (3, 4, 5):  # a value replaced
        i = rng.randrange(len(lines))
        value = rng.choice(VALUES)
        lines[i] = re.sub(r":\s*[^\s{\[#][^#\n]*", lambda _: f": {value}", lines[i], count=1)
    elif kind == 6:  # a new key somewhere
        i = rng.randrange(len(lines) + 1)
        indent = "  " if rng.random() < 0.5 else ""
        lines.insert(i, f"{indent}{rng.choice(KEYS)}: {rng.choice(VALUES)}\n")
    elif kind == 7:  # an alias bomb or deep nesting
        bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]\n" for k in range(1, rng.randint(2, 10))
        )
        deep = "deep: " + "[" * rng.randint(10, 6000) + "]" * rng.randint(0, 6000) + "\n"
        lines.append(bomb if rng.random() < 0.5 else deep)
    elif kind == 8:  # a key typo
        i = rng.randrange(len(lines))
        lines[i] = re.sub(r"([a-z])([a-z_]*):", lambda m: m.group(1) + m.group(2)[::-1] + ":", lines[i], count=1)
    data = "".join(lines).encode()
    if kind == 9:
        return mutate_bytes(data, rng)
    if kind == 10:
        return data + b"\nname: caf\xe9\n"
    if kind == 11:
        return data[: rng.randrange(len(data) + 1)]
    return data


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        at = rng.randrange(len(b) + 1) if b else 0
        if kind == 0 and b:
            b[min(at, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 2 and b:
            del b[at : at + rng.randint(1, 64)]
        elif kind == 3 and b:
            del b[rng.randrange(len(b)) :]
        elif kind == 4 and b:
            b[at:at] = rng.choice([b"-", b"9" * 25, b"1e400", b"NaN", b'"', b",", b"\n", b"\xff\xfe", b"\x00"])
    return bytes(b)


_NUMBER = re.compile(rb"(?<![\w.])\d+(?:\.\d+)?")


def mutate_numbers(data: bytes, rng: random.Random) -> bytes:
    """Numbers negated, scaled, replaced with huge values or swapped (timing data no profiler writes)."""
    spans = [m.span() for m in _NUMBER.finditer(data, 0, min(len(data), 4_000_000))]
    if not spans:
        return mutate_bytes(data, rng)
    out = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        lo, hi = rng.choice(spans)
        value = data[lo:hi]
        new = rng.choice([b"-" + value, value + b"000000", b"-1", b"0", b"9223372036854775807", b"1e30", value[::-1]])
        out[lo:hi] = new.ljust(hi - lo)[: max(hi - lo, len(new))] if len(new) <= hi - lo else new
        spans = [m.span() for m in _NUMBER.finditer(out, 0, min(len(out), 4_000_000))] or spans
    return bytes(out)


def mutate_lines(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    if len(lines) < 3:
        return mutate_bytes(data, rng)
    kind = rng.randrange(3)
    if kind == 0:  # every line tripled
        return b"\n".join(line for line in lines for _ in range(3))
    if kind == 1:
        i = rng.randrange(1, len(lines))
        lines[i:i] = [lines[i]] * rng.randint(1, 50)
    else:
        rng.shuffle(lines)
    return b"\n".join(lines)


def mutate_input(data: bytes, rng: random.Random) -> bytes:
    packed = data[:2] == b"\x1f\x8b"
    raw = gzip.decompress(data) if packed else data
    pick = rng.random()
    if pick < 0.4:
        raw = mutate_bytes(raw, rng)
    elif pick < 0.75:
        raw = mutate_numbers(raw, rng)
    else:
        raw = mutate_lines(raw, rng)
    if packed:
        raw = gzip.compress(raw, 1, mtime=0)
        if rng.random() < 0.2:
            raw = mutate_bytes(raw, rng)  # the compressed stream itself
    return raw


# -- cases -----------------------------------------------------------------------------------------------------------


def config_cases(n: int, seed: int) -> list[dict[str, Any]]:
    """Case descriptors; the worker makes each mutation (from its own seed) so memory stays flat."""
    rng = random.Random(seed)
    bases = sorted(p for p in FIXTURES.glob("*.yaml") if "atb_fusion" not in p.name)
    return [
        {"kind": "config", "id": f"config-{i}", "seed": rng.getrandbits(64), "base": str(rng.choice(bases))}
        for i in range(n)
    ]


def input_samples(our_run: Path) -> list[Path]:
    found = [p for p in (SHARED / "ascend_samples").rglob("*") if p.is_file() and p.suffix in (".csv", ".json")]
    found += [p for p in (SHARED / "traces").glob("*") if p.name.endswith((".json", ".json.gz"))]
    found += [p for p in (SHARED / "gpu").glob("*") if p.name.endswith((".json", ".json.gz"))]  # serving-era traces
    found += [our_run / "ops.parquet"]
    keep = [p for p in found if p.stat().st_size > 0 and "profiler_info" not in p.name and "metadata" not in p.name]
    return sorted(keep)


def input_cases(n: int, seed: int, our_run: Path) -> list[dict[str, Any]]:
    rng = random.Random(seed + 1)
    samples = input_samples(our_run)
    small = [p for p in samples if p.stat().st_size <= INPUT_MAX_BYTES]
    return [
        {
            "kind": "input",
            "id": f"input-{i}",
            "seed": rng.getrandbits(64),
            "base": str(rng.choice(samples if rng.random() < 0.1 else small)),
        }
        for i in range(n)
    ]


READER_KINDS = ("run-reader", "sweep-reader", "sweep-spec", "cluster", "predict")
CLUSTER = SHARED / "ascend_samples" / "msinsight_qwen3_0.6b_level2_cluster"
KERNELS = (
    SHARED / "ascend_samples" / "msinsight_qwen3_0.6b_level2_rank0" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
)
SPEC_TEXT = (
    "name: f\nbase: {base}\nset: {{workload.decode_tokens: 2}}\n"
    "grid: {{workload.batch_size: [1, 2], fusion: [none, default]}}\n"
    "compare: {{axis: fusion, base: none, new: default, figure: decode_ms_per_token}}\n"
    "reference: [{{label: claim, at: {{workload.batch_size: 1}}, gain_pct: [5, 15]}}]\n"
)


def reader_cases(n: int, seed: int, our_run: Path, our_sweep: Path) -> list[dict[str, Any]]:
    rng = random.Random(seed + 2)
    return [
        {"kind": kind, "id": f"{kind}-{i}", "seed": rng.getrandbits(64), "base": str(our_run), "sweep": str(our_sweep)}
        for i, kind in ((i, READER_KINDS[i % len(READER_KINDS)]) for i in range(n))
    ]


def _mutate_json_values(data: bytes, rng: random.Random) -> bytes:
    """A value of a JSON document replaced by a wrong type, a huge or negative number, NaN-like text."""
    import orjson

    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return mutate_bytes(data, rng)
    nodes: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                nodes.append((node, k))
                walk(v)
        elif isinstance(node, list):
            for k, v in enumerate(node[:50]):
                nodes.append((node, k))
                walk(v)

    walk(doc)
    for _ in range(rng.randint(1, 3)):
        if not nodes:
            break
        parent, key = rng.choice(nodes)
        parent[key] = rng.choice(
            ["x", "12.5", -1, 0, 10**20, -(10**20), 1e308, None, [], {}, [1], True, 100_000, "NaN", 2**63]
        )
    return json.dumps(doc).encode()  # the stdlib: it writes integers beyond 64 bits as a damaged file may hold them


def _dir_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _materialise_reader(case: dict[str, Any], rng: random.Random) -> tuple[dict[str, bytes], list[str]]:
    kind = case["kind"]
    if kind == "run-reader":
        files = {"r/" + k: v for k, v in _dir_files(Path(case["base"])).items()}
        target = rng.choice(["r/ops.parquet", "r/steps.parquet", "r/run.json"])
        data = files[target]
        files[target] = _mutate_json_values(data, rng) if target.endswith(".json") else mutate_bytes(data, rng)
        command = rng.choice(["plot", "report", "analyze"])
    elif kind == "sweep-reader":
        files = {"s/" + k: v for k, v in _dir_files(Path(case["sweep"])).items()}
        target = rng.choice(["s/sweep.parquet", "s/sweep.json", "s/sweep.json"])
        data = files[target]
        files[target] = _mutate_json_values(data, rng) if target.endswith(".json") else mutate_bytes(data, rng)
        command = rng.choice(["plot", "report"])
    elif kind == "sweep-spec":
        text = SPEC_TEXT.format(base=FIXTURES / "tiny-llama.yaml")
        files = {"spec.yaml": mutate_text(text, rng)}
        args = ["sweep", "--spec", "{dir}/spec.yaml", "--out", "{dir}/out", "--workers", "0", "--format", "json"]
        return files, args
    elif kind == "cluster":
        files = {"c/" + k: v for k, v in _dir_files(CLUSTER).items() if not k.endswith(("memory_record.csv",))}
        small = [k for k in files if k.endswith((".json", ".csv")) and "kernel_details" not in k]
        target = rng.choice(small)
        data = files[target]
        pick = rng.random()
        files[target] = (
            _mutate_json_values(data, rng)
            if target.endswith(".json") and pick < 0.6
            else mutate_numbers(data, rng)
            if pick < 0.8
            else mutate_bytes(data, rng)
        )
        return files, ["analyze", "{dir}/c", "--format", "json"]
    else:  # predict
        data = KERNELS.read_bytes()
        pick = rng.random()
        files = {
            "kernel_details.csv": mutate_numbers(data, rng)
            if pick < 0.6
            else mutate_lines(data, rng)
            if pick < 0.8
            else mutate_bytes(data, rng)
        }
        if rng.random() < 0.2:
            args = ["calibrate", "{dir}/kernel_details.csv", "--out", "{dir}/spec.yaml", "--no-cross-validate"]
            return files, [*args, "--format", "json"]
        return files, ["predict", "{dir}/kernel_details.csv", "--format", "json"]
    root = "{dir}/" + ("r" if kind == "run-reader" else "s")
    out = {"plot": ["--out", "{dir}/plots"], "report": ["--out", "{dir}/page.html"], "analyze": ["--format", "json"]}
    return files, [command, root, *out[command]]


def materialise(case: dict[str, Any]) -> tuple[dict[str, bytes], list[str]]:
    """The files and the command of a case descriptor (deterministic in its seed)."""
    rng = random.Random(case["seed"])
    if case["kind"] in READER_KINDS:
        return _materialise_reader(case, rng)
    base = Path(case["base"])
    if case["kind"] == "config":
        files = {"cfg.yaml": mutate_text(base.read_text(), rng)}
        args = ["run", "--config", "{dir}/cfg.yaml", "--out", "{dir}/out", "--format", "json"]
        return files, [*args, "--set", "output.max_ops=2000000"]
    data = base.read_bytes()
    if base.name == "ops.parquet":  # our run: the op table mutated inside its run directory
        files = {f.name: f.read_bytes() for f in base.parent.iterdir() if f.is_file()}
        files["ops.parquet"] = mutate_bytes(data, rng) if rng.random() < 0.5 else mutate_numbers(data, rng)
        return files, ["analyze", "{dir}", "--format", "json"]
    files = {base.name: mutate_input(data, rng)}
    if base.name.endswith((".json", ".json.gz")) and rng.random() < 0.3:
        return files, ["validate", "{dir}/" + base.name, "--format", "json"]
    return files, ["analyze", "{dir}/" + base.name, "--format", "json"]


# -- running ---------------------------------------------------------------------------------------------------------


def _sane(doc: Any, path: str = "") -> str | None:
    """Why a JSON report is not sane (a non-finite number, a negative time), or None."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            why = _sane(v, f"{path}.{k}")
            if why:
                return why
    elif isinstance(doc, list):
        for k, v in enumerate(doc[:10_000]):
            why = _sane(v, f"{path}[{k}]")
            if why:
                return why
    elif isinstance(doc, float) and not math.isfinite(doc):
        return f"{path} = {doc}"
    elif isinstance(doc, int | float) and not isinstance(doc, bool) and doc < 0:
        leaf = path.rsplit(".", 1)[-1]
        signed = ("delta", "sav", "diff", "ci_", "low", "high", "err", "layer", "step", "stream", "min", "parent")
        timed = leaf.endswith(("_ms", "_us", "_ns", "_s")) or leaf in ("ms", "us", "ns")
        if timed and not any(s in path for s in signed):
            return f"{path} = {doc} (a negative time)"
    return None


def run_case(case: dict[str, Any], timeout: float) -> tuple[str, str, str]:
    """(case id, outcome, detail)."""
    import orjson
    from typer.testing import CliRunner

    from atbprof.commands import app

    files, template = materialise(case)
    with tempfile.TemporaryDirectory(prefix="atbprof-fuzz-") as d:
        for name, data in files.items():
            Path(d, name).parent.mkdir(parents=True, exist_ok=True)
            Path(d, name).write_bytes(data)
        args = [a.replace("{dir}", d) for a in template]
        refused_by_analyze = None
        if args[0] in ("plot", "report"):  # the oracle: what analyze (or the sweep loader) says of the same input
            refused_by_analyze = _refused(args[1])
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        start = time.monotonic()
        try:
            result = CliRunner().invoke(app, args, catch_exceptions=True)
        except Timeout:
            return case["id"], "hang", f"no answer in {timeout:g} s"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        took = time.monotonic() - start
    err = result.stderr
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return case["id"], "crash", f"{type(result.exception).__name__}: {result.exception}"
    if "Traceback" in err or "Traceback" in result.stdout:
        return case["id"], "crash", err[-400:]
    if code == 0 and refused_by_analyze:
        return case["id"], "wrong acceptance", f"{args[0]} drew what is refused: {refused_by_analyze}"
    if code == 0 and "--format" not in args:
        return case["id"], "ok", f"{took:.2f} s"
    if code == 0:
        try:
            why = _sane(orjson.loads(result.stdout))
        except orjson.JSONDecodeError as e:
            why = f"stdout is not JSON ({e})"
        return case["id"], ("wrong acceptance" if why else "ok"), why or f"{took:.2f} s"
    validate_fail = code == 1 and args[0] == "validate"  # validate's "Perfetto would lose data" verdict
    one_message = err.startswith("error: ") and sum(line.startswith("error:") for line in err.splitlines()) == 1
    if validate_fail or (code in (2, 3) and one_message):
        return case["id"], "clean error", err.splitlines()[0][:200] if err else ""
    return case["id"], "crash", f"exit {code}: {err[-400:]}"


def _refused(path: str) -> str | None:
    """Why the reading libraries refuse the run or sweep at `path` (the message), or None when they read it."""
    from atbprof.errors import AtbprofError

    try:
        if Path(path, "sweep.json").exists() or Path(path, "sweep.parquet").exists():
            from atbprof.sweep.api import read_sweep

            read_sweep(Path(path))
        else:
            from atbprof.importers.ours import load_run
            from atbprof.target import read_run_json

            load_run(Path(path))
            read_run_json(Path(path))
    except AtbprofError as err:
        return str(err)[:200]
    except Exception:  # a crash of the loader is counted by the case itself
        return None
    return None


def _worker(job: tuple[dict[str, Any], float]) -> tuple[str, str, str]:
    case, timeout = job
    try:
        return run_case(case, timeout)
    except BaseException as e:  # anything escaping is a crash to count, not to die of
        return case["id"], "crash", f"escaped: {type(e).__name__}: {e}"


def _our_run(where: Path) -> Path:
    from atbprof.config import load_config
    from atbprof.run import run_simulation

    cfg = load_config(FIXTURES / "tiny-llama.yaml", ["workload.decode_tokens=3"])
    return run_simulation(cfg, where / "tiny").out_dir


def _our_sweep(where: Path) -> Path:
    from atbprof.sweep.api import run_sweep

    out = where / "sweep"
    spec = where / "spec.yaml"
    spec.write_text(SPEC_TEXT.format(base=FIXTURES / "tiny-llama.yaml"))
    run_sweep(config=None, spec_file=spec, grid=[], sets=[], out=out, workers=0)
    return out


def signal_cases(n: int, seed: int, where: Path) -> Counter[str]:
    """`atbprof sweep --keep-runs` interrupted by SIGINT, SIGTERM or SIGKILL at a random moment, then the same
    command run to the end: it must end cleanly (its signal's exit code, no traceback), leave no process behind,
    and finish with every point's run and a table byte-identical to an uninterrupted sweep's."""
    import subprocess

    rng = random.Random(seed + 3)
    base = FIXTURES / "tiny-llama.yaml"
    grid = ["--grid", "workload.batch_size=1,2,3,4,5,6,7,8", "--grid", "workload.prompt_len=16,32,64,128"]
    cmd = [sys.executable, "-c", "from atbprof.commands import main; main()", "sweep", "--config", str(base), *grid]
    reference = where / "reference"
    subprocess.run([*cmd, "--out", str(reference), "--keep-runs"], check=True, capture_output=True)
    want = (reference / "sweep.parquet").read_bytes()
    counts: Counter[str] = Counter()
    for i in range(n):
        out = where / f"s{i}"
        sig = rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
        proc = subprocess.Popen(
            [*cmd, "--out", str(out), "--keep-runs", "--workers", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        time.sleep(rng.uniform(0.3, 6.0))
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            counts["hang"] += 1
            print(f"hang: signal case {i} ({sig.name})", flush=True)
            continue
        code = proc.returncode
        if b"Traceback" in err or code not in (0, 128 + sig, -sig):
            counts["crash"] += 1
            print(f"crash: signal case {i} ({sig.name}): exit {code}: {err[-300:]!r}", flush=True)
            continue
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_alive(proc.pid):
            time.sleep(0.2)
        if _group_alive(proc.pid):
            counts["hang"] += 1
            print(f"hang: signal case {i} ({sig.name}): processes left behind", flush=True)
            continue
        again = subprocess.run([*cmd, "--out", str(out), "--keep-runs"], capture_output=True, timeout=300)
        runs = len(list((out / "runs").glob("point-*/run.json"))) if (out / "runs").is_dir() else 0
        same = (out / "sweep.parquet").is_file() and (out / "sweep.parquet").read_bytes() == want
        if again.returncode != 0 or runs != 32 or not same:
            counts["data lost"] += 1
            print(f"data lost: signal case {i} ({sig.name}): exit {again.returncode}, {runs} runs", flush=True)
            continue
        counts["ok"] += 1
    return counts


def _group_alive(pgid: int) -> bool:
    """A live process in the process group `pgid` (zombies hold nothing open: not counted)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=5000)
    ap.add_argument("--inputs", type=int, default=5000)
    ap.add_argument("--readers", type=int, default=0, help="cases for plot, report, sweep, cluster and predict")
    ap.add_argument("--signals", type=int, default=0, help="sweeps interrupted at a random moment, then resumed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take before it is a hang")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--keep", type=Path, help="write the failing cases (crash, hang, wrong acceptance) here")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if opts.signals:
            sig = signal_cases(opts.signals, opts.seed, Path(tmp))
            print(
                f"signals: {opts.signals} sweeps interrupted: " + ", ".join(f"{k} {v}" for k, v in sorted(sig.items()))
            )
            if set(sig) - {"ok"}:
                return 1
        ours = _our_run(Path(tmp))
        cases = config_cases(opts.configs, opts.seed) + input_cases(opts.inputs, opts.seed, ours)
        if opts.readers:
            cases += reader_cases(opts.readers, opts.seed, ours, _our_sweep(Path(tmp)))
        counts: dict[str, Counter[str]] = {k: Counter() for k in ("config", "input", *READER_KINDS)}
        failures: list[tuple[dict[str, Any], str, str]] = []
        start = time.monotonic()
        by_id = {c["id"]: c for c in cases}
        ctx = mp.get_context("fork")
        with ctx.Pool(opts.workers, maxtasksperchild=100) as pool:
            jobs = pool.imap_unordered(_worker, [(c, opts.timeout) for c in cases], chunksize=4)
            for k, (cid, outcome, detail) in enumerate(jobs, 1):
                case = by_id[cid]
                counts[case["kind"]][outcome] += 1
                if outcome in ("crash", "hang", "wrong acceptance"):
                    failures.append((case, outcome, detail))
                    print(f"{outcome}: {cid} ({case['base']}): {detail}", flush=True)
                if k % 500 == 0:
                    print(f"... {k:,}/{len(cases):,} cases, {time.monotonic() - start:.0f} s", flush=True)
        if opts.keep and failures:
            opts.keep.mkdir(parents=True, exist_ok=True)
            for case, outcome, detail in failures:
                d = opts.keep / case["id"]
                d.mkdir(exist_ok=True)
                files, template = materialise(case)
                for name, data in files.items():
                    (d / name).parent.mkdir(parents=True, exist_ok=True)
                    (d / name).write_bytes(data)
                (d / "CASE.txt").write_text(f"{outcome}\n{' '.join(template)}\n{case['base']}\n{detail}\n")
    print(f"\n{len(cases):,} cases in {time.monotonic() - start:.0f} s (seed {opts.seed}, {opts.workers} workers)")
    print(f"{'':14} {'cases':>7} {'ok':>7} {'clean error':>12} {'crash':>6} {'hang':>5} {'wrong acceptance':>17}")
    for kind, c in counts.items():
        total = sum(c.values())
        if not total:
            continue
        row = [c["ok"], c["clean error"], c["crash"], c["hang"], c["wrong acceptance"]]
        print(f"{kind + 's':14} {total:>7,} {row[0]:>7,} {row[1]:>12,} {row[2]:>6,} {row[3]:>5,} {row[4]:>17,}")
    bad = sum(c["crash"] + c["hang"] for c in counts.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
