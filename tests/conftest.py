"""Shared helpers: the repo root, fixture configs, and small simulated runs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from atbprof.config import load_config
from atbprof.config.models import RunConfig
from atbprof.sim.simulate import Simulation

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"


def fixture_config(name: str, *overrides: str) -> RunConfig:
    return load_config(FIXTURES / name, list(overrides))


def simulate_table(cfg: RunConfig) -> tuple[Simulation, pa.Table]:
    sim = Simulation(cfg)
    table = pa.Table.from_batches(list(sim.batches()))
    return sim, table


@pytest.fixture(scope="session")
def tiny_run() -> tuple[Simulation, pa.Table]:
    return simulate_table(fixture_config("tiny-llama.yaml"))
