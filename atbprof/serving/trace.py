"""trace.json.gz of a serving run (Chrome trace format, opened by Perfetto): each engine replica's iterations on one
track with counters of its queue and KV cache, and a track per request with its queued / prefill / decode spans.

Timestamps are trace-relative microseconds with ns precision; every track's slices follow one another (a request's
spans end where the next begins, the iterations run back to back), so nothing overlaps on a thread.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa

MAX_REQUEST_TRACKS = 2000
"""Requests drawn as tracks (the first ones by arrival)."""
MAX_ITERATIONS = 50_000
"""Iterations drawn (the first ones) with their counters: ~20 MB of trace, what the UI opens comfortably."""

_ENGINE_PID, _REQUESTS_PID = 1, 2


def _us(ns: np.ndarray) -> list[float]:
    return (np.asarray(ns, dtype=np.int64) / 1000.0).tolist()


def write_serving_trace(path: Path, requests: pa.Table, iterations: pa.Table, title: str) -> tuple[int, int]:
    """Writes the trace; returns the request tracks and the iterations drawn."""
    drawn = min(iterations.num_rows, MAX_ITERATIONS)
    it = {c: iterations.column(c).to_numpy(zero_copy_only=False)[:drawn] for c in iterations.column_names}
    replicas = int(iterations.column("replica").to_numpy().max(initial=0)) + 1
    # one process per engine replica (its iterations and counters); the requests' tracks after the first engine's
    pids = [_ENGINE_PID, *range(_REQUESTS_PID + 1, _REQUESTS_PID + replicas)]
    events: list[dict[str, object]] = []
    for k, pid in enumerate(pids):
        engine = f"{title}: engine" + (f" {k}" if replicas > 1 else "")
        events.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": engine}})
        events.append({"ph": "M", "pid": pid, "tid": 1, "name": "thread_name", "args": {"name": "iterations"}})
        if k == 0:
            events.append({"ph": "M", "pid": _REQUESTS_PID, "name": "process_name", "args": {"name": "requests"}})
    start, end = _us(it["start_ns"]), _us(it["end_ns"])
    for i in range(drawn):
        pid = pids[int(it["replica"][i])]
        prefill, decode = int(it["prefill_seqs"][i]), int(it["decode_seqs"][i])
        kind = "mixed" if prefill and decode else "prefill" if prefill else "decode"
        events.append(
            {
                "ph": "X",
                "pid": pid,
                "tid": 1,
                "ts": start[i],
                "dur": round(end[i] - start[i], 3),
                "name": f"{kind} x{prefill + decode}",
                "cat": "iteration",
                "args": {
                    "iteration": int(it["iteration"][i]),
                    "prefill_seqs": prefill,
                    "prefill_tokens": int(it["prefill_tokens"][i]),
                    "decode_seqs": decode,
                    "device_ms": float(it["device_ms"][i]),
                    "preempted": int(it["preempted"][i]),
                },
            }
        )
        # the UI names a counter track "<event> <arg>": "sequences running", "sequences waiting", "KV cache blocks used"
        events.append(
            {
                "ph": "C",
                "pid": pid,
                "ts": start[i],
                "name": "sequences",
                "args": {"running": int(it["running"][i]), "waiting": int(it["waiting"][i])},
            }
        )
        events.append(
            {
                "ph": "C",
                "pid": pid,
                "ts": start[i],
                "name": "KV cache",
                "args": {"blocks used": int(it["kv_blocks_used"][i])},
            }
        )
    req = {c: requests.column(c).to_numpy(zero_copy_only=False) for c in requests.column_names}
    shown = min(requests.num_rows, MAX_REQUEST_TRACKS)
    arrival, sched, first, finish = (
        _us(req[c][:shown]) for c in ("arrival_ns", "first_scheduled_ns", "first_token_ns", "finish_ns")
    )
    for r in range(shown):
        tid = r + 1
        events.append(
            {"ph": "M", "pid": _REQUESTS_PID, "tid": tid, "name": "thread_name", "args": {"name": f"request {r}"}}
        )
        args = {
            "input_len": int(req["input_len"][r]),
            "output_len": int(req["output_len"][r]),
            "preemptions": int(req["preemptions"][r]),
        }
        for name, a, b in (
            ("queued", arrival[r], sched[r]),
            ("prefill", sched[r], first[r]),
            ("decode", first[r], finish[r]),
        ):
            if b > a:
                events.append(
                    {
                        "ph": "X",
                        "pid": _REQUESTS_PID,
                        "tid": tid,
                        "ts": a,
                        "dur": round(b - a, 3),
                        "name": name,
                        "cat": "request",
                        "args": args,
                    }
                )
    doc = {"traceEvents": events, "otherData": {"request_tracks": shown, "iterations": drawn}}
    path.write_bytes(gzip.compress(orjson.dumps(doc), compresslevel=6, mtime=0))
    return shown, drawn
