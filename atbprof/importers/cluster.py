"""A cluster of rank profiles: one torch_npu `*_ascend_pt` directory per rank (text, db, or mixed), found by content
(rank ids from profiler_info / profiler_metadata, not directory names), as msprof-analyze's `cluster` mode reads
them; or a run of ours on several devices.

Each rank is read on its own (importers/cluster_rank.py: in this process, a local process pool or Ray tasks), its
tables streamed to per-rank Parquet (`<table>/rank=N/part-0.parquet`, hive-partitioned: DuckDB and pandas read
them directly) and the cluster's tables reduced from those files, so the ranks are never all held as parsed files.
A rank that cannot be read, or is a second copy of a rank id, or is of another capture (hours apart from the most
ranks), is left out with a warning; the cluster needs two readable ranks. Links are mapped from group-local indices
to global ranks through the communicators of every rank's profiler_metadata.json; a communicator no rank records is
taken to be the ranks that report it, sorted (what msprof-analyze does, its CommunicationGroupMapping)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from atbprof.errors import InputError
from atbprof.importers.ascend_dirs import PT_OUTPUT, is_ascend_pt
from atbprof.importers.cluster_comm import json_tables
from atbprof.importers.cluster_rank import MAX_RANKS, RankPart, _groups, _RankReader, read_rank
from atbprof.importers.cluster_tables import (
    RANK_TABLE_SCHEMAS,
    STEP_COLUMNS,
    STEPS_SCHEMA,
    Cluster,
    RankProfile,
    map_links,
    sum_bandwidth,
)
from atbprof.importers.ours import is_run_dir
from atbprof.importers.run_doc import read_run_doc

if TYPE_CHECKING:
    from atbprof.importers.cluster_ops import OpsReducer

__all__ = ["STEP_COLUMNS", "Cluster", "RankProfile", "is_cluster", "load_cluster", "rank_dirs"]

CAPTURE_GAP_S = 3600.0
"""Ranks whose first communication ops are further apart than this are of different captures."""
PART_FILE = "part-0.parquet"


def rank_dirs(path: Path) -> list[Path]:
    """The profile directories of a cluster directory: its children that are torch_npu profiles, else its
    grandchildren (an export root holding one `<run>_cluster/`)."""
    children = sorted(p for p in path.iterdir() if p.is_dir())
    found = [p for p in children if is_ascend_pt(p) and p.name != PT_OUTPUT]
    if found:
        return found
    return sorted(q for p in children for q in p.iterdir() if q.is_dir() and is_ascend_pt(q) and q.name != PT_OUTPUT)


def _run_devices(path: Path) -> int:
    """Devices of a run directory of ours (summary.parallel.devices of run.json; 1 if not recorded)."""
    doc = read_run_doc(path / "run.json") if (path / "run.json").is_file() else {}
    parallel = (doc.get("summary") or {}).get("parallel")
    return int(parallel.get("devices") or 1) if isinstance(parallel, dict) else 1


def is_cluster(path: Path) -> bool:
    """A directory of rank profiles, or a run of ours on several devices."""
    if not path.is_dir():
        return False
    if is_run_dir(path):
        return _run_devices(path) > 1
    return not is_ascend_pt(path) and len(rank_dirs(path)) >= 2


def _load_run(path: Path, keep_rows: bool = True) -> Cluster:
    """A run of ours on several devices, each rank as its `--to ascend-pt` export would hold it (step split,
    communication.json, communication_matrix.json, parallel groups), computed from ops.parquet without writing.
    `keep_rows` False: the communication op rows are reduced rank by rank and not kept (Cluster.ops empty)."""
    from atbprof.export import cluster as export
    from atbprof.export.cluster_columns import communication_tables
    from atbprof.export.common import load_run
    from atbprof.export.tables import StepComputing
    from atbprof.export.timeline import BusyTracker
    from atbprof.heap import release_freed
    from atbprof.importers.cluster_ops import OpsReducer

    source = load_run(path)
    per_rank = source.rank_rows()
    warnings: list[str] = []
    ranks: list[RankProfile] = []
    step_rows: list[dict[str, Any]] = []
    tables: dict[str, list[pa.Table]] = {"ops": [], "bandwidth": [], "links": []}
    reducer = OpsReducer()
    for rank in range(source.devices):
        view = source.for_rank(rank, per_rank.get(rank, 0))
        computing, tracker, comm = StepComputing(), BusyTracker(), []
        for b, busy in tracker.batches(view, export.COMM_COLUMNS):  # one pass: the step split and the collectives
            computing.add(b, busy.new_busy)
            comm.append(export.comm_of(b))
        rows = export.comm_rows(comm)
        del comm
        sync = view.sync_ns() if export.is_last_stage(view, rank) else 0
        meta = export.metadata(view, rank)
        groups, communicators = _groups(meta, path / "run.json")
        reader = _RankReader(path, rank)
        steps = reader.steps_csv(computing.csv(view.steps, sync), f"{path} rank {rank}")
        columns = communication_tables(view, rank, warnings, str(path), rows)
        if columns is None:  # two ops of a step with one key: the JSON's own rule decides which is kept
            columns = json_tables(rank, *export.communication(view, rank, rows), warnings, path, path)
        ops, bandwidth, links = columns
        ranks.append(RankProfile(rank, path, None, True, groups, communicators, "atbprof run", run=True))
        step_rows += steps
        reducer.add(ops)
        kept = ops if keep_rows else ops.schema.empty_table()
        # a rank's bandwidth rows (one per op, transport and step: ~60 MB a rank at 20 M ops) summed over steps now
        for key, table in (("ops", kept), ("bandwidth", sum_bandwidth(bandwidth)), ("links", links)):
            tables[key].append(table)
        del view, computing, tracker, rows, columns, ops, kept, bandwidth, links
        release_freed()  # each rank's transient arrays would stack on what the last one freed
    tables["steps"] = [pa.Table.from_pylist(step_rows, schema=STEPS_SCHEMA)]
    parallel = {**export.parallel_of(source), "world": source.devices}
    cluster = _reduce(path, ranks, tables, parallel, warnings, reducer=reducer, summed=("bandwidth",))
    del source, tables, reducer  # the run's reader and the per-rank tables: freed before what they held is handed back
    release_freed()
    return cluster


def write_part(root: Path, table_name: str, rank: int, table: pa.Table) -> None:
    """One rank's table as `<root>/<table>/rank=<rank>/part-0.parquet` (the partition column in the path)."""
    import pyarrow.parquet as pq  # lazy: a single profile's analyze never writes Parquet

    d = root / table_name / f"rank={rank}"
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.drop_columns(["rank"]), d / PART_FILE, compression="zstd")


def read_parts(
    root: Path, table_name: str, schema: pa.Schema, per_rank: Callable[[pa.Table], pa.Table] | None = None
) -> pa.Table:
    """A table of the per-rank Parquet files under `root` (rank from the path), in rank order; `per_rank` reduces
    each rank's table as it is read (only the reduced tables are held together)."""
    import pyarrow.dataset as ds  # lazy, as in write_part

    d = root / table_name
    if not d.is_dir():
        return schema.empty_table()
    if per_rank is not None:
        import pyarrow.parquet as pq

        parts = []
        for rank, part in sorted((int(p.parent.name.removeprefix("rank=")), p) for p in d.glob("rank=*/*.parquet")):
            t = pq.read_table(part)
            t = t.append_column("rank", pa.array(np.full(t.num_rows, rank, np.int32)))
            parts.append(per_rank(t.select(schema.names).cast(schema)))
        return pa.concat_tables(parts) if parts else per_rank(schema.empty_table())
    partitioning = ds.partitioning(pa.schema([pa.field("rank", pa.int32())]), flavor="hive")
    table = ds.dataset(d, format="parquet", partitioning=partitioning).to_table()
    table = table.select(schema.names).cast(schema)
    return table.sort_by([("rank", "ascending")]) if table.num_rows else table


def _captures(parts: list[RankPart], warnings: list[str]) -> list[RankPart]:
    """The ranks of the main capture: split where first-op times are more than CAPTURE_GAP_S apart, keep the group
    with the most ranks (the earliest of equals); the others are left out, named."""
    timed = sorted((p for p in parts if p.start_us is not None), key=lambda p: p.start_us or 0.0)
    groups: list[list[RankPart]] = []
    for p in timed:
        if groups and (p.start_us or 0.0) - (groups[-1][-1].start_us or 0.0) <= CAPTURE_GAP_S * 1e6:
            groups[-1].append(p)
        else:
            groups.append([p])
    if len(groups) <= 1:
        return parts
    main = max(groups, key=len)
    for g in groups:
        if g is main:
            continue
        gap_h = abs((g[0].start_us or 0.0) - (main[0].start_us or 0.0)) / 3.6e9
        names = ", ".join(f"rank {p.profile.rank}" for p in g if p.profile)
        warnings.append(
            f"{names}: captured {gap_h:,.1f} h apart from the other {len(main)} ranks (another profiling run): left "
            "out; profile all ranks in one run to compare them"
        )
    dropped = {id(p) for g in groups if g is not main for p in g}
    return [p for p in parts if id(p) not in dropped]


def _infer_communicators(
    ranks: list[RankProfile], ops: pa.Table, links: pa.Table, warnings: list[str]
) -> dict[str, list[int]]:
    """Every rank's recorded communicators, and for one that none records the sorted ranks reporting it (`ops`:
    the op rows or their sums, which have the same (group, rank) pairs)."""
    known: dict[str, list[int]] = {}
    for r in ranks:
        known.update(r.communicators)
    pairs = pa.concat_tables([t.select(["group", "rank"]) for t in (ops, links)])
    pairs = pairs.group_by(["group", "rank"], use_threads=False).aggregate([])  # distinct (group, rank): few
    reporting: dict[str, set[int]] = {}
    for group, rank in zip(pairs.column("group").to_pylist(), pairs.column("rank").to_pylist(), strict=True):
        if group and group not in known:
            reporting.setdefault(group, set()).add(rank)
    for group, members in sorted(reporting.items()):
        known[group] = sorted(members)
        shown = ", ".join(map(str, known[group][:8])) + (", ..." if len(members) > 8 else "")
        warnings.append(
            f"communicator {group}: no rank records its members (profiler_metadata.json parallel_group_info); taken "
            f"as the ranks that report it ({shown}), as msprof-analyze does"
        )
    return known


def _reduce(
    path: Path,
    ranks: list[RankProfile],
    tables: dict[str, list[pa.Table]] | Path,
    parallel: dict[str, int],
    warnings: list[str],
    per_rank: bool = False,
    reducer: OpsReducer | None = None,
    summed: tuple[str, ...] = (),
) -> Cluster:
    """The cluster from its ranks' tables (in memory, or per-rank Parquet under a directory); `per_rank`: the
    in-memory tables are reduced rank by rank, as those read from Parquet are; `summed`: in-memory tables already
    reduced rank by rank as they were made; `reducer`: the op rows already reduced rank by rank (else they are
    reduced here, from the op table)."""
    from atbprof.importers.cluster_ops import OpsReducer

    def table(name: str) -> pa.Table:
        schema, reduce = RANK_TABLE_SCHEMAS[name], (sum_bandwidth if name == "bandwidth" else None)
        if isinstance(tables, Path):
            return read_parts(tables, name, schema, reduce)
        held = tables[name]
        if reduce is None:
            return pa.concat_tables(held) if held else schema.empty_table()
        if not held:
            return reduce(schema.empty_table())
        if name in summed:  # reduced rank by rank as they were made
            return pa.concat_tables(held)
        return pa.concat_tables([reduce(t) for t in held]) if per_rank else reduce(pa.concat_tables(held))

    steps, ops, bandwidth, links = (table(n) for n in ("steps", "ops", "bandwidth", "links"))
    if reducer is None:
        reducer = OpsReducer()
        reducer.add(ops)
    op_sums = reducer.sums()
    communicators = _infer_communicators(ranks, op_sums, links, warnings)
    matrix, unmapped = map_links(links, communicators)
    if unmapped:
        warnings.append(
            f"{unmapped} communication-matrix links name a rank outside their communicator's known members (ranks "
            "not in this cluster): left out"
        )
    if isinstance(tables, Path):
        import pyarrow.dataset as ds  # lazy, as in write_part

        ds.write_dataset(
            matrix,
            tables / "matrix",
            format="parquet",
            partitioning=ds.partitioning(pa.schema([pa.field("rank", pa.int32())]), flavor="hive"),
            basename_template="part-{i}.parquet",
            existing_data_behavior="overwrite_or_ignore",
            use_threads=False,
            max_partitions=MAX_RANKS,  # one per rank (Arrow's default stops at 1,024)
        )
    ranks = sorted(ranks, key=lambda r: r.rank)
    return Cluster(path, ranks, steps, ops, bandwidth, matrix, parallel, op_sums, reducer.collectives(), warnings)


def discover(path: Path) -> list[Path]:
    """The rank directories of a cluster directory, or the reason there are too few (InputError)."""
    dirs = rank_dirs(Path(path))
    if len(dirs) > MAX_RANKS:
        raise InputError(f"{path}: {len(dirs):,} rank profiles, more than a cluster has ({MAX_RANKS:,} at most)")
    if len(dirs) < 2:
        raise InputError(
            f"{path}: a cluster needs at least two rank profiles (*_ascend_pt directories), found {len(dirs)}"
        )
    return dirs


IN_MEMORY_RANKS = 256
"""Below this many ranks a cluster's per-rank tables are held in memory rather than written to Parquet parts and
read back (32 ranks: ~0.2 s of writing and reading saved; 128 ranks held 371 MB in all)."""


def gather(
    path: Path,
    parts: Iterator[RankPart],
    store: Path | None,
    on_rank: Callable[[RankPart], None] | None = None,
) -> Cluster:
    """Stream rank parts (as a map over the rank directories yields them) into per-rank Parquet under `store` and
    reduce the cluster from it (`store` None: the tables held in memory, for a small cluster; the per-rank tables
    only a `--tables` directory keeps, the findings, are then dropped). `on_rank` sees each readable, kept rank
    first (to add per-rank tables of its own)."""
    warnings: list[str] = []
    seen: dict[int, Path] = {}
    kept: list[RankPart] = []
    held: dict[int, dict[str, pa.Table]] = {}
    for part in parts:
        if part.error is not None or part.profile is None:
            warnings.append(f"{part.path}: left out: {part.error}")
            continue
        rank = part.profile.rank
        if rank in seen:
            warnings.append(f"{part.path}: rank {rank} again (first in {seen[rank]}): left out")
            continue
        seen[rank] = part.path
        warnings += part.warnings
        if store is None:
            held[rank] = {n: t for n, t in part.tables.items() if n in RANK_TABLE_SCHEMAS}
        else:
            for name, t in part.tables.items():
                write_part(store, name, rank, t)
        if on_rank is not None:
            on_rank(part)
        part.tables = {}  # written (or held above): not held twice
        kept.append(part)
    main = _captures(kept, warnings)
    if len(main) < len(kept):
        for p in kept:
            if p not in main and p.profile is not None:
                held.pop(p.profile.rank, None)
                for name in ("steps", "ops", "bandwidth", "links", "findings"):
                    if store is not None:
                        shutil.rmtree(store / name / f"rank={p.profile.rank}", ignore_errors=True)
    if len(main) < 2:
        raise InputError(
            f"{path}: a cluster needs at least two readable rank profiles, found {len(main)}"
            + ("".join(f"\n  {w}" for w in warnings) if warnings else "")
        )
    parallel = next((p.parallel for p in main if p.parallel), None) or {"tp": 0, "pp": 0, "dp": 0, "world": 0}
    ranks = [p.profile for p in main if p.profile]
    if store is None:  # in rank order and reduced rank by rank, as read_parts gives them
        tables = {
            n: [held[r][n].select(schema.names).cast(schema) for r in sorted(held) if n in held[r]]
            for n, schema in RANK_TABLE_SCHEMAS.items()
        }
        return _reduce(Path(path), ranks, tables, parallel, warnings, per_rank=True)
    return _reduce(Path(path), ranks, store, parallel, warnings)


def load_cluster(path: Path, *, workers: int | None = None, ray: str | None = None, rows: bool = True) -> Cluster:
    """Read every rank of a cluster directory (or of a run of ours on several devices); a rank that cannot be
    read is a warning, fewer than two an error. Ranks are read by `workers` processes or on Ray (scale/pool.py).
    `rows` False: a run of ours keeps its communication op rows only as sums and keys (Cluster.ops empty: the
    analysis reads those; the cluster trace draws the rows)."""
    from atbprof.scale.pool import map_ordered, read_workers

    path = Path(path)
    if is_run_dir(path):
        return _load_run(path, keep_rows=rows)
    dirs = discover(path)
    parts = map_ordered(read_rank, dirs, workers=read_workers(workers, len(dirs)), ray=ray)
    if len(dirs) < IN_MEMORY_RANKS:
        return gather(path, parts, None)
    with tempfile.TemporaryDirectory(prefix="atbprof-cluster-") as tmp:
        return gather(path, parts, Path(tmp))
