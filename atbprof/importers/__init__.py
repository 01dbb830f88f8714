"""Importers: one per input format, all producing a `Profile` (see base.py)."""

from atbprof.importers.base import FRAMEWORK_SCHEMA, Profile

__all__ = ["FRAMEWORK_SCHEMA", "Profile"]
