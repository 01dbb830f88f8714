"""What every public importer shares: the collector paused while it runs, and a safety net for the contract
"a damaged input raises InputError, nothing else"."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa

from atbprof.errors import InputError
from atbprof.gc_pause import gc_paused

T = TypeVar("T")
_UNEXPECTED = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, pa.ArrowException)
UNEXPECTED = "damaged in a way atbprof's checks did not anticipate"
"""Marks messages of the safety net (the tests check that no real sample nor fuzzed input needs it)."""


def importer(load: Callable[..., T]) -> Callable[..., T]:
    """Wrap a `load_*(path)` importer: gc paused (JSON imports allocate millions of small objects, collection passes
    would cost more than the parse), OSError and stray exceptions turned into an InputError naming the file."""

    @functools.wraps(load)
    def wrapper(path: Path, **options: object) -> T:
        path = Path(path)
        with gc_paused():
            try:
                return load(path, **options)
            except InputError:
                raise
            except OSError as err:
                raise InputError(f"{path}: cannot be read ({err})") from None
            except _UNEXPECTED as err:  # the importers check what they read: this is a safety net
                raise InputError(
                    f"{path}: {UNEXPECTED} ({type(err).__name__}: {err}); re-export it "
                    "(if it opens in the Ascend / PyTorch tools, please report this as an atbprof bug)"
                ) from err

    return wrapper
