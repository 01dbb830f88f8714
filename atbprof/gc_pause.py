"""`gc_paused()`: no cyclic garbage collection while a JSON document of millions of small containers is parsed and
walked (full collections would find nothing to free and cost more than the parse). Used by the trace importers and
the trace validator."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
