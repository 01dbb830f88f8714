"""One rank directory of a cluster, read on its own (in a worker process or a Ray task): its rank id, parallel
groups, step split, communication ops, bandwidth and links, into Arrow tables of the cluster's schemas.

The step split is analysis.db's StepTraceTime when the rank has one (what msprof-analyze reads in its db mode),
else step_trace_time.csv; communication is analysis.db's CommAnalyzer* tables, else communication.json and
communication_matrix.json. Links keep their group-local indices: mapping them needs every rank's communicators."""

from __future__ import annotations

import csv
import io
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from atbprof.errors import InputError
from atbprof.importers.ascend_dirs import PT_OUTPUT
from atbprof.importers.cluster_comm import db_tables, json_tables, number
from atbprof.importers.cluster_tables import (
    CSV_STEP_COLUMNS,
    DB_STEP_COLUMNS,
    STEP_COLUMNS,
    STEPS_SCHEMA,
    RankProfile,
    communicator_name,
)
from atbprof.inputs import max_input_bytes, read_bytes, read_text, regular_file

JSON_MAX_BYTES = 1 << 30  # a rank's communication.json: thousands of ops a step, a few hundred bytes each


def _json(path: Path, limit: int = 1 << 24) -> Any:
    try:
        return orjson.loads(read_bytes(path, min(limit, max_input_bytes())))
    except orjson.JSONDecodeError as err:
        raise InputError(f"{path}: not valid JSON ({err})") from None


MAX_RANKS = 65_536
"""Ranks of one cluster at most (as a run's devices, config/models.py MAX_DEVICES): a rank id, a group member or a
rank count beyond it is damage."""


def _checked_rank(rank: int, where: str) -> int:
    """A rank id a real cluster can have: 0 to MAX_RANKS - 1 (a negative or huge one is damage, not a rank)."""
    if not 0 <= rank < MAX_RANKS:
        raise InputError(f"{where} = {rank}: not a rank id (expected 0 to {MAX_RANKS - 1})")
    return rank


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
        if value is not None and str(value).lstrip("-").isdigit():
            rank = _checked_rank(int(value), f"{info}: rank_id")
            break
    args = meta.get("distributed_args")
    if rank is None and isinstance(args, dict) and isinstance(args.get("rank"), int):
        rank = _checked_rank(int(args["rank"]), f"{meta_path}: distributed_args.rank")
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
        ranks = [int(r) for r in g["global_ranks"] if isinstance(r, int) and 0 <= r < MAX_RANKS]
        name = str(g.get("group_name", ""))
        groups.setdefault(name, ranks)
        communicators[communicator_name(str(key))] = ranks
    return groups, communicators


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
            row[c] = number(v, f"{where} {c}")
        return row

    def communication(self, warnings: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
        tables = self._tables()
        if {"CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"} <= tables:
            return self._db_communication(warnings)
        return self._json_communication(warnings)

    def _db_communication(self, warnings: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
        return db_tables(self.rank, self._query, warnings, str(self.d / PT_OUTPUT / "analysis.db"))

    def _json_communication(self, warnings: list[str]) -> tuple[pa.Table, pa.Table, pa.Table]:
        path, matrix_path = self.out / "communication.json", self.out / "communication_matrix.json"
        doc = _json(path, JSON_MAX_BYTES) if path.is_file() else {}
        matrix = _json(matrix_path, JSON_MAX_BYTES) if matrix_path.is_file() else {}
        return json_tables(self.rank, doc, matrix, warnings, path, matrix_path)


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


def _parallel(meta: dict[str, Any], where: Path) -> dict[str, int] | None:
    args = meta.get("distributed_args")
    if not isinstance(args, dict):
        return None
    keys = {
        "tp": "tensor_model_parallel_size",
        "pp": "pipeline_model_parallel_size",
        "dp": "data_parallel_size",
        "world": "world_size",
    }
    out = {}
    for short, key in keys.items():
        value = args.get(key) or 0
        if isinstance(value, str) and value.strip().isdigit() and len(value) < 8:
            value = int(value)
        if type(value) is not int or not 0 <= value <= MAX_RANKS:  # a count of ranks, as torch_npu records it
            raise InputError(f"{where}: distributed_args.{key} = {value!r}: not a count of ranks (0 to {MAX_RANKS})")
        out[short] = value
    return out


def _start_us(ops: pa.Table) -> float | None:
    starts = ops["start_us"].to_numpy()
    starts = starts[starts > 0]
    return float(starts.min()) if len(starts) else None


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
    tables = {
        "steps": pa.Table.from_pylist(steps, schema=STEPS_SCHEMA),
        "ops": ops,
        "bandwidth": bandwidth,
        "links": links,
    }
    return RankPart(d, profile, tables, _parallel(meta, d / "profiler_metadata.json"), _start_us(ops), warnings)
