#!/usr/bin/env python3
"""Regenerate traces/examples/: the two seed 000 fixtures with 4 decode steps (small enough to commit).

python scripts/make_examples.py          # rewrite traces/examples/
python scripts/make_examples.py --check  # exit 1 if the committed examples are stale
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from atbprof.config import load_config  # noqa: E402
from atbprof.run import run_simulation  # noqa: E402

EXAMPLES = ("seed000-baseline", "seed000-lnfused")
OVERRIDES = ["workload.decode_tokens=4"]


def generate(dest: Path) -> list[Path]:
    out = []
    for name in EXAMPLES:
        # named as their configs: they are the seed 000 runs, only shorter
        cfg = load_config(ROOT / "fixtures" / f"{name}.yaml", [*OVERRIDES, f"name={name}"])
        out.append(run_simulation(cfg, dest / name, force=True).out_dir)
    return out


def stale(committed: Path) -> list[str]:
    """Files whose content differs from a fresh generation (Parquet compared as tables, the rest byte-exact)."""
    import pyarrow.parquet as pq

    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for fresh in generate(Path(tmp)):
            old = committed / fresh.name
            for f in sorted(fresh.iterdir()):
                o = old / f.name
                if not o.exists():
                    problems.append(f"{o} is missing")
                elif f.suffix == ".parquet":
                    if not pq.read_table(f).equals(pq.read_table(o)):
                        problems.append(f"{o} differs")
                elif f.read_bytes() != o.read_bytes():
                    problems.append(f"{o} differs")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    dest = ROOT / "traces" / "examples"
    if args.check:
        problems = stale(dest)
        print("\n".join(problems) or "traces/examples is current")
        sys.exit(1 if problems else 0)
    for d in generate(dest):
        print(f"wrote {d.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
