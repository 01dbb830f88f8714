"""`atbprof.analyze`, `atbprof.diff`, `atbprof.sweep` and `atbprof.predict` are both subpackages and the API
functions of the same names: Python binds a subpackage to its parent's attribute whenever it is imported, so a
plain function of that name in atbprof/__init__ would be replaced by the package the first time anything imported
it. The package itself is made callable instead: calling it calls its entry function (its `entry` module)."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any


class CallablePackage(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__dict__["__entry__"](*args, **kwargs)


def make_callable(name: str, entry: Callable[..., Any]) -> None:
    """Make the package `name` callable as `entry` (with its signature and docstring for help())."""
    module = sys.modules[name]
    module.__dict__["__entry__"] = entry
    module.__class__ = CallablePackage
