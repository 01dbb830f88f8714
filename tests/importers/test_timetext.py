"""µs values to ns: the native scanner's float64 column takes a path of its own that must agree with the general one."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from atbprof.importers.timetext import floats_to_ns

_DURATIONS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e16, 1e16),  # around the bound of what counts as a time (9e15 µs)
    st.sampled_from([0.0005, 0.0015, -0.0005, 2.5e-4, 8.999999e15, 9e15, -9e15, 9.000001e15]),
)


@given(st.lists(_DURATIONS, max_size=30))
def test_an_array_of_floats_gives_what_the_list_gives(values: list[float]) -> None:
    """NaN (the scanner's absent value) is missing, not bad; an infinity or a value past the bound is bad."""
    fast = floats_to_ns(np.array(values, np.float64))
    general = floats_to_ns(values)
    for a, b in zip(fast, general, strict=True):
        assert a.dtype == b.dtype and a.tolist() == b.tolist()
