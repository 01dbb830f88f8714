"""torch_npu's SQLite export (export_type=db): the real CNN db samples, their text twins, and damaged databases."""

from __future__ import annotations

import gzip
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.errors import InputError
from atbprof.importers import load_profile
from atbprof.importers.guard import UNEXPECTED
from atbprof.optable.schema import OPS_SCHEMA, check_table
from tests.importers.conftest import ASCEND, LEVEL1, OUT, shared

DB = {
    (level, rank): ASCEND / f"msinsight_imagenet_cnn_db_level{level}_rank{rank}" for level in (1, 2) for rank in (0, 1)
}
TEXT = {0: LEVEL1, 1: ASCEND / "msinsight_imagenet_cnn_level1_rank1"}


def _db_file(level: int, rank: int) -> Path:
    return shared(DB[level, rank] / OUT / f"ascend_pytorch_profiler_{rank}.db")


def _per_step(path: Path) -> Counter[tuple[object, str]]:
    ops = load_profile(path).ops
    return Counter(zip(ops.column("step").to_pylist(), ops.column("op_type").to_pylist(), strict=True))


@pytest.mark.parametrize(("level", "rank"), sorted(DB))
def test_db_sample_imports_like_kernel_details(level: int, rank: int) -> None:
    """Every compute task (TASK joined with COMPUTE_TASK_INFO) and communication op, as kernel_details lists them,
    with the chip, the clock and the rank from the db's own tables."""
    profile = load_profile(shared(DB[level, rank]))
    check_table(profile.ops, OPS_SCHEMA)
    ops = profile.ops
    assert profile.kind == "ascend_db" and ops.num_rows == 191
    assert profile.meta["chip"] == "Ascend910B" and profile.meta["aicore_clock_mhz"] == 1800.0
    assert profile.meta["rank"] == rank and profile.meta["db_schema_version"] == "1.0.0"
    assert Counter(ops.column("task_type").to_pylist()) == {
        "AI_VECTOR_CORE": 149,
        "AI_CORE": 23,
        "MIX_AIV": 13,
        "HCCL": 4,
        "DSA_SQE": 2,
    }
    rows = ops.to_pylist()
    conv = next(r for r in rows if r["op_type"] == "Conv2D")
    assert conv["input_shapes"].startswith("32,") and '"' not in conv["input_shapes"]
    assert conv["block_dim"] > 0 and conv["mac_time_ns"] > 0 and 0 < conv["mac_ratio"] <= 1
    assert conv["host_launch_start_ns"] is not None and conv["host_launch_dur_ns"] > 0
    hcom = [r for r in rows if r["task_type"] == "HCCL"]
    assert [r["op_type"] for r in hcom] == ["hcom_allReduce_"] * 4 and hcom[0]["op_name"].startswith("hcom_allReduce__")
    assert profile.framework is not None and profile.framework.num_rows > 0
    frames = profile.step_frames
    assert frames is not None and frames.column("frame").to_pylist() == ["ProfilerStep"]


@pytest.mark.parametrize("rank", [0, 1])
def test_db_and_text_captures_of_one_script_count_the_same_op_types_per_step(rank: int) -> None:
    """Separate captures of the same CNN step (other timestamps): the same kernels of each type in step 50."""
    assert _per_step(shared(DB[1, rank])) == _per_step(shared(TEXT[rank]))


def test_the_db_is_found_from_the_directory_its_output_folder_or_itself() -> None:
    for path in (DB[1, 0], DB[1, 0] / OUT, _db_file(1, 0)):
        assert load_profile(shared(path)).kind == "ascend_db"


def test_analysis_db_is_refused_with_what_to_pass_instead() -> None:
    with pytest.raises(InputError, match=r"ascend_pytorch_profiler_<rank>\.db"):
        load_profile(shared(DB[1, 0] / OUT / "analysis.db"))


def _copy(tmp_path: Path) -> Path:
    path = tmp_path / "ascend_pytorch_profiler_0.db"
    shutil.copyfile(_db_file(1, 0), path)
    path.chmod(0o644)
    return path


def _edit(path: Path, *sql: str, tolerant: bool = False) -> None:
    con = sqlite3.connect(path)
    for statement in sql:
        try:
            con.execute(statement)
        except sqlite3.OperationalError:  # a mutation an earlier one made moot (its table or column is gone)
            if not tolerant:
                raise
    con.commit()
    con.close()


def test_a_newer_schema_is_refused_naming_the_version(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    _edit(path, "UPDATE META_DATA SET value = '2.1.0' WHERE name = 'SCHEMA_VERSION'")
    with pytest.raises(InputError, match=r"SCHEMA_VERSION 2\.1\.0; atbprof reads schema 1\.x"):
        load_profile(path)


def test_a_truncated_or_compressed_db_gives_one_clear_error(tmp_path: Path) -> None:
    raw = _db_file(1, 0).read_bytes()
    cut = tmp_path / "cut.db"
    cut.write_bytes(raw[: len(raw) // 3])
    with pytest.raises(InputError, match=str(cut)) as err:
        load_profile(cut)
    assert UNEXPECTED not in str(err.value)
    packed = tmp_path / "packed.db.gz"
    packed.write_bytes(gzip.compress(raw))
    with pytest.raises(InputError, match="gzip-compressed SQLite database"):
        load_profile(packed)


def test_the_sample_is_never_written(tmp_path: Path) -> None:
    """An immutable read-only open: not even a journal or a lock file appears beside the database."""
    path = _copy(tmp_path)
    before = path.read_bytes()
    load_profile(path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [path.name]


MUTATIONS = [
    "DROP TABLE TASK_PMU_INFO",
    "DROP TABLE STEP_TIME",
    "DROP TABLE PYTORCH_API",
    "DROP TABLE CANN_API",
    "DROP TABLE COMMUNICATION_OP",
    "DROP TABLE META_DATA",
    "DROP TABLE NPU_INFO",
    "DROP TABLE COMPUTE_TASK_INFO",
    "DELETE FROM STRING_IDS WHERE id % 3 = 0",
    "DELETE FROM TASK WHERE globalTaskId % 2 = 0",
    "UPDATE TASK SET endNs = startNs - 5 WHERE globalTaskId % 7 = 0",
    "UPDATE TASK SET startNs = NULL WHERE globalTaskId = 5",
    "UPDATE TASK SET startNs = 'soon' WHERE globalTaskId = 6",
    "UPDATE TASK SET startNs = 9223372036854775807 WHERE globalTaskId = 7",
    "UPDATE COMPUTE_TASK_INFO SET blockDim = -3",
    "UPDATE COMPUTE_TASK_INFO SET inputShapes = 999999",
    "UPDATE COMPUTE_TASK_INFO SET name = NULL",
    "UPDATE COMPUTE_TASK_INFO SET opType = 'text, not an id'",
    "UPDATE TASK_PMU_INFO SET value = 'x' WHERE globalTaskId % 2 = 0",
    "UPDATE TASK_PMU_INFO SET value = 1e308",
    "UPDATE PYTORCH_API SET startNs = 'x' WHERE rowid = 3",
    "UPDATE PYTORCH_API SET endNs = 0",
    "UPDATE STEP_TIME SET endNs = startNs - 1",
    "UPDATE STEP_TIME SET startNs = NULL",
    "UPDATE COMMUNICATION_OP SET opName = NULL, opType = NULL",
    "UPDATE AICORE_FREQ SET freq = 'fast'",
    "UPDATE STRING_IDS SET value = NULL WHERE id % 5 = 0",
    "ALTER TABLE COMPUTE_TASK_INFO DROP COLUMN inputShapes",
    "ALTER TABLE TASK DROP COLUMN connectionId",
    "ALTER TABLE TASK DROP COLUMN streamId",
    "ALTER TABLE COMMUNICATION_OP DROP COLUMN opType",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3, unique=True))
def test_mutated_databases_import_or_raise_one_clear_error(tmp_path: Path, mutations: list[str]) -> None:
    path = _copy(tmp_path)
    try:
        _edit(path, *mutations, tolerant=True)
        try:
            profile = load_profile(path)
        except InputError as err:
            assert UNEXPECTED not in str(err) and str(path) in str(err), str(err)
        else:
            check_table(profile.ops, OPS_SCHEMA)
    finally:
        path.unlink()
