"""Perfetto's field coercions, one by one (json_trace_tokenizer.cc CoerceToTs / CoerceToUint32)."""

from __future__ import annotations

import numpy as np

from atbprof.validate.columns import (
    BAD,
    MISSING,
    MISSING_VALUE,
    OK,
    OUT_OF_RANGE,
    STRING,
    build_table,
    id_column,
    llround,
    parse_json_number,
    time_column,
)


def test_llround_rounds_halfway_away_from_zero() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999999999999994, 2.4])
    assert llround(x).tolist() == [1, 2, 3, -1, -3, 0, 2]


def test_time_coercion_matches_trace_processor() -> None:
    vals = [3, 1.5, 1.0004, 0.0005, -0.0005, 1e3, "1704161511420306.491", "12", "12x", None, True, MISSING_VALUE]
    ns, state, _ = time_column(vals)
    assert ns[:8].tolist() == [3000, 1500, 1000, 1, -1, 1_000_000, 1704161511420306432, 12000]
    assert state.tolist() == [OK] * 8 + [BAD, BAD, BAD, MISSING]


def test_integer_timestamps_stay_exact_beyond_double_precision() -> None:
    ns, state, _ = time_column([2**60 // 1000 + 1, 1])
    assert ns.tolist() == [(2**60 // 1000 + 1) * 1000, 1000]
    assert state.tolist() == [OK, OK]


def test_pid_tid_coercion() -> None:
    strings: dict[str, int] = {}
    value, state, raw = id_column([5, 3.7, -1, 4376751100, "Spans", None, MISSING_VALUE, True], strings)
    assert value[:4].tolist() == [5, 3, 0, 0]
    assert state.tolist() == [OK, OK, OUT_OF_RANGE, OUT_OF_RANGE, STRING, MISSING, MISSING, MISSING]
    assert raw[2:4].tolist() == [-1, 4376751100]
    assert strings == {"Spans": 0}


def test_tid_zero_becomes_the_pid_unless_the_pid_is_zero_or_the_tid_a_string() -> None:
    events = [
        {"ph": "X", "pid": 5, "tid": 0},
        {"ph": "X", "pid": 5},
        {"ph": "X", "pid": 0, "tid": 0},
        {"ph": "X", "pid": 5, "tid": -3},
        {"ph": "X", "pid": 5, "tid": 9},
    ]
    assert build_table(events).tid.tolist() == [5, 5, 0, 5, 9]


def test_json_numbers_in_strings() -> None:
    assert parse_json_number("12") == 12
    assert parse_json_number("-1.5e3") == -1500.0
    for bad in ("12x", " 12", "0x10", "", "01", "1."):
        assert parse_json_number(bad) is None


def test_phase_is_the_first_character_and_names_are_strings() -> None:
    table = build_table([{"ph": "Xyz", "name": 5}, {"ph": ""}, {"ph": 7}, {"ph": "i", "name": "n", "cat": ""}])
    assert table.ph.tolist() == [ord("X"), 0, 0, ord("i")]
    assert [table.name_of(i) for i in range(4)] == [None, None, None, "n"]
    assert table.cat.tolist() == [-1, -1, -1, -1]
