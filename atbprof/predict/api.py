"""Every kernel of a real profile priced by the device model (pure: profile in, report out)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from atbprof.device.spec import DeviceSpec
from atbprof.errors import InputError
from atbprof.importers.base import Profile
from atbprof.predict.device import choose_device
from atbprof.predict.price import price_kernels
from atbprof.predict.report import PREDICT_SCHEMA_VERSION, DeviceChoice, PredictReport, summarize

__all__ = ["PREDICT_SCHEMA_VERSION", "PredictReport", "check_priceable", "predict_kernels", "predict_profile"]


MAX_BLOCK_DIM = 65_535
"""A Block Dim beyond this (msprof records it in 16 bits; an NPU has tens of cores) is damage."""


def check_priceable(profile: Profile) -> None:
    """Refuse a profile with nothing to price (no kernels, no shapes, no measured time) or with Block Dims no
    kernel has, naming the fix."""
    if profile.ops.num_rows == 0:
        raise InputError(f"{profile.source}: the profile has no device kernels to price")
    ops = profile.ops
    block_dim = ops.column("block_dim")
    low = pc.less(block_dim, 0)
    if pc.any(low).as_py():
        row = pc.index(low, True).as_py()
        raise InputError(
            f"{profile.source}: kernel {row + 1} ({ops.column('op_name')[row].as_py()}) has Block Dim "
            f"{block_dim[row].as_py()}: a kernel runs on at least one core; the profile is damaged"
        )
    big = pc.greater(block_dim, MAX_BLOCK_DIM)
    if pc.any(big).as_py():
        row = pc.index(big, True).as_py()
        raise InputError(
            f"{profile.source}: kernel {row + 1} ({ops.column('op_name')[row].as_py()}) has Block Dim "
            f"{block_dim[row].as_py()}, more than any NPU's cores ({MAX_BLOCK_DIM} at most); the profile is damaged"
        )
    if not pc.any(pc.greater(ops.column("task_dur_ns"), 0)).as_py():
        raise InputError(
            f"{profile.source}: every kernel's duration is 0: nothing was measured to compare the model with"
        )
    if pc.all(pc.is_null(profile.ops.column("input_shapes"))).as_py():
        raise InputError(
            f"{profile.source}: no kernel has Input Shapes, so none can be priced; capture with "
            "record_shapes=True (torch_npu profiler_level Level1 or higher; msprof op_summary has them)"
        )


def predict_profile(
    profile: Profile, device: str | None = None, spec: tuple[DeviceSpec, DeviceChoice] | None = None
) -> PredictReport:
    """Measured vs predicted for every kernel of `profile`. `device`: a preset or spec YAML (else inferred from
    the profile); `spec`: an already chosen spec and how (calibrate's before/after), which overrides `device`."""
    return predict_kernels(profile, device, spec)[0]


def predict_kernels(
    profile: Profile, device: str | None = None, spec: tuple[DeviceSpec, DeviceChoice] | None = None
) -> tuple[PredictReport, pa.Table]:
    """The report and every kernel's row (atbprof/writers/kernels.py `kernels_table`: what `--kernels` writes)."""
    from atbprof.writers.kernels import kernels_table

    check_priceable(profile)
    chosen, how = spec or choose_device(profile.ops, profile.meta, device)
    prices = price_kernels(profile.ops, chosen)
    return summarize(prices, profile.source, how), kernels_table(profile.ops, prices)
