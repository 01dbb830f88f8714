"""Runs of ours (simulated once per session) and the real Ascend samples, for the analyzer tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from atbprof.config import load_config
from atbprof.importers.base import Profile
from atbprof.importers.ours import load_run
from atbprof.run import run_simulation
from tests.analyze.kernel_details import load_kernel_details
from tests.conftest import FIXTURES

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "ascend_samples"
QWEN3 = SAMPLES / "msinsight_qwen3_0.6b_level2_rank0" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
GPT_LAYERNORM = SAMPLES / "mstt_advisor_ut" / "kernel_details_gpt_layernorm_train.csv"
CNN = [
    SAMPLES / "msinsight_imagenet_cnn_level0_rank0" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv",
    SAMPLES / "msinsight_imagenet_cnn_level1_rank0" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv",
]


def simulate(out: Path, config: str, *overrides: str) -> Profile:
    """`atbprof run` of a fixture config (no trace: the analyzer reads ops.parquet, steps.parquet, run.json)."""
    cfg = load_config(FIXTURES / config, [*overrides, "output.trace=false"])
    run_simulation(cfg, out)
    return load_run(out)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Profile]:
    """runs(config, *overrides) -> the Profile of that run, simulated once per session."""
    cache: dict[tuple[str, ...], Profile] = {}
    root = tmp_path_factory.mktemp("runs")

    def get(config: str, *overrides: str) -> Profile:
        key = (config, *overrides)
        if key not in cache:
            cache[key] = simulate(root / f"run{len(cache)}", config, *overrides)
        return cache[key]

    return get


def sample_loaders() -> list[Callable[[Path], Profile]]:
    """The test-only kernel_details reader, plus the project's importer once it exists."""
    loaders: list[Callable[[Path], Profile]] = [load_kernel_details]
    try:
        from atbprof.importers.detect import load_profile  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return loaders
    return [*loaders, load_profile]


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"sample not available: {path}")
    return path
