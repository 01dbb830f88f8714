"""Importer for a run directory written by `atbprof run` (ops.parquet, steps.parquet, run.json)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow.parquet as pq

from atbprof.errors import InputError
from atbprof.importers.base import Profile
from atbprof.optable.schema import read_ops


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / "ops.parquet").exists()


def load_run(path: Path) -> Profile:
    ops = read_ops(path / "ops.parquet")
    steps = pq.read_table(path / "steps.parquet") if (path / "steps.parquet").exists() else None
    meta: dict[str, object] = {}
    if (path / "run.json").exists():
        try:
            meta = orjson.loads((path / "run.json").read_bytes())
        except orjson.JSONDecodeError as err:
            raise InputError(
                f"{path / 'run.json'}: not valid JSON ({err}); re-create the run with `atbprof run`"
            ) from None
    return Profile("atbprof-run", str(path), ops, None, steps, meta)
