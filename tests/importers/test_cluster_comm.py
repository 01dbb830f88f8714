"""A rank's communication.json / communication_matrix.json into tables: bad figures named, links summed as a
plain per-link loop would sum them."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atbprof.errors import InputError
from atbprof.importers.cluster_comm import json_tables

P = Path("/x/communication.json")
M = Path("/x/communication_matrix.json")


def _op(elapse: object = 1.0, size: object = 2.0) -> dict:
    return {
        "Communication Time Info": {"Start Timestamp(us)": 1.7e15, "Elapse Time(ms)": elapse, "Wait Time(ms)": 0.1},
        "Communication Bandwidth Info": {
            "HCCS": {"Transit Size(MB)": size, "Transit Time(ms)": 0.5, "Bandwidth(GB/s)": 4.0},
            "RDMA": {"Transit Size(MB)": 0, "Transit Time(ms)": 0, "Bandwidth(GB/s)": 0},
        },
    }


def test_ops_and_used_transports() -> None:
    doc = {"step1": {"collective": {"hcom_allReduce__1_1@tp": _op(), "Total Op Info": _op()}}}
    ops, bandwidth, links = json_tables(3, doc, {}, [], P, M)
    assert ops.to_pylist() == [
        {
            "rank": 3,
            "step": 1,
            "section": "collective",
            "name": "hcom_allReduce__1_1",
            "group": "tp",
            "start_us": 1.7e15,
            "elapse_ms": 1.0,
            "transit_ms": 0.0,
            "wait_ms": 0.1,
            "synchronization_ms": 0.0,
            "idle_ms": 0.0,
        }
    ]
    assert bandwidth.column("transport").to_pylist() == ["HCCS"]  # RDMA moved nothing: left out
    assert links.num_rows == 0


@pytest.mark.parametrize(
    ("op", "message"),
    [
        (_op(elapse="fast"), "/x/communication.json step1 hcom_x@tp Elapse Time(ms): 'fast' is not a number"),
        (_op(elapse=float("nan")), "/x/communication.json step1 hcom_x@tp Elapse Time(ms): nan is not a plausible"),
        (_op(size=[1]), "/x/communication.json step1 hcom_x@tp HCCS: [1] is not a number"),
        (_op(size=1e300), "/x/communication.json step1 hcom_x@tp HCCS: 1e+300 is not a plausible"),
        ("oops", "/x/communication.json step1 hcom_x@tp: expected an object, found str"),
    ],
)
def test_a_bad_figure_is_named(op: object, message: str) -> None:
    doc = {"step1": {"collective": {"hcom_y@tp": _op(), "hcom_x@tp": op}}}
    with pytest.raises(InputError) as err:
        json_tables(0, doc, {}, [], P, M)
    assert str(err.value).startswith(message)


def test_a_bad_link_is_named() -> None:
    matrix = {"step1": {"collective": {"allreduce@tp": {"0-1": {"Transit Size(MB)": 1}, "1-0": 7}}}}
    with pytest.raises(InputError, match=r"communication_matrix.json step1 allreduce@tp 1-0: expected an object"):
        json_tables(0, {}, matrix, [], P, M)


def test_links_without_indices_are_left_out_with_a_warning() -> None:
    link = {"Transport Type": "HCCS", "Transit Size(MB)": 1.0, "Transit Time(ms)": 1.0, "Bandwidth(GB/s)": 1.0}
    matrix = {"step1": {"collective": {"allreduce@tp": {"0-1": link, "a-b": link, "2.0-3": link}}}}
    warnings: list[str] = []
    _, _, links = json_tables(5, {}, matrix, warnings, P, M)
    assert [(r["src_local"], r["dst_local"]) for r in links.to_pylist()] == [(0, 1), (2, 3)]
    assert warnings == ["rank 5: 1 communication-matrix links without rank indices: left out"]


def test_torch_npu_summary_rows_count_only_their_totals() -> None:
    def link(size: float) -> dict:
        return {"Transport Type": "HCCS", "Transit Size(MB)": size, "Transit Time(ms)": 1.0, "Bandwidth(GB/s)": size}

    matrix = {
        "step1": {
            "collective": {
                "allreduce-top1@tp": {"0-1": link(5.0)},
                "allreduce-total@tp": {"0-1": link(9.0)},
            },
            "p2p": {"send@pp": {"0-1": link(2.0)}},
        }
    }
    _, _, links = json_tables(0, {}, matrix, [], P, M)
    assert sorted((r["section"], r["size_mb"]) for r in links.to_pylist()) == [("collective", 9.0), ("p2p", 2.0)]


LINK = st.fixed_dictionaries(
    {
        "Transport Type": st.sampled_from(["HCCS", "RDMA", "SIO"]),
        "Transit Size(MB)": st.floats(0, 1e6),
        "Transit Time(ms)": st.floats(0, 1e3),
        "Bandwidth(GB/s)": st.floats(0, 1e3),
    }
)
PAIRS = st.dictionaries(st.sampled_from(["0-1", "1-0", "0-2", "3-1"]), LINK, min_size=1, max_size=4)
MATRIX = st.dictionaries(
    st.sampled_from(["step1", "step2"]),
    st.fixed_dictionaries(
        {"collective": st.dictionaries(st.sampled_from(["a@tp", "b@tp", "c@dp", "d@dp"]), PAIRS, max_size=4)}
    ),
    max_size=2,
)


@settings(max_examples=150, deadline=None)
@given(MATRIX)
def test_links_are_the_per_link_sums(matrix: dict) -> None:
    """Each (step, section, group, src, dst, transport) row is the sum of its links, in key order, with the
    op's name where one op is the link's only one and the summed bandwidth otherwise."""
    expected: dict[tuple, list] = {}
    for step, sections in matrix.items():
        for kind, entries in sections.items():
            for key, pairs in entries.items():
                for pair, v in pairs.items():
                    src, dst = (int(x) for x in pair.split("-"))
                    k = (int(step[4:]), kind, key.split("@")[1], src, dst, v["Transport Type"])
                    acc = expected.setdefault(k, [key, 0.0, 0.0, v["Bandwidth(GB/s)"], 0])
                    acc[1] += v["Transit Size(MB)"]
                    acc[2] += v["Transit Time(ms)"]
                    acc[4] += 1
    _, _, links = json_tables(0, {}, matrix, [], P, M)
    got = {
        (r["step"], r["section"], r["group"], r["src_local"], r["dst_local"], r["transport"]): r
        for r in links.to_pylist()
    }
    assert list(got) == sorted(expected, key=lambda k: (f"step{k[0]}", *k[1:]))  # in key order (step as its key)
    for k, (name, size, time, bw, n) in expected.items():
        r = got[k]
        assert r["size_mb"] == pytest.approx(size) and r["time_ms"] == pytest.approx(time)
        assert r["name"] == (name if n == 1 else f"{n} ops")
        mean = min(size / time, 1e15) if time else 0.0  # a vanishing time: bounded, as every figure read is
        assert r["bandwidth_gbps"] == pytest.approx(bw if n == 1 else mean)
