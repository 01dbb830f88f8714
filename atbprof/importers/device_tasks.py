"""Which Ascend device tasks are kernels: an allowlist of task types, not a blocklist of what is not.

A timeline (trace_view.json, msprof_*.json) holds every task the device ran: kernels, and the runtime's own
housekeeping (memcpy, event record / wait, notify, SDMA, profiling switches, TASK_TIMEOUT_SET at start-up, model
maintenance...). kernel_details.csv and op_summary list only the kernels; every Ascend importer keeps the same rows.
A task is a kernel when its Task Type says so (the op-table names and the SQE / runtime names the timelines use).
Older timelines write the generic type `Other` for kernels and runtime tasks alike, and Level0 tables `N/A`: then
the name decides, and runtime tasks are named in upper snake case (MEMCPY_ASYNC, EVENT_RECORD, TASK_TIMEOUT_SET)
where kernels are not (aclnnAdd_AddAiCore_Add, trans_TransData_0, Conv2D1, RmsNorm).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

KERNEL_TASK_TYPES = frozenset(
    {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC", "MIX_AIV", "DSA_SQE", "FFTS_PLUS", "FFTS_PLUS_SQE"}
    | {"KERNEL_AICORE", "KERNEL_AIVEC", "KERNEL_AICPU", "KERNEL_MIX_AIC", "KERNEL_MIX_AIV"}
    | {"AICORE_SQE", "AIV_SQE", "AICPU_SQE", "AI_CORE_SQE", "AI_VECTOR_CORE_SQE", "AI_CPU_SQE"}
)
COMMUNICATION_TASK_TYPES = frozenset({"HCCL", "COMMUNICATION"})
MODEL_ID_NONE = 4294967295
"""msprof's Model ID of a task no model holds (eager, single-op); a captured graph's tasks name their model."""


def graph_task(model: int | None) -> bool | None:
    """Whether a task with this Model ID was replayed from a captured graph (None: not recorded)."""
    return None if model is None else model != MODEL_ID_NONE


UNTYPED = frozenset({"", "N/A", "Other", "OTHER", "UNKNOWN"})
"""Task types that do not tell a kernel from a runtime task (the name does)."""
RUNTIME_TASK_NAMES = frozenset({"Notify Wait", "Notify Record", "Write Value", "SDMA", "Memcpy", "Memset"})
"""Runtime task names that are not in upper snake case."""
_RUNTIME_SHAPED = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")


def is_kernel_task(task_type: str | None, name: str) -> bool:
    """True for a device kernel or communication op; False for the runtime's own tasks."""
    task_type = task_type.strip() if task_type is not None else None
    if task_type in KERNEL_TASK_TYPES or task_type in COMMUNICATION_TASK_TYPES:
        return True
    if task_type is None or task_type in UNTYPED:
        return name not in RUNTIME_TASK_NAMES and _RUNTIME_SHAPED.fullmatch(name) is None
    return False


def kernel_mask(task_types: pa.Array | None, names: pa.Array) -> np.ndarray:
    """is_kernel_task over columns (a table of a million rows holds a handful of task types)."""
    n = len(names)
    if task_types is None:
        task_types = pa.nulls(n, pa.string())
    kinds = pc.fill_null(pc.utf8_trim_whitespace(task_types.cast(pa.string())), "")
    typed_ok = pc.is_in(kinds, pa.array(sorted(KERNEL_TASK_TYPES | COMMUNICATION_TASK_TYPES)))
    untyped = pc.is_in(kinds, pa.array(sorted(UNTYPED)))
    clean = pc.fill_null(names.cast(pa.string()), "")
    runtime = pc.or_(
        pc.match_substring_regex(clean, f"^(?:{_RUNTIME_SHAPED.pattern})$"),
        pc.is_in(clean, pa.array(sorted(RUNTIME_TASK_NAMES))),
    )
    keep = pc.or_(typed_ok, pc.and_(untyped, pc.invert(runtime)))
    return np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool)
