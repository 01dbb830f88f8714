"""GPUs atbprof has no device model of: their peak HBM bandwidth (data/gpus.yaml, each with its datasheet), found
from a trace's deviceProperties. What a trace's what-if needs to price one fused memory-bound kernel."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from atbprof.yamlio import load_data


@dataclass(frozen=True)
class GpuSpec:
    name: str
    hbm_gbps: float  # peak, 10^9 bytes/s
    memory_gb: float
    source: str

    @property
    def hbm_bytes_per_ns(self) -> float:
        return self.hbm_gbps  # 10^9 B/s = 1 B/ns


@cache
def _entries() -> tuple[tuple[re.Pattern[str], float | None, GpuSpec], ...]:
    text = resources.files("atbprof.data").joinpath("gpus.yaml").read_text(encoding="utf-8")
    out = []
    for e in load_data(text)["gpus"]:
        spec = GpuSpec(e["name"], float(e["hbm_gbps"]), float(e["memory_gb"]), e["source"])
        floor = e.get("min_memory_gb")
        out.append((re.compile(e["match"], re.IGNORECASE), float(floor) if floor is not None else None, spec))
    return tuple(out)


def gpu_spec(names: list[str], memory_bytes: list[int] | None = None) -> GpuSpec | None:
    """The spec of the first device name a data/gpus.yaml entry matches (its memory reaching the entry's
    `min_memory_gb` where set); None for a device not listed."""
    memory = [m for m in (memory_bytes or []) if isinstance(m, int) and m > 0]
    gb = max(memory) / 1e9 if memory else None
    for name in names:
        for regex, floor, spec in _entries():
            if regex.search(name) and (floor is None or (gb is not None and gb >= floor)):
                return spec
    return None
