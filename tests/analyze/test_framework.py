"""Framework-level (aten) detection: only the outermost framework op of a call counts."""

from __future__ import annotations

import pyarrow as pa

from atbprof.analyze import analyze, load_patterns
from atbprof.analyze.detect import detect_framework, outermost_ops
from atbprof.importers.base import FRAMEWORK_SCHEMA, Profile
from atbprof.optable.schema import OPS_SCHEMA

# (name, depth, tid); every op lasts 10 µs, children inside their parent, siblings one after another
Spec = list[tuple[str, int, int]]

HF_RMSNORM: Spec = [
    ("ProfilerStep#1", 0, 1),
    ("aten::to", 1, 1),
    ("aten::_to_copy", 2, 1),
    ("aten::copy_", 3, 1),
    ("aten::pow", 1, 1),
    ("aten::mean", 1, 1),
    ("aten::add", 1, 1),
    ("aten::rsqrt", 1, 1),
    ("aten::mul", 1, 1),
    ("aten::to", 1, 1),
    ("aten::_to_copy", 2, 1),
    ("aten::mul", 1, 1),
    ("aten::linear", 1, 1),
    ("aten::matmul", 2, 1),
]
FUSED_RMSNORM: Spec = [
    ("ProfilerStep#1", 0, 1),
    ("aten::rms_norm", 1, 1),  # its composite implementation: none of this is a decomposed norm
    ("aten::pow", 2, 1),
    ("aten::mean", 2, 1),
    ("aten::add", 2, 1),
    ("aten::rsqrt", 2, 1),
    ("aten::mul", 2, 1),
    ("aten::mul", 2, 1),
]
ADD_LAYERNORM: Spec = [
    ("ProfilerStep#1", 0, 1),
    ("aten::add", 1, 1),
    ("aten::layer_norm", 1, 1),
    ("aten::native_layer_norm", 2, 1),
]


def framework_table(spec: Spec) -> pa.Table:
    rows: list[dict[str, object]] = []
    stack: list[int] = []
    clock = 0
    for i, (name, depth, tid) in enumerate(spec):
        del stack[depth:]
        rows.append(
            {
                "index": i,
                "name": name,
                "start_ns": clock,
                "dur_ns": 10_000 * (len(spec) - i) if depth == 0 else 10_000,
                "pid": 7,
                "tid": tid,
                "depth": depth,
                "parent": stack[-1] if stack else None,
                "step": 1,
                "input_shapes": None,
            }
        )
        stack.append(i)
        clock += 1_000 if i + 1 < len(spec) and spec[i + 1][1] > depth else 11_000
    return pa.Table.from_pylist(rows, schema=FRAMEWORK_SCHEMA)


def kinds(table: pa.Table) -> list[tuple[str, str, list[int]]]:
    return list(
        zip(
            table.column("kind").to_pylist(),
            table.column("fused_as").to_pylist(),
            table.column("op_indices").to_pylist(),
            strict=True,
        )
    )


def test_hf_rmsnorm_at_aten_level_is_one_decomposed_chain_of_outermost_calls() -> None:
    found = detect_framework(framework_table(HF_RMSNORM), load_patterns())
    assert kinds(found) == [("decomposed_rmsnorm", "torch_npu.npu_rms_norm", [1, 4, 5, 6, 7, 8, 9, 11])]


def test_children_of_a_fused_framework_op_are_not_a_decomposed_norm() -> None:
    found = detect_framework(framework_table(FUSED_RMSNORM), load_patterns())
    assert kinds(found) == [("fused_norm", "aten::rms_norm", [1])]
    assert outermost_ops(framework_table(FUSED_RMSNORM)).column("op_type").to_pylist() == ["aten::rms_norm"]


def test_add_then_layer_norm_is_an_add_norm_opportunity() -> None:
    found = detect_framework(framework_table(ADD_LAYERNORM), load_patterns())
    assert kinds(found) == [
        ("add_norm", "torch_npu.npu_add_layer_norm", [1, 2]),
        ("fused_norm", "aten::layer_norm", [2]),
    ]


def test_a_chain_split_over_two_threads_does_not_match() -> None:
    split = [(name, depth, 1 if i < 6 else 2) for i, (name, depth, _) in enumerate(HF_RMSNORM)]
    found = detect_framework(framework_table(split), load_patterns())
    assert found.num_rows == 0


def test_framework_only_profile_is_analyzed_and_its_host_time_estimated() -> None:
    profile = Profile("trace_view", "t.json", OPS_SCHEMA.empty_table(), framework_table(HF_RMSNORM), None, {})
    report = analyze(profile)
    (finding,) = report.findings
    assert (finding.kind, finding.level, finding.count) == ("decomposed_rmsnorm", "framework", 1)
    assert report.has_unfused
    # a fused call costs about its longest member: the other seven 10 µs calls (and the gaps between them) go
    assert finding.est_saving_us > 70
    assert report.whatif.total_saving_us == finding.est_saving_us
