"""Prefill MFU over a grid: models x devices x batch x prompt x eager/graph x fusion (`python scripts/prefill_grid.py`).

Each point is `atbprof.run.summarize` of a one-decode-step run; its `prefill_mfu` is the prefill's FLOPs per device
(GEMMs, causal attention, vector work) over TTFT x the device's dense peak. Points that do not fit the device's
memory are counted, not run. Prints the distribution and the points above `--limit` (the device model's claim:
no prefill runs above 0.80 of peak; real 910B GEMMs reach 0.80 at best, scripts/bench_fidelity.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from atbprof.config import load_config  # noqa: E402
from atbprof.errors import AtbprofError  # noqa: E402
from atbprof.run import summarize  # noqa: E402

MODELS = {  # preset: (tensor parallel, max_position_embeddings: longer prompts run with RoPE scaling)
    "llama2-7b": (1, 4096),
    "llama2-13b": (1, 4096),
    "llama3-8b": (1, 8192),
    "qwen3-8b": (1, 40960),
    "llama2-70b": (8, 4096),
}
DEVICES = ("910A", "910B2", "910B4")
BATCHES = (1, 8, 32, 128)
PROMPTS = (128, 512, 2048, 8192, 32768)
MODES = ("eager", "graph")
FUSION = ("none", "default")


def point(model: str, device: str, batch: int, prompt: int, mode: str, fusion: str) -> dict[str, object]:
    tp, context = MODELS[model]
    stretch = -(-(prompt + 1) // context)  # the prompt and its one decode token
    sets = [
        f"model.preset={model}",
        "model.dtype=fp16" if device == "910A" else "model.dtype=bf16",
        f"device.preset={device}",
        f"workload.batch_size={batch}",
        f"workload.prompt_len={prompt}",
        "workload.decode_tokens=1",
        f"execution.mode={mode}",
        f"fusion.strategy={fusion}",
        f"parallel.tp={tp}",
    ]
    if stretch > 1:
        sets.append(f"model.rope_scaling_factor={stretch}")
    row: dict[str, object] = {"model": model, "device": device, "batch": batch, "prompt": prompt, "mode": mode}
    row["fusion"] = fusion
    try:
        s = summarize(load_config(ROOT / "fixtures" / "llama2-7b-910b2.yaml", sets))
    except AtbprofError as err:
        row["refused"] = str(err).splitlines()[0][:120]
        return row
    row["ttft_ms"] = s.ttft_ms
    row["mfu"] = s.prefill_mfu
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=0.80)
    ap.add_argument("--quick", action="store_true", help="batch 1 and 32, prompts 512 and 8192 only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    batches, prompts = ((1, 32), (512, 8192)) if args.quick else (BATCHES, PROMPTS)
    rows = [point(*p) for p in itertools.product(MODELS, DEVICES, batches, prompts, MODES, FUSION)]
    ran = [r for r in rows if "mfu" in r]
    over = [r for r in ran if float(r["mfu"]) > args.limit]  # type: ignore[arg-type]
    if args.json:
        print(json.dumps({"points": rows}, indent=1))
        return
    mfus = sorted(float(r["mfu"]) for r in ran)  # type: ignore[arg-type]
    print(f"{len(rows)} points: {len(ran)} ran, {len(rows) - len(ran)} refused (memory or context)")
    if mfus:
        q = lambda f: mfus[min(len(mfus) - 1, int(f * len(mfus)))]  # noqa: E731
        print(f"prefill MFU: median {q(0.5):.3f}, p90 {q(0.9):.3f}, max {mfus[-1]:.3f}")
    top = sorted(ran, key=lambda r: -float(r["mfu"]))[:5]  # type: ignore[arg-type]
    for r in top:
        print("  highest:", {k: r[k] for k in ("model", "device", "batch", "prompt", "mode", "fusion", "mfu")})
    print(f"points above {args.limit:.2f}: {len(over)}")
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
