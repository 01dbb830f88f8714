"""Whether two inputs can be compared at all: a diff of an inference run against a training step prints
percentages that mean nothing. Such a pair is refused (exit 2) unless --force, and then compared per step with a
note saying what differs. (Two runs of ours of different models are told apart by their graphs: diff/graphs.py.)
Pure: profiles in, a verdict out."""

from __future__ import annotations

import fnmatch

import pyarrow.compute as pc

from atbprof.analyze.patterns import PatternSet
from atbprof.errors import InputError
from atbprof.importers.base import Profile


def workload(profile: Profile, patterns: PatternSet) -> tuple[str, str | None]:
    """("training", a backward kernel's type) when a kernel matches the backward patterns, else ("inference", None)."""
    if not profile.ops.num_rows:
        return "inference", None
    types = pc.unique(profile.ops.column("op_type").cast("string")).to_pylist()
    for name in types:
        if name and any(fnmatch.fnmatchcase(name, g) for g in patterns.training.backward):
            return "training", name
    return "inference", None


def check_comparable(base: Profile, new: Profile, patterns: PatternSet, force: bool) -> list[str]:
    """Notes for the report; InputError when the inputs are unlike and `force` is off."""
    (wa, why_a), (wb, why_b) = workload(base, patterns), workload(new, patterns)
    if wa == wb:
        return []
    unlike = f"{base.source} is {_a(wa)} and {new.source} is {_a(wb)} ({why_a or why_b} is a backward kernel)"
    if not force:
        raise InputError(
            f"unlike inputs: {unlike}. A diff of different work says nothing about what fusion changed: compare the "
            "same model and workload (e.g. two captures of the same serving step, or a run with --fusion none "
            "against one with --fusion default), or pass --force to compare them per step anyway"
        )
    return [f"compared unlike inputs at --force ({unlike}): the figures are per step of each, not of the same work"]


def _a(kind: str) -> str:
    return "a training step" if kind == "training" else "inference"
