"""Staged writes: a temp path beside the output, renamed in only when complete; stale temp paths cleaned up.

Names: `.<name>.atbprof-<pid>-<random>.tmp` (being written) and `.<name>.atbprof-<pid>-<random>.old` (the
previous output set aside while the new one is renamed in). A path whose pid is no longer alive (or belongs to a
process started after the path was last touched: the pid was reused) is stale: a `.tmp` is deleted, an `.old` is
put back when its output is missing (the replacement never arrived) and deleted otherwise.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from atbprof.outputs.ownership import MARKER, OutputKind, marker_bytes

_STAGED = re.compile(r"^\.(?P<name>.+)\.atbprof-(?P<pid>\d+)-[A-Za-z0-9_]+\.(?P<state>tmp|old)$")
_REUSE_SLACK_S = 5.0


def _prefix(final: Path) -> str:
    return f".{final.name}.atbprof-{os.getpid()}-"


def _process_start_s(pid: int) -> float | None:
    """When process `pid` started (epoch seconds; inf for a zombie: it is gone), from /proc; None without /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # after the command name
        boot = Path("/proc/stat").read_text().splitlines()
        btime = next(int(line.split()[1]) for line in boot if line.startswith("btime "))
        if fields[0] in ("Z", "X"):  # killed, not yet reaped by its parent
            return float("inf")
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of proc(5)
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def owner_alive(pid: int, path: Path) -> bool:
    """Whether the process that made `path` still runs."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    except OverflowError:
        return False
    started = _process_start_s(pid)
    if started is None:
        return True
    try:
        touched = path.lstat().st_mtime
    except OSError:
        return True
    return started <= touched + _REUSE_SLACK_S


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def clean_stale(parent: Path) -> list[str]:
    """Remove (or put back) the stale staged paths of atbprof in `parent`; what was done, one line each."""
    done: list[str] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return done
    for entry in entries:
        m = _STAGED.match(entry.name)
        if m is None:
            continue
        path = Path(entry.path)
        if owner_alive(int(m["pid"]), path):
            continue
        final = path.with_name(m["name"])
        if m["state"] == "old" and not os.path.lexists(final):
            with contextlib.suppress(OSError):
                os.rename(path, final)
                done.append(f"put back {final.name} (set aside by an interrupted replacement)")
                continue
        _remove(path)
        done.append(f"removed {entry.name} (left by an interrupted atbprof, pid {m['pid']})")
    return done


_DEFERRED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@dataclass
class _Held:
    """Staged writes holding signals back on the main thread (nested), and the first signal that came meanwhile."""

    depth: int = 0
    pending: int | None = None


_HELD = _Held()


def defer_signal(signum: int) -> bool:
    """For a signal handler (it runs on the main thread): True when a staged write holds signals back, the signal
    then being delivered at its release. Blocking the signal in the main thread is not enough: the kernel gives a
    process-wide signal to another thread (Arrow's, a writer's) when the main one blocks it, and Python still runs
    the handler on the main thread at once."""
    if _HELD.depth > 0:
        _HELD.pending = _HELD.pending or signum
        return True
    return False


class _Deferred:
    """Ctrl-C / SIGTERM / SIGHUP held back from `hold()` to `release()` (a pending one is delivered then): a temp
    path created but not yet covered by its cleanup, or an output set aside but not yet replaced, would otherwise
    be left behind. Only the main thread receives signals; elsewhere this does nothing. The signals are blocked for
    the main thread, and the CLI's handlers also hold back what reaches them meanwhile (`defer_signal`)."""

    def __init__(self) -> None:
        self._old: object = None
        self._counted = False

    def hold(self) -> _Deferred:
        if threading.current_thread() is threading.main_thread():
            _HELD.depth += 1
            self._counted = True
            if hasattr(signal, "pthread_sigmask"):
                self._old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED)
        return self

    def release(self) -> None:
        old, self._old = self._old, None
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)  # type: ignore[arg-type]
        if self._counted:
            self._counted = False
            _HELD.depth -= 1
            if _HELD.depth == 0 and _HELD.pending is not None:  # a signal came while held: delivered now
                signum, _HELD.pending = _HELD.pending, None
                signal.raise_signal(signum)


@contextmanager
def signals_deferred() -> Iterator[None]:
    held = _Deferred().hold()
    try:
        yield
    finally:
        held.release()


def _swap_in(tmp: Path, final: Path, before_replace: Callable[[], object] | None) -> None:
    """Rename-aside the old output, rename-in the new, then delete the old; a failure puts the old one back."""
    if os.path.lexists(final) and before_replace is not None:
        before_replace()
    aside = None
    with signals_deferred():
        if os.path.lexists(final):
            aside = Path(tempfile.mkdtemp(prefix=_prefix(final), suffix=".old", dir=final.parent))
            os.rename(final, aside)  # onto the empty directory mkdtemp made: POSIX allows it
        try:
            os.rename(tmp, final)
        except BaseException:
            if aside is not None:
                os.rename(aside, final)
            raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def name_the_output(err: BaseException, final: Path) -> None:
    """An OS error raised while an output was written (a full disk: a write() knows no file name) names that
    output, so the message says what could not be written rather than blaming standard output."""
    if isinstance(err, OSError) and err.filename is None:
        err.filename = str(final)


@contextmanager
def staged_dir(final: Path, kind: OutputKind, before_replace: Callable[[], object] | None = None) -> Iterator[Path]:
    """A temp directory beside `final`; when the block succeeds it gets the atbprof marker and replaces `final`
    (`before_replace` runs first when there is something to replace: it re-checks that it may be)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(final.parent)
    held = _Deferred().hold()  # until the cleanup below covers the new directory
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_prefix(final), suffix=".tmp", dir=final.parent))
    except BaseException:
        held.release()
        raise
    try:
        held.release()
        yield tmp
        (tmp / MARKER).write_bytes(marker_bytes(kind, tmp))
        for d in (tmp, *(p for p in tmp.rglob("*") if p.is_dir())):
            d.chmod(0o755)  # mkdtemp makes it private; an output is an ordinary directory
        _swap_in(tmp, final, before_replace)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        held.release()  # (released already unless the failure came before the block ran)
        name_the_output(err, final)
        raise


@contextmanager
def staged_file(final: Path, before_replace: Callable[[], object] | None = None) -> Iterator[Path]:
    """A temp file beside `final`, renamed over it (one atomic step) when the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(final.parent)
    held = _Deferred().hold()
    try:
        fd, name = tempfile.mkstemp(prefix=_prefix(final), suffix=".tmp", dir=final.parent)
    except BaseException:
        held.release()
        raise
    tmp = Path(name)
    try:
        os.close(fd)
        held.release()
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the output is an ordinary file
        if before_replace is not None and os.path.lexists(final):
            before_replace()
        os.replace(tmp, final)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        held.release()
        name_the_output(err, final)
        raise
