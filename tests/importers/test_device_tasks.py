"""The kernel allowlist, on its own and in the columnar form the op-table importers use."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from atbprof.importers.device_tasks import KERNEL_TASK_TYPES, is_kernel_task, kernel_mask


@pytest.mark.parametrize(
    ("task_type", "name", "kernel"),
    [
        ("AI_VECTOR_CORE", "aclnnAdd_AddAiCore_Add", True),
        ("MIX_AIC", "aclnnFlashAttentionScore_FlashAttentionScore", True),
        ("KERNEL_AIVEC", "anything", True),  # the db export's runtime name for a vector kernel
        ("HCCL", "hcom_allReduce__1_0_1", True),
        ("DSA_SQE", "DSAGenBitMask", True),  # kernel_details lists these
        ("TASK_TIMEOUT_SET", "TASK_TIMEOUT_SET", False),
        ("EVENT_RECORD_SQE", "EVENT_RECORD", False),
        ("PCIE_DMA_SQE", "MEMCPY_ASYNC", False),
        ("Notify Wait", "Notify Wait", False),
        ("Other", "MEMCPY_ASYNC", False),
        ("Other", "Conv2D1", True),
        (None, "RmsNorm", True),
        ("N/A", "trans_TransData_0", True),  # Level0 kernel_details
        ("N/A", "Write Value", False),
        (None, "PROFILING_ENABLE", False),
    ],
)
def test_is_kernel_task(task_type: str | None, name: str, kernel: bool) -> None:
    assert is_kernel_task(task_type, name) is kernel


TYPES = st.sampled_from([None, "", "N/A", "Other", "EVENT_RECORD", "TASK_TIMEOUT_SET", *sorted(KERNEL_TASK_TYPES)])
NAMES = st.one_of(
    st.sampled_from(["MEMCPY_ASYNC", "Notify Wait", "RmsNorm", "Conv2D1", "A_B", "AB", "a_B", "SDMA"]),
    st.text(alphabet="AbZ_1 ", max_size=8),
)


@given(st.lists(st.tuples(TYPES, NAMES), max_size=30))
def test_the_columnar_mask_agrees_with_the_rule(rows: list[tuple[str | None, str]]) -> None:
    types = pa.array([t for t, _ in rows], pa.string())
    names = pa.array([n for _, n in rows], pa.string())
    assert kernel_mask(types, names).tolist() == [is_kernel_task(t, n) for t, n in rows]
