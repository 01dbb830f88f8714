"""Invariants of `diff` on synthetic foreign profiles (Hypothesis): every op of a compared step is in exactly one
group, the rows partition the time, a profile against itself changes nothing, and an injected Add + RmsNorm ->
AddRmsNorm fusion is found as one fused row with the injected count."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.diff.api import diff
from atbprof.errors import InputError
from atbprof.importers.base import Profile
from atbprof.optable.schema import OPS_SCHEMA

TYPES = ["MatMulV2", "Mul", "Cast", "Transpose", "SoftmaxV2", "Add", "RmsNorm"]


def profile(steps: list[list[tuple[str, int]]], name: str) -> Profile:
    """An op table of back-to-back kernels on one stream: steps of (op type, duration ns)."""
    cols: dict[str, list[object]] = {"op_index": [], "step": [], "op_name": [], "op_type": [], "stream_id": []}
    cols |= {"task_start_ns": [], "task_dur_ns": []}
    t = 0
    for k, ops in enumerate(steps):
        for op_type, dur in ops:
            cols["op_index"].append(len(cols["op_index"]))
            cols["step"].append(k)
            cols["op_name"].append(op_type)
            cols["op_type"].append(op_type)
            cols["stream_id"].append(2)
            cols["task_start_ns"].append(t)
            cols["task_dur_ns"].append(dur)
            t += dur + 1000
    n = len(cols["op_index"])
    arrays = [pa.array(cols[f.name]).cast(f.type) if f.name in cols else pa.nulls(n, f.type) for f in OPS_SCHEMA]
    return Profile("kernel_details", name, pa.Table.from_arrays(arrays, schema=OPS_SCHEMA))


step_ops = st.lists(st.tuples(st.sampled_from(TYPES), st.integers(1000, 50_000)), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(st.lists(step_ops, min_size=1, max_size=4), st.data())
def test_groups_partition_the_ops_and_the_time(steps: list[list[tuple[str, int]]], data: st.DataObject) -> None:
    edited = []
    for ops in steps:
        ops = list(ops)
        for _ in range(data.draw(st.integers(0, 3))):
            if ops and data.draw(st.booleans()):
                del ops[data.draw(st.integers(0, len(ops) - 1))]
            else:
                ops.insert(data.draw(st.integers(0, len(ops))), (data.draw(st.sampled_from(TYPES)), 3000))
        edited.append(ops or [("Mul", 1000)])
    base, new = profile(steps, "a"), profile(edited, "b")
    if not {t for ops in steps for t, _ in ops} & {t for ops in edited for t, _ in ops}:
        with pytest.raises(InputError, match="no op type in common"):
            diff(base, new)
        return
    report = diff(base, new, top=100_000).report
    m = report.matching
    # every op is matched or, in a removed / added row, unmatched: never both, never neither
    assert m.base_matched_ops + m.base_unmatched_ops == base.ops.num_rows
    assert m.new_matched_ops + m.new_unmatched_ops == new.ops.num_rows
    if any(r.classification in ("removed", "added") for r in report.rows):
        assert m.base_unmatched_ops + m.new_unmatched_ops > 0  # never "unmatched 0" beside a removed row
    total = next(c for c in report.categories if c.name == "per-token total")
    # no host frames here: the step wall is the device span, which the rows (kernel + wait) partition
    rounding = 0.1 + 0.001 * len(report.rows)  # categories are rounded to 0.1 µs, rows to 1 ns
    assert sum(r.base_us for r in report.rows) == pytest.approx(total.base_ms * 1e3, abs=rounding)
    assert sum(r.new_us for r in report.rows) == pytest.approx(total.new_ms * 1e3, abs=rounding)
    same = diff(base, base).report
    assert all(r.delta_us == 0 and r.classification == "unchanged" for r in same.rows)


@settings(max_examples=30, deadline=None)
@given(step_ops, st.integers(1, 5), st.integers(2, 4))
def test_an_injected_fusion_is_one_fused_row(ops: list[tuple[str, int]], fusions: int, n_steps: int) -> None:
    ops = [o for o in ops if o[0] not in ("Add", "RmsNorm")] or [("Mul", 2000)]
    before = {(i * 7) % len(ops) for i in range(fusions)}  # the ops an Add + RmsNorm / AddRmsNorm precedes
    base_step: list[tuple[str, int]] = []
    new_step: list[tuple[str, int]] = []
    for i, op in enumerate(ops):
        if i in before:
            base_step += [("Add", 4000), ("RmsNorm", 6000)]
            new_step.append(("AddRmsNorm", 7000))
        base_step.append(op)
        new_step.append(op)
    fusions = len(before)
    report = diff(profile([base_step] * n_steps, "a"), profile([new_step] * n_steps, "b"), top=1000).report
    fused = [r for r in report.rows if r.classification == "fused"]
    assert [(r.base_types, r.new_types, r.instances_per_step) for r in fused] == [
        (["Add", "RmsNorm"], ["AddRmsNorm"], fusions)
    ]
    assert not [r for r in report.rows if r.classification in ("added", "removed")]
