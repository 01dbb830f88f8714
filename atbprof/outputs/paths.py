"""Checks of an output path, made before any work: what may be written there, and what --force may replace."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from atbprof.errors import InputError, OutputExistsError
from atbprof.outputs.ownership import OutputKind, file_is_ours, foreign_entries

_WHAT = {
    "run": "run directory",
    "export": "export",
    "diff-trace": "diff trace",
    "device-spec": "device spec",
    "cluster-tables": "cluster-tables directory",
    "cluster-trace": "cluster trace",
    "sweep": "sweep directory",
    "plots": "plots directory",
    "report": "report",
    "kernels": "kernel table",
}


def default_run_dir(output_dir: str | None, name: str) -> Path:
    """Where `atbprof run` writes when no --out is given: output.dir, else traces/<name>."""
    return Path(output_dir) if output_dir else Path("traces") / name


def absolute(path: Path) -> Path:
    """`path` made absolute through what exists of it (symlinked parents resolved), its own name kept."""
    return Path(path).parent.resolve() / Path(path).name


def _check_name(out: Path, option: str, noun: str, example: str) -> None:
    name = Path(out).name
    if name in ("", ".", ".."):
        raise InputError(
            f"{option} {out}: names no new {noun} (it ends in {name or str(out)!r}); "
            f"give a new name, e.g. {option} {example}"
        )
    if len(os.fsencode(name)) > 200:  # room for the temp-name prefix and suffix below NAME_MAX (255)
        raise InputError(f"{option}: the name {name[:40]}... is {len(os.fsencode(name))} bytes; use at most 200")


def _check_overlap(target: Path, option: str, out: Path, inputs: Sequence[Path]) -> None:
    cwd = Path.cwd().resolve()
    if cwd.is_relative_to(target):
        raise InputError(
            f"{option} {out} is the current directory or one above it; atbprof writes a directory of its own: "
            "name a new one, e.g. traces/my-run"
        )
    for given in inputs:
        src = Path(given).resolve()
        if target == src or src.is_relative_to(target) or target.is_relative_to(src):
            raise InputError(
                f"{option} {out} overlaps the input {given}; atbprof never writes over or into its inputs: "
                "write elsewhere"
            )


def check_output_dir(
    out: Path, kind: OutputKind, *, force: bool, inputs: Sequence[Path] = (), option: str = "--out"
) -> Path:
    """The absolute directory to write for `out`, or the reason it may not be written (InputError: the path is
    unusable; OutputExistsError: something is there that atbprof will not replace)."""
    out = Path(out)
    _check_name(out, option, "directory", "traces/my-run")
    target = absolute(out)
    _check_overlap(target, option, out, inputs)
    if target.is_symlink():
        raise OutputExistsError(
            f"{out} is a symbolic link; atbprof replaces only directories it wrote: remove the link or choose "
            f"another {option}"
        )
    if not target.exists():
        return target
    if not target.is_dir():
        raise OutputExistsError(f"{out} exists and is not a directory; remove it or choose another {option}")
    if not force:
        raise OutputExistsError(f"{out} already exists; pass --force to replace it or {option} to write elsewhere")
    foreign = foreign_entries(target, kind)
    if foreign is None:
        raise OutputExistsError(
            f"{out} is not an atbprof {_WHAT[kind]}, so --force will not replace it (atbprof replaces only what it "
            f"wrote); choose another {option}, or remove it yourself if you mean it"
        )
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputExistsError(
            f"{out} holds files atbprof did not write ({shown}); --force would delete them: move them out or "
            f"choose another {option}"
        )
    return target


def check_output_file(
    out: Path, kind: OutputKind, *, force: bool, inputs: Sequence[Path] = (), option: str = "--trace"
) -> Path:
    """The absolute file to write for `out`, or the reason it may not be written (as `check_output_dir`)."""
    out = Path(out)
    if out.is_dir() or str(out).endswith(("/", os.sep)):
        raise InputError(f"{option} {out} is a directory; give the file a name, e.g. {out / 'combined.json.gz'}")
    _check_name(out, option, "file", "combined.json.gz")
    target = absolute(out)
    _check_overlap(target, option, out, inputs)
    if target.is_symlink():
        raise OutputExistsError(f"{out} is a symbolic link; remove it or choose another {option}")
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target
    if not stat.S_ISREG(mode):
        raise OutputExistsError(f"{out} exists and is not a regular file; choose another {option}")
    if not force:
        raise OutputExistsError(f"{out} exists; pass --force to overwrite it")
    if not file_is_ours(target):
        raise OutputExistsError(
            f"{out} is not a {_WHAT[kind]} atbprof wrote, so --force will not overwrite it; choose another "
            f"{option}, or remove it yourself if you mean it"
        )
    return target
