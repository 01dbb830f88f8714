"""Start-up cost of the command line.

pyarrow probes for pandas the first time it converts a Python list (`pa.array([...])`), and importing pandas costs
~0.15-0.2 s: half the wall time of `atbprof analyze` on a small profile. atbprof never hands pyarrow pandas objects,
so the command line lets that one probe find no pandas; pandas itself stays importable afterwards (only pyarrow's
pandas interop, unused here, is off in the CLI process). Library users are not affected: this runs from `main()`.
"""

from __future__ import annotations

import gc
import importlib.abc
import sys


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def skip_pyarrow_pandas_probe() -> None:
    """Run pyarrow's pandas probe now, with pandas hidden (no-op if pandas is already loaded)."""
    if "pandas" in sys.modules:
        return
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        import pyarrow as pa

        pa.array([0])
    finally:
        sys.meta_path.remove(finder)


def fewer_collections() -> None:
    """Collect cyclic garbage every 200,000 allocations instead of 700, as mypy does: importing typer, pydantic,
    numpy and pyarrow allocates long-lived objects, and the ~130 collections they trigger cost ~0.03 s (8% of
    `atbprof analyze` on the Qwen3 sample, scripts/bench_analyze.py). Reference counting still frees the rest."""
    gc.set_threshold(200_000, 30, 30)


def system_allocator() -> None:
    """Arrow's buffers from the C library's allocator rather than its bundled mimalloc, unless the user chose one
    (ARROW_DEFAULT_MEMORY_POOL). Measured on a 4.1 M-op run (scripts/bench_scale.py): `analyze` 6.6 -> 4.1-4.6 s
    and a lower peak, `diff` of two runs 1.55 -> 1.1 s; mimalloc gives large freed blocks back to the system and
    faults them in again on the next allocation, glibc reuses them. `run` is unchanged."""
    import os

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def rank_by_rank_allocator() -> None:
    """For a job that analyses many large tables one after the other (the ranks of a multi-device run): Arrow's
    buffers from its bundled jemalloc where the wheel has it (Linux), unless the user chose a pool. Whole processes
    side by side, a 20.5 M-op 8-rank run: 20.1 s / 1,955 MiB against 21.9 s / 2,061 MiB with the C library's
    allocator, whose heap fragments as each rank's arrays are freed (handing that back costs page faults when the
    next rank allocates); with ARROW_DEFAULT_MEMORY_POOL=jemalloc set before start (Arrow's own internal buffers
    too) 20.0 s / 1,768 MiB. Not everywhere: a 1 M- or 4.1 M-op single run and the 4-rank real cluster were 2-3 %
    slower with it (4.1 M ops: 4.07 against 3.99 s, for 708 against 797 MiB). Buffers already allocated are freed
    by the pool that allocated them."""
    import contextlib
    import os

    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    with contextlib.suppress(NotImplementedError, pa.ArrowException):  # built without it (macOS, Windows wheels)
        pa.set_memory_pool(pa.jemalloc_memory_pool())
