"""atbprof: see what operator fusion buys LLaMA inference on Ascend NPUs (and on GPUs).

The Python API (atbprof/api.py; docs/api.md): `load`, `analyze`, `diff`, `simulate`, `sweep`, `predict` and
`load_target`, each returning the typed result its command renders (`.to_dict()` is the command's JSON). They load
on first use, so `import atbprof` stays cheap."""

from __future__ import annotations

import importlib
from typing import Any

from atbprof.version import __version__

__all__ = ["__version__", "analyze", "diff", "load", "load_target", "predict", "simulate", "sweep"]

_FUNCTIONS = ("load", "simulate", "load_target")
_CALLABLE_PACKAGES = ("analyze", "diff", "sweep", "predict")  # see atbprof/_callable.py


def __getattr__(name: str) -> Any:
    if name in _FUNCTIONS:
        from atbprof import api

        return getattr(api, name)
    if name in _CALLABLE_PACKAGES:
        return importlib.import_module(f"atbprof.{name}")
    raise AttributeError(f"module 'atbprof' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
