"""canonical_dictionary gives exactly what dictionary_encode of the texts gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

from atbprof.importers.coded import canonical_dictionary


@given(
    st.lists(st.sampled_from(["a", "b", "ab", "", "é", "a"]), min_size=1, max_size=8),  # repeats: one text twice
    st.lists(st.one_of(st.none(), st.integers(0, 7)), max_size=30),
)
def test_the_same_array_as_dictionary_encode(dictionary: list[str], picks: list[int | None]) -> None:
    indices = [None if p is None else p % len(dictionary) for p in picks]
    arr = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(dictionary, pa.string()))
    want = pc.dictionary_encode(arr.cast(pa.string()))
    got = canonical_dictionary(arr)
    assert got.type == want.type
    assert got.dictionary.equals(want.dictionary) and got.indices.equals(want.indices)
