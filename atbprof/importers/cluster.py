"""A cluster of rank profiles: one torch_npu `*_ascend_pt` directory per rank, found by content (rank ids from
profiler_info / profiler_metadata, not directory names), as msprof-analyze's `cluster` mode reads them.

Per rank: its step split (analysis.db's StepTraceTime when the rank has one - what msprof-analyze reads in its
db mode - else step_trace_time.csv), its communication ops with their time split and bandwidth per transport
(analysis.db's CommAnalyzerTime / CommAnalyzerBandwidth, else communication.json), its links
(CommAnalyzerMatrix, else communication_matrix.json; group-local rank indices mapped to global ranks through the
parallel group whose communicator name the op carries), its parallel groups (profiler_metadata.json) and whether
it is complete (kernel tables: the single-profile analysis can run on it). A rank that cannot be read is left out
with a warning; the cluster needs two readable ranks. Units: µs for the step split, ms and MB as the files give
communication (their own units, named in the columns)."""

from __future__ import annotations

import csv
import io
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from atbprof.errors import InputError
from atbprof.importers.ascend_dirs import PT_OUTPUT, is_ascend_pt
from atbprof.importers.ours import RUN_JSON_MAX_BYTES, is_run_dir
from atbprof.inputs import max_input_bytes, read_bytes, read_text, regular_file

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
TABLE_SCHEMAS = {"steps": STEPS_SCHEMA, "ops": OPS_SCHEMA, "bandwidth": BANDWIDTH_SCHEMA, "matrix": MATRIX_SCHEMA}
JSON_MAX_BYTES = 1 << 30  # a rank's communication.json: thousands of ops a step, a few hundred bytes each
_STEP = re.compile(r"^step(\d{1,9})$")


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


@dataclass
class Cluster:
    path: Path
    ranks: list[RankProfile]
    steps: pa.Table
    ops: pa.Table
    bandwidth: pa.Table
    matrix: pa.Table
    parallel: dict[str, int]  # tp, pp, dp, world (profiler_metadata's distributed_args; 0 = not recorded)
    warnings: list[str] = field(default_factory=list)


def communicator_name(key: str) -> str:
    """The HCCL communicator name of a parallel_group_info key, as op names carry it after '@' (the two 32-bit
    polynomial hashes, primes 29 and 131: how msprof-analyze maps a communicator to its group)."""
    h0 = h1 = 0
    for ch in key:
        h0 = (h0 * 29 + ord(ch)) & 0xFFFFFFFF
        h1 = (h1 * 131 + ord(ch)) & 0xFFFFFFFF
    return str((h0 << 32) | h1)


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
    doc = _json(path / "run.json", RUN_JSON_MAX_BYTES) if (path / "run.json").is_file() else {}
    parallel = (doc.get("summary") or {}).get("parallel") if isinstance(doc, dict) else None
    return int(parallel.get("devices") or 1) if isinstance(parallel, dict) else 1


def is_cluster(path: Path) -> bool:
    """A directory of rank profiles, or a run of ours on several devices."""
    if not path.is_dir():
        return False
    if is_run_dir(path):
        return _run_devices(path) > 1
    return not is_ascend_pt(path) and len(rank_dirs(path)) >= 2


def _json(path: Path, limit: int = 1 << 24) -> Any:
    try:
        return orjson.loads(read_bytes(path, min(limit, max_input_bytes())))
    except orjson.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None


def _rank_of(d: Path) -> tuple[int, int | None, dict[str, Any]]:
    """(rank id, device id, profiler_metadata) of a rank directory, from its files."""
    meta_path = d / "profiler_metadata.json"
    meta = _json(meta_path) if meta_path.is_file() else {}
    if not isinstance(meta, dict):
        raise InputError(f"{meta_path}: expected a JSON object")
    rank: int | None = None
    for info in sorted(d.glob("profiler_info*.json")):
        doc = _json(info)
        value = doc.get("rank_id") if isinstance(doc, dict) else None
        if value is not None and str(value).lstrip("-").isdigit() and int(value) >= 0:
            rank = int(value)
            break
    args = meta.get("distributed_args")
    if rank is None and isinstance(args, dict) and isinstance(args.get("rank"), int):
        rank = int(args["rank"])
    if rank is None:
        raise InputError(
            f"{d}: no rank id (profiler_info_*.json rank_id or profiler_metadata.json distributed_args.rank)"
        )
    return rank, None, meta


def _groups(meta: dict[str, Any], source: Path) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    info = meta.get("parallel_group_info") or {}
    groups: dict[str, list[int]] = {}
    communicators: dict[str, list[int]] = {}
    if not isinstance(info, dict):
        raise InputError(f"{source}: parallel_group_info is not an object")
    for key, g in info.items():
        if not isinstance(g, dict) or not isinstance(g.get("global_ranks"), list):
            continue
        ranks = [int(r) for r in g["global_ranks"] if isinstance(r, int)]
        name = str(g.get("group_name", ""))
        groups.setdefault(name, ranks)
        communicators[communicator_name(str(key))] = ranks
    return groups, communicators


def _step_of(text: object) -> int | None:
    m = _STEP.match(str(text))
    return int(m.group(1)) if m else None


def _number(value: object, where: str, limit: float = 1e15) -> float:
    """A finite number within `limit` (times in µs / ms and sizes in MB; epoch timestamps in µs need 1e18)."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: {value!r} is not a number") from None
    if x != x or abs(x) > limit:
        raise InputError(f"{where}: {value!r} is not a plausible time or size")
    return x


class _RankReader:
    """Everything of one rank directory, into row lists of the cluster tables."""

    def __init__(self, d: Path, rank: int) -> None:
        self.d, self.rank = d, rank
        self.out = d / PT_OUTPUT if (d / PT_OUTPUT).is_dir() else d
        self.db = self.out / "analysis.db"
        self._table_names: set[str] | None = None

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        try:
            con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
            try:
                return con.execute(sql).fetchall()
            finally:
                con.close()
        except sqlite3.Error as err:
            raise InputError(
                f"{self.db}: {err} (damaged, or of a schema atbprof does not know; re-export it)"
            ) from None

    def _tables(self) -> set[str]:
        """The tables of the rank's analysis.db (read once)."""
        if self._table_names is None:
            self._table_names = set()
            if self.db.exists():
                regular_file(self.db)  # a FIFO or an oversized file is refused before sqlite opens it
                rows = self._query("select name from sqlite_master where type = 'table'")
                self._table_names = {r[0] for r in rows}
        return self._table_names

    def steps(self) -> tuple[list[dict[str, Any]], str]:
        if "StepTraceTime" in self._tables():
            rows = self._query(f"select step, {', '.join(DB_STEP_COLUMNS)} from StepTraceTime")
            where = f"{self.db} StepTraceTime"
            return [self._step_row(r[0], r[1:], where) for r in rows], "analysis.db"
        path = self.out / "step_trace_time.csv"
        if not path.is_file():
            return [], "none"
        return self.steps_csv(read_text(path, 1 << 26), str(path)), "step_trace_time.csv"

    def steps_csv(self, text: str, where: str) -> list[dict[str, Any]]:
        reader = csv.DictReader(io.StringIO(text))
        missing = [c for c in ("Step", *CSV_STEP_COLUMNS) if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{where}: missing columns {', '.join(missing)} (not a step_trace_time.csv)")
        return [
            self._step_row(r["Step"], [r[c] for c in CSV_STEP_COLUMNS], f"{where} line {line}")
            for line, r in enumerate(reader, 2)
        ]

    def _step_row(self, step: object, values: Any, where: str) -> dict[str, Any]:
        text = str(step).strip()
        row: dict[str, Any] = {"rank": self.rank, "step": int(text) if text.isdigit() else None}
        for c, v in zip(STEP_COLUMNS, values, strict=True):
            row[c] = _number(v, f"{where} {c}")
        return row

    def communication(
        self, communicators: dict[str, list[int]], warnings: list[str]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        tables = self._tables()
        if {"CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"} <= tables:
            return self._db_communication(communicators, warnings)
        return self._json_communication(communicators, warnings)

    def _db_communication(self, communicators: dict[str, list[int]], warnings: list[str]) -> tuple[list, list, list]:
        ops = [
            {
                "rank": self.rank,
                "step": _step_of(step),
                "section": kind,
                "name": name,
                "group": str(group),
                "start_us": float(start or 0),
                **dict(zip(TIME_KEYS, (float(v or 0) for v in times), strict=True)),
            }
            for name, group, start, *times, step, kind in self._query(
                "select hccl_op_name, group_name, start_timestamp, elapse_time, transit_time, wait_time, "
                "synchronization_time, idle_time, step, type from CommAnalyzerTime"
            )
        ]
        bandwidth = [
            {
                "rank": self.rank,
                "step": _step_of(step),
                "name": name,
                "transport": str(t),
                "size_mb": float(size or 0),
                "time_ms": float(time or 0),
                "bandwidth_gbps": float(bw or 0),
            }
            for name, t, size, time, bw, step in self._query(
                "select hccl_op_name, transport_type, transit_size, transit_time, bandwidth, step "
                "from CommAnalyzerBandwidth"
            )
        ]
        links = [
            (step, kind, key, op, group, src, dst, t, size, time, bw)
            for key, op, group, src, dst, t, size, time, bw, step, kind in self._query(
                "select hccl_op_name, op_name, group_name, src_rank, dst_rank, transport_type, transit_size, "
                "transit_time, bandwidth, step, type from CommAnalyzerMatrix"
            )
        ]
        return ops, bandwidth, self._links(links, communicators, warnings)

    def _json_communication(self, communicators: dict[str, list[int]], warnings: list[str]) -> tuple[list, list, list]:
        path, matrix_path = self.out / "communication.json", self.out / "communication_matrix.json"
        doc = _json(path, JSON_MAX_BYTES) if path.is_file() else {}
        matrix = _json(matrix_path, JSON_MAX_BYTES) if matrix_path.is_file() else {}
        return self.communication_docs(doc, matrix, communicators, warnings, path, matrix_path)

    def communication_docs(
        self,
        doc: Any,
        matrix: Any,
        communicators: dict[str, list[int]],
        warnings: list[str],
        path: Path,
        matrix_path: Path,
    ) -> tuple[list, list, list]:
        """Rows of a communication.json and a communication_matrix.json (as parsed)."""
        ops: list[dict[str, Any]] = []
        bandwidth: list[dict[str, Any]] = []
        for step_key, sections in _items(doc, path):
            for kind, entries in _items(sections, path):
                for key, info in _items(entries, path):
                    if key.startswith("Total"):
                        continue
                    name, _, group = key.partition("@")
                    t = info.get("Communication Time Info") or {}
                    where = f"{path} {step_key} {key}"
                    ops.append(
                        {
                            "rank": self.rank,
                            "step": _step_of(step_key),
                            "section": kind,
                            "name": name,
                            "group": group,
                            "start_us": _number(t.get("Start Timestamp(us)", 0), where, 1e18),
                            **{k: _number(t.get(v, 0), f"{where} {v}") for k, v in TIME_KEYS.items()},
                        }
                    )
                    for transport, b in _items(info.get("Communication Bandwidth Info") or {}, path):
                        bandwidth.append(
                            {
                                "rank": self.rank,
                                "step": _step_of(step_key),
                                "name": name,
                                "transport": transport,
                                "size_mb": _number(b.get("Transit Size(MB)", 0), where),
                                "time_ms": _number(b.get("Transit Time(ms)", 0), where),
                                "bandwidth_gbps": _number(b.get("Bandwidth(GB/s)", 0), where),
                            }
                        )
        links = []
        path = matrix_path
        for step_key, sections in _items(matrix, path):
            for kind, entries in _items(sections, path):
                for key, pairs in _items(entries, path):
                    group = key.partition("@")[2]
                    for pair, v in _items(pairs, path):
                        src, _, dst = pair.partition("-")
                        links.append(
                            (
                                step_key,
                                kind,
                                key.partition("@")[0],
                                v.get("Op Name", key),
                                group,
                                src,
                                dst,
                                v.get("Transport Type", ""),
                                v.get("Transit Size(MB)", 0),
                                v.get("Transit Time(ms)", 0),
                                v.get("Bandwidth(GB/s)", 0),
                            )
                        )
        return ops, bandwidth, self._links(links, communicators, warnings)

    def _links(self, links: list[tuple[Any, ...]], communicators: dict[str, list[int]], warnings: list[str]) -> list:
        """Matrix rows with group-local indices mapped to global ranks (the communicator's group). torch_npu's
        own matrix is a summary per op kind (`allreduce-top1`, `-middle`, `-bottom1`, ..., `-total`): of a step and
        section that has `-total` rows only those count (the others repeat their figures); ours lists each op."""
        totals = {(step, kind) for step, kind, key, *_ in links if str(key).endswith("-total")}
        out, unmapped = [], 0
        for step, kind, key, op, group, src, dst, t, size, time, bw in links:
            if (step, kind) in totals and not str(key).endswith("-total"):
                continue
            ranks = communicators.get(str(group))
            try:
                s, d = int(float(src)), int(float(dst))
            except ValueError:
                unmapped += 1
                continue
            if ranks is None or not (0 <= s < len(ranks) and 0 <= d < len(ranks)):
                unmapped += 1
                continue
            out.append(
                {
                    "rank": self.rank,
                    "step": _step_of(step),
                    "section": kind,
                    "name": str(op),
                    "src_rank": ranks[s],
                    "dst_rank": ranks[d],
                    "transport": str(t),
                    "size_mb": _number(size, f"{self.d} matrix"),
                    "time_ms": _number(time, f"{self.d} matrix"),
                    "bandwidth_gbps": _number(bw, f"{self.d} matrix"),
                }
            )
        if unmapped:
            warnings.append(
                f"rank {self.rank}: {unmapped} communication-matrix links name a group not in its "
                "profiler_metadata.json: left out"
            )
        return out


def _items(doc: Any, path: Path) -> list[tuple[str, Any]]:
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected JSON objects (step -> section -> op), found {type(doc).__name__}")
    return [(str(k), v) for k, v in doc.items()]


def _load_run(path: Path) -> Cluster:
    """A run of ours on several devices, each rank as its `--to ascend-pt` export would hold it (step split,
    communication.json, communication_matrix.json, parallel groups), computed from ops.parquet without writing."""
    from atbprof.export import cluster as export
    from atbprof.export.common import load_run
    from atbprof.export.tables import OP_COLUMNS, StepComputing
    from atbprof.export.timeline import BusyTracker

    source = load_run(path)
    per_rank = source.rank_rows()
    warnings: list[str] = []
    ranks: list[RankProfile] = []
    rows: dict[str, list[dict[str, Any]]] = {"steps": [], "ops": [], "bandwidth": [], "matrix": []}
    for rank in range(source.devices):
        view = source.for_rank(rank, per_rank.get(rank, 0))
        computing, tracker = StepComputing(), BusyTracker()
        for b, busy in tracker.batches(view, ("op_index", *OP_COLUMNS)):
            computing.add(b, busy.new_busy)
        sync = view.sync_ns() if export.is_last_stage(view, rank) else 0
        meta = export.metadata(view, rank)
        groups, communicators = _groups(meta, path / "run.json")
        reader = _RankReader(path, rank)
        steps = reader.steps_csv(computing.csv(view.steps, sync), f"{path} rank {rank}")
        comm, matrix = export.communication(view, rank)
        ops, bandwidth, links = reader.communication_docs(comm, matrix, communicators, warnings, path, path)
        ranks.append(RankProfile(rank, path, None, True, groups, communicators, "atbprof run", run=True))
        for key, new in (("steps", steps), ("ops", ops), ("bandwidth", bandwidth), ("matrix", links)):
            rows[key] += new
    return _cluster(path, ranks, rows, {**export.parallel_of(source), "world": source.devices}, warnings)


def load_cluster(path: Path) -> Cluster:
    """Read every rank of a cluster directory (or of a run of ours on several devices); a rank that cannot be
    read is a warning, fewer than two an error."""
    path = Path(path)
    if is_run_dir(path):
        return _load_run(path)
    warnings: list[str] = []
    seen: dict[int, Path] = {}
    ranks: list[RankProfile] = []
    rows: dict[str, list[dict[str, Any]]] = {"steps": [], "ops": [], "bandwidth": [], "matrix": []}
    parallel = {"tp": 0, "pp": 0, "dp": 0, "world": 0}
    for d in rank_dirs(path):
        try:
            rank, device, meta = _rank_of(d)
            if rank in seen:
                warnings.append(f"{d}: rank {rank} again (first in {seen[rank]}): left out")
                continue
            groups, communicators = _groups(meta, d / "profiler_metadata.json")
            reader = _RankReader(d, rank)
            steps, source = reader.steps()
            ops, bandwidth, matrix = reader.communication(communicators, warnings)
        except InputError as err:
            warnings.append(f"{d}: left out: {err}")
            continue
        seen[rank] = d
        out = reader.out
        complete = (out / "kernel_details.csv").is_file() or (out / "trace_view.json").is_file()
        ranks.append(RankProfile(rank, d, device, complete, groups, communicators, source))
        for key, new in (("steps", steps), ("ops", ops), ("bandwidth", bandwidth), ("matrix", matrix)):
            rows[key] += new
        args = meta.get("distributed_args")
        if isinstance(args, dict) and not parallel["world"]:
            parallel = {
                "tp": int(args.get("tensor_model_parallel_size") or 0),
                "pp": int(args.get("pipeline_model_parallel_size") or 0),
                "dp": int(args.get("data_parallel_size") or 0),
                "world": int(args.get("world_size") or 0),
            }
        if source == "none":
            warnings.append(
                f"rank {rank} ({d.name}): no step split (no analysis.db StepTraceTime, no step_trace_time.csv)"
            )
    if len(ranks) < 2:
        raise InputError(
            f"{path}: a cluster needs at least two readable rank profiles, found {len(ranks)}"
            + ("".join(f"\n  {w}" for w in warnings) if warnings else "")
        )
    ranks.sort(key=lambda r: r.rank)
    return _cluster(path, ranks, rows, parallel, warnings)


def _cluster(
    path: Path,
    ranks: list[RankProfile],
    rows: dict[str, list[dict[str, Any]]],
    parallel: dict[str, int],
    warnings: list[str],
) -> Cluster:
    """The cluster from the row lists of its tables."""
    tables = {k: pa.Table.from_pylist(rows[k], schema=schema) for k, schema in TABLE_SCHEMAS.items()}
    return Cluster(
        path, ranks, tables["steps"], tables["ops"], tables["bandwidth"], tables["matrix"], parallel, warnings
    )
