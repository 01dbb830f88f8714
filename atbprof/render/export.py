"""`atbprof export` result: a rich view and its JSON twin."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from atbprof.export import ExportResult


def export_json(result: ExportResult) -> dict[str, Any]:
    return {
        "target": result.target,
        "root": str(result.root),
        "files": [str(p) for p in result.files],
        "op_rows": result.op_rows,
        "steps": result.steps,
        "trace_events": result.trace_events,
        "note": result.note,
    }


MAX_LISTED = 20


def render_export(result: ExportResult, console: Console) -> None:
    console.print(
        f"wrote {result.root}/ ({result.target}: {result.op_rows:,} kernels, {result.steps} steps, "
        f"{result.trace_events:,} timeline events, {len(result.files)} files)"
    )
    for path in result.files[:MAX_LISTED]:
        console.print(f"  {path.relative_to(result.root)}")
    if len(result.files) > MAX_LISTED:  # a 1,024-rank export has 5,000 files: the JSON twin lists them all
        console.print(f"  ... and {len(result.files) - MAX_LISTED:,} more (--format json lists every file)")
    if result.note:
        console.print(f"note: the timeline JSON {result.note.removeprefix('the trace ')}")
    if result.target == "ascend-pt" and result.root.name.endswith("_cluster"):
        console.print(f"next: msprof-analyze cluster -d {result.root} -m all   (per-rank steps, communication)")
    elif result.target == "ascend-pt":
        console.print(f"next: msprof-analyze advisor all -d {result.root}   (or open it in MindStudio Insight)")
    else:
        console.print(f"next: open {result.root} in MindStudio Insight")
