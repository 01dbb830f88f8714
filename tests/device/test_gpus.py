"""GPU specs for a trace's what-if (data/gpus.yaml): found from deviceProperties, each with its datasheet."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from atbprof.analyze.whatif_trace import fused_bytes
from atbprof.device.gpus import gpu_spec


@pytest.mark.parametrize(
    ("names", "memory", "spec", "gbps"),
    [
        (["NVIDIA H200"], [150_109_880_320], "H200", 4800),  # the H200 anchor traces
        (["NVIDIA H100 80GB HBM3"], [85_018_279_936], "H100 SXM", 3350),  # TraceLens H100 trace
        (["NVIDIA B200", "NVIDIA B200"], [191_503_138_816], "B200", 8000),
        (["AMD Instinct MI300X"], [206_141_652_992], "MI300X", 5300),
        (["NVIDIA A100-PG509-200"], [42_297_524_224], "A100 40GB", 1555),  # HTA's A100 traces
        (["NVIDIA A100-SXM4-80GB"], [85_100_000_000], "A100 80GB", 2039),
        (["NVIDIA A100-SXM4-80GB"], None, "A100 40GB", 1555),  # no memory said: the smaller, never a guess up
        (["Tesla V100-SXM2-32GB"], None, "V100", 900),
    ],
)
def test_the_spec_comes_from_the_device_name(names: list[str], memory: list[int] | None, spec: str, gbps: int) -> None:
    found = gpu_spec(names, memory)
    assert found is not None and (found.name, found.hbm_gbps) == (spec, gbps)


def test_an_unlisted_device_has_no_spec() -> None:
    assert gpu_spec(["ARTEMIS"]) is None and gpu_spec([]) is None


def test_every_spec_names_its_source() -> None:
    doc = yaml.safe_load(resources.files("atbprof.data").joinpath("gpus.yaml").read_text())
    assert all(e["source"] and e["hbm_gbps"] > 0 for e in doc["gpus"])


def test_a_fused_norm_moves_its_input_and_output_once() -> None:
    """RMSNorm over 512 x 4096 fp16: read x, write y (2 x 4 MiB) and the 8 KiB weight; Add + RMSNorm also reads and
    writes the residual."""
    assert fused_bytes("decomposed_rmsnorm", "1,512,4096;") == (2 * 512 * 4096 + 4096) * 2
    assert fused_bytes("add_norm", "1,512,4096;1,512,4096") == (4 * 512 * 4096 + 4096) * 2
    assert fused_bytes("decomposed_rmsnorm", None) != fused_bytes("decomposed_rmsnorm", None)  # NaN: no shape
