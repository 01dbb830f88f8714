"""Device specs are data: atbprof/data/devices/<name>.yaml, or a user file with the same fields."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atbprof.errors import ConfigError
from atbprof.yamlio import load_data

PRESETS = ("910A", "910B1", "910B2", "910B3", "910B4")


class _M(BaseModel):
    # bounds: what a real accelerator can have, with room (so a typo cannot give a 1e-300 GB/s memory)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Cores(_M):
    split: bool
    aic: int = Field(ge=1, le=4096)
    aiv: int = Field(ge=1, le=8192)


class Memory(_M):
    capacity_gb: float = Field(default=0, ge=0, le=65536)
    bandwidth_gbps: float = Field(ge=1, le=1e6)


class L2(_M):
    size_mb: float = Field(ge=0.01, le=65536)
    bandwidth_gbps: float = Field(ge=1, le=1e7)


class Efficiency(_M):
    cube: float = Field(ge=0.01, le=1)
    hbm_stream: float = Field(ge=0.01, le=1)
    gemv_nd: float = Field(ge=0.01, le=1)
    vector: float = Field(ge=0.01, le=1)
    vector_hbm: float = Field(ge=0.01, le=1)
    mix_overlap: float = Field(default=1.0, ge=0, le=1)
    # share of a GEMM's shorter side (cube MACs or MTE2 operand loads) hidden under its longer one; 1 = perfect
    # double buffering
    mac_mte2_overlap: float = Field(default=1.0, ge=0, le=1)


class StaticCost(_M):
    cube: float = Field(ge=0, le=1e4)
    vector: float = Field(ge=0, le=1e4)
    mix: float = Field(ge=0, le=1e4)
    aicpu: float = Field(ge=0, le=1e5)


class ICache(_M):
    free_ops: int = Field(ge=1, le=10_000)
    penalty_per_op: float = Field(ge=0, le=1e4)


class Link(_M):
    """One level of the interconnect, as the alpha-beta model sees it."""

    transport: str = Field(pattern="^(HCCS|PCIE|RDMA|SIO)$")  # msprof's Communication Bandwidth Info keys
    bandwidth_gbps: float = Field(ge=0.01, le=1e5)  # per link and direction, GB/s
    links: int = Field(default=1, ge=1, le=1024)  # links one device has at this level (a full mesh: one per peer)
    latency_us: float = Field(ge=0, le=1e4)  # per algorithm step
    efficiency: float = Field(ge=0.01, le=1)  # achieved share of the link bandwidth


class Topology(_M):
    """How a device's cards are joined, and what HCCL does on them (device_model_facts.md section 1)."""

    mesh_devices: int = Field(ge=1, le=1024)  # cards joined all-to-all by `mesh` links
    server_devices: int = Field(ge=1, le=1024)  # cards per server
    mesh: Link
    between_meshes: Link | None = None  # inside a server, between meshes (910A: PCIe between its 4-card groups)
    between_servers: Link
    server_algorithm: str = Field(default="auto", pattern="^(auto|ring|halving_doubling)$")
    collective_static_us: float = Field(ge=0, le=1e5)  # device-side fixed cost of one collective task
    host_launch_us: float = Field(ge=0, le=1e6)  # eager mode: host cost of launching one collective
    buffer_mb: float = Field(ge=0, le=1e6)  # HCCL's communication buffer per communicator (device memory)


PROVENANCE_KINDS = ("published", "fitted", "calibrated", "unstated")
"""Where a device parameter came from, weakest evidence last but one: a spec sheet or a published measurement, a
fit on a named real sample (with a held-out check), `atbprof calibrate` on the user's own profile; `unstated`: a
user-written spec that does not say."""


class Provenance(_M):
    kind: Literal["published", "fitted", "calibrated"]
    source: str = Field(min_length=1, max_length=2000)


class DeviceSpec(_M):
    name: str = Field(min_length=1, max_length=200)
    soc_version: str = Field(min_length=1, max_length=200)
    sources: tuple[str, ...] = Field(default=(), strict=False, max_length=1000)  # YAML gives a list
    cores: Cores
    clock_ghz: float = Field(ge=0.05, le=20)
    cube_macs_per_cycle: int = Field(ge=1, le=1 << 20)
    # int8 MACs per core per cycle (a 16 x 32 x 16 fractal); a spec without it prices int8 GEMMs at the fp16 rate
    cube_int8_macs_per_cycle: int | None = Field(default=None, ge=1, le=1 << 21)
    vector_bytes_per_cycle: int = Field(ge=1, le=1 << 20)
    core_gm_bytes_per_cycle: float = Field(ge=0.01, le=1 << 20)
    l2_read_bytes_per_cycle: float = Field(ge=0.01, le=1 << 20)
    mte1_bytes_per_cycle: float = Field(ge=0.01, le=1 << 20)
    mte3_bytes_per_cycle: float = Field(ge=0.01, le=1 << 20)
    fixpipe_bytes_per_cycle: float = Field(ge=0.01, le=1 << 20)
    hbm: Memory
    l2: L2
    buffers_kb: dict[str, Annotated[float, Field(gt=0, le=1 << 20)]] = Field(max_length=64)
    cube_to_vector: str = Field(pattern="^(ub|l2)$")
    efficiency: Efficiency
    static_cost_us: StaticCost
    fusion_icache: ICache
    # AIC scalar cycles per 128 x 128 block pair of a FlashAttention kernel (its block bookkeeping), by op type; a
    # kernel's scalar pipe is at least blocks x this / cores. Measured from PMU counters, see the presets.
    block_scalar_cycles: dict[str, Annotated[float, Field(ge=0, le=1e7)]] = Field(default_factory=dict, max_length=100)
    # fitted by `atbprof calibrate` (empty in the shipped presets): measured / modelled execution time of each op
    # type's kernels on the profiled hardware, the part of a kernel library's quality the pipes do not explain
    op_time_scale: dict[str, Annotated[float, Field(ge=0.05, le=20)]] = Field(default_factory=dict, max_length=1000)
    calibration: dict[str, str | int | float] = Field(default_factory=dict, max_length=100, strict=False)
    # per parameter ("efficiency.cube", "static_cost_us.vector", "block_scalar_cycles.FlashAttentionScore", ...):
    # where its value came from; `atbprof predict` says which of them priced each kernel
    provenance: dict[str, Provenance] = Field(default_factory=dict, max_length=1000)
    topology: Topology | None = None  # absent: a single card (parallel.tp/pp/dp must be 1)

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

    def model_dtype(self, dtype: str) -> str:
        """The dtype a model of `dtype` runs in here: bf16 only where the SoC has it, else fp16."""
        return "bf16" if dtype == "bf16" and self.supports_bf16 else "fp16"

    def at_clock(self, clock_mhz: float | None) -> DeviceSpec:
        """This device at the AI Core clock a profile's counters show (None: the preset's)."""
        return self.model_copy(update={"clock_ghz": clock_mhz / 1e3}) if clock_mhz else self


@lru_cache(maxsize=len(PRESETS))
def _preset(preset: str) -> DeviceSpec:
    text = resources.files("atbprof.data.devices").joinpath(f"{preset}.yaml").read_text(encoding="utf-8")
    return DeviceSpec.model_validate(load_data(text))  # our own data: a failure here is a bug


def load_device(preset: str | None, spec: str | None = None) -> DeviceSpec:
    if spec:
        from atbprof.yamlio import load_yaml_file

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
