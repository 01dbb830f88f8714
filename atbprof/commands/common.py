"""What every command shares: output formats, the one error handler, the console and the stderr spinner."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn

import orjson
import typer

if TYPE_CHECKING:  # rich loads where a command renders with it (`--format json` does not)
    from rich.console import Console

from atbprof.errors import AtbprofError, Terminated


class OutputFormat(str, Enum):
    rich = "rich"
    json = "json"


class AnalyzeFormat(str, Enum):
    rich = "rich"
    json = "json"
    md = "md"


def emit(
    format_: AnalyzeFormat,
    as_json: Callable[[], object],
    as_markdown: Callable[[], str],
    render: Callable[[Any, Console], None],
    report: object,
) -> None:
    """A report to stdout in the chosen form (the JSON and Markdown twins carry the same content)."""
    if format_ is AnalyzeFormat.json:
        sys.stdout.write(orjson.dumps(as_json(), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif format_ is AnalyzeFormat.md:
        sys.stdout.write(as_markdown() + "\n")
    else:
        render(report, console())


def status(what: str, rich_output: bool) -> contextlib.AbstractContextManager[object]:
    """A spinner on stderr while a long step runs (a terminal and rich output only)."""
    if not rich_output:  # rich is not imported where nothing renders with it (~15 ms)
        return contextlib.nullcontext()
    from rich.console import Console

    err = Console(stderr=True)
    return err.status(what) if err.is_terminal else contextlib.nullcontext()


@contextlib.contextmanager
def progress(what: str, rich_output: bool, unit: str) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr (a terminal and rich output only; nothing when piped): yields the callback that
    moves it, `(done, total)`, or None where nothing is shown. Before the first call it is a spinner."""
    from rich.console import Console

    err = Console(stderr=True)
    if not (rich_output and err.is_terminal):
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeRemainingColumn

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TextColumn(unit), TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def console() -> Console:
    """Reports to stdout; when it is not a terminal (a pipe, a file, CI) use a width the tables fit in."""
    from rich.console import Console

    console = Console(highlight=False)  # a terminal: prose wraps at words, tables fit its width
    return console if console.is_terminal else Console(highlight=False, soft_wrap=True, width=160)


_USER_ERRNOS = {
    errno.ENOSPC: "free some space, or write elsewhere (--out)",
    errno.EDQUOT: "free some of your quota, or write elsewhere (--out)",
    errno.ENAMETOOLONG: "use a shorter name or path",
    errno.EACCES: "check the permissions, or write elsewhere (--out)",
    errno.EPERM: "check the permissions, or write elsewhere (--out)",
    errno.EROFS: "the file system is read-only: write elsewhere (--out)",
    errno.ENOTDIR: "a part of the path is a file, not a directory: check the path",
    errno.EISDIR: "the path is a directory: give a file",
    errno.ELOOP: "the path has a symbolic-link loop: check the path",
    errno.EMFILE: "too many open files: raise `ulimit -n`",
    errno.ENFILE: "too many open files on the system: close some programs",
    errno.EIO: "the disk reported an I/O error: check the device",
    errno.ENOENT: "a file or directory vanished while atbprof used it: check the path",
}
"""Operating-system errors a user fixes (a full disk, a long name, permissions): exit 2 with the fix."""


def os_error(err: OSError) -> str:
    if err.filename is None:
        return f"cannot write to standard output: {err.strerror or err}; redirect it somewhere that takes it"
    return f"{err.filename}: {err.strerror or err}; {_USER_ERRNOS.get(err.errno or 0, '')}"


def guard(body: object, verbose: bool) -> None:
    """The one error handler: AtbprofError -> its message and exit code; OS errors a user can fix -> exit 2;
    anything else -> exit 70 (an atbprof bug)."""
    try:
        body()  # type: ignore[operator]
        sys.stdout.flush()  # a full disk or a closed pipe on stdout shows here, not at interpreter exit
    except BrokenPipeError:  # `atbprof ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(128 + signal.SIGPIPE) from None
    except OSError as err:
        if err.errno not in _USER_ERRNOS:
            internal(err, verbose)
        if verbose:
            traceback.print_exc()
        if err.filename is None:  # stdout: drop what could not be written, or exit would try again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        typer.echo(f"error: {os_error(err)}", err=True)
        raise typer.Exit(2) from None
    except AtbprofError as err:
        if verbose:
            traceback.print_exc()
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(err.exit_code) from None
    except KeyboardInterrupt as err:
        signum = err.signum if isinstance(err, Terminated) else signal.SIGINT
        kept = getattr(err, "kept", None)  # a sweep keeps the points it finished
        typer.echo(f"interrupted ({signal.Signals(signum).name}); {kept or 'nothing was written'}", err=True)
        raise typer.Exit(128 + signum) from None
    except MemoryError:
        # the machine's memory, or a limit set on it (ulimit -v, a container's): the inputs are bounded by their
        # size (docs/safety.md), so this is the environment's limit, not damage in the input
        if verbose:
            traceback.print_exc()
        typer.echo(
            "error: out of memory (the machine's, or a limit such as `ulimit -v` or a container's); free memory, "
            "raise the limit, or give a smaller input",
            err=True,
        )
        raise typer.Exit(2) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as err:  # an atbprof bug, not a user error
        internal(err, verbose)


def internal(err: BaseException, verbose: bool) -> NoReturn:
    if verbose:
        traceback.print_exc()
    typer.echo(f"internal error: {type(err).__name__}: {err} (run with --verbose for the traceback)", err=True)
    raise typer.Exit(70) from None


def ray_address(ray: str | None) -> str | None:
    """Where `--ray` runs the work (scale/pool.py `choose_ray`); `--ray auto` says on stderr what it chose and why."""
    if ray is None:
        return None
    from atbprof.scale.pool import choose_ray

    address, why = choose_ray(ray)
    if why:
        typer.echo(why, err=True)
    return address
