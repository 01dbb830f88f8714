"""Device specs are data: atbprof/data/devices/<name>.yaml, or a user file with the same fields."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atbprof.errors import ConfigError

PRESETS = ("910A", "910B1", "910B2", "910B3", "910B4")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Cores(_M):
    split: bool
    aic: int = Field(gt=0)
    aiv: int = Field(gt=0)


class Memory(_M):
    capacity_gb: float = Field(default=0, ge=0)
    bandwidth_gbps: float = Field(gt=0)


class L2(_M):
    size_mb: float = Field(gt=0)
    bandwidth_gbps: float = Field(gt=0)


class Efficiency(_M):
    cube: float = Field(gt=0, le=1)
    hbm_stream: float = Field(gt=0, le=1)
    gemv_nd: float = Field(gt=0, le=1)
    vector: float = Field(gt=0, le=1)
    vector_hbm: float = Field(gt=0, le=1)


class StaticCost(_M):
    cube: float = Field(ge=0)
    vector: float = Field(ge=0)
    mix: float = Field(ge=0)
    aicpu: float = Field(ge=0)


class ICache(_M):
    free_ops: int = Field(ge=1)
    penalty_per_op: float = Field(ge=0)


class DeviceSpec(_M):
    name: str
    soc_version: str
    sources: tuple[str, ...] = ()
    cores: Cores
    clock_ghz: float = Field(gt=0)
    cube_macs_per_cycle: int = Field(gt=0)
    vector_bytes_per_cycle: int = Field(gt=0)
    core_gm_bytes_per_cycle: float = Field(gt=0)
    mte1_bytes_per_cycle: float = Field(gt=0)
    mte3_bytes_per_cycle: float = Field(gt=0)
    fixpipe_bytes_per_cycle: float = Field(gt=0)
    hbm: Memory
    l2: L2
    buffers_kb: dict[str, float]
    cube_to_vector: str = Field(pattern="^(ub|l2)$")
    efficiency: Efficiency
    static_cost_us: StaticCost
    fusion_icache: ICache

    @property
    def peak_flops(self) -> float:
        """Dense fp16 cube peak, FLOP/s (2 per MAC)."""
        return 2.0 * self.cores.aic * self.cube_macs_per_cycle * self.clock_ghz * 1e9

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm.bandwidth_gbps * 1e9

    @property
    def supports_bf16(self) -> bool:
        return self.soc_version != "Ascend910"


@lru_cache(maxsize=len(PRESETS))
def _preset(preset: str) -> DeviceSpec:
    text = resources.files("atbprof.data.devices").joinpath(f"{preset}.yaml").read_text(encoding="utf-8")
    return DeviceSpec.model_validate(yaml.safe_load(text))  # our own data: a failure here is a bug


def load_device(preset: str | None, spec: str | None = None) -> DeviceSpec:
    if spec:
        from atbprof.config.yamlio import load_yaml_file  # the config package: only for a user file

        doc = load_yaml_file(spec, "device.spec")
        source = spec
    else:
        if preset not in PRESETS:
            raise ConfigError(
                f"device.preset = {preset!r}: unknown device (allowed: {', '.join(PRESETS)}; "
                "or device.spec: path/to/spec.yaml)"
            )
        return _preset(preset)
    try:
        return DeviceSpec.model_validate(doc)
    except ValidationError as err:
        raise ConfigError(
            [f"{source}: {'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()]
        ) from None
