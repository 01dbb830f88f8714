"""One rank's communication — communication.json and communication_matrix.json, or analysis.db's CommAnalyzer*
tables — into Arrow tables of the cluster schemas (ops, bandwidth, links).

A rank of a large job lists thousands of ops a step, each with a few transports and links: the figures are
gathered into columns as they come and checked column-wise (finite, within range), and a bad one is named by
walking back to it only then; the links are summed per step, section, communicator, src, dst and transport with
Arrow's group-by, not a Python dict per link."""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.errors import InputError
from atbprof.importers.cluster_tables import BANDWIDTH_SCHEMA, LINKS_SCHEMA, OPS_SCHEMA, TIME_KEYS

_STEP = re.compile(r"^step(\d{1,9})$")
_LINK_KEYS = ["step", "section", "group", "src_local", "dst_local", "transport"]
_INDEX_LIMIT = 1 << 30  # a group-local index past this is clamped (it names no rank of any cluster)


@functools.lru_cache(maxsize=1 << 14)
def step_of(text: object) -> int | None:
    m = _STEP.match(str(text))
    return int(m.group(1)) if m else None


def number(value: object, where: str, limit: float = 1e15, key: str = "") -> float:
    """A finite number within `limit` (times in µs / ms and sizes in MB; epoch timestamps in µs need 1e18);
    `where` and `key` name it in the message."""
    if type(value) is float or type(value) is int:
        x = float(value)
    else:
        try:
            x = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise InputError(f"{where}{' ' + key if key else ''}: {value!r} is not a number") from None
    if x != x or x > limit or x < -limit:
        raise InputError(f"{where}{' ' + key if key else ''}: {value!r} is not a plausible time or size")
    return x


def floats(values: list[Any], where: Callable[[int], str], limit: float = 1e15, key: str = "") -> np.ndarray:
    """`values` as float64, each a finite number within `limit`; the first that is not is named (`where(i)`)."""
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        x = None
    if x is None or x.shape != (len(values),) or not bool((np.abs(x) <= limit).all()):  # NaN fails `<=` too
        x = np.array([number(v, where(i), limit, key) for i, v in enumerate(values)], dtype=np.float64)
    return x


def items(doc: Any, path: Path) -> Iterable[tuple[str, Any]]:
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected JSON objects (step -> section -> op), found {type(doc).__name__}")
    return ((str(k), v) for k, v in doc.items())


def _steps(keys: list[Any]) -> pa.Array:
    """Step numbers of `step<N>` keys (null where a key is not one), through the keys' distinct values."""
    codes = pa.array(_texts(keys), pa.string()).dictionary_encode()
    steps = pa.array([step_of(k) for k in codes.dictionary.to_pylist()], pa.int32())
    return steps.take(codes.indices)


def _texts(values: Iterable[Any]) -> list[str | None]:
    return [None if v is None else str(v) for v in values]


def _fields(dicts: list[dict[str, Any]], defaults: dict[str, Any]) -> list[list[Any]]:
    """The values of `defaults`' keys in each dict, as one list per key (a key a dict lacks reads as its default):
    one C-level itemgetter call per dict while every dict has every key, as torch_npu writes them."""
    keys = tuple(defaults)
    try:
        rows = list(map(operator.itemgetter(*keys), dicts))
    except KeyError:
        rows = [tuple(d.get(k, v) for k, v in defaults.items()) for d in dicts]
    return [list(c) for c in zip(*rows, strict=True)] if rows else [[] for _ in keys]


def _rank_column(rank: int, n: int) -> pa.Array:
    return pa.array(np.full(n, rank, dtype=np.int32))


def json_tables(
    rank: int, doc: Any, matrix: Any, warnings: list[str], path: Path, matrix_path: Path
) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(ops, bandwidth, links) of a communication.json and a communication_matrix.json (as parsed)."""
    # gathered by comprehensions over all ops at once (a rank of a large job lists thousands a step), each level's
    # shape checked as it is walked and a bad entry named
    entries: list[tuple[str, str, str, Any]] = []  # (step key, section, op key, info)
    for step_key, by_section in items(doc, path):
        for kind, ops_of in items(by_section, path):
            entries += [(step_key, kind, k, v) for k, v in items(ops_of, path) if not k.startswith("Total")]
    bad = next((e for e in entries if type(e[3]) is not dict), None)
    if bad is not None:
        raise InputError(f"{path} {bad[0]} {bad[2]}: expected an object, found {type(bad[3]).__name__}")
    times = [e[3].get("Communication Time Info") or {} for e in entries]
    bad_at = next((i for i, t in enumerate(times) if type(t) is not dict), None)
    if bad_at is not None:
        raise InputError(f"{path} {entries[bad_at][0]} {entries[bad_at][2]}: Communication Time Info is not an object")
    op_keys = [(e[0], e[2]) for e in entries]  # (step key, op key): steps, names and the messages
    sections = [e[1] for e in entries]
    labels = {"start_us": "Start Timestamp(us)", **TIME_KEYS}
    raw = dict(zip(labels, _fields(times, dict.fromkeys(labels.values(), 0)), strict=True))
    by_op = [list(items(e[3].get("Communication Bandwidth Info") or {}, path)) for e in entries]
    of = np.repeat(np.arange(len(by_op), dtype=np.int64), [len(b) for b in by_op])  # each transport row's op
    pairs = [p for b in by_op for p in b]
    bad_at = next((i for i, (_, b) in enumerate(pairs) if type(b) is not dict), None)
    if bad_at is not None:
        step_key, key = op_keys[int(of[bad_at])]
        raise InputError(f"{path} {step_key} {key} {pairs[bad_at][0]}: expected an object")
    bw_transport = [t for t, _ in pairs]
    bw_labels = {"size_mb": "Transit Size(MB)", "time_ms": "Transit Time(ms)", "bandwidth_gbps": "Bandwidth(GB/s)"}
    bw_raw = dict(zip(bw_labels, _fields([b for _, b in pairs], dict.fromkeys(bw_labels.values(), 0)), strict=True))

    def where(i: int) -> str:
        return f"{path} {op_keys[i][0]} {op_keys[i][1]}"

    names, groups = zip(*(key.partition("@")[::2] for _, key in op_keys), strict=True) if op_keys else ((), ())
    steps = _steps([s for s, _ in op_keys])
    ops = pa.table(
        {
            "rank": _rank_column(rank, len(op_keys)),
            "step": steps,
            "section": pa.array(sections, pa.string()),
            "name": pa.array(names, pa.string()),
            "group": pa.array(groups, pa.string()),
            "start_us": floats(raw["start_us"], where, 1e18),
            **{k: floats(raw[k], where, key=label) for k, label in TIME_KEYS.items()},
        },
        schema=OPS_SCHEMA,
    )
    figures = {k: floats(v, lambda i: f"{where(int(of[i]))} {bw_transport[i]}") for k, v in bw_raw.items()}
    used = (figures["size_mb"] != 0) | (figures["time_ms"] != 0)  # torch_npu lists every transport, used or not
    keep = pa.array(np.flatnonzero(used))
    bandwidth = pa.table(
        {
            "rank": _rank_column(rank, len(of)),
            "step": steps.take(pa.array(of)) if len(of) else pa.array([], pa.int32()),
            "name": ops["name"].take(pa.array(of)).combine_chunks() if len(of) else pa.array([], pa.string()),
            "transport": pa.array(bw_transport, pa.string()),
            **figures,
        },
        schema=BANDWIDTH_SCHEMA,
    ).take(keep)
    return ops, bandwidth, links_table(rank, _matrix_columns(matrix, matrix_path), warnings, f"{matrix_path}")


def _matrix_columns(matrix: Any, path: Path) -> dict[str, list[Any]]:
    """The matrix's links as columns: the op entries walked once, each entry's links read by comprehensions."""
    entries: list[tuple[str, str, str]] = []  # (step key, section, op key) of each entry
    counts: list[int] = []
    pair_keys: list[str] = []
    links: list[Any] = []
    for step_key, by_section in items(matrix, path):
        for kind, by_op in items(by_section, path):
            for key, pairs in items(by_op, path):
                if not isinstance(pairs, dict):
                    raise InputError(
                        f"{path} {step_key} {key}: expected an object of links, found {type(pairs).__name__}"
                    )
                entries.append((step_key, kind, key))
                counts.append(len(pairs))
                pair_keys += pairs
                links += pairs.values()
    bad = next((i for i, v in enumerate(links) if type(v) is not dict), None)
    if bad is not None:
        step_key, _, key = entries[int(np.searchsorted(np.cumsum(counts), bad, side="right"))]
        raise InputError(f"{path} {step_key} {key} {pair_keys[bad]}: expected an object")
    # per entry once, then repeated per link (a C-level take), and each distinct "src-dst" key split once
    owner = np.repeat(np.arange(len(entries)), counts)

    def per_link(values: list[Any]) -> list[Any]:
        return list(np.array(values, dtype=object)[owner]) if len(owner) else []

    ops = [k.partition("@") for _, _, k in entries]
    ends = {p: p.partition("-") for p in set(pair_keys)}
    labels = {
        "name": "Op Name",
        "transport": "Transport Type",
        "size_mb": "Transit Size(MB)",
        "time_ms": "Transit Time(ms)",
        "bandwidth_gbps": "Bandwidth(GB/s)",
    }
    figures = dict(
        zip(labels, _fields(links, {**dict.fromkeys(labels.values(), 0), "Transport Type": ""}), strict=True)
    )
    if not all("Op Name" in v for v in links):  # a link without its op's name is named by its entry's key
        full_keys = per_link([k for _, _, k in entries])
        figures["name"] = [v.get("Op Name", k) for v, k in zip(links, full_keys, strict=True)]
    return {
        "step": per_link([e[0] for e in entries]),
        "section": per_link([e[1] for e in entries]),
        "key": per_link([o[0] for o in ops]),
        "group": per_link([o[2] for o in ops]),
        "src": [ends[p][0] for p in pair_keys],
        "dst": [ends[p][2] for p in pair_keys],
        **figures,
    }


def db_tables(rank: int, query: Callable[[str], list[tuple[Any, ...]]], warnings: list[str], where: str) -> tuple:
    """(ops, bandwidth, links) of analysis.db's CommAnalyzerTime, CommAnalyzerBandwidth and CommAnalyzerMatrix."""
    rows = query(
        "select hccl_op_name, group_name, start_timestamp, elapse_time, transit_time, wait_time, "
        "synchronization_time, idle_time, step, type from CommAnalyzerTime"
    )
    cols = list(zip(*rows, strict=True)) if rows else [()] * 10

    def at(table: str) -> Callable[[int], str]:
        return lambda i: f"{where} {table} row {i + 1}"

    ops = pa.table(
        {
            "rank": _rank_column(rank, len(rows)),
            "step": _steps(list(cols[8])),
            "section": pa.array(_texts(cols[9]), pa.string()),
            "name": pa.array(_texts(cols[0]), pa.string()),
            "group": pa.array([str(v) for v in cols[1]], pa.string()),
            "start_us": floats([v or 0 for v in cols[2]], at("CommAnalyzerTime"), 1e18),
            **{
                k: floats([v or 0 for v in c], at("CommAnalyzerTime"))
                for k, c in zip(TIME_KEYS, cols[3:8], strict=True)
            },
        },
        schema=OPS_SCHEMA,
    )
    rows = query(
        "select hccl_op_name, transport_type, transit_size, transit_time, bandwidth, step from CommAnalyzerBandwidth"
    )
    cols = list(zip(*rows, strict=True)) if rows else [()] * 6
    bandwidth = pa.table(
        {
            "rank": _rank_column(rank, len(rows)),
            "step": _steps(list(cols[5])),
            "name": pa.array(_texts(cols[0]), pa.string()),
            "transport": pa.array([str(v) for v in cols[1]], pa.string()),
            **{
                k: floats([v or 0 for v in c], at("CommAnalyzerBandwidth"))
                for k, c in zip(("size_mb", "time_ms", "bandwidth_gbps"), cols[2:5], strict=True)
            },
        },
        schema=BANDWIDTH_SCHEMA,
    )
    rows = query(
        "select step, type, hccl_op_name, op_name, group_name, src_rank, dst_rank, transport_type, transit_size, "
        "transit_time, bandwidth from CommAnalyzerMatrix"
    )
    names = ("step", "section", "key", "name", "group", "src", "dst", "transport", "size_mb", "time_ms")
    cols = list(zip(*rows, strict=True)) if rows else [()] * 11
    links = dict(zip((*names, "bandwidth_gbps"), (list(c) for c in cols), strict=True))
    return ops, bandwidth, links_table(rank, links, warnings, f"{where} CommAnalyzerMatrix")


def _strings(values: list[Any] | pa.Array) -> pa.Array:
    """`values` as a string array: as they are when they are all strings (the common case), else each as text."""
    if isinstance(values, pa.Array) and pa.types.is_string(values.type) and not values.null_count:
        return values
    try:
        out = pa.array(values, pa.string())
        if not out.null_count:
            return out
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass
    return pa.array([str(v) for v in values], pa.string())


def _indices(values: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(indices, readable) of group-local rank indices given as ints or digit strings (else as float text)."""
    try:
        x = np.asarray(values, dtype=np.int64)
        if x.shape == (len(values),):
            return x, np.ones(len(values), dtype=bool)
    except (TypeError, ValueError, OverflowError):
        pass
    out = np.zeros(len(values), dtype=np.int64)
    ok = np.ones(len(values), dtype=bool)
    for i, v in enumerate(values):
        try:
            f = float(v)
            out[i] = int(max(-1.0, min(f, float(_INDEX_LIMIT))))
        except (TypeError, ValueError, OverflowError):
            ok[i] = False
    return out, ok


def links_table(rank: int, cols: dict[str, Any], warnings: list[str], where: str) -> pa.Table:
    """Link rows with their group-local indices (mapped to global ranks with the whole cluster's communicators),
    summed per step, section, communicator, src, dst and transport: the matrix is per link, and a rank of a
    large job lists thousands of ops a step (the op is kept where one op is the link's only one).
    torch_npu's own matrix is a summary per op kind (`allreduce-top1`, `-middle`, `-bottom1`, ..., `-total`): of
    a step and section that has `-total` rows only those count (the others repeat their figures); ours lists each
    op."""
    n = len(cols["step"])
    if not n:
        return LINKS_SCHEMA.empty_table()
    keys, step_keys, sections = (_strings(cols[k]) for k in ("key", "step", "section"))
    total = pc.ends_with(keys, "-total").to_numpy(zero_copy_only=False)
    keep = np.ones(n, dtype=bool)
    if total.any():  # within a step and section that has `-total` rows, only those
        pairs = pc.binary_join_element_wise(step_keys, sections, "\x00")
        with_total = pc.is_in(pairs, value_set=pc.unique(pairs.filter(pa.array(total)))).to_numpy(zero_copy_only=False)
        keep = ~with_total | total
    src, src_ok = _indices(cols["src"])
    dst, dst_ok = _indices(cols["dst"])
    unreadable = int((keep & ~(src_ok & dst_ok)).sum())
    if unreadable:
        warnings.append(f"rank {rank}: {unreadable} communication-matrix links without rank indices: left out")
    keep &= src_ok & dst_ok

    rows = None if keep.all() else np.flatnonzero(keep)

    def figures(k: str) -> np.ndarray:
        values = cols[k] if rows is None else [cols[k][i] for i in rows]
        return floats(values, lambda i: where)

    table = pa.table(
        {
            "step": step_keys,
            "section": sections,
            "group": _strings(cols["group"]),
            "src_local": pa.array(np.clip(src, -1, _INDEX_LIMIT).astype(np.int32)),
            "dst_local": pa.array(np.clip(dst, -1, _INDEX_LIMIT).astype(np.int32)),
            "transport": _strings(cols["transport"]),
            "name": _strings(cols["name"]),
        }
    )
    if rows is not None:
        table = table.take(pa.array(rows))
    table = table.append_column("size_mb", pa.array(figures("size_mb")))
    table = table.append_column("time_ms", pa.array(figures("time_ms")))
    table = table.append_column("bandwidth_gbps", pa.array(figures("bandwidth_gbps")))
    summed = table.group_by(_LINK_KEYS, use_threads=False).aggregate(
        [("name", "first"), ("name", "count"), ("size_mb", "sum"), ("time_ms", "sum"), ("bandwidth_gbps", "first")]
    )
    return summed_links(rank, summed)


def summed_links(rank: int, summed: pa.Table) -> pa.Table:
    """The links table of link rows already summed per `_LINK_KEYS` (columns `name_first`, `name_count`,
    `size_mb_sum`, `time_ms_sum`, `bandwidth_gbps_first` beside the keys), in the keys' order."""
    summed = summed.sort_by([(k, "ascending") for k in _LINK_KEYS])  # a group-by's own order is not promised
    count = summed["name_count"].to_numpy()
    size, time = summed["size_mb_sum"].to_numpy(), summed["time_ms_sum"].to_numpy()
    one = count == 1
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # a vanishing time would give an infinite bandwidth (not JSON): bounded as every figure read is
        mean_bw = np.minimum(np.where(time != 0, size / np.where(time != 0, time, 1.0), 0.0), 1e15)
    names = pc.if_else(
        pa.array(one),
        summed["name_first"],
        pc.binary_join_element_wise(pc.cast(summed["name_count"], pa.string()), "ops", " "),
    )
    return pa.table(
        {
            "rank": _rank_column(rank, summed.num_rows),
            "step": _steps(summed["step"].to_pylist()),
            "section": summed["section"],
            "name": names,
            "group": summed["group"],
            "src_local": summed["src_local"],
            "dst_local": summed["dst_local"],
            "transport": summed["transport"],
            "size_mb": size,
            "time_ms": time,
            "bandwidth_gbps": np.where(one, summed["bandwidth_gbps_first"].to_numpy(), mean_bw),
        },
        schema=LINKS_SCHEMA,
    )
