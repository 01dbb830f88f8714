"""Importers: one per input format, all producing a `Profile` (see base.py); `load_profile` picks the importer."""

from atbprof.importers.base import FRAMEWORK_SCHEMA, STEP_FRAMES_SCHEMA, Profile
from atbprof.importers.detect import ACCEPTED, load_profile

__all__ = ["ACCEPTED", "FRAMEWORK_SCHEMA", "STEP_FRAMES_SCHEMA", "Profile", "load_profile"]
