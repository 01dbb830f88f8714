"""The generated sections of the docs pages: a block between a BEGIN and an END marker that a script writes from
its results (bench_summary.py, compare_serving.py, compare_msmodeling.py), and the `--check` that the page holds
what the results give."""

from __future__ import annotations

import sys
from pathlib import Path


def replaced(page: str, begin: str, end: str, block: str, where: Path) -> str:
    """`page` with its section from `begin` to `end` (markers included) replaced by `block` (which holds both)."""
    if begin not in page or end not in page:
        raise SystemExit(f"{where}: the markers of the generated section are missing ({begin})")
    head, rest = page.split(begin, 1)
    return head + block + rest.split(end, 1)[1]


def stale(page: str, new: str, where: Path, source: str, script: str) -> bool:
    """Whether the page differs from what its results give (said on stderr, with the command that mends it)."""
    if new == page:
        return False
    print(f"{where} is not what {source} gives: run python scripts/{script}", file=sys.stderr)
    return True
