"""CANN releases in the fusion catalogue: which fused kernel and torch_npu call a profile's release would use.

A release is compared by its major.minor number ("8.0.RC1", "8.0.0" and "8.0" are all 8.0): the catalogue's renames
happened at a minor release. The version comes from `atbprof analyze --cann-version`, else from the profile
(`cann_version` in profiler_metadata.json, which a capture records with torch_npu's `prof.add_metadata`)."""

from __future__ import annotations

import re
from functools import cache
from typing import NamedTuple

from atbprof.errors import ConfigError

_RELEASE = re.compile(r"^\s*(\d{1,3})\.(\d{1,3})(?:\.(?:RC)?\d{1,4}(?:\.\w{1,16})?)?\s*$", re.IGNORECASE)


def release(text: str) -> tuple[int, int] | None:
    """(major, minor) of a CANN version string, or None when it is not one."""
    m = _RELEASE.match(text) if len(text) <= 64 else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def checked_release(text: str, where: str) -> tuple[int, int]:
    """release(), or a ConfigError naming `where` and what a version looks like."""
    found = release(text)
    if found is None:
        raise ConfigError(f"{where}: {text[:64]!r} is not a CANN version (like 8.0.RC3, 8.1.RC1 or 8.5.0)")
    return found


class _Rename(NamedTuple):
    since: tuple[int, int] | None  # the first release with the new name (None: every one before `before`)
    before: tuple[int, int] | None  # the first release without it (None: every one from `since`)
    fused_as: str
    api: tuple[str, ...]


@cache
def _renames() -> dict[str, list[_Rename]]:
    """The catalogue's by_version entries by the fused kernel they rename, their releases parsed."""
    from atbprof.fusion.catalogue import fusion_catalogue

    out: dict[str, list[_Rename]] = {}
    for row in fusion_catalogue().fusions:
        for r in row.by_version:
            since = checked_release(r.since, f"{row.name}.by_version.since") if r.since else None
            before = checked_release(r.before, f"{row.name}.by_version.before") if r.before else None
            out.setdefault(r.fused, []).append(_Rename(since, before, r.fused_as, r.api))
    return out


def for_release(fused_as: str, api: str | None, version: tuple[int, int] | None) -> tuple[str, str | None]:
    """The fused kernel and call a finding names on `version` (unchanged without one, or without a rename)."""
    if version is None:
        return fused_as, api
    for since, before, name, calls in _renames().get(fused_as, []):
        if (since is None or version >= since) and (before is None or version < before):
            return name, " / ".join(f"torch_npu.{c}" for c in calls) if calls else api
    return fused_as, api
