"""The rules: id → (severity, what Perfetto does, how to fix it).

Severities: `error` — Perfetto does not import the event (or the trace); `data_loss` — it imports it but drops,
moves, merges, hides or mis-links something; `warning` — imported as written but fragile or out of spec;
`info` — a leniency or an ignored field, nothing lost. Stats names in parentheses are trace_processor's.
"""

from __future__ import annotations

from dataclasses import dataclass

from atbprof.validate.report import Severity


@dataclass(frozen=True)
class Rule:
    severity: Severity
    message: str
    fix: str


RULES: dict[str, Rule] = {
    # --- error: not imported -----------------------------------------------------------------------------------
    "event_not_object": Rule(
        "error",
        "an element of the event array is not a JSON object: Perfetto aborts the whole import",
        "write every element of the event array as an object {...}",
    ),
    "time_field_unreadable": Rule(
        "error",
        "ts/dur/tts/tdur present but not a number or numeric string: Perfetto (v52) stops reading the trace at "
        "this event (json_tokenizer_failure)",
        "write times as JSON numbers of µs (or numeric strings); leave the key out rather than null",
    ),
    "missing_ph": Rule(
        "error",
        "no ph (or not a non-empty string): the event is dropped (json_tokenizer_failure)",
        'give every event a phase, e.g. "ph": "X"',
    ),
    "missing_ts": Rule(
        "error",
        "no ts on a non-metadata event: dropped (json_tokenizer_failure)",
        "give every non-M event a ts in µs",
    ),
    "negative_ts": Rule(
        "error",
        "negative ts: dropped by the sorter (trace_sorter_negative_timestamp_dropped)",
        "rebase timestamps to a non-negative origin (e.g. subtract the trace start)",
    ),
    "unsupported_ph": Rule(
        "error",
        "a phase Perfetto's JSON importer does not handle: silently ignored",
        "use B/E/X/i/C/b/e/n/s/t/f/M (object snapshots, memory dumps, mark and clock-sync events are not imported)",
    ),
    "complete_without_dur": Rule(
        "error", "an X event without dur: dropped (json_parser_failure)", 'give every "X" a "dur" in µs'
    ),
    "counter_without_values": Rule(
        "error",
        "a C event whose args are missing, not an object or empty: no sample is imported (json_parser_failure "
        "unless args is {})",
        'put the series values in args, e.g. {"ph": "C", "name": "mem", "args": {"bytes": 1024}}',
    ),
    "counter_value_not_numeric": Rule(
        "error",
        "a C arg that is not a number or numeric string (null, bool, object, text): that sample is dropped "
        "(json_parser_failure)",
        "keep only numeric values in a counter's args; put labels in the event name",
    ),
    "async_without_id": Rule(
        "error",
        "a b/e/n event without pid or without id/id2: dropped (json_parser_failure)",
        'give async events a pid and an "id" (or "id2": {"local"|"global": ...})',
    ),
    "instant_without_track": Rule(
        "error",
        'an instant without the id its scope needs (tid for "s": "t" or no scope, pid for "s": "p"), or with an '
        "unknown scope: dropped (json_parser_failure)",
        'give thread instants a tid, process instants ("s": "p") a pid',
    ),
    "flow_invalid_id": Rule(
        "error",
        "a flow event (s/t/f) whose id is missing, not an integer or not a hex string: dropped (flow_invalid_id)",
        'give flow events an integer "id" (string ids are parsed as hexadecimal)',
    ),
    "metadata_invalid": Rule(
        "error",
        "thread_name/process_name without a non-empty string args.name, or *_sort_index without a numeric "
        "args.sort_index: ignored (json_parser_failure)",
        'write {"ph": "M", "name": "thread_name", "args": {"name": "..."}} / {"args": {"sort_index": 3}}',
    ),
    # --- data_loss: imported, but dropped/moved/merged/hidden/mis-linked --------------------------------------
    "overlapping_slices": Rule(
        "data_loss",
        "X slices that partially overlap an open slice on the same thread: dropped by Perfetto v51–v56 "
        "(slice_drop_overlapping_complete_event), moved to an overflow track since v57 "
        "(slice_spill_overlapping_complete_event)",
        "make slices on one thread nest or be disjoint after rounding to ns; put concurrent work on separate "
        "tids (one per stream), or use async events",
    ),
    "negative_dur": Rule(
        "data_loss",
        "imported with a negative duration, which the UI does not draw",
        "emit dur = end − start ≥ 0",
    ),
    "pid_out_of_range": Rule(
        "data_loss",
        "pid outside 0..4294967295: Perfetto coerces it to 0, so these events leave their process and merge into pid 0",
        "keep pids in the uint32 range (remap large ids, e.g. to small integers with a process_name)",
    ),
    "tid_out_of_range": Rule(
        "data_loss",
        "tid outside 0..4294967295: coerced to 0, then to the pid — the events land on the process's main thread",
        "keep tids in the uint32 range",
    ),
    "threads_merged": Rule(
        "data_loss",
        "different tids end up on one thread track (tid 0 and out-of-range tids become tid = pid): their slices "
        "nest into each other and one thread_name overwrites the other",
        "never use tid 0 (or out-of-range tids) for a thread other than the process's main thread (tid = pid)",
    ),
    "unmatched_end": Rule(
        "data_loss",
        "an E that closes nothing: no B open on its thread with the same name and cat (null matches anything); "
        "ignored, and the B it was meant for stays open",
        "emit E with the same name and cat as its B (or without name/cat), on the same pid/tid",
    ),
    "unclosed_begin": Rule(
        "data_loss",
        'a B never closed by an E: imported with dur −1 ("Did not end")',
        "emit a matching E for every B (or use X events)",
    ),
    "misplaced_end": Rule(
        "data_loss",
        "an E (or slice) after a B/E that closed out of order: Perfetto truncates the still-open children to their "
        "parent's end (misplaced_end_event)",
        "close B/E pairs in LIFO order on each thread",
    ),
    "flow_no_enclosing_slice": Rule(
        "data_loss",
        "a flow event with no slice open on its thread when Perfetto reads it: the arrow is lost "
        "(flow_no_enclosing_slice)",
        "emit flow events inside (at or after the start of) a slice on the same pid/tid",
    ),
    "flow_end_without_start": Rule(
        "data_loss",
        "an f with no earlier s of the same id, cat and name: the arrow is lost (flow_end_without_start)",
        "emit the s before (at an earlier or equal ts than) its f, with the same id, cat and name",
    ),
    "flow_end_from_first_slice": Rule(
        "data_loss",
        'an f without "bp": "e" and no earlier s of the same id, cat and name: Perfetto silently draws the arrow '
        "from the first slice of the trace",
        'emit the s before its f, with the same id, cat and name; add "bp": "e" to bind the f to its slice',
    ),
    "flow_step_without_start": Rule(
        "data_loss",
        "a t with no earlier s of the same id, cat and name: the step is lost (flow_step_without_start)",
        "emit the s before its t steps, with the same id, cat and name",
    ),
    "flow_duplicate_id": Rule(
        "data_loss",
        "a second s with an id, cat and name already started: ignored (flow_duplicate_id), later f link to the "
        "first source",
        "use a fresh id per flow",
    ),
    "flow_end_unbound": Rule(
        "data_loss",
        'an f without "bp": "e" and no later slice on its thread to bind to: the arrow is lost',
        'add "bp": "e" to bind the f to the slice enclosing it, or emit it before the slice it points to',
    ),
    "flow_without_direction": Rule(
        "data_loss",
        "a bind_id without flow_in/flow_out (JSON booleans): no arrow (flow_without_direction)",
        'add "flow_out": true on the source slice and "flow_in": true on the sink',
    ),
    "async_unmatched_end": Rule(
        "data_loss",
        "an e with no open b of the same name, cat and id: ignored",
        "emit e with the same name, cat, id (and pid) as its b",
    ),
    # --- warning ----------------------------------------------------------------------------------------------
    "flow_bound_to_ended_slice": Rule(
        "warning",
        "a flow event read when the last slice on its thread had already ended: Perfetto binds the arrow to that "
        "earlier slice",
        "emit flow events at a ts inside the slice they belong to (after it starts, before it ends)",
    ),
    "tid_zero": Rule(
        "warning",
        "tid 0 on a thread event: Perfetto shows it as the process's main thread (tid := pid)",
        "use a non-zero tid (atbprof uses 65536 for stream 0)",
    ),
    "string_pid_tid": Rule(
        "warning",
        "pid/tid given as a string: Perfetto interns it as a synthetic id named by the string (not in the spec)",
        "use integer pids/tids and name them with process_name/thread_name metadata",
    ),
    "async_unclosed_begin": Rule(
        "warning", "a b without its e: shown as not ended", "emit an e for every b (same name, cat, id)"
    ),
    "ts_precision": Rule(
        "warning",
        "fractional µs timestamps this large keep only double precision: Perfetto quantises them (to 256 ns at "
        "epoch µs), which can create or hide overlaps",
        "emit trace-relative timestamps, or integer µs / ns-exact values",
    ),
    "empty_trace": Rule("warning", "the trace has no events", "check the profiler's output settings"),
    "empty_array_refused": Rule(
        "error",
        "an empty bare array: Perfetto cannot tell its format and refuses it ('Unknown trace type provided')",
        'write at least one event, or use {"traceEvents": []}',
    ),
    # --- info -------------------------------------------------------------------------------------------------
    "metadata_ignored": Rule(
        "info",
        "M events Perfetto ignores (it honours only process_name, thread_name, process_sort_index, thread_sort_index)",
        "nothing to fix; these names carry no meaning in Perfetto",
    ),
    "display_time_unit_ignored": Rule(
        "info",
        "displayTimeUnit is ignored: ts/dur are always µs (json_display_time_unit)",
        "nothing to fix",
    ),
    "array_not_closed": Rule(
        "info",
        "the bare event array has no closing ']' (allowed by the format; Perfetto reads it)",
        "close the array when the writer finishes",
    ),
    "trailing_comma": Rule(
        "info", "trailing commas before ']' (Perfetto tolerates them; strict JSON parsers do not)", "drop them"
    ),
    "string_timestamps": Rule(
        "info", "ts/dur written as numeric strings: Perfetto parses them like numbers", "nothing to fix"
    ),
    "tid_missing": Rule(
        "info", "thread events without tid: Perfetto puts them on the process's main thread (tid := pid)", "-"
    ),
    "pid_missing": Rule("info", "events without pid: Perfetto puts them in pid 0", "give events a pid"),
    "slice_without_name": Rule("info", 'slices without a name: shown as "[No name]"', "name every slice"),
    "system_trace_events": Rule(
        "info", "systemTraceEvents (systrace text) present: imported by Perfetto, not checked here", "-"
    ),
    "v8_profile_events": Rule("info", "P (V8 CPU profile) events: imported by Perfetto, not checked here", "-"),
}
