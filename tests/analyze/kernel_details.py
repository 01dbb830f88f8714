"""A small test-only reader of torch_npu kernel_details.csv into a `Profile` (until atbprof.importers lands one).

Only what the analyzer needs: name, type, task type, stream, step, start/duration/wait (µs text -> ns, exactly),
block dim, shapes and dtypes. Columns the file lacks stay null, as the import contract says.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pyarrow as pa

from atbprof.importers.base import Profile
from atbprof.optable.schema import OPS_SCHEMA

MISSING = {"", "N/A", "NA"}


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip().strip('"').strip()
    return None if value in MISSING else value


def _int(value: str | None) -> int | None:
    text = _text(value)
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _ns(value: str | None) -> int | None:
    text = _text(value)
    if text is None:
        return None
    whole, _, frac = text.partition(".")
    return int(whole or 0) * 1000 + int((frac + "000")[:3])


def load_kernel_details(path: Path) -> Profile:
    with path.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    starts = [_ns(r.get("Start Time(us)")) for r in rows]
    t0 = min(s for s in starts if s is not None)
    cols: dict[str, list[object]] = {f.name: [None] * len(rows) for f in OPS_SCHEMA}
    for i, r in enumerate(rows):
        typ = _text(r.get("Type"))
        name = _text(r.get("Name")) or "?"
        if typ is None:  # Level0: the type is the last token of the kernel name
            typ = name.rsplit("_", 1)[-1].rstrip("0123456789") or name
        cols["op_index"][i] = i
        cols["step"][i] = _int(r.get("Step Id"))
        cols["op_name"][i] = name
        cols["op_type"][i] = typ
        cols["task_type"][i] = _text(r.get("Accelerator Core"))
        cols["stream_id"][i] = _int(r.get("Stream ID"))
        cols["task_id"][i] = _int(r.get("Task ID"))
        cols["task_start_ns"][i] = (starts[i] or t0) - t0
        cols["task_dur_ns"][i] = _ns(r.get("Duration(us)")) or 0
        cols["task_wait_ns"][i] = _ns(r.get("Wait Time(us)"))
        cols["block_dim"][i] = _int(r.get("Block Dim"))
        for ours, theirs in (
            ("input_shapes", "Input Shapes"),
            ("input_dtypes", "Input Data Types"),
            ("output_shapes", "Output Shapes"),
            ("output_dtypes", "Output Data Types"),
        ):
            cols[ours][i] = _text(r.get(theirs))
    ops = pa.Table.from_pydict(cols, schema=OPS_SCHEMA)
    return Profile("kernel_details", str(path), ops, None, None, {})
