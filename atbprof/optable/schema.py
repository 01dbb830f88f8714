"""Op table schema, version 4 (version 3 had no graph_launch; 2 no microbatch; 1 no rank, stage and comm_bytes).

One row per device task, in the order each device ran them; a multi-device run holds every rank's tasks (rows of
one rank are in device order, (rank, op_index) is unique). Runs of `atbprof run` fill every column; an imported
profile (msprof, torch_npu, Kineto) leaves null what its format does not record - only op_index, op_name, op_type,
task_start_ns and task_dur_ns are always present. Times are integer nanoseconds relative to the run start
(msprof writes µs with three decimals, i.e. ns precision; integers keep every digit). Column names carry units.
The msprof/torch_npu names (`Task Start Time(us)`, `Duration(us)`, ...) are mapped once, at the writer/importer
boundary (see `MSPROF_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from atbprof.errors import InputError, SchemaError

if TYPE_CHECKING:  # pyarrow.parquet is imported where a file is read: analyze of other formats never needs it
    import threading

    import pyarrow.parquet as pq

SCHEMA_VERSION = "4"

_dict = pa.dictionary(pa.int32(), pa.string())

PIPES = ("mac", "vec", "scalar", "mte1", "mte2", "mte3", "fixpipe")
"""msprof PipeUtilization pipes: Cube (mac), Vector, Scalar, MTE1 (L1->L0), MTE2 (GM->core), MTE3 (UB->GM), FixPipe."""

_FIELDS: list[tuple[str, pa.DataType, bool, str]] = [
    ("op_index", pa.int64(), False, "position of the task in the run (device order)"),
    ("step", pa.int32(), True, "0 = prefill (0..C-1 with chunked prefill), then the decode steps"),
    ("phase", _dict, True, "prefill | decode"),
    ("layer", pa.int32(), True, "decoder layer, -1 for model-level ops (embedding, final norm, LM head, sampling)"),
    ("node_id", pa.int32(), True, "node of the (fused) phase graph this task executes"),
    ("role", _dict, True, "model role, e.g. attn.norm, attn.qkv, ffn.down, head.sample"),
    ("op_name", _dict, False, "msprof Op Name (kernel name)"),
    ("op_type", _dict, False, "msprof OP Type"),
    ("task_type", _dict, True, "msprof Task Type: AI_CORE, AI_VECTOR_CORE, MIX_AIC, AI_CPU"),
    ("stream_id", pa.int32(), True, "device stream"),
    ("task_id", pa.int32(), True, "msprof Task ID (per stream, wraps at 65536)"),
    ("task_start_ns", pa.int64(), False, "Task Start Time"),
    ("task_dur_ns", pa.int64(), False, "Task Duration (static device cost + execution)"),
    ("task_wait_ns", pa.int64(), True, "Task Wait Time: gap since the previous task on the device ended"),
    ("host_launch_start_ns", pa.int64(), True, "start of the host launch of this task (null in graph mode)"),
    ("host_launch_dur_ns", pa.int64(), True, "host dispatch cost of this task (null in graph mode)"),
    ("block_dim", pa.int32(), True, "Block Dim: cores the kernel runs on"),
    ("mix_block_dim", pa.int32(), True, "Mix Block Dim: secondary (vector) blocks of a MIX kernel, else 0"),
    ("input_shapes", _dict, True, "msprof Input Shapes: tensors ';'-separated, dims ','-separated"),
    ("input_dtypes", _dict, True, "msprof Input Data Types"),
    ("output_shapes", _dict, True, "msprof Output Shapes"),
    ("output_dtypes", _dict, True, "msprof Output Data Types"),
    ("kv_len", pa.int32(), True, "KV-cache length (context) seen by this step"),
    ("flops", pa.int64(), True, "useful floating-point operations (2 per MAC)"),
    ("hbm_read_bytes", pa.int64(), True, "bytes read from global memory (HBM)"),
    ("hbm_write_bytes", pa.int64(), True, "bytes written to global memory (HBM)"),
    *[(f"{p}_time_ns", pa.int64(), True, f"busy time of the {p} pipe") for p in PIPES],
    *[(f"{p}_ratio", pa.float32(), True, f"{p} pipe busy time / task duration (msprof *_{p}_ratio)") for p in PIPES],
    ("bound", _dict, True, "what limits the kernel: compute | memory | launch (static cost dominates)"),
    ("fused_from", pa.list_(pa.string()), True, "op types this fused kernel replaced; empty if not fused"),
    ("rank", pa.int32(), True, "global rank (device) that ran the task: tp rank + tp x (stage + pp x dp replica)"),
    ("stage", pa.int32(), True, "pipeline stage of that rank (0 without pipeline parallelism)"),
    ("comm_bytes", pa.int64(), True, "collectives: bytes this rank sent over its links (msprof Transit Size)"),
    ("microbatch", pa.int32(), True, "pipeline microbatch of the step this task belongs to (0 without stages)"),
    (
        "graph_launch",
        pa.bool_(),
        True,
        "replayed from a captured graph: one host call launched it with others (graph mode; cudaGraphLaunch, "
        "hipGraphLaunch), its host_launch_dur_ns an even share of that call; false: launched on its own",
    ),
]

OPS_SCHEMA = pa.schema(
    [pa.field(name, typ, nullable=nullable, metadata={"doc": doc}) for name, typ, nullable, doc in _FIELDS],
    metadata={"atbprof.table": "ops", "atbprof.schema_version": SCHEMA_VERSION},
)

MSPROF_COLUMNS = {
    "op_name": "Op Name",
    "op_type": "OP Type",
    "task_type": "Task Type",
    "stream_id": "Stream ID",
    "task_id": "Task ID",
    "task_start_ns": "Task Start Time(us)",
    "task_dur_ns": "Task Duration(us)",
    "task_wait_ns": "Task Wait Time(us)",
    "block_dim": "Block Dim",
    "mix_block_dim": "Mix Block Dim",
    "input_shapes": "Input Shapes",
    "input_dtypes": "Input Data Types",
    "output_shapes": "Output Shapes",
    "output_dtypes": "Output Data Types",
}
"""Our column -> msprof op_summary header (the writer/importer boundary)."""


def check_table(table: pa.Table | pa.Schema, source: str = "op table") -> None:
    """Raise SchemaError naming every missing or mistyped column."""
    schema = table if isinstance(table, pa.Schema) else table.schema
    missing = [f.name for f in OPS_SCHEMA if f.name not in schema.names]
    wrong = [
        f"{f.name} (is {schema.field(f.name).type}, expected {f.type})"
        for f in OPS_SCHEMA
        if f.name in schema.names and not schema.field(f.name).type.equals(f.type)
    ]
    if missing or wrong:
        parts = []
        if missing:
            parts.append("missing columns: " + ", ".join(missing))
        if wrong:
            parts.append("wrong types: " + ", ".join(wrong))
        raise SchemaError(
            f"{source} does not match the atbprof op schema v{SCHEMA_VERSION}: "
            + "; ".join(parts)
            + ". Re-create it with `atbprof run` of this version."
        )


def ops_metadata(path: str | Path) -> pq.FileMetaData:
    """The Parquet metadata of an ops.parquet, after checking its columns and schema version."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        meta = pq.read_metadata(path)
        schema = meta.schema.to_arrow_schema()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: not a Parquet file ({err}); re-create the run with `atbprof run`") from None
    version = (schema.metadata or {}).get(b"atbprof.schema_version", b"?").decode()
    if version != SCHEMA_VERSION and version.isdigit() and int(version) < int(SCHEMA_VERSION):
        raise SchemaError(
            f"{path}: op schema version {version}, this atbprof reads version {SCHEMA_VERSION} (the run was made by "
            "an older atbprof): re-create it with `atbprof run`"
        )
    check_table(schema, str(path))
    if version != SCHEMA_VERSION:
        raise SchemaError(f"{path}: op schema version {version}, this atbprof reads version {SCHEMA_VERSION}")
    return meta


def read_steps(path: str | Path) -> pa.Table:
    """Read a steps.parquet written by `atbprof run`, checking its columns."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        steps = pq.read_table(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: not a Parquet file ({err}); re-create the run with `atbprof run`") from None
    missing = [f.name for f in STEPS_SCHEMA if f.name not in steps.column_names]
    if missing:
        raise InputError(f"{path}: missing columns {', '.join(missing)}; re-create the run with `atbprof run`")
    return steps


def read_ops(
    path: str | Path,
    *,
    need_rows: bool = False,
    columns: Sequence[str] | None = None,
    rank: int | None = None,
    check_other_ranks: bool = True,
) -> pa.Table:
    """Read an ops.parquet written by `atbprof run`, checking its schema and times (`need_rows`: and that it has
    ops, as a run's op table does). `columns`: hold only these (an analysis that needs a few columns holds a few).
    `rank`: hold only that rank's tasks, reading only the row groups whose statistics say they hold it (the writer
    gives each rank its own row groups, so one rank of a 20 M-op TP8 run reads an eighth of the file). The pages
    of what is not held are still checked, streamed: a damaged file is refused whatever is read
    (`check_other_ranks=False`: not the other ranks' row groups, for a reader that reads every rank in turn)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    meta = ops_metadata(path)
    names = meta.schema.to_arrow_schema().names
    held = names if columns is None else [n for n in names if n in {*columns, *_TIME_COLUMNS, "rank"}]
    groups = list(range(meta.num_row_groups)) if rank is None else _groups_with(meta, names.index("rank"), rank)
    try:
        if rank is None and columns is None:
            ops = pq.read_table(path, schema=OPS_SCHEMA, page_checksum_verification=True)
        else:
            file = pq.ParquetFile(path, page_checksum_verification=True)
            ops = file.read_row_groups(groups, columns=held).cast(pa.schema([OPS_SCHEMA.field(c) for c in held]))
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: damaged ({err}); re-create the run with `atbprof run`") from None
    if rank is not None:
        ops = ops.filter(pc.equal(ops.column("rank"), rank))
    check_times(ops, str(path), need_rows=need_rows)
    read = set(groups)
    others = [g for g in range(meta.num_row_groups) if g not in read]
    verify_pages(path, [n for n in names if n not in held], groups)
    if check_other_ranks:
        verify_pages(path, names, others)
    return ops


def step_chunks(path: str | Path, meta: pq.FileMetaData, rank: int | None, rows: int) -> list[list[int]] | None:
    """Row groups in runs of about `rows` rows whose steps follow each other (a run's ops are written step by
    step; the rows of a step a chunk ends on may continue in the next), or None when the statistics do not say so
    (a reader then reads the table whole)."""
    names = meta.schema.to_arrow_schema().names
    step_col, rank_col = names.index("step"), names.index("rank")
    groups = list(range(meta.num_row_groups)) if rank is None else _groups_with(meta, rank_col, rank)
    chunks: list[list[int]] = []
    size = 0
    last = None
    for g in groups:
        stats = meta.row_group(g).column(step_col).statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            return None
        if last is not None and stats.min < last:
            return None  # steps out of order: a chunk would not hold whole steps
        last = stats.max
        if not chunks or size >= rows:
            chunks.append([])
            size = 0
        chunks[-1].append(g)
        size += meta.row_group(g).num_rows
    return chunks


def column_recorded(meta: pq.FileMetaData, groups: Sequence[int], name: str) -> bool | None:
    """Whether some row of these row groups has a value in column `name` (`analyze.view.has_values` of them), from
    their statistics' null counts; None when a row group's statistics do not say (then read the column)."""
    names = meta.schema.to_arrow_schema().names
    if name not in names:
        return False
    column = names.index(name)
    for g in groups:
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_null_count:
            return None
        if stats.null_count < meta.row_group(g).num_rows:
            return True
    return False


def read_ops_chunks(
    path: str | Path,
    chunks: list[list[int]],
    *,
    columns: Sequence[str],
    rank: int | None = None,
    check_other_ranks: bool = True,
    verify: bool = True,
) -> Iterator[pa.Table]:
    """`read_ops` in parts of whole steps (`chunks` from `step_chunks`): each part is the rows of its row groups
    less its last step, which goes with the next part; the same checks as `read_ops`, part by part (`verify=False`:
    not the pages of the columns not held, for a second pass over a file one pass checked)."""
    import pyarrow.parquet as pq

    meta = ops_metadata(path)
    names = meta.schema.to_arrow_schema().names
    held = [n for n in names if n in {*columns, *_TIME_COLUMNS, "rank", "step"}]
    schema = pa.schema([OPS_SCHEMA.field(c) for c in held])
    file = pq.ParquetFile(path, page_checksum_verification=True)
    # the writer gives each rank its own row groups: then no row is filtered out by its rank
    mixed = rank is not None and not all(_holds_only(meta, names.index("rank"), g, rank) for c in chunks for g in c)
    read = [g for groups in chunks for g in groups]
    checks = [([n for n in names if n not in held], read)]
    if check_other_ranks:
        checks.append((names, [g for g in range(meta.num_row_groups) if g not in set(read)]))
    verifier = PageVerifier(path, checks) if verify else None
    try:
        yield from _parts(path, file, chunks, held, schema, rank if mixed else None)
    except BaseException:
        if verifier is not None:
            verifier.cancel()
        raise
    if verifier is not None:
        verifier.result()


def _parts(
    path: str | Path,
    file: pq.ParquetFile,
    chunks: list[list[int]],
    held: list[str],
    schema: pa.Schema,
    rank: int | None,
) -> Iterator[pa.Table]:
    """The parts of read_ops_chunks: `rank`'s rows (None: every row read) of the chunks' row groups, whole steps."""
    import pyarrow.compute as pc

    carry: pa.Table | None = None
    for k, groups in enumerate(chunks):
        try:
            part = file.read_row_groups(groups, columns=held).cast(schema)
        except (pa.ArrowException, OSError) as err:
            raise InputError(f"{path}: damaged ({err}); re-create the run with `atbprof run`") from None
        if rank is not None:
            part = part.filter(pc.equal(part.column("rank"), rank))
        check_times(part, str(path), need_rows=False)
        if carry is not None:
            part = pa.concat_tables([carry, part])
        if k + 1 < len(chunks) and part.num_rows:
            carry, part = _last_step(part)
        else:
            carry = None
        if part.num_rows:
            yield part


class PageVerifier:
    """`verify_pages` of (columns, row groups) checks in a thread beside a reader: Parquet decodes without the
    GIL, so a second core checks the pages nobody reads while the first analyses the ones read. `result()` waits
    and raises what it found; `cancel()` stops it (the reader failed first: its error is the one reported)."""

    def __init__(self, path: str | Path, checks: list[tuple[list[str], list[int]]]) -> None:
        import threading

        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(path, checks), name="atbprof-verify", daemon=True)
        self._thread.start()

    def _run(self, path: str | Path, checks: list[tuple[list[str], list[int]]]) -> None:
        try:
            for columns, groups in checks:
                verify_pages(path, columns, groups, stop=self._stop)
        except BaseException as err:  # handed to the reader's thread by result()
            self._error = err

    def result(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error

    def cancel(self) -> None:
        self._stop.set()
        self._thread.join()


def _last_step(part: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(the rows of the part's last step, the others): slices where the steps are in order, as a run writes them."""
    import pyarrow.compute as pc

    column = part.column("step")
    step = column.to_numpy()
    last = pc.max(column).as_py()
    if not column.null_count and bool((step[1:] >= step[:-1]).all()):
        at = int(np.searchsorted(step, last, side="left"))
        return part.slice(at), part.slice(0, at)
    tail = pc.equal(part.column("step"), last)
    return part.filter(tail), part.filter(pc.invert(tail))


def _holds_only(meta: pq.FileMetaData, column: int, group: int, rank: int) -> bool:
    stats = meta.row_group(group).column(column).statistics
    known = stats is not None and stats.has_min_max and stats.null_count == 0
    return known and stats.min == rank and stats.max == rank


def _groups_with(meta: pq.FileMetaData, column: int, rank: int) -> list[int]:
    """The row groups that may hold `rank`'s rows: by their min/max statistics, and every group without them."""
    out = []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        known = stats is not None and stats.has_min_max and stats.null_count == 0
        if not known or stats.min <= rank <= stats.max:
            out.append(g)
    return out


def op_ranks(path: str | Path) -> list[int]:
    """The distinct ranks of an ops.parquet (null read as 0): from the row groups' statistics when each holds one
    rank, as the writer writes them, else from the rank column, streamed."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    meta = ops_metadata(path)
    column = meta.schema.to_arrow_schema().get_field_index("rank")
    found: set[int] = set()
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max or stats.null_count or stats.min != stats.max:
            break
        found.add(int(stats.min))
    else:
        return sorted(found)
    found = set()
    try:
        for batch in pq.ParquetFile(path, page_checksum_verification=True).iter_batches(columns=["rank"]):
            found.update(pc.unique(pc.fill_null(batch.column(0), 0)).to_pylist())
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: damaged ({err}); re-create the run with `atbprof run`") from None
    return sorted(found)


def verify_pages(
    path: str | Path, columns: list[str], row_groups: list[int] | None = None, stop: threading.Event | None = None
) -> None:
    """The page checksums of columns (of row groups) a reader does not keep, streamed (bounded memory): a file that
    one command would refuse as damaged is refused by every command. `stop` set: stop between batches."""
    import pyarrow.parquet as pq

    if not columns or row_groups == []:
        return
    try:
        pages = pq.ParquetFile(path, page_checksum_verification=True)
        # batches of 64 k rows: the list column (fused_from) decodes 2-3x slower in batches of a million. A row
        # group at a time: one reader over all of them held ~700 MB more on a 659 MB file (21 M ops, times that do
        # not compress), the whole file's worth; per group ~40 MB, and no slower (2.9 against 3.8 s)
        for group in range(pages.num_row_groups) if row_groups is None else row_groups:
            for _ in pages.iter_batches(batch_size=1 << 16, row_groups=[group], columns=columns, use_threads=True):
                if stop is not None and stop.is_set():
                    return
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: damaged ({err}); re-create the run with `atbprof run`") from None


_TIME_COLUMNS = ("task_start_ns", "task_dur_ns")
"""Read whatever else is asked: the times are checked on every read."""


WEEK_NS = 7 * 86_400 * 10**9
"""No task lasts, and no profile spans, longer than this (ours, and imported ones: importers/sanity.py)."""


def check_times(ops: pa.Table, source: str, *, need_rows: bool = True) -> None:
    """An op table of ours: at least one op (`need_rows`), starts >= 0, durations in [0, a week]; else it was
    damaged."""
    import pyarrow.compute as pc

    if ops.num_rows == 0 and not need_rows:
        return
    if ops.num_rows == 0:
        raise InputError(f"{source}: an op table with no ops; re-create the run with `atbprof run`")
    for column, lo, hi in (("task_start_ns", 0, 2**62), ("task_dur_ns", 0, WEEK_NS)):
        values = ops.column(column)
        bounds = pc.min_max(values)
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if values.null_count or low is None or low < lo or high > hi:
            raise InputError(
                f"{source}: {column} holds impossible values (min {low}, max {high}, {values.null_count} null; "
                f"expected {lo} to {hi:,}): the file was damaged or edited; re-create the run with `atbprof run`"
            )


STEPS_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int32(), nullable=False),
        pa.field("phase", pa.string(), nullable=False),
        pa.field("kv_len", pa.int32(), nullable=False),
        pa.field("tokens", pa.int32(), nullable=False, metadata={"doc": "new tokens processed (batch x query len)"}),
        pa.field("host_start_ns", pa.int64(), nullable=False, metadata={"doc": "host begins the step"}),
        pa.field("host_overhead_ns", pa.int64(), nullable=False, metadata={"doc": "host work before 1st launch"}),
        pa.field("first_op_index", pa.int64(), nullable=False),
        pa.field("op_count", pa.int64(), nullable=False),
        pa.field("device_start_ns", pa.int64(), nullable=False, metadata={"doc": "first task of the step starts"}),
        pa.field("device_end_ns", pa.int64(), nullable=False, metadata={"doc": "last task of the step ends"}),
        pa.field("sync_end_ns", pa.int64(), nullable=False, metadata={"doc": "host has the sampled token"}),
    ],
    metadata={"atbprof.table": "steps", "atbprof.schema_version": SCHEMA_VERSION},
)
"""One row per step: the host-side frame around the step's device tasks (sync = the token copy back to host)."""
