"""Dictionary arrays made from codes a reader already has, exactly as `pc.dictionary_encode` of their texts.

The op table's names are dictionary columns. A reader that holds its rows as codes into a list of texts (the native
Kineto scanner interns every string) can hand them over as a dictionary array without building a string per row
and hashing it again: only the distinct texts are hashed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def canonical_dictionary(arr: pa.DictionaryArray) -> pa.DictionaryArray:
    """What `pc.dictionary_encode(arr.cast(pa.string()))` gives: each distinct text once, in the order of its first
    row, int32 indices, nulls as null indices. Entries of `arr.dictionary` no row uses are dropped and equal ones
    merged (a scanner may hold one text spelled two ways)."""
    indices = np.asarray(arr.indices.to_numpy(zero_copy_only=False))
    valid = ~np.asarray(arr.indices.is_null().to_numpy(zero_copy_only=False), bool)
    rows = indices[valid].astype(np.int64)
    used, first = np.unique(rows, return_index=True)  # the entries rows use, and the first row of each
    merged = pc.dictionary_encode(arr.dictionary.take(pa.array(used)))
    text_of = np.asarray(merged.indices.to_numpy(zero_copy_only=False), np.int64)  # entry -> distinct text
    first_row = np.full(len(merged.dictionary), len(rows), np.int64)
    np.minimum.at(first_row, text_of, first)
    order = np.argsort(first_row, kind="stable")  # the distinct texts by their first row
    rank = np.empty(len(order), np.int32)
    rank[order] = np.arange(len(order), dtype=np.int32)
    out = np.zeros(len(indices), np.int32)
    out[valid] = rank[text_of[np.searchsorted(used, rows)]]
    codes = pa.array(out, pa.int32(), mask=None if valid.all() else ~valid)
    return pa.DictionaryArray.from_arrays(codes, merged.dictionary.take(pa.array(order)))
