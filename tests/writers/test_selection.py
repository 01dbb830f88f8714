import numpy as np
import pytest

from atbprof.errors import ConfigError
from atbprof.writers.selection import BYTES_PER_OP, parse_ranges, select_trace


def test_parse_ranges() -> None:
    assert parse_ranges("0-3,10,20-", "k") == [(0, 3), (10, 10), (20, None)]
    for bad in ("3-1", "a", "-2", "1-x", ""):
        with pytest.raises(ConfigError, match="k = "):
            parse_ranges(bad, "k")


def test_default_cap_keeps_whole_steps_that_fit() -> None:
    per_step = [1000] + [400] * 99
    sel = select_trace(per_step, [900] + [360] * 99, 32, "eager", None, None, max_mb=2.0)
    fits = (2e6 - 1000 * BYTES_PER_OP["eager"]) // (400 * BYTES_PER_OP["eager"])
    assert fits == 2 and list(sel.steps) == [0, 1, 2]
    assert sel.auto_capped and sel.estimated_bytes <= 2e6 < sel.full_bytes
    # a first step larger than the budget is still traced (a trace with nothing in it helps no one)
    assert list(select_trace(per_step, per_step, 32, "eager", None, None, max_mb=0.5).steps) == [0]
    assert "more than output.trace_max_mb" in (sel.describe() or "")


def test_explicit_steps_and_layers() -> None:
    sel = select_trace([100] * 10, [90] * 10, 30, "graph", "0-1,8-", "0,29", max_mb=None)
    assert list(sel.steps) == [0, 1, 8, 9] and list(sel.layers) == [0, 29]  # type: ignore[arg-type]
    assert sel.estimated_bytes == 4 * (10 + 90 * 2 // 30) * BYTES_PER_OP["graph"]
    assert not sel.auto_capped


def test_everything_fits_no_note() -> None:
    sel = select_trace([10] * 3, [8] * 3, 2, "eager", None, None, max_mb=600)
    assert sel.describe() is None and np.array_equal(sel.steps, [0, 1, 2])
