"""Map a function over items, results in item order, streamed: in this process, in a local process pool, or as
Ray tasks (`ray`: "auto" joins the running cluster, else a head's address).

At most a few tasks per worker are in flight, so results are consumed as they come and the caller need not hold
them all (a 1,024-rank cluster is reduced rank by rank). The function and its items must be picklable (module-level
functions, plain data). Ray is an optional extra (`atbprof[ray]`); its workers must see the same paths."""

from __future__ import annotations

import os
import socket
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

from atbprof.errors import InputError

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 256
IN_FLIGHT_PER_WORKER = 4
POOL_MIN_ITEMS = 8  # fewer items run in this process: a worker's start (importing atbprof) costs more


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


READ_POOL_MIN_CORES = 4
READ_POOL_MIN_RANKS = 256
"""Reading ranks (a cluster's files) pays for a pool on a small machine only for a large cluster: on 2 cores
(scripts/bench_cluster.py) two workers were slower than this process alone at 32 ranks (2.90 vs 2.40 s), even at
128 (7.33 vs 7.21 s), and faster at 1,024 (55.6 vs 98.3 s): their start and the tables sent back cost more than
they save until there are hundreds of ranks. With READ_POOL_MIN_CORES or more, a pool from POOL_MIN_ITEMS."""


def read_workers(workers: int | None, ranks: int) -> int | None:
    """The workers for reading `ranks` ranks: as given, else this process on a machine with fewer than
    READ_POOL_MIN_CORES cores below READ_POOL_MIN_RANKS ranks (a sweep's points, which compute more per item,
    keep the pool)."""
    small = (os.cpu_count() or 1) < READ_POOL_MIN_CORES
    if workers is None and small and ranks < READ_POOL_MIN_RANKS:
        return 0
    return workers


def check_workers(workers: int | None) -> None:
    if workers is not None and not 0 <= workers <= MAX_WORKERS:
        raise InputError(f"--workers {workers}: expected 0 (this process) to {MAX_WORKERS}")


def map_ordered(
    fn: Callable[[T], R], items: Iterable[T], *, workers: int | None = None, ray: str | None = None
) -> Iterator[R]:
    """`fn` of every item, in order. `workers`: None = one per core when there are enough items, 0 or 1 = this
    process; `ray`: run on a Ray cluster instead ("auto": where one pays, `choose_ray`)."""
    check_workers(workers)
    todo = list(items)
    if ray is not None and ray.strip() == "auto":
        ray, _ = choose_ray(ray)
    if ray is not None:
        return _ray_map(fn, todo, ray)
    n = default_workers() if workers is None else workers
    if workers is None and len(todo) < POOL_MIN_ITEMS:
        n = 1
    n = min(n, len(todo))
    if n <= 1:
        return (fn(x) for x in todo)
    return _pool_map(fn, todo, n)


def _windowed(submit: Callable[[T], Any], result: Callable[[Any], R], todo: list[T], window: int) -> Iterator[R]:
    pending: deque[Any] = deque()
    it = iter(todo)
    for x in it:
        pending.append(submit(x))
        if len(pending) >= window:
            break
    while pending:
        out = result(pending.popleft())
        nxt = next(it, _END)
        if nxt is not _END:
            pending.append(submit(nxt))  # type: ignore[arg-type]
        yield out


_END = object()


def _parent_gone(pid: int) -> bool:
    """The process `pid` has exited (a zombie its own parent has not reaped yet counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state in (b"Z", b"X")
    except FileNotFoundError:
        return True
    except (OSError, IndexError):  # no /proc: ask the kernel whether the pid exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False


def _die_with(pid: int) -> None:
    """A pool worker's initializer: a daemon thread ends the worker when the process that made the pool is gone,
    however it went (SIGKILL included: nothing of it runs to shut the pool down). Without it the workers -
    children of the forkserver, not of that process - run on, holding the caller's stdout and stderr open."""
    import threading
    import time

    def watch() -> None:
        while not _parent_gone(pid):
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="atbprof-parent-watch", daemon=True).start()


PARENT_POLL_S = 0.5


def _pool_map(fn: Callable[[T], R], todo: list[T], n: int) -> Iterator[R]:
    # forkserver: a fork of this process would copy its threads' locks (pyarrow's pools) mid-use
    with ProcessPoolExecutor(
        max_workers=n, mp_context=get_context("forkserver"), initializer=_die_with, initargs=(os.getpid(),)
    ) as pool:

        def result(f: Future[R]) -> R:
            return f.result()

        yield from _windowed(lambda x: pool.submit(fn, x), result, todo, n * IN_FLIGHT_PER_WORKER)


def ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError("--ray needs Ray: pip install 'atbprof[ray]' (or run without --ray)") from None
    return ray


def _probe(address: str) -> None:
    """Refuse a head's address nothing listens on at once (Ray itself retries for minutes)."""
    if address == "auto" or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"--ray {address}: expected 'auto' or HOST:PORT of a Ray head, e.g. 127.0.0.1:6379")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as err:
        raise InputError(
            f"--ray {address}: no Ray cluster there ({err.strerror or err}); start one with `ray start --head` or "
            "pass its address"
        ) from None


def _ray_map(fn: Callable[[T], R], todo: list[T], address: str) -> Iterator[R]:
    ray = ray_module()
    if not address.strip():
        raise InputError("--ray: give 'auto' (the running cluster) or a head's address, e.g. 127.0.0.1:6379")
    if not ray.is_initialized():
        _probe(address)
        _connect(ray, address)
    task = ray.remote(fn)
    window = max(2, int(ray.cluster_resources().get("CPU", 1))) * IN_FLIGHT_PER_WORKER
    return _windowed(lambda x: task.remote(x), ray.get, todo, window)


def _connect(ray: Any, address: str) -> None:
    """Join the Ray cluster at `address`, its workers importing the atbprof this process runs. Ray puts the
    driver's working directory first on its workers' path: started from a source checkout, workers would import
    the checkout's atbprof (without its built parts) instead of the installed one. So the driver joins from the
    directory that holds its own atbprof package, and that is what the workers find."""
    here = os.getcwd()
    os.chdir(Path(__file__).resolve().parents[2])  # atbprof/scale/pool.py -> the directory holding atbprof/
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise InputError(
            f"--ray {address}: no Ray cluster there ({str(err).splitlines()[0] if str(err) else err}); start one "
            "with `ray start --head` or pass its address"
        ) from None
    finally:
        os.chdir(here)


def choose_ray(ray: str | None) -> tuple[str | None, str | None]:
    """(where to run: a Ray address, or None for the local process pool; why, when `--ray auto` chose). An
    address the user names is used as given. `auto` uses Ray only where it can pay: when RAY_ADDRESS names a
    cluster, or the running cluster has more CPUs than this machine (several nodes). On one machine Ray's task
    overhead only slows the work (measured on 2 cores: a 32-rank cluster analysis 2.1x and a 1,008-point sweep
    1.06x slower than without Ray, docs/performance.md), so it runs in the local pool and says so."""
    if ray is None or ray.strip() != "auto":
        return ray, None
    named = os.environ.get("RAY_ADDRESS")
    if named:
        return named, f"--ray auto: RAY_ADDRESS names a cluster ({named}): running on it"
    try:
        import ray as ray_lib
    except ImportError:
        return None, "--ray auto: Ray is not installed (the `ray` extra): running in the local process pool"
    local = os.cpu_count() or 1
    joined = not ray_lib.is_initialized()  # a caller's own Ray session is left as it was
    if joined:
        try:
            _connect(ray_lib, "auto")
        except InputError:
            return None, "--ray auto: no Ray cluster is running: running in the local process pool"
    cpus = int(ray_lib.cluster_resources().get("CPU", 0))
    nodes = sum(1 for n in ray_lib.nodes() if n.get("Alive"))
    if nodes > 1 or cpus > local:
        return "auto", f"--ray auto: the Ray cluster has {nodes} node(s) and {cpus} CPUs (this machine {local}): on Ray"
    if joined:
        ray_lib.shutdown()
    return None, (
        f"--ray auto: the Ray cluster is this machine alone ({cpus} CPUs), where Ray only adds overhead: running in "
        "the local process pool (name the head, --ray HOST:PORT, to use it anyway)"
    )
