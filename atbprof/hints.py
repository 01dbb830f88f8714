"""Commands atbprof prints for the user to run next: shell-quoted (they work when pasted, whatever the paths hold),
with paths shown relative to the working directory where they lie inside it, and the reason as a shell comment."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=@,-]+")


def shown(path: str | os.PathLike[str]) -> str:
    """`path` as a user would type it here: relative to the working directory when inside it, else normalised."""
    text = os.fspath(path)
    norm = os.path.normpath(text)
    if not os.path.isabs(norm):
        return norm
    try:
        rel = os.path.relpath(norm)
    except ValueError:  # another drive (Windows)
        return norm
    return norm if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def command(*words: str | os.PathLike[str], why: str | None = None) -> str:
    """One command line: every word quoted for a POSIX shell, paths shown as `shown` does; `why` as a comment."""
    line = shlex.join(shown(w) if isinstance(w, Path) else str(w) for w in words)
    return f"{line}   # {why}" if why else line


def file_name(text: str) -> str:
    """A name for a generated file or directory: no spaces, slashes or shell characters (runs of them -> '-')."""
    return _UNSAFE.sub("-", text).strip("-.") or "atbprof"
