"""`distinct` gives what `np.unique` gives, for every dtype it is handed."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from atbprof.arrays import distinct

_DTYPES = st.sampled_from([np.int8, np.int32, np.int64, np.uint16, np.uint64, np.bool_, np.float64])


@given(hnp.arrays(_DTYPES, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=40)))
def test_distinct_is_np_unique(values: np.ndarray) -> None:
    want = np.unique(values)
    got = distinct(values)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_distinct_of_a_list_and_of_large_values() -> None:
    assert distinct([3, 1, 3, 2]).tolist() == [1, 2, 3]
    big = np.array([2**63 - 1, -(2**63), 0, 2**63 - 1], dtype=np.int64)
    assert distinct(big).tolist() == [-(2**63), 0, 2**63 - 1]
