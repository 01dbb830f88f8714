"""The collectives of a cluster's op rows are told apart by codes, as the joined strings told them apart."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.analyze.cluster_comm import _collective_ids


def _joined(ops: pa.Table) -> np.ndarray:
    """The string key each row's collective had: step, name and communicator joined."""
    key = pc.binary_join_element_wise(
        pc.cast(ops.column("step"), pa.string()).fill_null(""),
        ops.column("name").fill_null(""),
        ops.column("group").fill_null(""),
        "\x1f",
    )
    return pc.dictionary_encode(key.combine_chunks()).indices.to_numpy()


def _same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(0, 3)),
        st.one_of(st.none(), st.sampled_from(["", "hcom_allReduce__1_1", "hcom_allReduce__1_2", "x"])),
        st.one_of(st.none(), st.sampled_from(["", "tp0", "pp0"])),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(rows, st.integers(1, 3))
def test_codes_tell_the_collectives_apart_as_the_strings_did(data: list[tuple], chunks: int) -> None:
    step = pa.array([r[0] for r in data], pa.int32())
    name = pa.array([r[1] for r in data], pa.string())
    group = pa.array([r[2] for r in data], pa.string())
    cut = len(data) // chunks
    table = pa.table({"step": step, "name": name, "group": group})
    table = pa.concat_tables([table.slice(i * cut, cut if i + 1 < chunks else None) for i in range(chunks)])
    ids = _collective_ids(table)
    assert len(ids) == table.num_rows
    assert _same_partition(ids, _joined(table))
