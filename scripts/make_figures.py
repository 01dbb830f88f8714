#!/usr/bin/env python3
"""Regenerate the seed-000 figure (README, docs/sweeps.md): the sweep fixtures/sweeps/seed000.yaml, its gain plot
(docs/figures/seed000-fusion-gain.png) and the table of the model's gains beside the seed's claims (the block in
docs/sweeps.md between the `seed000-sweep` markers).

python scripts/make_figures.py          # rewrite the figure and the docs block
python scripts/make_figures.py --check  # exit 1 if either is stale (the figure is checked by its data digest)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atbprof.plots.base import LIGHT, png_data_digest, render  # noqa: E402
from atbprof.plots.sweep_figures import sweep_plots  # noqa: E402
from atbprof.sweep.api import SweepResult, run_sweep  # noqa: E402

SPEC = ROOT / "fixtures" / "sweeps" / "seed000.yaml"
FIGURE = ROOT / "docs" / "figures" / "seed000-fusion-gain.png"
PAGE = ROOT / "docs" / "sweeps.md"  # the table lives on the sweeps page
BEGIN, END = "<!-- seed000-sweep:begin -->", "<!-- seed000-sweep:end -->"


def sweep() -> SweepResult:
    with tempfile.TemporaryDirectory() as tmp:
        return run_sweep(config=None, spec_file=SPEC, grid=[], sets=[], out=Path(tmp) / "seed000", workers=0)


def table(result: SweepResult) -> str:
    """The gains beside the seed's claims, as Markdown."""
    rep = result.report
    claims = {tuple(sorted(c.at.items())): c for c in rep.claims}
    lines = [
        "| batch | prompt | baseline ms/token | lnfused ms/token | model gain | seed 000 says |",
        "|---:|---:|---:|---:|---:|---|",
    ]
    for g in rep.gains:
        b, p = g.at["workload.batch_size"], g.at["workload.prompt_len"]
        claim = claims.get(tuple(sorted({"workload.batch_size": b, "workload.prompt_len": p}.items())))
        said = ""
        if claim is not None:
            lo, hi = claim.claimed_pct
            said = f"{lo:g} %" if lo == hi else f"{lo:g}-{hi:g} %"
        if g.gain_pct is None:
            row = f"| {b} | {p:,} | does not fit | does not fit | | {said} |"
        else:
            row = f"| {b} | {p:,} | {g.base:.2f} | {g.new:.2f} | {g.gain_pct:.1f} % | {said} |"
        lines.append(row)
    return "\n".join(lines)


def gain_plot(result: SweepResult):  # type: ignore[no-untyped-def]
    return next(p for p in sweep_plots(result.spec, result.report, result.table) if p.name == "sweep-gain")


def stale() -> list[str]:
    result = sweep()
    problems = []
    if not FIGURE.exists() or png_data_digest(FIGURE.read_bytes()) != gain_plot(result).digest():
        problems.append(f"{FIGURE.relative_to(ROOT)} is not drawn from the current sweep")
    text = PAGE.read_text(encoding="utf-8")
    if f"{BEGIN}\n{table(result)}\n{END}" not in text:
        problems.append("docs/sweeps.md's seed000-sweep table differs from the current sweep")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    if args.check:
        problems = stale()
        print("\n".join(problems) or "the figure and the table are current")
        raise SystemExit(1 if problems else 0)
    result = sweep()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    FIGURE.write_bytes(render(gain_plot(result), LIGHT, "png"))
    text = PAGE.read_text(encoding="utf-8")
    head, sep, rest = text.partition(BEGIN)
    if not sep:
        raise SystemExit(f"docs/sweeps.md has no {BEGIN} marker")
    _, sep, tail = rest.partition(END)
    PAGE.write_text(f"{head}{BEGIN}\n{table(result)}\n{END}{tail}", encoding="utf-8")
    print(f"wrote {FIGURE.relative_to(ROOT)} and the table in docs/sweeps.md")


if __name__ == "__main__":
    main()
