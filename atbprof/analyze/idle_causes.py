"""Why the device sat idle where no op is charged: each idle stretch of a step, split by what the host was doing.

An op is charged the idle right before it that its own launch explains (charges.py: the host-dispatch wait, in the
op's row). The rest of a step's idle time is split here, by the host activity it overlaps, first match wins:

  synchronisation  the host sat in a call that waits for the device (cudaDeviceSynchronize, a blocking
                   cudaMemcpy / hipMemcpyWithStream, ...: importers/host_calls.yaml)
  graph/launch     the host sat in any other runtime call (kernel, graph and copy launches, queries)
  host dispatch    the host ran framework code (a framework op or a recorded Python function: the work that
                   prepares the next launch - scheduling, input preparation, sampling in a serving loop)
  unexplained      the profile records no host activity then (another thread or process, the profiler itself)

Host and device clocks are compared as the profile wrote them; a trace whose device lags its host shows most idle
as unexplained rather than guessing an offset.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.analyze.intervals import covered, union

IDLE_CAUSES = ("synchronisation", "graph/launch", "host dispatch", "unexplained")


def split_idle(
    lo: np.ndarray, hi: np.ndarray, host_calls: pa.Table | None, host_ops: tuple[np.ndarray, np.ndarray] | None
) -> np.ndarray:
    """(len(lo), 4) int ns per idle interval and cause (IDLE_CAUSES order); the row sums are hi - lo."""
    total = (hi - lo).astype(np.int64)
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    empty = np.zeros(0, np.int64)
    if host_calls is not None and host_calls.num_rows:
        kind = host_calls.column("kind")
        start = np.asarray(host_calls.column("start_ns").to_numpy(), np.int64)
        end = start + np.asarray(host_calls.column("dur_ns").to_numpy(), np.int64)
        sync = np.asarray(pc.equal(kind, "sync").to_numpy(zero_copy_only=False), bool)
        python = np.asarray(pc.equal(kind, "python").to_numpy(zero_copy_only=False), bool)
        layers.append((start[sync], end[sync]))
        layers.append((start[~python], end[~python]))
        host_ops = (
            np.concatenate([start[python], host_ops[0] if host_ops is not None else empty]),
            np.concatenate([end[python], host_ops[1] if host_ops is not None else empty]),
        )
    else:
        layers += [(empty, empty), (empty, empty)]
    if host_ops is not None and len(host_ops[0]):
        layers.append((np.concatenate([layers[-1][0], host_ops[0]]), np.concatenate([layers[-1][1], host_ops[1]])))
    else:
        layers.append(layers[-1])
    cum = [np.zeros(len(lo), np.int64)]
    for s, e in layers:  # each layer holds the ones before it: covered lengths are cumulative
        cum.append(np.minimum(covered(lo, hi, *union(s, e)), total))
    cum.append(total)
    stacked = np.stack(cum, axis=1)
    return np.diff(np.maximum.accumulate(stacked, axis=1), axis=1)


def host_ops_of(framework: pa.Table | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(start, end) of the top-level framework ops (depth 0), relative ns."""
    if framework is None or not framework.num_rows:
        return None
    top = framework.filter(pc.equal(framework.column("depth"), 0))
    start = np.asarray(top.column("start_ns").to_numpy(), np.int64)
    return start, start + np.asarray(top.column("dur_ns").to_numpy(), np.int64)
