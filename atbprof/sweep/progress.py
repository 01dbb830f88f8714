"""Where an unfinished sweep keeps its points: `.<out name>.atbprof-sweep/` beside the output, one file per point
done (written whole: temp file + rename), so an interrupted sweep goes on where it stopped when it is run again.

The directory is the sweep's (its `progress.json` holds the digest of the work: the base config, fixed overrides
and points); a sweep of another digest refuses it unless --force discards it. One sweep writes it at a time (an
exclusive lock on `progress.json`)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from atbprof.errors import InputError
from atbprof.writers.base import atomic_path

PROGRESS = "progress.json"


def progress_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.atbprof-sweep"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(path.read_bytes()[: 1 << 24])
    except (OSError, orjson.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) and doc.get("generator") == "atbprof" else None


@contextmanager
def open_progress(out: Path, digest: str, points: int, force: bool) -> Iterator[Progress]:
    """The progress directory of the sweep writing `out`, made or resumed (locked while the block runs)."""
    d = progress_dir(out)
    if d.is_symlink():
        raise InputError(
            f"{d} is a symbolic link; a sweep keeps its progress in a directory it makes beside --out: remove the "
            "link, or choose another --out"
        )
    if d.exists():
        doc = _read(d / PROGRESS)
        if doc is None or doc.get("kind") != "sweep-progress":
            raise InputError(
                f"{d} is in the way of the sweep's progress and is not atbprof's: move it, or choose another --out"
            )
        if doc.get("digest") != digest:
            if not force:
                raise InputError(
                    f"{d} holds the unfinished points of another sweep (another base config, fixed overrides or "
                    f"points: {doc.get('points')} points, {len(_done_files(d))} done); run that sweep again to "
                    "finish it, pass --force to discard it, or choose another --out"
                )
            with _locked(d):
                pass
            shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    (d / "points").mkdir(exist_ok=True)
    with _locked(d):
        if not (d / PROGRESS).exists():
            doc = {"generator": "atbprof", "kind": "sweep-progress", "digest": digest, "points": points}
            with atomic_path(d / PROGRESS) as tmp:
                tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
        yield Progress(d)


@contextmanager
def _locked(d: Path) -> Iterator[None]:
    fd = os.open(d / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(
                f"{d}: another atbprof sweep is writing this sweep; wait for it, or choose another --out"
            ) from None
        yield
    finally:
        os.close(fd)


def _done_files(d: Path) -> list[Path]:
    return sorted((d / "points").glob("*.json"))


def record_outcome(path: Path, outcome: dict[str, Any]) -> None:
    """One point's outcome, written whole (temp file + rename): a sweep resumed later trusts it."""
    doc = {"generator": "atbprof", "outcome": outcome}
    with atomic_path(path) as tmp:
        tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))


class Progress:
    def __init__(self, root: Path) -> None:
        self.root = root

    def done(self, with_runs: bool = False) -> dict[int, dict[str, Any]]:
        """The points already done (index -> outcome); a damaged file is not done (it runs again), nor, with
        `with_runs`, a point that ran but whose kept run is not there whole (it runs again)."""
        out: dict[int, dict[str, Any]] = {}
        for f in _done_files(self.root):
            doc = _read(f)
            if doc is not None and isinstance(doc.get("outcome"), dict):
                with contextlib.suppress(ValueError, TypeError):
                    index = int(f.stem)
                    if index != doc["outcome"].get("point"):
                        continue  # a file renamed by hand: not trusted
                    if with_runs and doc["outcome"].get("summary") is not None and not self._run_whole(index):
                        continue
                    out[index] = doc["outcome"]
        return out

    def _run_whole(self, index: int) -> bool:
        from atbprof.outputs.ownership import read_marker

        run = self.run_dir(index)
        return run.is_dir() and read_marker(run) is not None and (run / "run.json").is_file()

    def record(self, outcome: dict[str, Any]) -> None:
        record_outcome(self.point_file(int(outcome["point"])), outcome)

    def point_file(self, index: int) -> Path:
        return self.root / "points" / f"{index:07d}.json"

    def run_dir(self, index: int) -> Path:
        return self.root / "runs" / f"point-{index:04d}"

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
