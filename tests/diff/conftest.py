"""The diff tests use the analyzer tests' runs of ours (simulated once per session) and the HTA TraceDiff pair."""

from __future__ import annotations

from pathlib import Path

from tests.analyze.conftest import runs as diff_runs  # noqa: F401  (a fixture, shared with the analyzer tests)

TRACES = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "traces"
HTA_CONTROL = TRACES / "hta_trace_diff_control.json.gz"
HTA_TEST = TRACES / "hta_trace_diff_test.json.gz"
