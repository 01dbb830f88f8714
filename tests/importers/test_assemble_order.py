"""The framework table's orders are np.lexsort's, found faster."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from atbprof.importers.assemble import _by_start

_SMALL = st.integers(0, 6)  # few values: many ties


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.int64, n, elements=st.one_of(_SMALL, st.integers(-(2**40), 2**40))),
            hnp.arrays(np.int64, n, elements=st.one_of(_SMALL, st.integers(0, 2**40))),
            hnp.arrays(np.int64, n, elements=_SMALL),
            st.permutations(range(n)),
        )
    )
)
def test_by_start_and_by_thread_are_lexsorts(arrays: tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]) -> None:
    start, dur, thread, perm = arrays
    index = np.asarray(perm, np.int64) * 3  # unique, any order
    rows = _by_start(start, dur, index)
    assert np.array_equal(rows, np.lexsort((index, -dur, start)))
    by_thread = rows[np.argsort(thread[rows], kind="stable")]
    assert np.array_equal(by_thread, np.lexsort((index, -dur, start, thread)))
