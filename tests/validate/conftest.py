"""A fresh atbprof run (tiny LLaMA) for the validator's own-trace tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from atbprof.config import load_config
from atbprof.run import run_simulation
from tests.conftest import FIXTURES


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("validate") / "tiny-llama"
    run_simulation(load_config(FIXTURES / "tiny-llama.yaml"), out)
    return out
