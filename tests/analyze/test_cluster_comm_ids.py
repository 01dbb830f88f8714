"""The collectives of a cluster's op rows, added rank by rank (importers/cluster_ops.py), are told apart by codes
as the joined strings of the whole table told them apart; their sums are the whole table's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.importers.cluster_ops import OP_SUM_KEYS, OP_SUMS, OpsReducer
from atbprof.importers.cluster_tables import OPS_SCHEMA


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
        st.sampled_from(["collective", "collective", "p2p"]),
        st.one_of(st.none(), st.floats(0, 10)),
    ),
    max_size=60,
)


def _table(data: list[tuple], ranks: int) -> pa.Table:
    n = len(data)
    rank = sorted(i % ranks for i in range(n))  # the rows of each rank together, in rank order
    columns = {
        "rank": pa.array(rank, pa.int32()),
        "step": pa.array([r[0] for r in data], pa.int32()),
        "section": pa.array([r[3] for r in data]),
        "name": pa.array([r[1] for r in data], pa.string()),
        "group": pa.array([r[2] for r in data], pa.string()),
    }
    return pa.table(
        {
            f.name: columns.get(f.name, pa.array([r[4] for r in data], pa.float64()) if f.name == "wait_ms" else None)
            if f.name in columns or f.name == "wait_ms"
            else pa.array(np.arange(n, dtype=np.float64))
            for f in OPS_SCHEMA
        },
        schema=OPS_SCHEMA,
    )


@settings(max_examples=200, deadline=None)
@given(rows, st.integers(1, 4))
def test_codes_tell_the_collectives_apart_as_the_strings_did(data: list[tuple], ranks: int) -> None:
    table = _table(data, ranks)
    reducer = OpsReducer()
    for r in range(ranks):  # each rank's rows alone, as a run's ranks are read
        reducer.add(table.filter(pc.equal(table.column("rank"), r)))
    got = reducer.collectives()
    coll = table.filter(pc.equal(table.column("section"), "collective"))
    assert len(got.rank) == coll.num_rows
    assert got.rank.tolist() == coll.column("rank").to_pylist()
    assert got.wait_ms.tolist() == pc.fill_null(coll.column("wait_ms"), 0.0).to_pylist()
    assert _same_partition(got.ids(), _joined(coll))
    whole = table.group_by(OP_SUM_KEYS, use_threads=False).aggregate(OP_SUMS)
    keys = [(k, "ascending") for k in OP_SUM_KEYS]
    assert reducer.sums().sort_by(keys).equals(whole.sort_by(keys))  # the same sums (in another order)


def test_keys_beyond_one_integer_are_numbered_by_distinct_rows() -> None:
    """Steps spread over the int32 range with many names and communicators: the packed key would overflow."""
    n = 3000
    data = [(-(2**31) + i * 1_431_655, f"op{i % 1500}", f"g{i % 1100}", "collective", 1.0) for i in range(n)]
    data += data[:50]  # the same collectives again on another rank
    table = _table(data, 1)
    reducer = OpsReducer()
    reducer.add(table)
    got = reducer.collectives()
    assert _same_partition(got.ids(), _joined(table))


def test_no_rows() -> None:
    reducer = OpsReducer()
    assert reducer.sums().num_rows == 0 and len(reducer.collectives().ids()) == 0
    reducer.add(OPS_SCHEMA.empty_table())
    assert reducer.sums().num_rows == 0 and len(reducer.collectives().ids()) == 0
