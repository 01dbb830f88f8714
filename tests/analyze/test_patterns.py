"""Patterns as data: the built-in file, user extensions, errors, gap tolerance and group boundaries."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from atbprof.analyze import load_patterns
from atbprof.analyze.detect import detect_kernels, same_tensor
from atbprof.errors import ConfigError
from atbprof.optable.schema import OPS_SCHEMA

RMS_CHAIN = ["Cast", "Pows", "ReduceMean", "Add", "Rsqrt", "Mul", "Cast", "Mul"]


def ops(types: list[str], steps: list[int] | None = None, streams: list[int] | None = None) -> pa.Table:
    """A minimal op table: back-to-back 1 µs kernels, shapes unknown."""
    n = len(types)
    cols: dict[str, list[object]] = {f.name: [None] * n for f in OPS_SCHEMA}
    cols["op_index"] = list(range(n))
    cols["op_name"] = list[object](types)
    cols["op_type"] = list[object](types)
    cols["task_start_ns"] = [1_000 * i for i in range(n)]
    cols["task_dur_ns"] = [1_000] * n
    cols["step"] = list[object](steps or [1] * n)
    cols["stream_id"] = list[object](streams or [2] * n)
    return pa.Table.from_pydict(cols, schema=OPS_SCHEMA)


def found(table: pa.Table, patterns_file: str | None = None) -> list[tuple[str, list[int]]]:
    out = detect_kernels(table, load_patterns(patterns_file))
    return list(zip(out.column("kind").to_pylist(), out.column("op_indices").to_pylist(), strict=True))


def test_builtin_patterns_compile_with_one_symbol_per_class() -> None:
    p = load_patterns()
    assert len(set(p.kernel.symbols.values())) == len(p.kernel.symbols)
    assert {cp.spec.kind for cp in p.kernel.patterns} == {
        "decomposed_rmsnorm",
        "decomposed_layernorm",
        "add_norm",
        "norm_matmul",
        "fused_norm",
        "fused_op",  # the fusion catalogue's fused kernels
        "unfused_op",  # and its other fusions' unfused sequences
    }
    assert p.kernel.class_of("RmsNormGrad") is None  # backward kernels are not norms
    assert p.kernel.class_of("FusedAddRmsNormMatMul") == "NormMatMul"


@pytest.mark.parametrize(
    "chain",
    [
        RMS_CHAIN,
        ["Cast", "Square", "ReduceMeanD", "Add", "Rsqrt", "Mul", "Cast", "Mul"],  # mstt torch_npu.npu_rms_norm
        ["Cast", "Square", "MemSet", "ReduceMean", "Add", "Rsqrt", "Mul", "Cast", "Mul"],  # atomic clean inside
        ["Cast", "Square", "ReduceMeanD", "Add", "Rsqrt", "Cast", "Cast", "Mul", "Cast", "Cast", "Mul", "Cast"],
        ["Pows", "ReduceMean", "Adds", "Rsqrt", "Mul", "Mul"],  # already fp32: no casts
    ],
)
def test_decomposed_rmsnorm_variants(chain: list[str]) -> None:
    table = ops(["MatMulV2", *chain, "MatMulV2"])
    n = len(chain)
    # and the MatMul after it: the Norm->MatMul that follows once the chain is one kernel
    assert found(table) == [("decomposed_rmsnorm", list(range(1, n + 1))), ("norm_matmul", [n, n + 1])]


def test_a_match_never_starts_with_a_gap_op_and_takes_no_cast_of_the_next_chain() -> None:
    table = ops(["MemSet", *RMS_CHAIN, *RMS_CHAIN])
    assert found(table) == [("decomposed_rmsnorm", list(range(1, 9))), ("decomposed_rmsnorm", list(range(9, 17)))]


def test_matches_do_not_cross_steps_or_streams() -> None:
    types = RMS_CHAIN * 2
    assert found(ops(types, steps=[1] * 4 + [2] * 12)) == [("decomposed_rmsnorm", list(range(8, 16)))]
    streams = [2] * 8 + [2, 2, 2, 3, 3, 3, 3, 3]
    assert found(ops(types, streams=streams)) == [("decomposed_rmsnorm", list(range(8)))]


def test_rows_out_of_order_are_matched_in_stream_order() -> None:
    table = ops(["MatMulV2", *RMS_CHAIN])
    shuffled = table.take(pa.array([5, 0, 8, 3, 1, 7, 2, 6, 4]))
    assert found(shuffled) == [("decomposed_rmsnorm", list(range(1, 9)))]


def test_add_norm_needs_the_add_to_feed_the_norm() -> None:
    table = ops(["Add", "RmsNorm", "MatMulV2"])
    shapes = {"output_shapes": ["4,8", "4,8;4,1", "4,16"], "input_shapes": ["4,8;4,8", "4,8;8", "4,8;16,8"]}
    same = table
    for name, values in shapes.items():
        same = same.set_column(same.schema.get_field_index(name), name, pa.array(values).dictionary_encode())
    assert [k for k, _ in found(same)] == ["add_norm", "norm_matmul", "fused_norm"]
    other = same.set_column(
        same.schema.get_field_index("output_shapes"),
        "output_shapes",
        pa.array(["4,9", "4,8", "4,16"]).dictionary_encode(),
    )
    assert [k for k, _ in found(other)] == ["norm_matmul", "fused_norm"]
    # no shapes at all (Level0 profiles): adjacency is all there is, and the evidence says so
    assert [k for k, _ in found(table)] == ["add_norm", "norm_matmul", "fused_norm"]


def test_same_tensor_allows_a_view() -> None:
    assert same_tensor((4096, 1, 1024), (4096, 1024))
    assert not same_tensor((4096, 1, 1024), (1024, 4096))
    assert not same_tensor(None, (1,))


def test_a_user_file_adds_classes_and_patterns_and_replaces_by_name(tmp_path: Path) -> None:
    user = tmp_path / "my.yaml"
    user.write_text(
        """
kernel:
  classes:
    Gelu: [Gelu, FastGelu]
  patterns:
    - {name: gelu-rmsnorm, kind: add_norm, regex: "<Gelu><RmsNorm>", fused_as: GeluRmsNorm}
    - {name: fused-norm, kind: fused_norm, regex: "<LayerNorm>"}
""",
        encoding="utf-8",
    )
    table = ops(["FastGelu", "RmsNorm", "LayerNormV3"])
    # a replaced pattern keeps its place in the order; new ones come last
    assert found(table, str(user)) == [("fused_norm", [2]), ("add_norm", [0, 1])]
    assert load_patterns(str(user)).source == f"built-in patterns + {user}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{name: x, kind: fused_norm, regex: "<Nope>"}', "unknown class <Nope>"),
        ('{name: x, kind: fused_norm, regex: "<Cast>", gap: [Cast]}', "both a gap / between class and a token"),
        ('{name: x, kind: fused_norm, regex: "<Cast>("}', "not a valid regex"),
        ('{name: x, kind: fused_norm, regex: "<Cast>?"}', "matches an empty op sequence"),
        ('{name: x, kind: unfused, regex: "<Cast>"}', "kernel.patterns.0.kind"),
    ],
)
def test_bad_user_patterns_are_config_errors(tmp_path: Path, text: str, message: str) -> None:
    user = tmp_path / "bad.yaml"
    user.write_text(f"kernel:\n  patterns:\n    - {text}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_patterns(str(user))


def test_a_missing_patterns_file_names_the_option() -> None:
    with pytest.raises(ConfigError, match=r"--patterns: nope\.yaml: no such file"):
        load_patterns("nope.yaml")


def test_required_tokens_are_the_ones_every_match_contains() -> None:
    from atbprof.analyze.patterns import required_tokens

    assert required_tokens("<Mul>?(<Slice><Neg>|<Neg>)<Concat><Mul><Mul>*<Add>{0,2}<A|B>") == [
        ("Concat",), ("Mul",), ("A", "B"),
    ]  # fmt: skip
    assert required_tokens("<Add><RmsNorm>|<AddRmsNorm>") == []  # a top-level alternative: nothing is certain


TOLERANT = [
    ("Mul Slice MemSet Neg Slice ConcatD TransData Mul Add", "RotaryPositionEmbedding"),
    ("Swish Cast MatMulV2 Mul", "SwiGlu"),
    ("ScatterUpdate TransData ScatterUpdate", "ReshapeAndCache"),
    ("BatchMatMulV2 Mul Add Cast MemSet SoftmaxV2 Cast BatchMatMulV2", "FusedInferAttentionScore"),
    (
        "GatherElements Less MaskedFill SoftmaxV2 MemSet Cumsum LessEqual MaskedFill ScatterElements",
        "ApplyTopKTopPWithSorted",
    ),
    ("Cast SoftmaxV2 TransData TopKV2", "MoeGatingTopKSoftmax"),
    ("NonZero GatherV2 MatMulV2 Swish MatMulV2 Mul TransData MatMulV2 Index Mul InplaceIndexAdd", "GroupedMatmul"),
]


@pytest.mark.parametrize(("text", "fused_as"), TOLERANT)
def test_the_catalogues_unfused_sequences_tolerate_memset_transdata_and_casts_between(text: str, fused_as: str) -> None:
    """CANN inserts atomic cleans (MemSet) and format conversions (TransData) between kernels; a cast may sit inside
    a sequence whose tokens do not include one. They are members of the match, never its start."""
    sequence = text.split()
    table = ops(["Relu", "MemSet", *sequence, "Relu"])
    out = detect_kernels(table, load_patterns())
    hits = [
        (fa, ix)
        for k, fa, ix in zip(
            out["kind"].to_pylist(), out["fused_as"].to_pylist(), out["op_indices"].to_pylist(), strict=True
        )
        if k == "unfused_op"
    ]
    between = [i for i, t in enumerate(sequence, start=2) if t in ("MemSet", "TransData", "Cast")]
    assert [fa for fa, _ in hits] == [fused_as]
    members = hits[0][1]
    assert members[0] == 2 and set(between) <= set(members)  # the MemSet in front of the sequence is not one
    assert (4 in members) is (fused_as != "SwiGlu")  # the up projection between Swish and Mul is not a member


def test_first_match_is_fnmatch_in_order() -> None:
    """The set + combined-regex matcher names the class fnmatchcase, glob by glob in order, would."""
    import fnmatch

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from atbprof.analyze.patterns import _first_match

    p = load_patterns(None)
    levels = (p.kernel.classes, p.framework.classes, p.categories)
    globs = sorted({g for d in levels for v in d.values() for g in v})

    def plain(d: dict[str, tuple[str, ...]], t: str) -> str | None:
        return next((n for n, gs in d.items() if any(fnmatch.fnmatchcase(t, g) for g in gs)), None)

    for g in globs:  # every glob's own text, and its wildcards filled in
        for t in (g, g.replace("*", "Xy").replace("?", "Q")):
            assert all(_first_match(d, t) == plain(d, t) for d in levels), t

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from(globs), st.text(alphabet="aZ_:.0", max_size=4), st.booleans())
    def check(g: str, extra: str, front: bool) -> None:
        t = extra + g.replace("*", extra) if front else g.replace("*", extra) + extra
        assert all(_first_match(d, t) == plain(d, t) for d in levels)

    check()
