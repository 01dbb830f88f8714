"""Two serving runs compared at the percentile level, with statistics over the requests (pure: tables in).

- Same requests on both sides (one stream: the same seed, rate and lengths, e.g. fusion on vs off): each request
  is paired with itself. Means get a paired t interval; each percentile a paired bootstrap interval (the requests
  resampled together, 2,000 times, seeded: the same inputs give the same report).
- Different streams: Welch's t for the means and an unpaired bootstrap for the percentiles.
- A change is significant when its interval excludes zero and it is at least the threshold (as every diff).
Throughput and goodput are one figure per run (deterministic simulations): compared by the threshold alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from atbprof.diff.serving_report import ServingDiff, ServingDiffRow
from atbprof.diff.stats import compare, verdict
from atbprof.errors import InputError
from atbprof.serving.summary import ServingSummary

BOOTSTRAP = 2000
METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms")
STATISTICS = ("mean", "p50", "p90", "p99")


def is_serving_run(path: Path) -> bool:
    return path.is_dir() and (path / "requests.parquet").is_file() and (path / "iterations.parquet").is_file()


def read_serving_run(path: Path) -> tuple[pa.Table, ServingSummary]:
    """(requests table, summary.serving) of a serving run directory, checked."""
    import orjson
    import pyarrow.parquet as pq
    from pydantic import ValidationError

    from atbprof.inputs import read_bytes
    from atbprof.serving.tables import REQUESTS_SCHEMA

    try:
        table = pq.read_table(path / "requests.parquet", page_checksum_verification=True)
        doc = orjson.loads(read_bytes(path / "run.json", 1 << 24))
        summary = ServingSummary.model_validate(doc["summary"]["serving"])
    except (pa.ArrowException, OSError, orjson.JSONDecodeError, KeyError, TypeError, ValidationError) as err:
        reason = str(err).splitlines()[0]
        raise InputError(f"{path}: not a serving run of `atbprof run` ({reason}); re-create it") from None
    if "replica" not in table.column_names:  # written before engine replicas existed: one engine
        table = table.append_column(REQUESTS_SCHEMA.field("replica"), pa.array([0] * table.num_rows, pa.int32()))
    if not table.schema.equals(REQUESTS_SCHEMA, check_metadata=False):
        raise InputError(f"{path}/requests.parquet: not the serving requests schema; re-create the run")
    return table, summary


REGRESSION_ROWS = (("ttft_ms", "p99"), ("tpot_ms", "p99"))
"""What --fail-if-slower checks of a serving diff: the tails users are judged on."""


def diff_serving_paths(
    base: Path, new: Path, threshold_pct: float = 1.0, fail_if_slower_pct: float | None = None
) -> ServingDiff:
    for p in (base, new):
        if not is_serving_run(p):
            raise InputError(
                f"{p}: not a serving run (requests.parquet, iterations.parquet); a serving run is compared with "
                "another serving run"
            )
    (a, sa), (b, sb) = read_serving_run(base), read_serving_run(new)
    d = diff_serving(a, b, sa, sb, str(base), str(new), threshold_pct)
    if fail_if_slower_pct is None:
        return d
    slower = [
        f"{r.metric} {r.statistic} {r.delta_pct:+.1f}%"
        for r in d.rows
        if (r.metric, r.statistic) in REGRESSION_ROWS
        and r.significant
        and r.delta_pct is not None
        and r.delta_pct > fail_if_slower_pct
    ]
    return d.model_copy(update={"regression": slower})


def diff_serving(
    a: pa.Table,
    b: pa.Table,
    summary_a: ServingSummary,
    summary_b: ServingSummary,
    base: str,
    new: str,
    threshold_pct: float = 1.0,
) -> ServingDiff:
    def col(t: pa.Table, c: str) -> np.ndarray:
        return np.asarray(t.column(c).to_numpy(zero_copy_only=False))

    paired = a.num_rows == b.num_rows and all(
        np.array_equal(col(a, c), col(b, c)) for c in ("arrival_ns", "input_len", "output_len")
    )
    rng = np.random.default_rng(0)
    rows: list[ServingDiffRow] = []
    for metric in METRICS:
        x, y = col(a, metric), col(b, metric)
        if paired:
            keep = ~(np.isnan(x) | np.isnan(y))
            x, y = x[keep], y[keep]
        else:
            x, y = x[~np.isnan(x)], y[~np.isnan(y)]
        if not len(x) or not len(y):
            continue  # TPOT of single-token outputs
        c = compare(x, y, paired=paired, threshold_pct=threshold_pct)
        rows.append(
            ServingDiffRow(
                metric=metric,
                statistic="mean",
                base=_r(c.base),
                new=_r(c.new),
                delta=_r(c.delta),
                delta_pct=_maybe(c.delta_pct),
                ci_low=_maybe(c.ci_low),
                ci_high=_maybe(c.ci_high),
                significant=c.significant,
                method=c.method,
            )
        )
        qs = [50, 90, 99]
        pb, pn = np.percentile(x, qs), np.percentile(y, qs)
        if paired:
            at = rng.integers(0, len(x), (BOOTSTRAP, len(x)))
            boot = np.percentile(y[at], qs, axis=1) - np.percentile(x[at], qs, axis=1)
        else:
            ia, ib = rng.integers(0, len(x), (BOOTSTRAP, len(x))), rng.integers(0, len(y), (BOOTSTRAP, len(y)))
            boot = np.percentile(y[ib], qs, axis=1) - np.percentile(x[ia], qs, axis=1)
        lo, hi = np.percentile(boot, [2.5, 97.5], axis=1)
        for k, q in enumerate(qs):
            d = float(pn[k] - pb[k])
            rows.append(
                ServingDiffRow(
                    metric=metric,
                    statistic=f"p{q}",
                    base=_r(pb[k]),
                    new=_r(pn[k]),
                    delta=_r(d),
                    delta_pct=_r(100.0 * d / pb[k]) if pb[k] else None,
                    ci_low=_r(lo[k]),
                    ci_high=_r(hi[k]),
                    significant=verdict(d, float(pb[k]), float(lo[k]), float(hi[k]), threshold_pct),
                    method="paired-bootstrap" if paired else "bootstrap",
                )
            )
    for metric in ("requests_per_s", "output_tokens_per_s", "goodput_rps"):
        va, vb = _value(summary_a, metric), _value(summary_b, metric)
        if va is None or vb is None:
            continue
        d = vb - va
        rows.append(
            ServingDiffRow(
                metric=metric,
                statistic="value",
                base=va,
                new=vb,
                delta=_r(d),
                delta_pct=_r(100.0 * d / va) if va else None,
                ci_low=None,
                ci_high=None,
                significant=verdict(d, va, None, None, threshold_pct),
                method="exact",
            )
        )
    return ServingDiff(
        base=base,
        new=new,
        requests_base=a.num_rows,
        requests_new=b.num_rows,
        paired=paired,
        threshold_pct=threshold_pct,
        rows=rows,
    )


def _value(summary: ServingSummary, metric: str) -> float | None:
    if metric == "goodput_rps":
        return None if summary.goodput is None else summary.goodput.requests_per_s
    return float(getattr(summary, metric))


def _r(x: float) -> float:
    return round(float(x), 3)


def _maybe(x: float | None) -> float | None:
    return None if x is None else _r(x)
