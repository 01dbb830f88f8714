"""The alignment's row interning (diff/align.py `_unique_rows`) equals np.unique over rows, on both of its paths."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from atbprof.diff.align import _unique_rows

small = arrays(np.int64, st.tuples(st.integers(0, 60), st.integers(1, 8)), elements=st.integers(-3, 5))
wide = arrays(np.int64, st.tuples(st.integers(0, 60), st.just(8)), elements=st.integers(-(2**40), 2**40))


@settings(max_examples=200, deadline=None)
@given(st.one_of(small, wide))
def test_unique_rows_equals_numpy(rows: np.ndarray) -> None:
    uniq, first, inverse = _unique_rows(rows)
    want_uniq, want_first, want_inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    assert np.array_equal(uniq, want_uniq)
    assert np.array_equal(first, want_first)
    assert np.array_equal(inverse, want_inverse.reshape(-1))


def test_many_distinct_values_take_the_row_sort() -> None:
    """Eight columns of 300 distinct values each overflow 63 bits of mixed radix: np.unique over rows serves."""
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 300, size=(3000, 8))
    rows[:, :] = np.arange(3000)[:, None] % 300 * (np.arange(8) + 1)[None, :] + rows % 2
    uniq, first, inverse = _unique_rows(rows)
    assert np.array_equal(uniq[inverse], rows)
    assert np.array_equal(rows[first], uniq)
