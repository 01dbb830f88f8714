"""ops.parquet (the op table, schema in its metadata) and steps.parquet, written in batches."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from atbprof.optable.schema import OPS_SCHEMA
from atbprof.writers.base import TraceMeta


def _write_options(schema: pa.Schema) -> dict[str, object]:
    # dictionary pages only for the (dictionary-typed) string columns; zstd level 1 is 2x faster than 3 and
    # smaller here because the string columns no longer fight the numeric ones for dictionary pages
    strings = [f.name for f in schema if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]
    return {
        "compression": "zstd",
        "compression_level": 1,
        "use_dictionary": strings,
        "write_statistics": True,
        "write_page_checksum": True,  # a flipped byte is an error on read, not a silently different start time
    }


class ParquetOpsWriter:
    filename = "ops.parquet"

    def __init__(self) -> None:
        self._writer: pq.ParquetWriter | None = None
        self._path: Path | None = None

    def open(self, directory: Path, meta: TraceMeta) -> None:
        self._path = directory / self.filename
        schema = OPS_SCHEMA
        if meta.numerics_json:  # the numerics report rides in the key-value metadata; the columns do not change
            schema = schema.with_metadata({**(schema.metadata or {}), b"atbprof.numerics": meta.numerics_json})
        self._writer = pq.ParquetWriter(self._path, schema, **_write_options(OPS_SCHEMA))

    def write_batch(self, batch: pa.RecordBatch) -> None:
        assert self._writer is not None
        self._writer.write_batch(batch, row_group_size=1 << 20)

    def close(self, steps: pa.Table) -> None:
        assert self._writer is not None and self._path is not None
        self._writer.close()
        pq.write_table(steps, self._path.parent / "steps.parquet", **_write_options(steps.schema))
