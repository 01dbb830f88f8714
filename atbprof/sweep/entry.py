"""`atbprof.sweep(...)`: `atbprof sweep --spec SPEC` as one function."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atbprof.sweep.report import SweepResult

PathLike = str | os.PathLike[str]


def sweep_spec(
    spec: PathLike,
    *,
    out: PathLike | None = None,
    workers: int | None = None,
    keep_runs: bool = False,
    force: bool = False,
) -> SweepResult:
    """`atbprof sweep --spec SPEC`: every point simulated (resuming an interrupted run of the same sweep), the
    sweep directory written (`out`, default sweeps/<name>). `.to_arrow()` is sweep.parquet's table."""
    from atbprof.sweep.api import run_sweep

    return run_sweep(
        config=None,
        spec_file=Path(spec),
        grid=[],
        sets=[],
        out=Path(out) if out is not None else None,
        workers=workers,
        keep_runs=keep_runs,
        force=force,
    )
