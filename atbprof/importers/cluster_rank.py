"""One rank directory of a cluster, read on its own (in a worker process or a Ray task): its rank id, parallel
groups, step split, communication ops, bandwidth and links, into Arrow tables of the cluster's schemas.

The step split is analysis.db's StepTraceTime when the rank has one (what msprof-analyze reads in its db mode),
else step_trace_time.csv; communication is analysis.db's CommAnalyzer* tables, else communication.json and
communication_matrix.json. Links keep their group-local indices: mapping them needs every rank's communicators."""

from __future__ import annotations

import csv
import functools
import io
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from atbprof.errors import InputError
from atbprof.importers.ascend_dirs import PT_OUTPUT
from atbprof.importers.cluster_tables import (
    CSV_STEP_COLUMNS,
    DB_STEP_COLUMNS,
    RANK_TABLE_SCHEMAS,
    STEP_COLUMNS,
    TIME_KEYS,
    RankProfile,
    communicator_name,
)
from atbprof.inputs import max_input_bytes, read_bytes, read_text, regular_file

JSON_MAX_BYTES = 1 << 30  # a rank's communication.json: thousands of ops a step, a few hundred bytes each
_STEP = re.compile(r"^step(\d{1,9})$")


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


@functools.lru_cache(maxsize=1 << 14)
def _step_of(text: object) -> int | None:
    m = _STEP.match(str(text))
    return int(m.group(1)) if m else None


def _number(value: object, where: str, limit: float = 1e15, key: str = "") -> float:
    """A finite number within `limit` (times in µs / ms and sizes in MB; epoch timestamps in µs need 1e18);
    `where` and `key` name it in the message (joined only then: this runs for every figure of every rank)."""
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
        self, warnings: list[str]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        tables = self._tables()
        if {"CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"} <= tables:
            return self._db_communication(warnings)
        return self._json_communication(warnings)

    def _db_communication(self, warnings: list[str]) -> tuple[list, list, list]:
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
        return ops, bandwidth, self._links(links, warnings)

    def _json_communication(self, warnings: list[str]) -> tuple[list, list, list]:
        path, matrix_path = self.out / "communication.json", self.out / "communication_matrix.json"
        doc = _json(path, JSON_MAX_BYTES) if path.is_file() else {}
        matrix = _json(matrix_path, JSON_MAX_BYTES) if matrix_path.is_file() else {}
        return self.communication_docs(doc, matrix, warnings, path, matrix_path)

    def communication_docs(
        self,
        doc: Any,
        matrix: Any,
        warnings: list[str],
        path: Path,
        matrix_path: Path,
    ) -> tuple[list, list, list]:
        """Rows of a communication.json and a communication_matrix.json (as parsed)."""
        ops: list[dict[str, Any]] = []
        bandwidth: list[dict[str, Any]] = []
        for step_key, sections in _items(doc, path):
            step = _step_of(step_key)
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
                            "step": step,
                            "section": kind,
                            "name": name,
                            "group": group,
                            "start_us": _number(t.get("Start Timestamp(us)", 0), where, 1e18),
                            **{k: _number(t.get(v, 0), where, key=v) for k, v in TIME_KEYS.items()},
                        }
                    )
                    for transport, b in _items(info.get("Communication Bandwidth Info") or {}, path):
                        size = _number(b.get("Transit Size(MB)", 0), where, key=transport)
                        time = _number(b.get("Transit Time(ms)", 0), where, key=transport)
                        if not size and not time:
                            continue  # a transport the op did not use (torch_npu lists them all)
                        bandwidth.append(
                            {
                                "rank": self.rank,
                                "step": step,
                                "name": name,
                                "transport": transport,
                                "size_mb": size,
                                "time_ms": time,
                                "bandwidth_gbps": _number(b.get("Bandwidth(GB/s)", 0), where, key=transport),
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
        return ops, bandwidth, self._links(links, warnings)

    def _links(self, links: list[tuple[Any, ...]], warnings: list[str]) -> list[dict[str, Any]]:
        """Link rows with their group-local indices (mapped to global ranks with the whole cluster's communicators),
        summed per step, section, communicator, src, dst and transport: the matrix is per link, and a rank of a
        large job lists thousands of ops a step (the op is kept where one op is the link's only one).
        torch_npu's own matrix is a summary per op kind (`allreduce-top1`, `-middle`, `-bottom1`, ..., `-total`): of
        a step and section that has `-total` rows only those count (the others repeat their figures); ours lists each
        op."""
        totals = {(step, kind) for step, kind, key, *_ in links if str(key).endswith("-total")}
        sums: dict[tuple[Any, ...], list[Any]] = {}
        unreadable = 0
        where = f"{self.d} matrix"
        for step, kind, key, op, group, src, dst, t, size, time, bw in links:
            if totals and (step, kind) in totals and not str(key).endswith("-total"):
                continue
            try:
                s = int(src) if type(src) is str and src.isdigit() else int(float(src))
                d = int(dst) if type(dst) is str and dst.isdigit() else int(float(dst))
            except (TypeError, ValueError, OverflowError):
                unreadable += 1
                continue
            k = (step, kind, str(group), max(-1, min(s, 1 << 30)), max(-1, min(d, 1 << 30)), str(t))
            size_mb, time_ms, bw_gbps = _number(size, where), _number(time, where), _number(bw, where)
            acc = sums.get(k)
            if acc is None:
                sums[k] = [str(op), size_mb, time_ms, bw_gbps, 1]
            else:
                acc[1] += size_mb
                acc[2] += time_ms
                acc[4] += 1
        if unreadable:
            warnings.append(f"rank {self.rank}: {unreadable} communication-matrix links without rank indices: left out")
        return [
            {
                "rank": self.rank,
                "step": _step_of(step),
                "section": kind,
                "name": op if n == 1 else f"{n} ops",
                "group": group,
                "src_local": src,
                "dst_local": dst,
                "transport": t,
                "size_mb": size_mb,
                "time_ms": time_ms,
                "bandwidth_gbps": bw if n == 1 else (size_mb / time_ms if time_ms else 0.0),
            }
            for (step, kind, group, src, dst, t), (op, size_mb, time_ms, bw, n) in sums.items()
        ]


def _items(doc: Any, path: Path) -> list[tuple[str, Any]]:
    if not isinstance(doc, dict):
        raise InputError(f"{path}: expected JSON objects (step -> section -> op), found {type(doc).__name__}")
    return [(str(k), v) for k, v in doc.items()]


@dataclass
class RankPart:
    """What one rank directory gave: its profile and tables, or the reason it could not be read."""

    path: Path
    profile: RankProfile | None
    tables: dict[str, pa.Table] = field(default_factory=dict)
    parallel: dict[str, int] | None = None  # distributed_args: tp, pp, dp, world
    start_us: float | None = None  # the capture's first communication op (epoch µs), to tell captures apart
    warnings: list[str] = field(default_factory=list)
    error: str | None = None


def _complete(out: Path) -> bool:
    """Has kernel tables (text or db export): the single-profile analysis can run on it."""
    return (
        (out / "kernel_details.csv").is_file()
        or (out / "trace_view.json").is_file()
        or any(out.glob("ascend_pytorch_profiler*.db"))
    )


def _parallel(meta: dict[str, Any]) -> dict[str, int] | None:
    args = meta.get("distributed_args")
    if not isinstance(args, dict):
        return None
    keys = {"tp": "tensor_model_parallel_size", "pp": "pipeline_model_parallel_size", "dp": "data_parallel_size"}
    out = {k: int(args.get(v) or 0) for k, v in keys.items()}
    return {**out, "world": int(args.get("world_size") or 0)}


def _start_us(ops: list[dict[str, Any]]) -> float | None:
    starts = [o["start_us"] for o in ops if o["start_us"] > 0]
    return min(starts) if starts else None


def tables_of(rows: dict[str, list[dict[str, Any]]]) -> dict[str, pa.Table]:
    return {k: pa.Table.from_pylist(rows.get(k, []), schema=s) for k, s in RANK_TABLE_SCHEMAS.items()}


def read_rank(d: Path) -> RankPart:
    """Everything of one rank directory; an unreadable one is a RankPart with `error` (the cluster goes on)."""
    warnings: list[str] = []
    try:
        rank, device, meta = _rank_of(d)
        groups, communicators = _groups(meta, d / "profiler_metadata.json")
        reader = _RankReader(d, rank)
        steps, source = reader.steps()
        ops, bandwidth, links = reader.communication(warnings)
    except InputError as err:
        return RankPart(d, None, error=str(err))
    if source == "none":
        warnings.append(f"rank {rank} ({d.name}): no step split (no analysis.db StepTraceTime, no step_trace_time.csv)")
    profile = RankProfile(rank, d, device, _complete(reader.out), groups, communicators, source)
    tables = tables_of({"steps": steps, "ops": ops, "bandwidth": bandwidth, "links": links})
    return RankPart(d, profile, tables, _parallel(meta), _start_us(ops), warnings)
