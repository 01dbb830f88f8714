"""summary.serving of run.json: latency percentiles, throughput, KV use and the queue's own checks, from the
requests and iterations tables alone (pure: tables in, summary out)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict


class Percentiles(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray) -> Percentiles | None:
        if not len(values):
            return None
        # linear interpolation between order statistics, as vLLM's benchmark_serving reports them
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return cls(mean=_r(values.mean()), p50=_r(p50), p90=_r(p90), p99=_r(p99))


class Goodput(BaseModel):
    model_config = ConfigDict(frozen=True)

    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    requests_meeting: int
    share: float
    requests_per_s: float


class LittlesLaw(BaseModel):
    """L = lambda W: the mean number in the system (sampled by the scheduler at each iteration's start, weighted by
    the iteration's length) against the arrival rate times the mean time in the system (from the requests)."""

    model_config = ConfigDict(frozen=True)

    in_system_mean: float
    rate_times_e2e: float
    relative_error: float


class ServingSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    requests: int
    lengths: str
    input_len_mean: float
    output_len_mean: float
    rate_qps: float  # asked (0: every request at t = 0)
    arrival_rate_qps: float  # as the stream came: requests over the span of the arrivals
    duration_s: float  # first arrival to last finish
    ttft_ms: Percentiles
    tpot_ms: Percentiles | None  # None: every output is a single token
    e2e_ms: Percentiles
    queue_ms: Percentiles
    requests_per_s: float
    output_tokens_per_s: float
    total_tokens_per_s: float
    iterations: int  # of every replica
    replicas: int = 1  # engine replicas (parallel.dp), each request sent to one by workload.dispatch
    decode_batch_mean: float  # decode sequences per iteration with any, weighted by the iteration's length
    device_busy: float  # kernel time over the span, per replica
    kv_blocks: int  # per replica
    block_size: int
    kv_cache_gb: float
    kv_utilisation_mean: float  # weighted by the iteration's length
    kv_utilisation_peak: float
    preemptions: int
    goodput: Goodput | None
    littles_law: LittlesLaw
    alone_ttft_ms: float  # a request of the mean input length alone on the engine: its prefill
    alone_tpot_ms: float  # one decode step of a single sequence at the mean context


def _r(x: float) -> float:
    return round(float(x), 3)


def serving_summary(
    requests: pa.Table,
    iterations: pa.Table,
    *,
    rate_qps: float,
    lengths: str,
    kv: tuple[int, int, float],
    slo: tuple[float | None, float | None],
    alone: tuple[float, float],
    replicas: int = 1,
) -> ServingSummary:
    def col(t: pa.Table, name: str) -> np.ndarray:
        return np.asarray(t.column(name).to_numpy(zero_copy_only=False))

    arrival, finish = col(requests, "arrival_ns"), col(requests, "finish_ns")
    ttft, e2e = col(requests, "ttft_ms"), col(requests, "e2e_ms")
    tpot_all = requests.column("tpot_ms")
    tpot = np.asarray(tpot_all.drop_null().to_numpy(zero_copy_only=False))
    out_len, in_len = col(requests, "output_len"), col(requests, "input_len")
    span_ns = max(int(finish.max() - arrival.min()), 1)
    span_s = span_ns / 1e9
    dur = col(iterations, "duration_ms")
    weight = dur / max(float(dur.sum()), 1e-12)
    decode = col(iterations, "decode_seqs")
    has_decode = decode > 0
    blocks, block_size, cache_gb = kv
    used = col(iterations, "kv_blocks_used") / max(blocks, 1)
    arrival_span = (arrival.max() - arrival.min()) / 1e9
    arrival_rate = (len(arrival) - 1) / arrival_span if arrival_span > 0 else 0.0
    # Little's law over the whole run: the time-mean number in the system from the scheduler's counts
    in_system = col(iterations, "in_system")
    sampled = float((in_system * dur).sum()) / (span_ns / 1e6)
    expected = len(arrival) / span_s * float(e2e.mean()) / 1e3
    goodput = None
    slo_ttft, slo_tpot = slo
    if slo_ttft is not None or slo_tpot is not None:
        ok = np.ones(len(ttft), dtype=bool)
        if slo_ttft is not None:
            ok &= ttft <= slo_ttft
        if slo_tpot is not None:
            tp = np.asarray(tpot_all.fill_null(0.0).to_numpy(zero_copy_only=False))
            ok &= tp <= slo_tpot
        goodput = Goodput(
            slo_ttft_ms=slo_ttft,
            slo_tpot_ms=slo_tpot,
            requests_meeting=int(ok.sum()),
            share=_r(ok.mean()),
            requests_per_s=_r(ok.sum() / span_s),
        )
    ttft_p, e2e_p, queue_p = (Percentiles.of(x) for x in (ttft, e2e, col(requests, "queue_ms")))
    assert ttft_p is not None and e2e_p is not None and queue_p is not None  # at least one request
    return ServingSummary(
        requests=len(arrival),
        lengths=lengths,
        input_len_mean=_r(in_len.mean()),
        output_len_mean=_r(out_len.mean()),
        rate_qps=rate_qps,
        arrival_rate_qps=_r(arrival_rate),
        duration_s=_r(span_s),
        ttft_ms=ttft_p,
        tpot_ms=Percentiles.of(tpot),
        e2e_ms=e2e_p,
        queue_ms=queue_p,
        requests_per_s=_r(len(arrival) / span_s),
        output_tokens_per_s=_r(out_len.sum() / span_s),
        total_tokens_per_s=_r((out_len.sum() + in_len.sum()) / span_s),
        iterations=iterations.num_rows,
        replicas=replicas,
        decode_batch_mean=_r((decode * dur)[has_decode].sum() / max(float(dur[has_decode].sum()), 1e-12)),
        device_busy=_r(col(iterations, "device_ms").sum() / (span_ns / 1e6) / replicas),
        kv_blocks=blocks,
        block_size=block_size,
        kv_cache_gb=_r(cache_gb),
        kv_utilisation_mean=_r((used * weight).sum()),
        kv_utilisation_peak=_r(used.max()),
        preemptions=int(col(requests, "preemptions").sum()),
        goodput=goodput,
        littles_law=LittlesLaw(
            in_system_mean=_r(sampled),
            rate_times_e2e=_r(expected),
            relative_error=_r(abs(sampled - expected) / expected) if expected else 0.0,
        ),
        alone_ttft_ms=_r(alone[0]),
        alone_tpot_ms=_r(alone[1]),
    )
