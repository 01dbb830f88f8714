"""Whether two inputs can be compared at all: a diff of an inference run against a training step prints
percentages that mean nothing. Such a pair is refused (exit 2) unless --force, and then compared per step with a
note saying what differs. (Two runs of ours of different models are told apart by their graphs: diff/graphs.py.)
Pure: profiles in, a verdict out."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

import pyarrow.compute as pc

from atbprof.analyze.patterns import PatternSet
from atbprof.errors import InputError
from atbprof.importers.base import Profile


def workload(profile: Profile, patterns: PatternSet) -> tuple[str, str | None]:
    """("training", a backward kernel's type) when a kernel matches the backward patterns, else ("inference", None)."""
    if not profile.ops.num_rows:
        return "inference", None
    return workload_of(pc.unique(profile.ops.column("op_type").cast("string")).to_pylist(), patterns)


def workload_of(types: Iterable[str | None], patterns: PatternSet) -> tuple[str, str | None]:
    """`workload` of the op types of a profile."""
    for name in types:
        if name and any(fnmatch.fnmatchcase(name, g) for g in patterns.training.backward):
            return "training", name
    return "inference", None


def check_comparable(base: Profile, new: Profile, patterns: PatternSet, force: bool) -> list[str]:
    """Notes for the report; InputError when the inputs are unlike and `force` is off."""
    return check_workloads(base.source, workload(base, patterns), new.source, workload(new, patterns), force)


def check_workloads(
    base: str, base_workload: tuple[str, str | None], new: str, new_workload: tuple[str, str | None], force: bool
) -> list[str]:
    """`check_comparable` of two inputs' workloads (`workload`), the inputs named by their sources."""
    (wa, why_a), (wb, why_b) = base_workload, new_workload
    if wa == wb:
        return []
    unlike = f"{base} is {_a(wa)} and {new} is {_a(wb)} ({why_a or why_b} is a backward kernel)"
    if not force:
        raise InputError(
            f"unlike inputs: {unlike}. A diff of different work says nothing about what fusion changed: compare the "
            "same model and workload (e.g. two captures of the same serving step, or a run with --fusion none "
            "against one with --fusion default), or pass --force to compare them per step anyway"
        )
    return [f"compared unlike inputs at --force ({unlike}): the figures are per step of each, not of the same work"]


def _a(kind: str) -> str:
    return "a training step" if kind == "training" else "inference"


_VENDORS = (("NVIDIA", ("nvidia", "tesla", "geforce", "quadro")), ("AMD", ("amd", "instinct", "radeon")))


def vendor(profile: Profile) -> str | None:
    """Who made the device a profile ran on: Huawei Ascend for Ascend profiles and runs of ours, the vendor of a
    Kineto trace's deviceProperties, None where it does not say."""
    if profile.kind != "kineto":
        return "Huawei Ascend"
    devices = profile.meta.get("devices")
    names = [str(d).lower() for d in devices if d] if isinstance(devices, list) else []
    if any("ascend" in n or "910" in n for n in names):
        return "Huawei Ascend"
    for name, marks in _VENDORS:
        if any(m in n for n in names for m in marks):
            return name
    return None


def cross_vendor(base: Profile, new: Profile) -> tuple[str, str] | None:
    """(base vendor, new vendor) when both are known and differ: their kernels come from different libraries
    (cuBLAS vs hipBLASLt, flash_fwd vs attn_fwd), so a kernel name on one side is no kernel on the other."""
    a, b = vendor(base), vendor(new)
    return (a, b) if a and b and a != b else None


def kernel_roles(profile: Profile, patterns: PatternSet) -> dict[str, str]:
    """Each op type of the profile -> its role across vendors: attention, matmul, norm, communication, memory
    (patterns.yaml's categories and norm classes), else `elementwise / other`."""
    from atbprof.analyze.categories import norm_symbols

    norms = norm_symbols(patterns)
    types = [t for t in pc.unique(profile.ops.column("op_type").cast("string")).to_pylist() if t is not None]
    symbols: list[int] = patterns.kernel.lookup(types).tolist() if types else []
    return {
        t: patterns.category_of(t) or ("norm" if sym in norms else "elementwise / other")
        for t, sym in zip(types, symbols, strict=True)
    }
