"""Which device a real profile ran on: `--device`, else its metadata, else the core counts its Block Dims show."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from atbprof.device.spec import PRESETS, DeviceSpec, load_device
from atbprof.errors import InputError, UsageError
from atbprof.predict.report import DeviceChoice

PREFERRED = ("910B3", "910B2", "910B1", "910B4", "910A")
"""Among presets with the same core counts, the one assumed (the others are named in the reason)."""
_CUBE = ("AI_CORE", "MIX_AIC")
_VECTOR = ("AI_VECTOR_CORE", "MIX_AIV")


CLOCK_TOLERANCE = 0.005
"""A measured clock this close to the spec's is the spec's (counter rounding)."""
DEFAULT_DEVICE = "910B2"
"""What analyze assumes of a profile that names no device and records no Block Dim (it says so)."""
# "Ascend910B" with no digit is the second-generation family (the db export's NPU_INFO, Short_SoC_version): it
# names no one preset, and must not read as the first-generation "910"
_PRESET_IN_TEXT = re.compile(r"910(?:B[1-4]?|A)?", re.IGNORECASE)


def device_from_meta(meta: dict[str, object]) -> tuple[str, str] | None:
    """(device preset, why) when the profile's metadata names a 910 variant, else None."""
    candidates: list[object] = [meta.get(k) for k in ("device", "soc_version", "device_name", "chip", "npu")]
    device = meta.get("device")
    if isinstance(device, dict):
        candidates += [device.get("name"), device.get("soc_version")]
    for value in candidates:
        if not isinstance(value, str):
            continue
        m = _PRESET_IN_TEXT.search(value)
        if m:
            text = m.group(0).upper()
            if text == "910B":
                continue
            preset = "910A" if text == "910" else text
            if preset in PRESETS:
                return preset, f"from the profile's metadata ({value})"
    return None


def infer_device(ops: pa.Table, meta: dict[str, object]) -> tuple[str, float | None, str]:
    """(preset, clock in MHz when the profile's counters show another than the preset's, why): the same choice
    `predict` makes, for `analyze`'s what-if; a profile that says nothing gets DEFAULT_DEVICE, said so."""
    try:
        spec, choice = choose_device(ops, meta, None)
    except InputError:
        return DEFAULT_DEVICE, None, f"the profile does not say which 910 it ran on; {DEFAULT_DEVICE} assumed"
    preset = choice.preset or spec.name
    clock = choice.clock_mhz if choice.clock_from == "profile cycle counters" else None
    return preset, clock, choice.how


def choose_device(ops: pa.Table, meta: dict[str, object], device: str | None) -> tuple[DeviceSpec, DeviceChoice]:
    """The spec to price `ops` with, at the clock the profile's own cycle counters show when it has them (an SoC
    runs below its nominal clock under a power cap or another frequency setting: the kernels ran at that one)."""
    spec, choice = _chosen_spec(ops, meta, device)
    return at_profile_clock(spec, choice, meta.get("aicore_clock_mhz"))


def at_profile_clock(spec: DeviceSpec, choice: DeviceChoice, measured: object) -> tuple[DeviceSpec, DeviceChoice]:
    nominal = spec.clock_ghz * 1e3
    if not isinstance(measured, int | float) or not 50 <= measured <= 20000:
        return spec, replace(choice, clock_mhz=nominal, clock_from="device spec")
    if abs(measured / nominal - 1) <= CLOCK_TOLERANCE:
        return spec, replace(choice, clock_mhz=nominal, clock_from="device spec (the profile's counters agree)")
    spec = spec.model_copy(update={"clock_ghz": measured / 1e3})
    how = f"{choice.how}; clock {measured:g} MHz from the profile's cycle counters (the spec says {nominal:g})"
    return spec, replace(choice, how=how, clock_mhz=float(measured), clock_from="profile cycle counters")


def _chosen_spec(ops: pa.Table, meta: dict[str, object], device: str | None) -> tuple[DeviceSpec, DeviceChoice]:
    if device:
        if device in PRESETS:
            return load_device(device), DeviceChoice(device, None, "--device")
        if Path(device).suffix in (".yaml", ".yml") or Path(device).exists():
            spec = load_device(None, device)
            return spec, DeviceChoice(None, str(device), f"--device {device} ({spec.name})")
        raise UsageError(f"--device {device!r}: not a preset ({', '.join(PRESETS)}) nor a device spec YAML file")
    named = device_from_meta(meta)
    if named:
        return load_device(named[0]), DeviceChoice(named[0], None, named[1])
    preset, how = _from_block_dims(ops, meta.get("aicore_clock_mhz"))
    return load_device(preset), DeviceChoice(preset, None, how)


def _max_block(ops: pa.Table, task_types: tuple[str, ...], column: str = "block_dim") -> int:
    rows = pc.is_in(ops.column("task_type").cast(pa.string()), pa.array(task_types))
    values = pc.filter(ops.column(column), pc.fill_null(rows, False))
    top = pc.max(values).as_py() if len(values) else None
    return int(top or 0)


def _from_block_dims(ops: pa.Table, clock_mhz: object = None) -> tuple[str, str]:
    cube = _max_block(ops, _CUBE)
    vector = max(_max_block(ops, _VECTOR), _max_block(ops, ("MIX_AIC",), "mix_block_dim"))
    split = vector > 0 or bool(_max_block(ops, ("MIX_AIC", "MIX_AIV")))
    if not cube and not vector:
        raise InputError(
            "the profile records no Block Dim to tell the device by, and no device name: "
            f"pass --device ({', '.join(PRESETS)} or a spec YAML)"
        )
    specs = {p: load_device(p) for p in PREFERRED}
    # a vector kernel may launch more blocks than there are cores (they run in waves): the cube count decides
    fits = [p for p in PREFERRED if specs[p].cores.split == split and (specs[p].cores.aic == cube if cube else True)]
    seen = f"cube Block Dims up to {cube}" if cube else f"vector Block Dims up to {vector}"
    if not fits:  # a partial capture uses fewer cores than the chip has: the smallest chip that holds them
        fits = sorted(
            (p for p in PREFERRED if specs[p].cores.split == split and specs[p].cores.aic >= cube),
            key=lambda p: (specs[p].cores.aic, PREFERRED.index(p)),
        )
        if not fits:
            raise InputError(f"{seen}: no device preset has that many cores; pass --device with a spec YAML")
        return fits[0], f"{seen}: no preset has exactly these; {fits[0]} assumed (--device to choose)"
    if isinstance(clock_mhz, int | float) and len(fits) > 1:
        # same cores, different nominal clocks (910B1 1850 / 910B2 1800 MHz): the one the counters show
        at_clock = [p for p in fits if abs(clock_mhz / (specs[p].clock_ghz * 1e3) - 1) <= CLOCK_TOLERANCE]
        if at_clock:
            also = f" (also {', '.join(p for p in fits if p != at_clock[0])}: --device to choose)"
            return at_clock[0], f"{seen} at {clock_mhz:g} MHz: the {at_clock[0]}{also}"
    also = f" (also {', '.join(fits[1:])}: --device to choose)" if fits[1:] else ""
    return fits[0], f"{seen}: the {fits[0]} family{also}"
