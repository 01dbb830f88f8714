import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atbprof.errors import InputError, SchemaError
from atbprof.optable.schema import OPS_SCHEMA, read_ops


def empty_ops() -> pa.Table:
    return OPS_SCHEMA.empty_table()


def test_roundtrip_keeps_the_schema_and_version(tmp_path) -> None:
    pq.write_table(empty_ops(), tmp_path / "ops.parquet")
    t = read_ops(tmp_path / "ops.parquet")
    assert t.schema.equals(OPS_SCHEMA, check_metadata=False)
    assert pq.read_schema(tmp_path / "ops.parquet").metadata[b"atbprof.schema_version"] == b"4"


def test_missing_and_mistyped_columns_are_named(tmp_path) -> None:
    t = empty_ops().drop_columns(["task_dur_ns", "role"])
    t = t.set_column(t.schema.get_field_index("flops"), "flops", pa.array([], pa.float64()))
    pq.write_table(t, tmp_path / "bad.parquet")
    with pytest.raises(SchemaError) as err:
        read_ops(tmp_path / "bad.parquet")
    msg = str(err.value)
    assert "missing columns: role, task_dur_ns" in msg
    assert "wrong types: flops (is double, expected int64)" in msg
    assert str(tmp_path / "bad.parquet") in msg


def test_not_parquet_and_missing_file(tmp_path) -> None:
    (tmp_path / "x.parquet").write_text("hello")
    with pytest.raises(InputError, match="not a Parquet file"):
        read_ops(tmp_path / "x.parquet")
    with pytest.raises(InputError, match="no such file"):
        read_ops(tmp_path / "nope.parquet")


def test_other_schema_version_is_refused(tmp_path) -> None:
    t = empty_ops().replace_schema_metadata({"atbprof.table": "ops", "atbprof.schema_version": "0"})
    pq.write_table(t, tmp_path / "old.parquet")
    with pytest.raises(SchemaError, match="op schema version 0, this atbprof reads version 4"):
        read_ops(tmp_path / "old.parquet")
