"""The request stream of a serving workload: arrival times and input / output lengths, as arrays.

Arrivals: a Poisson stream at `rate_qps` (the first request at t = 0, as vLLM's benchmark_serving sends it), every
request at t = 0 (`rate_qps: 0`), or a lengths file's own `arrival_s`. Lengths: fixed, a named distribution
(atbprof/data/serving_lengths.yaml, each with its source), or a CSV file. Arrivals and lengths draw from separate
streams of the seed, so a rate sweep keeps the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from atbprof.config.models import WorkloadSection
from atbprof.errors import ConfigError, InputError

MAX_LENGTHS_FILE_BYTES = 64 << 20
"""A lengths file larger than this is refused before it is read (1 M requests take ~20 MB of CSV)."""


@dataclass(frozen=True)
class RequestStream:
    arrival_ns: np.ndarray  # int64, non-decreasing
    input_len: np.ndarray  # int64 >= 1
    output_len: np.ndarray  # int64 >= 1: generated tokens, the first one (from the prefill) included
    lengths: str  # where the lengths came from, in words

    def __len__(self) -> int:
        return len(self.input_len)


@cache
def length_distributions() -> dict[str, Any]:
    from importlib import resources

    from atbprof.yamlio import load_data

    text = resources.files("atbprof.data").joinpath("serving_lengths.yaml").read_text(encoding="utf-8")
    return load_data(text)


def request_stream(w: WorkloadSection, seed: int) -> RequestStream:
    n = w.requests
    arrivals: np.ndarray | None = None
    if w.lengths == "fixed":
        inp = np.full(n, w.input_len, dtype=np.int64)
        out = np.full(n, w.output_len, dtype=np.int64)
        how = f"fixed: {w.input_len} in, {w.output_len} out"
    elif w.lengths in length_distributions():
        inp, out = _drawn(length_distributions()[w.lengths], n, np.random.default_rng([seed, 2]))
        how = f"{w.lengths} distribution (atbprof/data/serving_lengths.yaml)"
    else:
        inp, out, arrivals = read_lengths_file(Path(w.lengths), n if "requests" in w.model_fields_set else None)
        how = f"file {w.lengths}"
    if arrivals is None:
        arrivals = _poisson(len(inp), w.rate_qps, np.random.default_rng([seed, 1]))
    return RequestStream(arrivals, inp, out, how)


def _poisson(n: int, rate_qps: float, rng: np.random.Generator) -> np.ndarray:
    if rate_qps == 0:
        return np.zeros(n, dtype=np.int64)
    gaps = rng.exponential(1e9 / rate_qps, n)
    gaps[0] = 0.0
    return np.rint(np.cumsum(gaps)).astype(np.int64)


def _drawn(spec: dict[str, Any], n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n (input, output) pairs of log-normals with the spec's means and shapes, drawn again while out of bounds."""
    inp = np.zeros(0, dtype=np.int64)
    out = np.zeros(0, dtype=np.int64)
    a, b = spec["input"], spec["output"]
    total = spec.get("max_total", np.iinfo(np.int64).max)
    for _ in range(64):  # each round keeps most draws: 64 rounds never run short in practice
        k = 2 * (n - len(inp)) + 16
        x = np.rint(rng.lognormal(np.log(a["mean"]) - a["sigma"] ** 2 / 2, a["sigma"], k)).astype(np.int64)
        y = np.rint(rng.lognormal(np.log(b["mean"]) - b["sigma"] ** 2 / 2, b["sigma"], k)).astype(np.int64)
        ok = (x >= a["min"]) & (x <= a.get("max", total)) & (y >= b["min"]) & (y <= b.get("max", total))
        ok &= x + y <= total
        inp, out = np.concatenate([inp, x[ok]]), np.concatenate([out, y[ok]])
        if len(inp) >= n:
            return inp[:n], out[:n]
    raise ConfigError("workload.lengths: the distribution's bounds reject nearly every draw; check its spec")


def read_lengths_file(path: Path, limit: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(input_len, output_len, arrival_ns or None) of a CSV with a header: input_len, output_len and optionally
    arrival_s (seconds from the start, non-decreasing); `limit`: the first that many rows."""
    import pyarrow as pa
    import pyarrow.csv as csv

    from atbprof.inputs import read_bytes

    if not path.is_file():
        raise ConfigError(
            f"workload.lengths: {path} is not a file, nor one of fixed, sharegpt; give a CSV with input_len, "
            "output_len (and optionally arrival_s) columns"
        )
    data = read_bytes(path, MAX_LENGTHS_FILE_BYTES)
    try:
        table = csv.read_csv(
            pa.BufferReader(data),
            convert_options=csv.ConvertOptions(
                column_types={"input_len": pa.int64(), "output_len": pa.int64(), "arrival_s": pa.float64()}
            ),
        )
    except pa.ArrowInvalid as err:
        raise InputError(
            f"{path}: not a lengths CSV ({err}); expected a header input_len,output_len[,arrival_s]"
        ) from None
    missing = [c for c in ("input_len", "output_len") if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: no {' or '.join(missing)} column; the header names input_len, output_len")
    if table.num_rows == 0:
        raise InputError(f"{path}: no requests (only a header)")
    if table.num_rows > 1_000_000:
        raise InputError(f"{path}: {table.num_rows:,} requests, more than 1,000,000; split the file")
    if limit is not None:
        if limit > table.num_rows:
            raise ConfigError(
                f"workload.requests = {limit:,} but {path} lists {table.num_rows:,}: lower requests or leave it out"
            )
        table = table.slice(0, limit)
    cols = {}
    for name, lo, hi in (("input_len", 1, 1_048_576), ("output_len", 1, 1_048_576), ("arrival_s", 0.0, 1e7)):
        if name not in table.column_names:
            continue
        col = table.column(name)
        if col.null_count:
            row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputError(f"{path} line {row + 2}: {name} is empty")
        x = col.to_numpy()
        bad = np.flatnonzero(~((x >= lo) & (x <= hi)))
        if len(bad):
            raise InputError(f"{path} line {int(bad[0]) + 2}: {name} = {x[bad[0]]} is not within [{lo}, {hi:,}]")
        cols[name] = x
    arrivals = None
    if "arrival_s" in cols:
        t = cols["arrival_s"]
        back = np.flatnonzero(np.diff(t) < 0)
        if len(back):
            raise InputError(
                f"{path} line {int(back[0]) + 3}: arrival_s goes back in time; sort the requests by arrival"
            )
        arrivals = np.rint(t * 1e9).astype(np.int64)
    return cols["input_len"].astype(np.int64), cols["output_len"].astype(np.int64), arrivals
