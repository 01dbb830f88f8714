"""What both export layouts share: the run directory as input, the fixed clock, text formatting, atomic output.

Times: the op table holds integer ns relative to the run start; Ascend files hold absolute epoch µs with three
decimals (ns precision). Exports add the fixed `EPOCH_BASE_NS`, so the same run always gives the same bytes.
Text is built column-wise with pyarrow compute (one string array per CSV column / JSON piece, joined element-wise),
never with a Python loop per row: a million-row op table exports in seconds.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from atbprof.errors import InputError
from atbprof.importers.device_tasks import MODEL_ID_NONE
from atbprof.importers.run_doc import read_run_doc
from atbprof.optable.schema import STEPS_SCHEMA, check_times, ops_metadata, read_steps

EPOCH_BASE_NS = 1_735_689_600_000_000_000
"""2025-01-01T00:00:00Z: run time 0 in every export (a constant, not the wall clock: exports are reproducible)."""
DEVICE_ID = 0
GRAPH_MODEL_ID = 1
"""The Model ID a graph-mode run's kernels carry: a captured graph's tasks name their model (real ACL graph captures
show small ids, e.g. 46-49; eager tasks 4294967295), which importers read as `graph_launch`."""
GRAPH_EXECUTE = "AscendCL@aclmdlRIExecuteAsync"
"""The CANN call that replays a captured ACL graph (CANN's model runtime-instance API; one per replay in real
vllm-ascend graph-mode profiles): what a graph-mode step shows on the CANN layer instead of a Node@launch per kernel."""


def model_id(execution_mode: str) -> int:
    return GRAPH_MODEL_ID if execution_mode == "graph" else MODEL_ID_NONE


BATCH_ROWS = 1 << 16  # op rows per text pass: bounded memory, few compute calls
RUN_FILES = ("ops.parquet", "steps.parquet", "run.json")

Piece: TypeAlias = str | pa.Array | pa.ChunkedArray
"""A literal text fragment or one string per row."""


@dataclass(frozen=True)
class RunSource:
    """A validated run directory: everything an exporter needs besides the op batches."""

    run_dir: Path
    ops_path: Path
    ops_rows: int
    steps: pa.Table
    doc: dict[str, Any]  # run.json
    name: str
    soc_version: str
    clock_ghz: float
    aic_cores: int
    aiv_cores: int
    execution_mode: str  # eager | graph
    identity: bytes  # digest of name, seed and config: names and pids derived from it are stable
    devices: int = 1  # ranks of the run (summary.parallel.devices)
    rank: int | None = None  # this view's rank of a multi-device run (None: the whole table, one device)

    @property
    def is_910b(self) -> bool:
        """A2-style split cube/vector cores: PMU columns come as aic_* / aiv_* pairs."""
        return self.soc_version.startswith("Ascend910B")

    def os_pid(self) -> int:
        """A plausible Linux pid (< 2^22) for the profiled process, fixed per run."""
        return 100_000 + int.from_bytes(self.identity[:4], "big") % 3_000_000

    def letters(self, n: int) -> str:
        """n uppercase letters fixed per run (the random tail of a PROF_ directory name)."""
        return "".join(chr(ord("A") + b % 26) for b in self.identity[-n:])

    def slug(self) -> str:
        """The run name as a hostname-like token (letters, digits, '-')."""
        out = "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-" for c in self.name).strip("-")
        return out or "run"

    def sync_ns(self) -> int:
        """The token copy back to the host that ends every step (config.execution.sync_us)."""
        return round(float(self.doc.get("config", {}).get("execution", {}).get("sync_us", 0.0)) * 1e3)

    def rank_rows(self) -> dict[int, int]:
        """Rows per rank of a multi-device run (pipeline stages run different graphs: their counts differ)."""
        try:
            ranks = pq.read_table(self.ops_path, columns=["rank"], page_checksum_verification=True).column("rank")
        except (pa.ArrowException, OSError) as err:
            raise InputError(f"{self.ops_path}: unreadable ({err}); re-create the run with `atbprof run`") from None
        counts = pc.value_counts(ranks)
        return {int(v["values"]): int(v["counts"]) for v in counts.to_pylist() if v["values"] is not None}

    def for_rank(self, rank: int, rows: int) -> RunSource:
        """The view of one rank's `rows` tasks."""
        return replace(self, rank=rank, ops_rows=rows)

    def iter_batches(self, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """The op table (of this view's rank) in batches of at most BATCH_ROWS rows; a damaged file -> InputError."""
        wanted = list(columns) if columns else None
        read = wanted if self.rank is None or wanted is None or "rank" in wanted else [*wanted, "rank"]
        try:
            reader = pq.ParquetFile(
                self.ops_path, page_checksum_verification=True, metadata=_metadata(self.ops_path, self.rank)
            )
            groups, mixed = (None, False) if self.rank is None else _row_groups_of(reader, self.rank)
            for b in reader.iter_batches(batch_size=BATCH_ROWS, columns=read, row_groups=groups):
                if mixed:
                    b = b.filter(pc.equal(b.column("rank"), self.rank))
                    if not b.num_rows:
                        continue
                    if wanted is not None and read is not wanted:
                        b = b.select(wanted)
                yield b
        except (pa.ArrowException, OSError) as err:
            raise InputError(f"{self.ops_path}: unreadable ({err}); re-create the run with `atbprof run`") from None


def _metadata(path: Path, rank: int | None) -> pq.FileMetaData | None:
    """The file's footer, read once for all the rank views of a cluster (2,048 row groups at 1,024 ranks)."""
    if rank is None:
        return None
    st = path.stat()
    return _footer(str(path), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _footer(path: str, size: int, mtime_ns: int) -> pq.FileMetaData:
    return pq.read_metadata(path)


def _row_groups_of(reader: pq.ParquetFile, rank: int) -> tuple[list[int], bool]:
    """The row groups that may hold `rank`'s rows (by their rank statistics; a run writes a rank's tasks together,
    so a rank's view reads its own row groups, not the whole cluster's table), and whether any of them may hold
    other rows too (then each batch is filtered)."""
    meta = reader.metadata
    j = reader.schema_arrow.get_field_index("rank")
    out = []
    mixed = j < 0
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(j).statistics if j >= 0 else None
        if stats is None or not stats.has_min_max:
            out.append(i)
            mixed = True
        elif stats.min <= rank <= stats.max:
            out.append(i)
            mixed |= stats.null_count != 0 or stats.min != stats.max
    return out, mixed


def _need(doc: dict[str, Any], path: str, source: Path) -> Any:
    node: Any = doc
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise InputError(f"{source}: missing key {path!r}; re-create the run with `atbprof run`")
        node = node[key]
    return node


def load_run(run_dir: Path) -> RunSource:
    """Check a run directory written by `atbprof run` and read its small parts (steps, run.json)."""
    run_dir = Path(run_dir)
    fix = "create one with `atbprof run -c CONFIG --out DIR`"
    if not run_dir.exists():
        raise InputError(f"{run_dir}: no such run directory; {fix}")
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not a directory; give the directory `atbprof run` wrote ({fix})")
    for name in RUN_FILES:
        if not (run_dir / name).is_file():
            raise InputError(
                f"{run_dir / name}: missing; {run_dir} is not a complete atbprof run directory "
                f"(it needs {', '.join(RUN_FILES)}); re-create it with `atbprof run`"
            )
    ops_path = run_dir / "ops.parquet"
    meta = ops_metadata(ops_path)
    try:  # the two time columns (16 bytes an op): damaged times stop the export before anything is written
        times = pq.read_table(ops_path, columns=["task_start_ns", "task_dur_ns"], page_checksum_verification=True)
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{ops_path}: damaged ({err}); re-create the run with `atbprof run`") from None
    check_times(times, str(ops_path))
    steps = read_steps(run_dir / "steps.parquet")
    doc_path = run_dir / "run.json"
    doc = read_run_doc(doc_path)
    parallel = (doc.get("summary") or {}).get("parallel") or {}
    devices = int(parallel.get("devices") or 1) if isinstance(parallel, dict) else 1
    identity = {k: doc.get(k) for k in ("name", "seed", "config")}
    return RunSource(
        run_dir=run_dir,
        ops_path=ops_path,
        ops_rows=meta.num_rows,
        steps=steps.select([f.name for f in STEPS_SCHEMA]).sort_by("step"),
        doc=doc,
        name=str(_need(doc, "name", doc_path)),
        soc_version=str(_need(doc, "device.soc_version", doc_path)),
        clock_ghz=float(_need(doc, "device.clock_ghz", doc_path)),
        aic_cores=int(_need(doc, "device.cores.aic", doc_path)),
        aiv_cores=int(_need(doc, "device.cores.aiv", doc_path)),
        execution_mode=str(_need(doc, "config.execution.mode", doc_path)),
        identity=hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).digest(),
        devices=devices,
    )


# -- clock ---------------------------------------------------------------------------------------------------------


def wall_clock(ns: int = 0, digits: int = 17) -> str:
    """Run time `ns` as the digits Ascend puts in names: YYYYMMDDhhmmss (14) or with milliseconds (17)."""
    t = datetime.fromtimestamp((EPOCH_BASE_NS + ns) // 1_000_000_000, tz=timezone.utc)
    ms = (EPOCH_BASE_NS + ns) // 1_000_000 % 1000
    text = t.strftime("%Y%m%d%H%M%S") + f"{ms:03d}"
    return text[:digits]


def abs_ns(rel: pa.Array | np.ndarray | int) -> Any:
    """Run-relative ns -> absolute epoch ns (int64 holds epoch ns until 2262)."""
    if isinstance(rel, int):
        return EPOCH_BASE_NS + rel
    return pc.add(rel, pa.scalar(EPOCH_BASE_NS, pa.int64()))


# -- text ----------------------------------------------------------------------------------------------------------


def _as_array(values: pa.Array | pa.ChunkedArray | np.ndarray) -> pa.Array:
    if isinstance(values, np.ndarray):
        return pa.array(values)
    if isinstance(values, pa.ChunkedArray):
        return values.combine_chunks()
    return values


def int_text(values: pa.Array | pa.ChunkedArray | np.ndarray) -> pa.Array:
    return pc.cast(_as_array(values), pa.string())


_FRACTION_FIXED = pa.array([f".{i:03d}" for i in range(1000)], pa.string())
_FRACTION_SHORT = pa.array([f".{i:03d}".rstrip("0") if i else ".0" for i in range(1000)], pa.string())


def _decimal(ns: pa.Array | pa.ChunkedArray | np.ndarray, fractions: pa.Array) -> pa.Array:
    arr = pc.cast(_as_array(ns), pa.int64())
    whole = pc.divide(arr, pa.scalar(1000, pa.int64()))  # integer division (the input is non-negative)
    frac = pc.subtract(arr, pc.multiply(whole, pa.scalar(1000, pa.int64())))
    out = pc.binary_join_element_wise(int_text(whole), pc.take(fractions, frac), "")  # nulls stay null
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def fixed3(ns: pa.Array | pa.ChunkedArray | np.ndarray) -> pa.Array:
    """Non-negative integer thousandths (ns) as µs text with exactly three decimals: 1234560 -> "1234.560"."""
    return _decimal(ns, _FRACTION_FIXED)


def short3(ns: pa.Array | pa.ChunkedArray | np.ndarray) -> pa.Array:
    """Thousandths as Python's repr of round(x, 3): "12.34", "0.0", "7.0" (how msprof prints PMU values)."""
    return _decimal(ns, _FRACTION_SHORT)


def thousandths(values: np.ndarray) -> np.ndarray:
    """Floats as non-negative integer thousandths (NaN and negatives -> 0)."""
    out = np.rint(np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0) * 1000.0)
    return np.clip(out, 0, None).astype(np.int64)


def py_number(x: float) -> str:
    """A float the way Python's csv module writes it (shortest round-trip repr)."""
    return repr(float(x))


def csv_field(value: str) -> str:
    """One CSV field, quoted only when it must be (RFC 4180)."""
    if any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


def quoted_shapes(value: str) -> str:
    """msprof writes shape cells with literal quotes: 4096,1;1024 -> the CSV field \"\"\"4096,1;1024\"\"\"."""
    return csv_field(f'"{value}"')


def map_dictionary(col: pa.Array, fn: Callable[[str], str], cache: dict[str, str] | None = None) -> pa.Array:
    """fn applied to each distinct value of a (dictionary or string) column, then spread back to the rows."""
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    memo = cache if cache is not None else {}
    values = [memo[v] if v in memo else memo.setdefault(v, fn(v)) for v in col.dictionary.to_pylist()]
    return pc.take(pa.array(values, pa.string()), col.indices)


def matches(values: pa.Array, test: Callable[[pa.Array], pa.Array]) -> pa.Array:
    """`test` (a compute function of strings) of each row; of each distinct value once where the column is
    dictionary-encoded, as the op table's string columns are (no string per row is built)."""
    if pa.types.is_dictionary(values.type):
        return test(values.dictionary.cast(pa.string())).take(values.indices)
    return test(values.cast(pa.string()))


def join_pieces(pieces: Sequence[Piece], null_handling: str = "emit_null") -> pa.Array:
    """Concatenate pieces per row; a null piece makes the row null (default) or is skipped ("skip")."""
    merged: list[Piece] = []
    for p in pieces:  # adjacent literals -> one scalar
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        else:
            merged.append(p)
    args = [pa.scalar(p, pa.string()) if isinstance(p, str) else p for p in merged]
    if not any(isinstance(a, pa.Array | pa.ChunkedArray) for a in args):
        raise ValueError("join_pieces needs at least one per-row piece")
    out = pc.binary_join_element_wise(*args, "", null_handling=null_handling)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def text_bytes(rows: pa.Array) -> memoryview:
    """The concatenated text of a string array without a copy: its data buffer between first and last offset."""
    if len(rows) == 0:
        return memoryview(b"")
    if rows.null_count:
        rows = pc.fill_null(rows, "")
    _, offsets, data = rows.buffers()
    if data is None:
        return memoryview(b"")
    off = np.frombuffer(offsets, dtype=np.int32, count=len(rows) + 1, offset=rows.offset * 4)
    return memoryview(data)[int(off[0]) : int(off[-1])]


def csv_lines(columns: Sequence[pa.Array]) -> pa.Array:
    """One CSV line per row ("a,b,c\\n") from already escaped text columns."""
    pieces: list[Piece] = []
    for i, col in enumerate(columns):
        pieces += [",", col] if i else [col]
    return join_pieces([*pieces, "\n"])
