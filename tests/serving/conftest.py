"""Serving configs on the tiny LLaMA (fast) and LLaMA-3-8B (the preset vllm-ascend's benchmarks use)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from atbprof.commands import app
from atbprof.config import RunConfig, load_config

SERVING_8B = """\
name: serve-8b
seed: 0
model: {preset: llama3-8b, dtype: bf16}
device: {preset: 910B2}
workload: {kind: serving, requests: 120, rate_qps: 4, input_len: 256, output_len: 32}
execution: {mode: graph}
fusion: {strategy: default}
"""


@pytest.fixture
def serving_8b(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "serve-8b.yaml"
    path.write_text(SERVING_8B)

    def make(*overrides: str) -> RunConfig:
        return load_config(path, list(overrides))

    return make


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """The serving config as a file (for the CLI)."""
    path = tmp_path / "serve.yaml"
    path.write_text(SERVING_8B)
    return path


_runner = CliRunner()


def cli(*args: object) -> Result:
    return _runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "1000"})
