"""Paths to the real samples (shared/anchors, the repo's sibling folder) and small simulated runs with exports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import strategies as st

from atbprof.export import ExportResult, ExportTarget
from tests.conftest import export_cache, run_cache

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
ASCEND = SHARED / "anchors" / "ascend_samples"
TRACES = SHARED / "anchors" / "traces"
LEVEL0 = ASCEND / "msinsight_imagenet_cnn_level0_rank0"
LEVEL1 = ASCEND / "msinsight_imagenet_cnn_level1_rank0"
QWEN = ASCEND / "msinsight_qwen3_0.6b_level2_rank0"
MSTT = ASCEND / "mstt_advisor_ut"
OUT = "ASCEND_PROFILER_OUTPUT"


def mutate(data: st.DataObject, raw: bytes, alphabet: bytes) -> bytes:
    """`raw` with 1-4 bytes replaced by bytes drawn from `alphabet` (JSON's structural and number characters...)."""
    out = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(out) - 1))
        out[at] = data.draw(st.sampled_from(alphabet))
    return bytes(out)


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
    return run_cache(tmp_path_factory.mktemp("importer-runs"), RUNS)


@pytest.fixture(scope="session")
def exported(
    run_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str, ExportTarget], ExportResult]:
    """The export of run `key` as `target` (written once per session)."""
    return export_cache(tmp_path_factory.mktemp("importer-exports"), run_dir)
