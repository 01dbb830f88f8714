"""`atbprof validate`: would Perfetto import this Chrome JSON trace as written, or drop and mangle parts of it?

The rules are those of Perfetto's JSON importer (trace_processor: `json_trace_tokenizer.cc`,
`json_trace_parser.cc`, `slice_tracker.cc`, `flow_tracker.cc`, `trace_sorter.h`; v52–v58), re-implemented over
NumPy columns so any trace, ours or foreign, can be checked offline in seconds:

    report = validate_trace("trace.json.gz")   # or a run directory
    report.loses_data                          # True → exit 1
    render_validation(report, console)         # or validation_json(report) for --format json

Modules: `load` (file → events), `columns` (events → coerced NumPy columns), `rules` (per-event rules),
`nesting` (the per-thread slice stack), `flows` (flow binding), `catalog` (rule texts), `report` (results and
renderers), `validator` (the orchestration).
"""

from atbprof.validate.catalog import RULES, Rule
from atbprof.validate.report import (
    Finding,
    Severity,
    TraceSummary,
    ValidationReport,
    render_validation,
    validation_json,
)
from atbprof.validate.validator import validate_trace

__all__ = [
    "RULES",
    "Finding",
    "Rule",
    "Severity",
    "TraceSummary",
    "ValidationReport",
    "render_validation",
    "validate_trace",
    "validation_json",
]
