"""Runs of ours for the diff tests (simulated once per session, no trace) and the HTA TraceDiff pair."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from atbprof.importers.base import Profile
from tests.analyze.conftest import simulate

TRACES = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "traces"
HTA_CONTROL = TRACES / "hta_trace_diff_control.json.gz"
HTA_TEST = TRACES / "hta_trace_diff_test.json.gz"


@pytest.fixture(scope="session")
def diff_runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Profile]:
    """diff_runs(config, *overrides) -> the Profile of that run; runs live in one directory (`.parent`)."""
    cache: dict[tuple[str, ...], Profile] = {}
    root = tmp_path_factory.mktemp("diff-runs")

    def get(config: str, *overrides: str) -> Profile:
        key = (config, *overrides)
        if key not in cache:
            cache[key] = simulate(root / f"run{len(cache)}", config, *overrides)
        return cache[key]

    return get
