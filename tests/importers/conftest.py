"""Paths to the real samples (shared/anchors, the repo's sibling folder) and small simulated runs with exports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from atbprof.config import load_config
from atbprof.export import ExportResult, ExportTarget, export_run
from atbprof.run import run_simulation
from tests.conftest import FIXTURES

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
ASCEND = SHARED / "anchors" / "ascend_samples"
TRACES = SHARED / "anchors" / "traces"
LEVEL0 = ASCEND / "msinsight_imagenet_cnn_level0_rank0"
LEVEL1 = ASCEND / "msinsight_imagenet_cnn_level1_rank0"
QWEN = ASCEND / "msinsight_qwen3_0.6b_level2_rank0"
MSTT = ASCEND / "mstt_advisor_ut"
OUT = "ASCEND_PROFILER_OUTPUT"


def shared(path: Path) -> Path:
    """A file of shared/anchors; tests that need one skip when the folder is absent (CI has it)."""
    if not path.exists():
        pytest.skip(f"real sample {path} not available (the shared/ folder beside the repo is missing)")
    return path


_TINY = ["workload.decode_tokens=3", "output.trace=false"]
RUNS: dict[str, tuple[str, list[str]]] = {
    "910a": ("tiny-llama.yaml", [*_TINY, "fusion=none"]),  # unprefixed PMU columns
    "910b": ("tiny-llama.yaml", [*_TINY, "fusion=default", "device.preset=910B2"]),  # aic_* / aiv_* columns
    "graph": ("tiny-llama.yaml", ["workload.decode_tokens=2", "output.trace=false", "execution.mode=graph"]),
}


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The run directory of RUNS[key], simulated on first use."""
    root = tmp_path_factory.mktemp("importer-runs")
    done: dict[str, Path] = {}

    def get(key: str) -> Path:
        if key not in done:
            name, overrides = RUNS[key]
            run_simulation(load_config(FIXTURES / name, overrides), root / key)
            done[key] = root / key
        return done[key]

    return get


@pytest.fixture(scope="session")
def exported(
    run_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, ExportTarget], ExportResult]:
    root = tmp_path_factory.mktemp("importer-exports")
    done: dict[tuple[str, str], ExportResult] = {}

    def get(key: str, target: ExportTarget) -> ExportResult:
        if (key, target) not in done:
            done[key, target] = export_run(run_dir(key), target, root / key)
        return done[key, target]

    return get
