"""Where a cluster's ranks are read by default: this process on a small machine until a pool pays."""

import os

import pytest

from atbprof.scale.pool import READ_POOL_MIN_RANKS, read_workers


def test_read_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert read_workers(None, 32) == 0  # measured slower with a pool on 2 cores
    assert read_workers(None, READ_POOL_MIN_RANKS) is None  # the pool's default from there
    assert read_workers(2, 32) == 2  # what the user asks for stands
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert read_workers(None, 32) is None
