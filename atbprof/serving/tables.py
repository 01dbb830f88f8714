"""requests.parquet and iterations.parquet of a serving run: explicit, versioned Arrow schemas (units in names)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from atbprof.serving.requests import RequestStream
from atbprof.serving.scheduler import Served

SERVING_SCHEMA_VERSION = "1"


def _schema(table: str, fields: list[tuple[str, pa.DataType, bool, str]]) -> pa.Schema:
    return pa.schema(
        [pa.field(n, t, nullable=null, metadata={"doc": doc}) for n, t, null, doc in fields],
        metadata={"atbprof.table": table, "atbprof.schema_version": SERVING_SCHEMA_VERSION},
    )


REQUESTS_SCHEMA = _schema(
    "requests",
    [
        ("request_id", pa.int32(), False, "the request's place in the stream (arrival order)"),
        (
            "arrival_ns",
            pa.int64(),
            False,
            "when it was sent, from the stream's start: its arrival, or with "
            "max_concurrency the moment a request before it finished, if later",
        ),
        ("input_len", pa.int32(), False, "prompt tokens"),
        ("output_len", pa.int32(), False, "generated tokens, the first one (from the prefill) included"),
        ("first_scheduled_ns", pa.int64(), False, "start of the first iteration that computed any of its tokens"),
        ("first_token_ns", pa.int64(), False, "its first token back on the host"),
        ("finish_ns", pa.int64(), False, "its last token back on the host"),
        ("queue_ms", pa.float64(), False, "arrival to first scheduled"),
        ("ttft_ms", pa.float64(), False, "time to first token: arrival to first token"),
        (
            "tpot_ms",
            pa.float64(),
            True,
            "time per output token after the first: (finish - first token) / "
            "(output_len - 1); null for a single-token output",
        ),
        ("e2e_ms", pa.float64(), False, "arrival to finish"),
        ("preemptions", pa.int32(), False, "times its KV blocks were taken back (it recomputed its tokens)"),
        ("replica", pa.int32(), False, "the engine replica that served it (0 ... parallel.dp - 1)"),
    ],
)

ITERATIONS_SCHEMA = _schema(
    "iterations",
    [
        ("iteration", pa.int32(), False, "0, 1, ... in time order (of every replica; a tie in replica order)"),
        ("replica", pa.int32(), False, "the engine replica that ran it (0 ... parallel.dp - 1)"),
        ("start_ns", pa.int64(), False, "host start of the iteration (scheduling, input preparation, launches)"),
        ("end_ns", pa.int64(), False, "its sampled tokens back on the host"),
        ("duration_ms", pa.float64(), False, "end - start"),
        ("device_ms", pa.float64(), False, "kernel time of the iteration (the device is idle the rest)"),
        ("prefill_seqs", pa.int32(), False, "sequences with prompt tokens (a chunk, a whole prompt, a recompute)"),
        ("prefill_tokens", pa.int32(), False, "prompt tokens computed"),
        ("decode_seqs", pa.int32(), False, "sequences decoding one token"),
        ("tokens", pa.int32(), False, "prefill_tokens + decode_seqs: what the linears ran over"),
        ("running", pa.int32(), False, "sequences holding KV blocks after the iteration"),
        ("waiting", pa.int32(), False, "requests arrived and queued at the iteration's start"),
        ("in_system", pa.int32(), False, "requests arrived and not finished at the iteration's start"),
        ("kv_blocks_used", pa.int32(), False, "blocks in use once the iteration's tokens are written"),
        ("preempted", pa.int32(), False, "sequences preempted to make room in this iteration"),
    ],
)


def requests_table(stream: RequestStream, served: Served) -> pa.Table:
    arrival, first, finish = served.arrival_ns, served.first_token_ns, served.finish_ns
    out = stream.output_len
    multi = out > 1
    tpot = np.where(multi, (finish - first) / np.maximum(out - 1, 1) / 1e6, np.nan)
    return pa.table(
        {
            "request_id": np.arange(len(stream), dtype=np.int32),
            "arrival_ns": arrival,
            "input_len": stream.input_len.astype(np.int32),
            "output_len": out.astype(np.int32),
            "first_scheduled_ns": served.first_scheduled_ns,
            "first_token_ns": first,
            "finish_ns": finish,
            "queue_ms": (served.first_scheduled_ns - arrival) / 1e6,
            "ttft_ms": (first - arrival) / 1e6,
            "tpot_ms": pa.array(tpot, pa.float64(), mask=~multi),
            "e2e_ms": (finish - arrival) / 1e6,
            "preemptions": served.preemptions.astype(np.int32),
            "replica": served.replica.astype(np.int32),
        },
        schema=REQUESTS_SCHEMA,
    )


def iterations_table(served: Served) -> pa.Table:
    it = served.iterations
    start, end = np.array(it.start_ns, dtype=np.int64), np.array(it.end_ns, dtype=np.int64)
    prefill_tokens = np.array(it.prefill_tokens, dtype=np.int32)
    decode = np.array(it.decode_seqs, dtype=np.int32)
    return pa.table(
        {
            "iteration": np.arange(len(start), dtype=np.int32),
            "replica": np.array(it.replica, dtype=np.int32),
            "start_ns": start,
            "end_ns": end,
            "duration_ms": (end - start) / 1e6,
            "device_ms": np.array(it.device_ns, dtype=np.int64) / 1e6,
            "prefill_seqs": np.array(it.prefill_seqs, dtype=np.int32),
            "prefill_tokens": prefill_tokens,
            "decode_seqs": decode,
            "tokens": prefill_tokens + decode,
            "running": np.array(it.running, dtype=np.int32),
            "waiting": np.array(it.waiting, dtype=np.int32),
            "in_system": np.array(it.in_system, dtype=np.int32),
            "kv_blocks_used": np.array(it.kv_blocks_used, dtype=np.int32),
            "preempted": np.array(it.preempted, dtype=np.int32),
        },
        schema=ITERATIONS_SCHEMA,
    )
