"""`atbprof predict --kernels`: every kernel of the profile with its prediction, pass, family and provenance.

Parquet (`.parquet`) or CSV (any other name); written to a temp file and renamed in; an existing file is replaced
only with --force and only if atbprof wrote it (the Parquet footer's `generator`, the CSV's first-line comment).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

KERNELS_SCHEMA_VERSION = "1"
_CSV_HEAD = b'# {"generator":"atbprof","what":"kernels priced by atbprof predict","schema_version":"1"}\n'


def kernels_table(ops: pa.Table, prices: pa.Table) -> pa.Table:
    """One row per kernel: what it is (from the profile), what was measured and predicted, and why."""
    measured = prices.column("measured_ns").cast(pa.float64())
    predicted = prices.column("predicted_ns")
    error = pc.divide(pc.subtract(predicted, measured), pc.if_else(pc.equal(measured, 0), None, measured))
    columns = {
        "op_index": prices.column("op_index"),
        "op_name": ops.column("op_name").cast(pa.string()),
        "op_type": prices.column("op_type"),
        "task_type": ops.column("task_type").cast(pa.string()),
        "input_shapes": ops.column("input_shapes").cast(pa.string()),
        "pass": prices.column("pass"),
        "family": prices.column("family"),
        "measured_ns": prices.column("measured_ns"),
        "predicted_ns": predicted,
        "error": error,
        "provenance": prices.column("provenance"),
        "parameters": prices.column("parameters"),
        "unpriced_why": prices.column("why"),
    }
    meta = {"generator": "atbprof", "atbprof.table": "kernels", "atbprof.schema_version": KERNELS_SCHEMA_VERSION}
    return pa.table(columns).replace_schema_metadata(meta)


def write_kernels(table: pa.Table, out: Path, *, force: bool, inputs: tuple[Path, ...] = ()) -> Path:
    from atbprof.outputs import check_output_file, staged_file

    def check() -> Path:
        return check_output_file(out, "kernels", force=force, inputs=inputs, option="--kernels")

    target = check()
    with staged_file(target, check) as tmp:
        if target.suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, tmp)
        else:
            import pyarrow.csv as pcsv

            with open(tmp, "wb") as fh:
                fh.write(_CSV_HEAD)
                pcsv.write_csv(table.replace_schema_metadata(None), fh)
    return target
