"""Hand-made bad traces: what `validate_trace` must find, and what the real trace_processor v52 reports for them.

Each case: the trace (events, or raw text), the findings expected (rule → count; every error/data_loss rule of
the report must be listed), and trace_processor's stats (error/data_loss ones, plus flow_end_without_start and
flow_step_without_start, which v52 files as info) — None when trace_processor refuses the file. Used by
test_bad_traces.py (ours) and test_tp_crosscheck.py (the real parser).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def X(name: str, ts: Any, dur: Any, pid: Any = 1, tid: Any = 10, **kw: Any) -> dict[str, Any]:
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": tid, **kw}


def flow(ph: str, ts: float, fid: Any = 1, tid: int = 10, **kw: Any) -> dict[str, Any]:
    return {"ph": ph, "id": fid, "name": "fl", "cat": "c", "ts": ts, "pid": 1, "tid": tid, **kw}


@dataclass
class Case:
    trace: list[Any] | dict[str, Any] | str
    findings: dict[str, int]
    tp_stats: dict[str, int] | None = field(default_factory=dict)
    """trace_processor's error/data_loss stats (+ the flow_*_without_start info stats); None = it refuses the trace."""

    def text(self) -> str:
        return self.trace if isinstance(self.trace, str) else json.dumps(self.trace)

    def write(self, directory: Path, name: str) -> Path:
        path = directory / f"{name}.json"
        path.write_text(self.text())
        return path


def _m(kind: str, pid: int = 1, tid: int | None = None, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "M", "name": kind, "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


CASES: dict[str, Case] = {
    "overlap": Case(
        [X("outer", 0, 10), X("overlap", 5, 10), X("inner", 1, 2)],
        {"overlapping_slices": 1},
        {"slice_drop_overlapping_complete_event": 1},
    ),
    "negative_dur": Case([X("neg", 0, -5), X("ok", 40, 5)], {"negative_dur": 1}),
    "no_ph": Case(
        [{"name": "noph", "ts": 0, "pid": 1, "tid": 1}, X("ok", 40, 5)],
        {"missing_ph": 1},
        {"json_tokenizer_failure": 1},
    ),
    "tid_zero_alone": Case(
        [X("a", 0, 10, pid=5, tid=0), _m("thread_name", pid=5, tid=0, name="zero")], {"tid_zero": 2}
    ),
    "tid_zero_merged": Case(
        [X("on tid 0", 0, 10, pid=5, tid=0), X("on tid 5", 20, 5, pid=5, tid=5)], {"threads_merged": 1}
    ),
    "pid_out_of_range": Case(
        [X("a", 0, 10, pid=4376751100, tid=1), X("b", 0, 10, pid=4376751101, tid=1)], {"pid_out_of_range": 2}
    ),
    "tid_out_of_range": Case([X("a", 0, 10, pid=7, tid=-3), X("b", 20, 10, pid=7, tid=7)], {"tid_out_of_range": 1}),
    "unclosed_begin": Case([{"ph": "B", "name": "a", "ts": 0, "pid": 1, "tid": 1}], {"unclosed_begin": 1}),
    "unmatched_end": Case(
        [{"ph": "E", "name": "b", "ts": 5, "pid": 1, "tid": 1}, X("a", 10, 1, tid=1)], {"unmatched_end": 1}
    ),
    "end_with_other_name": Case(
        [{"ph": "B", "name": "a", "ts": 0, "pid": 1, "tid": 1}, {"ph": "E", "name": "b", "ts": 5, "pid": 1, "tid": 1}],
        {"unmatched_end": 1, "unclosed_begin": 1},
    ),
    "misplaced_end": Case(
        [
            {"ph": "B", "name": "a", "ts": 0, "pid": 1, "tid": 1},
            {"ph": "B", "name": "b", "ts": 1, "pid": 1, "tid": 1},
            {"ph": "E", "name": "a", "ts": 5, "pid": 1, "tid": 1},
            X("z", 6, 1, tid=1),
        ],
        {"misplaced_end": 1},
        {"misplaced_end_event": 1},
    ),
    "flow_without_start": Case(
        [X("a", 0, 10), flow("f", 5, bp="e")], {"flow_end_without_start": 1}, {"flow_end_without_start": 1}
    ),
    "flow_no_enclosing_slice": Case(
        [X("a", 0, 10), flow("s", 5, tid=11), flow("f", 6, bp="e")],
        {"flow_no_enclosing_slice": 1, "flow_end_without_start": 1},
        {"flow_no_enclosing_slice": 1, "flow_end_without_start": 1},
    ),
    "flow_step_without_start": Case(
        [X("a", 0, 10), flow("t", 5)], {"flow_step_without_start": 1}, {"flow_step_without_start": 1}
    ),
    "flow_invalid_id": Case(
        [X("a", 0, 10), X("b", 20, 10), flow("s", 5, "0x10"), flow("f", 25, "10", bp="e"), flow("s", 6, "zz")],
        {"flow_invalid_id": 1},
        {"flow_invalid_id": 1},
    ),
    "flow_duplicate_id": Case(
        [X("a", 0, 10), X("b", 20, 10), flow("s", 5), flow("s", 22), flow("f", 25, bp="e")],
        {"flow_duplicate_id": 1},
        {"flow_duplicate_id": 1},
    ),
    "flow_end_unbound": Case([X("a", 0, 10), flow("s", 5), flow("f", 6, tid=11)], {"flow_end_unbound": 1}),
    "flow_end_from_slice_0": Case(
        [X("a", 0, 10), flow("f", 6, tid=11), X("b", 8, 2, tid=11)], {"flow_end_from_first_slice": 1}
    ),
    "flow_v2_without_direction": Case(
        [
            X("a", 0, 10, bind_id=7, flow_out=True),
            X("b", 20, 10, tid=11, bind_id=7, flow_in=True),
            X("c", 40, 5, bind_id=8),
        ],
        {"flow_without_direction": 1},
        {"flow_without_direction": 1},
    ),
    "flow_bound_to_ended_slice": Case(
        [X("a", 0, 10), flow("s", 50), X("b", 0, 100, tid=11), flow("f", 60, tid=11, bp="e")],
        {"flow_bound_to_ended_slice": 1},
    ),
    "counter_not_numeric": Case(
        [{"ph": "C", "name": "c", "ts": 0, "pid": 1, "args": {"v": "x", "w": True, "u": "3.5"}}],
        {"counter_value_not_numeric": 2},
        {"json_parser_failure": 2},
    ),
    "counter_without_values": Case(
        [{"ph": "C", "name": "c", "ts": 0, "pid": 1, "args": {}}, {"ph": "C", "name": "d", "ts": 0, "pid": 1}],
        {"counter_without_values": 2},
        {"json_parser_failure": 1},  # {} is silently empty; a missing args is a parser failure
    ),
    "missing_ts": Case(
        [{"name": "nots", "ph": "X", "dur": 1, "pid": 1, "tid": 1}, X("ok", 40, 5)],
        {"missing_ts": 1},
        {"json_tokenizer_failure": 1},
    ),
    "negative_ts": Case(
        [X("neg", -5, 10), X("ok", 40, 5)], {"negative_ts": 1}, {"trace_sorter_negative_timestamp_dropped": 1}
    ),
    "dur_not_a_number": Case(
        [X("a", 0, 10), X("b", 20, "abc"), X("c", 40, 5), X("d", 60, 5)],
        {"time_field_unreadable": 1},
        {"json_tokenizer_failure": 1},
    ),
    "dur_not_a_number_object": Case(
        {"traceEvents": [X("a", 0, 10), X("b", 20, None), X("c", 40, 5)]}, {"time_field_unreadable": 1}, None
    ),
    "ts_not_a_number": Case(
        [X("a", 0, 1), X("b", "12x", 1), X("c", 3, 1)], {"time_field_unreadable": 1}, {"json_tokenizer_failure": 1}
    ),
    "unsupported_ph": Case(
        [{"ph": "O", "name": "obj", "ts": 0, "pid": 1, "tid": 1, "id": "0x1"}, X("ok", 40, 5)], {"unsupported_ph": 1}
    ),
    "x_without_dur": Case(
        [X("a", 0, 10), {"ph": "X", "name": "b", "ts": 20, "pid": 1, "tid": 10}, X("c", 40, 5)],
        {"complete_without_dur": 1},
        {"json_parser_failure": 1},
    ),
    "instant_without_tid": Case(
        [{"ph": "i", "name": "i", "ts": 1, "pid": 1}, {"ph": "i", "name": "j", "ts": 1, "pid": 1, "tid": 2}],
        {"instant_without_track": 1},
        {"json_parser_failure": 1},
    ),
    "async": Case(
        [
            {"ph": "b", "name": "a", "cat": "x", "id": 1, "ts": 0, "pid": 1},
            {"ph": "e", "name": "a", "cat": "x", "id": 1, "ts": 5, "pid": 1},
            {"ph": "e", "name": "zz", "cat": "x", "id": 2, "ts": 6, "pid": 1},
            {"ph": "b", "name": "q", "cat": "x", "ts": 0, "pid": 1},
            {"ph": "b", "name": "q", "cat": "x", "id": 3, "ts": 0},
        ],
        {"async_without_id": 2, "async_unmatched_end": 1},
        {"json_parser_failure": 2},
    ),
    "metadata": Case(
        [
            _m("process_labels", labels="CPU"),
            _m("process_name", name=""),
            _m("thread_name", tid=3, name=5),
            X("a", 0, 1, tid=3),
        ],
        {"metadata_invalid": 2, "metadata_ignored": 1},
        {"json_parser_failure": 2},
    ),
    "event_not_object": Case([X("a", 0, 10), 5, X("c", 40, 5)], {"event_not_object": 1}, None),
    "string_pid": Case(
        [X("a", 0, 10, pid="Spans", tid="T1"), X("b", 0, 10, pid="Spans", tid=0)], {"string_pid_tid": 2}
    ),
    "string_timestamps": Case([X("a", "1704161511420306.491", "1.5")], {"string_timestamps": 1, "ts_precision": 1}),
    "display_time_unit": Case(
        {"traceEvents": [X("a", 0, 1)], "displayTimeUnit": "ns"}, {"display_time_unit_ignored": 1}
    ),
    "array_not_closed": Case(json.dumps([X("a", 0, 10), X("b", 20, 5)])[:-1] + ",\n", {"array_not_closed": 1}),
    "trailing_comma": Case(json.dumps({"traceEvents": [X("a", 0, 10)]})[:-2] + ",]}", {"trailing_comma": 1}),
    "empty_array": Case([], {"empty_array_refused": 1}, None),
    "empty_object": Case({"traceEvents": []}, {"empty_trace": 1}),
}
