"""Shared helpers: the repo root, fixture configs, and small simulated runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from atbprof.config import load_config
from atbprof.config.models import RunConfig
from atbprof.export import ExportResult, ExportTarget, export_run
from atbprof.run import run_simulation
from atbprof.sim.simulate import Simulation

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def regroup(run: Path, rows: int) -> None:
    """Rewrite the run's ops.parquet with each row group (one rank's rows, as the writer writes them) cut into
    groups of `rows` rows: most steps then straddle two groups (a reader in parts carries them over)."""
    import pyarrow.parquet as pq

    ops = run / "ops.parquet"
    file = pq.ParquetFile(ops)
    with pq.ParquetWriter(ops.with_suffix(".tmp"), file.schema_arrow, write_page_checksum=True) as out:
        for g in range(file.num_row_groups):
            out.write_table(file.read_row_group(g), row_group_size=rows)
    ops.with_suffix(".tmp").replace(ops)


def fixture_config(name: str, *overrides: str) -> RunConfig:
    return load_config(FIXTURES / name, list(overrides))


def simulate_table(cfg: RunConfig) -> tuple[Simulation, pa.Table]:
    sim = Simulation(cfg)
    table = pa.Table.from_batches(list(sim.batches()))
    return sim, table


@pytest.fixture(scope="session")
def tiny_run() -> tuple[Simulation, pa.Table]:
    return simulate_table(fixture_config("tiny-llama.yaml"))


def run_cache(root: Path, runs: dict[str, tuple[str, list[str]]]) -> Callable[[str], Path]:
    """`get(key)`: the run directory of runs[key] (fixture config + overrides), simulated on first use."""
    done: dict[str, Path] = {}

    def get(key: str) -> Path:
        if key not in done:
            name, overrides = runs[key]
            run_simulation(load_config(FIXTURES / name, overrides), root / key)
            done[key] = root / key
        return done[key]

    return get


def export_cache(root: Path, run: Callable[[str], Path]) -> Callable[[str, ExportTarget], ExportResult]:
    """`get(key, target)`: the export of run `key` as `target`, written on first use."""
    done: dict[tuple[str, str], ExportResult] = {}

    def get(key: str, target: ExportTarget) -> ExportResult:
        if (key, target) not in done:
            done[key, target] = export_run(run(key), target, root / key)
        return done[key, target]

    return get
