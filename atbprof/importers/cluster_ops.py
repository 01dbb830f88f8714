"""A cluster's communication op rows (OPS_SCHEMA, one per rank, op and step) reduced to what the analysis reads,
rank by rank as they are read: per rank and op the sums over steps, and per collective row its key and wait (who
waited for whom is decided across ranks). A 20 M-op run of 8 ranks has 4.1 M such rows (~460 MB as a table); the
sums are a few thousand rows and the collectives' keys 28 bytes a row. The rows themselves are kept only where they
are drawn (the cluster trace)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from atbprof.importers.cluster_tables import NO_STEP, OPS_SCHEMA, Collectives

OP_SUM_KEYS = ["rank", "section", "name", "group"]
OP_SUMS = [("step", "count"), ("elapse_ms", "sum"), ("transit_ms", "sum"), ("wait_ms", "sum"), ("idle_ms", "sum")]


class OpsReducer:
    """Add each rank's op rows (or several ranks' at once) in rank order; `sums()` and `collectives()` are then
    what the whole table would give."""

    def __init__(self) -> None:
        self._sums: list[pa.Table] = []
        self._codes: dict[str, dict[str, int]] = {"name": {}, "group": {}}
        self._rows: list[tuple[np.ndarray, ...]] = []

    def add(self, ops: pa.Table) -> None:
        # every group is within one rank: a rank's sums are the whole table's sums of its groups, each over the
        # same rows in the same order (their order is the group-by's own: analyze/cluster_comm.op_table sorts)
        self._sums.append(ops.group_by(OP_SUM_KEYS, use_threads=False).aggregate(OP_SUMS))
        coll = ops.select(["step", "section", "name", "group", "wait_ms", "rank"])
        coll = coll.filter(pc.equal(coll.column("section"), "collective"))
        step = pc.fill_null(pc.cast(coll.column("step"), pa.int64()), NO_STEP).to_numpy()
        wait = pc.fill_null(coll.column("wait_ms"), 0.0).to_numpy()
        rank = coll.column("rank").to_numpy().astype(np.int32)
        self._rows.append((step, self._coded(coll, "name"), self._coded(coll, "group"), wait, rank))

    def _coded(self, table: pa.Table, column: str) -> np.ndarray:
        """The column's values as codes shared by every rank (null as "": as the joined key told them apart)."""
        codes = self._codes[column]
        coded = pc.dictionary_encode(table.column(column).fill_null("").combine_chunks())
        lookup = np.array([codes.setdefault(v, len(codes)) for v in coded.dictionary.to_pylist()], np.int32)
        return lookup[coded.indices.to_numpy(zero_copy_only=False)] if len(lookup) else np.zeros(0, np.int32)

    def sums(self) -> pa.Table:
        """Per rank and op (section, name, communicator): rows counted (`step_count`) and times summed over steps."""
        if not self._sums:
            return OPS_SCHEMA.empty_table().group_by(OP_SUM_KEYS, use_threads=False).aggregate(OP_SUMS)
        return pa.concat_tables(self._sums)

    def collectives(self) -> Collectives:
        types = (np.int64, np.int32, np.int32, np.float64, np.int32)
        cols = [
            np.concatenate([r[i] for r in self._rows]).astype(t, copy=False) if self._rows else np.zeros(0, t)
            for i, t in enumerate(types)
        ]
        step, name, group, wait, rank = cols
        return Collectives(step, name, group, len(self._codes["name"]), len(self._codes["group"]), wait, rank)
