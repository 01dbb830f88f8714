"""Small simulated runs (written once per session) and their exports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from atbprof.export import ExportResult, ExportTarget
from tests.conftest import export_cache, run_cache

TINY = ["workload.decode_tokens=3", "output.trace=false"]
SEED000 = ["workload.decode_tokens=3", "device.preset=910B2", "output.trace=false"]
RUNS: dict[str, tuple[str, list[str]]] = {
    "tiny-none": ("tiny-llama.yaml", [*TINY, "fusion=none"]),  # 910A: unprefixed PMU columns
    "tiny-default": ("tiny-llama.yaml", [*TINY, "fusion=default"]),
    "tiny-910b": ("tiny-llama.yaml", [*TINY, "fusion=none", "device.preset=910B2"]),  # aic_* / aiv_* columns
    "tiny-graph": ("tiny-llama.yaml", ["workload.decode_tokens=2", "output.trace=false", "execution.mode=graph"]),
    "s0-none": ("seed000-baseline.yaml", [*SEED000, "fusion=none"]),
    "s0-baseline": ("seed000-baseline.yaml", SEED000),  # RmsNorm kernels after the residual Add
    "s0-lnfused": ("seed000-lnfused.yaml", SEED000),  # Add + RmsNorm fused (AddRmsNorm, folded into MatMul)
}


@pytest.fixture(scope="session")
def make_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The run directory of RUNS[key], simulated on first use."""
    return run_cache(tmp_path_factory.mktemp("runs"), RUNS)


@pytest.fixture(scope="session")
def exported(
    make_run: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, ExportTarget], ExportResult]:
    """The export of run `key` as `target` (written once per session)."""
    return export_cache(tmp_path_factory.mktemp("exports"), make_run)
