"""Importer for a run directory written by `atbprof run` (ops.parquet, steps.parquet, run.json)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from atbprof.errors import InputError
from atbprof.importers.base import STEP_FRAMES_SCHEMA, Profile
from atbprof.importers.guard import importer
from atbprof.importers.run_doc import RUN_JSON_MAX_BYTES, read_run_doc
from atbprof.optable.schema import OPS_SCHEMA, op_ranks, ops_metadata, read_ops, read_steps, step_chunks

__all__ = ["RUN_JSON_MAX_BYTES", "is_run_dir", "load_run", "run_in_parts"]


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / "ops.parquet").exists()


@importer
def load_run(
    path: Path, rank: int | None = None, columns: Sequence[str] | None = None, *, check_other_ranks: bool = True
) -> Profile:
    """A run directory as a profile: rank 0 of a multi-device run (with a warning), or `rank`'s tasks (only the
    row groups holding them are read). `columns`: the op-table columns to hold (default all).
    `check_other_ranks=False`: the other ranks' pages are not checked (a reader that reads each rank in turn)."""
    ops_path = path / "ops.parquet"
    meta: dict[str, object] = read_run_doc(path / "run.json") if (path / "run.json").exists() else {}
    meta.setdefault("origin_ns", 0)  # a run's times are relative to its own start already
    if rank is None:
        ranks = op_ranks(ops_path)
        if len(ranks) > 1 or (ranks and ranks[0] != 0):
            rank = 0
            _warn_rank_zero(meta, len(ranks))
    # a run has ops: an empty table was damaged
    ops = read_ops(ops_path, need_rows=rank is None, columns=columns, rank=rank, check_other_ranks=check_other_ranks)
    if not ops.num_rows:
        raise InputError(f"{path}: no tasks of rank {rank} in ops.parquet")
    steps = read_steps(path / "steps.parquet") if (path / "steps.parquet").exists() else None
    frames = _step_frames(steps) if steps is not None else None
    return Profile("atbprof-run", str(path), ops, None, steps, meta, frames)


def run_in_parts(
    path: Path, rank: int | None, columns: Sequence[str], part_ops: int, from_ops: int
) -> tuple[Profile, list[list[int]]] | None:
    """A run of more than `from_ops` ops (of `rank`, or of its only device) to be read in parts of whole steps of
    about `part_ops` ops: its profile without the ops (an empty table of the `columns`) and the parts' row groups;
    None when it is read whole (smaller, several devices, or steps not in order)."""
    ops_path = path / "ops.parquet"
    meta_pq = ops_metadata(ops_path)
    if rank is None and op_ranks(ops_path) != [0]:
        return None  # several devices: rank 0 is read whole, with the warning load_run gives
    chunks = step_chunks(ops_path, meta_pq, rank, part_ops)
    rows = sum(meta_pq.row_group(g).num_rows for c in chunks or [] for g in c)
    if chunks is None or rows <= from_ops:
        return None
    meta: dict[str, object] = read_run_doc(path / "run.json") if (path / "run.json").exists() else {}
    meta.setdefault("origin_ns", 0)
    steps = read_steps(path / "steps.parquet") if (path / "steps.parquet").exists() else None
    frames = _step_frames(steps) if steps is not None else None
    held = [f for f in OPS_SCHEMA if f.name in set(columns)]
    return Profile("atbprof-run", str(path), pa.schema(held).empty_table(), None, steps, meta, frames), chunks


def _warn_rank_zero(meta: dict[str, object], devices: int) -> None:
    """A multi-device run holds every rank's tasks; the single-device analyses read rank 0 (its steps frame
    rank 0 too) and say so."""
    warnings = meta.setdefault("warnings", [])
    if isinstance(warnings, list):
        warnings.append(
            f"a run on {devices} devices: this analysis reads rank 0; every rank's tasks are in ops.parquet (column "
            "rank), and summary.ranks of run.json splits each rank's step time"
        )


def _step_frames(steps: pa.Table) -> pa.Table:
    """A run's step frame: host start of the step to the sampled token back on the host."""
    start = steps.column("host_start_ns")
    return pa.table(
        {
            "step": pc.cast(steps.column("step"), pa.int32()),
            "start_ns": pc.cast(start, pa.int64()),
            "dur_ns": pc.cast(pc.subtract(steps.column("sync_end_ns"), start), pa.int64()),
            "op_count": pc.cast(steps.column("op_count"), pa.int64()),
            "first_op_index": pc.cast(steps.column("first_op_index"), pa.int64()),
            "frame": pa.array(["run"] * steps.num_rows, pa.string()),
        },
        schema=STEP_FRAMES_SCHEMA,
    )
