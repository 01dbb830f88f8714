"""The tables of a cluster (explicit Arrow schemas; µs for the step split, ms and MB for communication, as the
profiles give it), its ranks, and the mapping of group-local link indices to global ranks."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

STEP_COLUMNS = (
    "computing_us",
    "communication_not_overlapped_us",
    "overlapped_us",
    "communication_us",
    "free_us",
    "stage_us",
    "bubble_us",
    "communication_not_overlapped_exclude_receive_us",
    "preparing_us",
)
CSV_STEP_COLUMNS = (
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
)
DB_STEP_COLUMNS = tuple(c.removesuffix("_us").replace("_exclude_", "_and_exclude_") for c in STEP_COLUMNS)
TIME_KEYS = {
    "elapse_ms": "Elapse Time(ms)",
    "transit_ms": "Transit Time(ms)",
    "wait_ms": "Wait Time(ms)",
    "synchronization_ms": "Synchronization Time(ms)",
    "idle_ms": "Idle Time(ms)",
}
STEPS_SCHEMA = pa.schema(
    [pa.field("rank", pa.int32()), pa.field("step", pa.int32())] + [pa.field(c, pa.float64()) for c in STEP_COLUMNS]
)
OPS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("step", pa.int32()),
        pa.field("section", pa.string()),  # collective | p2p
        pa.field("name", pa.string()),
        pa.field("group", pa.string()),  # the communicator's name (after '@')
        pa.field("start_us", pa.float64()),
        *(pa.field(k, pa.float64()) for k in TIME_KEYS),
    ]
)
BANDWIDTH_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("step", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("transport", pa.string()),
        pa.field("size_mb", pa.float64()),
        pa.field("time_ms", pa.float64()),
        pa.field("bandwidth_gbps", pa.float64()),
    ]
)
MATRIX_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),  # whose file
        pa.field("step", pa.int32()),
        pa.field("section", pa.string()),
        pa.field("name", pa.string()),  # the op the link is of
        pa.field("src_rank", pa.int32()),
        pa.field("dst_rank", pa.int32()),
        pa.field("transport", pa.string()),
        pa.field("size_mb", pa.float64()),
        pa.field("time_ms", pa.float64()),
        pa.field("bandwidth_gbps", pa.float64()),
    ]
)
LINKS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),  # whose file
        pa.field("step", pa.int32()),
        pa.field("section", pa.string()),
        pa.field("name", pa.string()),
        pa.field("group", pa.string()),  # the communicator whose group-local indices src / dst are
        pa.field("src_local", pa.int32()),
        pa.field("dst_local", pa.int32()),
        pa.field("transport", pa.string()),
        pa.field("size_mb", pa.float64()),
        pa.field("time_ms", pa.float64()),
        pa.field("bandwidth_gbps", pa.float64()),
    ]
)
"""A rank's links as its file gives them: group-local indices, mapped to global ranks once the cluster's
communicators are all known (`map_links`)."""
RANK_TABLE_SCHEMAS = {"steps": STEPS_SCHEMA, "ops": OPS_SCHEMA, "bandwidth": BANDWIDTH_SCHEMA, "links": LINKS_SCHEMA}
BANDWIDTH_SUM_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("name", pa.string()),
        pa.field("transport", pa.string()),
        pa.field("size_mb", pa.float64()),
        pa.field("time_ms", pa.float64()),
    ]
)
"""A rank's transports per op, summed over steps (what the cluster keeps: a rank's raw rows are per step)."""
TABLE_SCHEMAS = {"steps": STEPS_SCHEMA, "ops": OPS_SCHEMA, "bandwidth": BANDWIDTH_SUM_SCHEMA, "matrix": MATRIX_SCHEMA}


def sum_bandwidth(rows: pa.Table) -> pa.Table:
    """Per rank, op and transport: the transit size and time of `rows` (BANDWIDTH_SCHEMA) summed over steps, the
    transports that carried nothing left out."""
    positive = pc.greater(rows.column("size_mb"), 0)
    # no copy of millions of rows when all carry bytes (a run's do): the same rows, chunks and so group order
    every = rows.num_rows == 0 or (positive.null_count == 0 and pc.all(positive).as_py())
    used = rows if every else rows.filter(positive)
    agg = used.group_by(["rank", "name", "transport"], use_threads=False).aggregate(
        [("size_mb", "sum"), ("time_ms", "sum")]
    )
    return agg.rename_columns([n.removesuffix("_sum") for n in agg.column_names]).select(BANDWIDTH_SUM_SCHEMA.names)


@dataclass(frozen=True)
class RankProfile:
    rank: int
    path: Path
    device_id: int | None
    complete: bool  # has kernel tables: the single-profile analysis can run on it
    groups: dict[str, list[int]]  # parallel group name (tp, pp, dp, ...) -> its global ranks
    communicators: dict[str, list[int]]  # communicator name (as op names carry it) -> global ranks
    step_source: str  # analysis.db | step_trace_time.csv | atbprof run | none
    run: bool = False  # a rank of a run of ours: `path` is the run directory, its tasks those of `rank`

    @property
    def stage(self) -> int | None:
        """The rank's pipeline stage: its index in its pp group (None: no pp group recorded)."""
        pp = self.groups.get("pp")
        return pp.index(self.rank) if pp and self.rank in pp else None


NO_STEP = -(2**40)
"""A collective row's step where it has none (steps are int32: no real step is this)."""


@dataclass(frozen=True)
class Collectives:
    """Every collective row in rank order: its collective's key (step, name and communicator codes, a null name or
    communicator as ""; null step: NO_STEP), how long it waited (ms, null as 0) and its rank."""

    step: np.ndarray  # int64
    name: np.ndarray  # int32 code
    group: np.ndarray  # int32 code
    names: int  # distinct names (code range)
    groups: int
    wait_ms: np.ndarray  # float64
    rank: np.ndarray  # int32

    def ids(self) -> np.ndarray:
        """An integer per row, equal for the rows of one collective."""
        valid = self.step != NO_STEP
        lo = int(self.step[valid].min()) if valid.any() else 0
        step = np.where(valid, self.step - lo + 1, 0)  # 0: no step
        span = int(step.max(initial=0)) + 1
        if span * max(self.names, 1) * max(self.groups, 1) < 1 << 62:
            return (step * max(self.names, 1) + self.name.astype(np.int64)) * max(self.groups, 1) + self.group
        keys = np.stack([step, self.name, self.group], axis=1)  # not one int64: numbered by distinct rows
        return np.unique(keys, axis=0, return_inverse=True)[1].reshape(-1)


@dataclass
class Cluster:
    path: Path
    ranks: list[RankProfile]
    steps: pa.Table
    ops: pa.Table  # OPS_SCHEMA: per rank, op and step; empty where not kept (load_cluster(rows=False))
    bandwidth: pa.Table  # BANDWIDTH_SUM_SCHEMA: summed over steps per rank
    matrix: pa.Table
    parallel: dict[str, int]  # tp, pp, dp, world (profiler_metadata's distributed_args; 0 = not recorded)
    op_sums: pa.Table  # the op rows summed per rank and op (importers/cluster_ops.py)
    collectives: Collectives  # the collective rows' keys and waits (importers/cluster_ops.py)
    warnings: list[str] = field(default_factory=list)


def communicator_name(key: str) -> str:
    """The HCCL communicator name of a parallel_group_info key, as op names carry it after '@' (the two 32-bit
    polynomial hashes, primes 29 and 131: how msprof-analyze maps a communicator to its group)."""
    h0 = h1 = 0
    for ch in key:
        h0 = (h0 * 29 + ord(ch)) & 0xFFFFFFFF
        h1 = (h1 * 131 + ord(ch)) & 0xFFFFFFFF
    return str((h0 << 32) | h1)


def map_links(links: pa.Table, communicators: dict[str, list[int]]) -> tuple[pa.Table, int]:
    """The matrix (global src / dst ranks) of local links, and how many links could not be mapped (a communicator
    not known, or an index beyond its members)."""
    # vectorised over the links (millions in a large cluster): each communicator's members laid end to end,
    # a link's global rank = members[offset of its communicator + its local index]
    codes = pc.dictionary_encode(links.column("group").combine_chunks())
    names = codes.dictionary.to_pylist()
    members = [communicators.get(g) or [] for g in names]
    known = np.array([g in communicators for g in names] + [False], dtype=bool)
    sizes = np.array([len(m) for m in members] + [0], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)])[:-1]
    flat = np.array([r for m in members for r in m], dtype=np.int64)
    code = codes.indices.fill_null(len(names)).to_numpy(zero_copy_only=False).astype(np.int64)
    s_local = links.column("src_local").fill_null(-1).to_numpy().astype(np.int64)
    d_local = links.column("dst_local").fill_null(-1).to_numpy().astype(np.int64)
    n = sizes[code]
    ok = known[code] & (s_local >= 0) & (s_local < n) & (d_local >= 0) & (d_local < n)
    keep = np.flatnonzero(ok)
    src = flat[offsets[code[keep]] + s_local[keep]] if len(keep) else np.zeros(0, np.int64)
    dst = flat[offsets[code[keep]] + d_local[keep]] if len(keep) else np.zeros(0, np.int64)
    kept = links.take(pa.array(keep, pa.int64()))
    matrix = pa.table(
        {
            "rank": kept.column("rank"),
            "step": kept.column("step"),
            "section": kept.column("section"),
            "name": kept.column("name"),
            "src_rank": pa.array(src.astype(np.int32), pa.int32()),
            "dst_rank": pa.array(dst.astype(np.int32), pa.int32()),
            **{c: kept.column(c) for c in ("transport", "size_mb", "time_ms", "bandwidth_gbps")},
        },
        schema=MATRIX_SCHEMA,
    )
    return matrix, links.num_rows - len(keep)
