"""The generated sections of the docs pages: a block between a BEGIN and an END marker that a script writes from
its results (bench_summary.py, compare_serving.py, compare_msmodeling.py), the `--check` that the page holds
what the results give, and the comparison scripts' table of our figures against a reference's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


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


def error_table(
    begin: str,
    end: str,
    cases: list[dict[str, Any]],
    reference: tuple[str, str],
    heads: list[str],
    figures: list[tuple[str, str]],
) -> str:
    """The section of a comparison: per case and figure, the reference's value (`reference`: its key in a case and
    its column head) and each of ours (`heads`: a column each, a case's `ours` in that order) with its error."""
    key_of, head = reference
    lines = [
        begin,
        "",
        f"| case | figure | {head} | {' | '.join(heads)} |",
        "|---|---|---:|" + "---:|" * len(heads),
    ]
    for case in cases:
        for key, label in figures:
            ref = case[key_of][key]
            cells = [f"{v[key]:,.1f} ({(v[key] - ref) / ref:+.0%})" for v in case["ours"]]
            lines.append(f"| {case['name']} | {label} | {ref:,.1f} | {' | '.join(cells)} |")
    lines += ["", end]
    return "\n".join(lines)
