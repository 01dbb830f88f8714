"""msprof shape strings: parsed exactly, absent optional inputs kept as holes, damaged ones refused with the part."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from atbprof.predict.shapes import ShapeError, TensorShape, parse_tensors


def test_real_flash_attention_row() -> None:
    shapes = '"4096,1,2048;4096,1,1024;4096,1,1024;;;;2048,2048;;;;;;;;"'
    types = "DT_BF16;DT_BF16;DT_BF16;DT_BF16;UINT8;DT_BF16;BOOL;INT64;INT64;INT64;INT64;INT64;FLOAT;FLOAT;FLOAT"
    tensors = parse_tensors(shapes, types)
    assert tensors[0] == TensorShape((4096, 1, 2048), "DT_BF16")
    assert tensors[6] == TensorShape((2048, 2048), "BOOL")
    assert tensors[0] is not None and tensors[0].nbytes == 4096 * 2048 * 2
    # an empty slot with a dtype is a scalar (1 element); an empty slot with an undefined dtype is absent
    assert tensors[3] == TensorShape((), "DT_BF16") and tensors[3].nbytes == 2
    assert parse_tensors("4096,1;;", "DT_BF16;DT_UNDEFINED;FLOAT")[1] is None


@pytest.mark.parametrize(
    ("shapes", "types", "part"),
    [
        ("4096,x", "FLOAT", "not comma-separated integers"),
        ("-1,4", "FLOAT", "out of range"),
        ("1099511627777", "INT8", "out of range"),
        ("4,4", "COMPLEX1024", "data type 'COMPLEX1024'"),
    ],
)
def test_damaged_shapes_name_the_part(shapes: str, types: str, part: str) -> None:
    with pytest.raises(ShapeError, match=part):
        parse_tensors(shapes, types)


def test_missing_shapes_are_no_tensors() -> None:
    assert parse_tensors(None, None) == [] and parse_tensors("N/A", "N/A") == []


@given(st.lists(st.lists(st.integers(0, 512), min_size=1, max_size=4), min_size=1, max_size=6))
def test_round_trip(dims: list[list[int]]) -> None:
    text = ";".join(",".join(map(str, d)) for d in dims)
    tensors = parse_tensors(text, ";".join("DT_BF16" for _ in dims))
    assert [t.dims if t else None for t in tensors] == [tuple(d) for d in dims]
