"""The optional C helpers (`native_src/`: the Kineto scanner and the framework-op nesting), or None.

The extension is an optional build (pyproject.toml): without a C compiler atbprof still installs, and the importers
take their pure-Python paths, which give the same tables (tests/importers/test_native.py) more slowly.
"""

from __future__ import annotations

from types import ModuleType

native: ModuleType | None
try:
    from atbprof.importers import _native as native  # type: ignore[attr-defined,no-redef]
except ImportError:  # pragma: no cover - a build without a compiler
    native = None
