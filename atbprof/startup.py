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
