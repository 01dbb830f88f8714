"""Serving configs on the tiny LLaMA (fast) and LLaMA-3-8B (the preset vllm-ascend's benchmarks use)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
