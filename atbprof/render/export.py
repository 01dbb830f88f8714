"""`atbprof export` result: a rich view and its JSON twin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from atbprof.export import ExportResult
from atbprof.hints import command, shown


def export_json(result: ExportResult) -> dict[str, Any]:
    return {
        "target": result.target,
        "root": shown(result.root),
        "files": [str(p) for p in result.files],
        "op_rows": result.op_rows,
        "steps": result.steps,
        "trace_events": result.trace_events,
        "note": result.note,
    }


MAX_LISTED = 20


def render_export(result: ExportResult, console: Console) -> None:
    console.print(
        f"wrote {shown(result.root)}/ ({result.target}: {result.op_rows:,} kernels, {result.steps} steps, "
        f"{result.trace_events:,} timeline events, {len(result.files)} files)"
    )
    for path in result.files[:MAX_LISTED]:
        console.print(f"  {path.relative_to(result.root)}")
    if len(result.files) > MAX_LISTED:  # a 1,024-rank export has 5,000 files: the JSON twin lists them all
        console.print(f"  ... and {len(result.files) - MAX_LISTED:,} more (--format json lists every file)")
    if result.note:
        console.print(f"note: the timeline JSON {result.note.removeprefix('the trace ')}")
    for line in next_steps(result):
        console.print(f"next: {line}", markup=False, highlight=False)


def next_steps(result: ExportResult) -> list[str]:
    """Ascend's own tools on the export; msprof-analyze comes with the `ascend-tools` extra."""
    root = Path(result.root)
    install = "pip install 'atbprof[ascend-tools]'   # msprof-analyze, if it is not installed"
    if result.target == "ascend-pt" and root.name.endswith("_cluster"):
        return [
            install,
            command("msprof-analyze", "cluster", "-d", root, "-m", "all", why="per-rank steps, communication"),
        ]
    if result.target == "ascend-pt":
        return [
            install,
            command("msprof-analyze", "advisor", "all", "-d", root, why="or open it in MindStudio Insight"),
        ]
    return [f"open {shown(root)} in MindStudio Insight"]
