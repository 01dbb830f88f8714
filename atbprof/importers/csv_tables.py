"""Per-task op tables as CSV: torch_npu `kernel_details.csv` and native msprof `op_summary_*.csv`.

Both carry the same cells under two vocabularies (docs/ascend_profiling_formats.md §0, §2.2); the variant is told by
the header, never by the file name. Headers drift by version: `Block Dim` / `Block Num`, optional `Step Id`,
`Device_id`, `OP State`, `HF32 Eligible`, PMU tails (aic_* / aiv_* on A2/A3, unprefixed on 910A, none at Level0).
Cells: start times end in a TAB (sometimes inside quotes), shapes carry literal quotes (the raw cell wraps
4096,1;1024 in three double quotes each side), `N/A` means not collected; at Level0 `Type` is N/A and the type comes
from the kernel name (optypes.py).

pyarrow reads every needed column as text (nothing is guessed as float); the text is then parsed column-wise.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from atbprof.errors import InputError
from atbprof.importers.assemble import RawOps
from atbprof.importers.device_tasks import MODEL_ID_NONE, kernel_mask
from atbprof.importers.optypes import ascend_op_type, base_ascend_types, derive_types
from atbprof.importers.timetext import clean_text, us_to_ns
from atbprof.inputs import read_bytes, regular_file
from atbprof.optable.schema import MSPROF_COLUMNS

KERNEL_DETAILS = {
    "op_name": "Name",
    "op_type": "Type",
    "task_type": "Accelerator Core",
    "task_start_ns": "Start Time(us)",
    "task_dur_ns": "Duration(us)",
    "task_wait_ns": "Wait Time(us)",
}
"""torch_npu's names for the cells msprof calls MSPROF_COLUMNS (the rest are shared)."""
_OWN = tuple(KERNEL_DETAILS)
OP_SUMMARY = {k: MSPROF_COLUMNS[k] for k in _OWN}
SHARED = {
    "step": ("Step Id",),
    "stream_id": ("Stream ID",),
    "task_id": ("Task ID",),
    "block_dim": ("Block Dim", "Block Num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num"),
    "input_shapes": ("Input Shapes",),
    "input_dtypes": ("Input Data Types",),
    "output_shapes": ("Output Shapes",),
    "output_dtypes": ("Output Data Types",),
    "graph_launch": ("Model ID",),  # a captured graph's task names its model; 4294967295: none (eager)
}
REQUIRED = ("op_name", "op_type", "task_start_ns", "task_dur_ns")
PIPE_SIDES = {  # our pipe -> PMU column prefixes that measure it (A2/A3 split cube/vector cores; 910A unprefixed)
    "mac": ("aic_", ""),
    "vec": ("aiv_", ""),
    "scalar": ("aic_", "aiv_", ""),
    "mte1": ("aic_", ""),
    "mte2": ("aic_", "aiv_", ""),
    "mte3": ("aiv_", ""),
    "fixpipe": ("aic_", ""),
}
NOT_OP_TABLES = (  # (header columns that identify it, what it is)
    (
        {"OP Type", "Core Type", "Count", "Total Time(us)"},
        "an op_statistic table (one row per op type: counts and total times)",
    ),
    ({"API Name", "Level", "Time(us)", "Count"}, "an api_statistic table (host API call statistics)"),
    ({"Step", "Computing", "Free"}, "a step_trace_time table (per-step computing / free time)"),
    ({"kernel_name", "kernel_type", "task_time(us)"}, "a task_time table (no op types, shapes or PMU data)"),
    ({"Name", "Call Stack", "Host Self Duration(us)"}, "an operator_details table (framework ops, not device tasks)"),
)
# the AI Core clock a profile ran at, from its own cycle counters: (total cycles, busy time) column pairs; the
# cycles are summed over the kernel's blocks (an AIV of a MIX kernel counts Mix Block Dim blocks: not used)
_CLOCK_PAIRS = (("aic_total_cycles", "aicore_time(us)"), ("total_cycles", "aicore_time(us)"))
_CLOCK_MIN_US = 10.0  # shorter busy times are rounded too coarsely to divide by
_NEXT_TO_IT = "give the kernel_details.csv (torch_npu) or op_summary_*.csv (msprof) of the same profile instead"
_INT = r"^-?[0-9]{1,10}$"
_FLOAT = r"^-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
_INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class OpTableVariant:
    kind: str  # kernel_details | op_summary
    names: dict[str, str]  # our column -> header name present in the file


def header_of(path: Path, head: bytes) -> list[str]:
    """The column names of the first line (BOM and CR stripped)."""
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    if line.startswith(b"\xef\xbb\xbf"):
        line = line[3:]
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(
            f"{path}: the header line is not UTF-8 text (byte {line[err.start]:#04x} at column {err.start + 1}); "
            "Ascend tools write UTF-8: re-export the file or convert it to UTF-8"
        ) from None
    try:
        return [c.strip() for c in next(csv.reader([text]), [])]
    except csv.Error as err:  # e.g. a stray carriage return inside the line
        raise InputError(f"{path}: the first line is not a CSV header ({err})") from None


def classify(path: Path, header: list[str]) -> OpTableVariant | None:
    """The op-table variant of `header`, None if it is no CSV atbprof knows; InputError for known non-op tables
    and for op tables that lack a column atbprof needs."""
    cols = set(header)
    for marks, what in NOT_OP_TABLES:
        if marks <= cols:
            raise InputError(f"{path}: this is {what}, not an op table with one row per device task; {_NEXT_TO_IT}")
    scores = {
        "kernel_details": len(cols & set(KERNEL_DETAILS.values())),
        "op_summary": len(cols & set(OP_SUMMARY.values())),
    }
    kind = max(scores, key=lambda k: scores[k])
    if scores[kind] < 2 and not (cols & {"Block Dim", "Block Num", "Input Shapes", "Step Id"}):
        return None
    vocab = KERNEL_DETAILS if kind == "kernel_details" else OP_SUMMARY
    names = {ours: theirs for ours, theirs in vocab.items() if theirs in cols}
    for ours, options in SHARED.items():
        found = next((o for o in options if o in cols), None)
        if found:
            names[ours] = found
    missing = [vocab[c] for c in REQUIRED if c not in names]
    if missing:
        need = ", ".join(vocab[c] for c in REQUIRED)
        raise InputError(
            f"{path}: looks like a {kind} table but lacks the column(s) {', '.join(repr(m) for m in missing)}; "
            f"atbprof needs {need}. Restore the header line or re-export the profile "
            "(torch_npu writes kernel_details.csv, msprof op_summary_*.csv)"
        )
    return OpTableVariant(kind, names)


def read_op_table(
    path: Path, data: bytes | None, variant: OpTableVariant, header: list[str]
) -> tuple[RawOps, dict[str, object]]:
    """The op rows of one CSV (absolute times, file order) and what was learned about it (meta)."""
    pmu = _pmu_columns(header)
    clock_cols = {c for pair in _CLOCK_PAIRS for c in pair}
    wanted = sorted(
        {*variant.names.values(), *(c for cs in pmu.values() for c in cs), *clock_cols, "Device_id"} & set(header)
    )
    table = _read_csv(path, data, wanted)
    n = table.num_rows
    if n == 0:
        raise InputError(f"{path}: has a header but no rows (a half-written file?); re-export the profile")
    col = {ours: table.column(theirs) for ours, theirs in variant.names.items()}
    warnings: list[str] = []
    out: dict[str, pa.Array] = {}
    name = pc.fill_null(col["op_name"].combine_chunks(), "")
    out["op_name"] = name
    typ = base_ascend_types(clean_text(col["op_type"]))
    derived = int(typ.null_count)
    out["op_type"] = pc.coalesce(typ, derive_types(name, ascend_op_type)) if derived else typ
    for ours in ("task_start_ns", "task_dur_ns"):
        out[ours] = _required_ns(path, variant.names[ours], col[ours], exact=ours == "task_start_ns")
    if (out["task_dur_ns"].to_numpy() < 0).any():
        row = int(np.flatnonzero(out["task_dur_ns"].to_numpy() < 0)[0])
        raise InputError(f"{path}: column {variant.names['task_dur_ns']!r}, row {row + 1}: negative duration")
    if "task_wait_ns" in col:
        out["task_wait_ns"] = _optional_ns(variant.names["task_wait_ns"], col["task_wait_ns"], warnings)
    if "task_type" in col:
        out["task_type"] = clean_text(col["task_type"])
    for ours in ("step", "stream_id", "task_id", "block_dim", "mix_block_dim"):
        if ours in col:
            out[ours] = _optional_int(variant.names[ours], col[ours], warnings)
    if "graph_launch" in col:
        model = clean_text(col["graph_launch"])
        out["graph_launch"] = pc.not_equal(model, pa.scalar(str(MODEL_ID_NONE)))  # graph_task; null: not recorded
    for ours in ("input_shapes", "output_shapes"):
        if ours in col:
            out[ours] = _shapes(col[ours])
    for ours in ("input_dtypes", "output_dtypes"):
        if ours in col:
            out[ours] = clean_text(col[ours])
    for pipe, (time_cols, ratio_cols) in _pmu_pairs(pmu).items():
        if time_cols:
            out[f"{pipe}_time_ns"] = _max_of([_optional_ns(c, table.column(c), warnings) for c in time_cols])
        if ratio_cols:
            out[f"{pipe}_ratio"] = _max_of([_optional_float(c, table.column(c), warnings) for c in ratio_cols])
    meta: dict[str, object] = {
        "variant": variant.kind,
        "columns": header,
        "op_types_from_names": derived,
        "pmu": sorted(c for cs in pmu.values() for c in cs),
    }
    keep = kernel_mask(out.get("task_type"), out["op_name"])
    if not keep.all():  # runtime tasks (EVENT_RECORD, TASK_TIMEOUT_SET, ...) are not kernels: as the timelines
        dropped = Counter(pc.filter(out["op_name"], pa.array(~keep)).to_pylist())
        mask = pa.array(keep)
        out = {k: v.filter(mask) for k, v in out.items()}
        table = table.filter(mask)
        meta["dropped_device_tasks"] = dict(sorted(dropped.items()))
        warnings.append(f"{int((~keep).sum())} row(s) are runtime tasks, not kernels, and were left out")
    clock = _measured_clock_mhz(table, variant.names.get("block_dim"))
    if clock:
        meta["aicore_clock_mhz"] = clock
    if "Device_id" in table.column_names:
        meta["devices"] = sorted({d for d in clean_text(table.column("Device_id")).to_pylist() if d is not None})
    if warnings:
        meta["warnings"] = [f"{path.name}: {w}" for w in warnings]
    return RawOps(out), meta


def _measured_clock_mhz(table: pa.Table, block_dim: str | None) -> float | None:
    """The median AI Core clock over the kernels busy long enough to tell, in MHz (cycles / time / blocks);
    None when the table has no cycle counters."""
    if not block_dim or block_dim not in table.column_names:
        return None
    for cycles_col, time_col in _CLOCK_PAIRS:
        if cycles_col not in table.column_names or time_col not in table.column_names:
            continue
        cycles, busy_us, blocks = (
            pc.cast(_optional_float(c, table.column(c), []), pa.float64()).to_numpy(zero_copy_only=False)
            for c in (cycles_col, time_col, block_dim)
        )
        ok = (busy_us >= _CLOCK_MIN_US) & (cycles > 0) & (blocks >= 1)
        if ok.any():
            return round(float(np.median(cycles[ok] / busy_us[ok] / blocks[ok])), 1)
    return None


def _read_csv(path: Path, data: bytes | None, columns: list[str]) -> pa.Table:
    if data is None:
        regular_file(path)  # the size cap, before pyarrow materialises the columns
    try:
        return pcsv.read_csv(
            io.BytesIO(data) if data is not None else str(path),
            read_options=pcsv.ReadOptions(use_threads=True, block_size=1 << 22),
            convert_options=pcsv.ConvertOptions(
                include_columns=columns,
                column_types=dict.fromkeys(columns, pa.string()),
                strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as err:
        raise InputError(f"{path}: {_arrow_reason(path, data, str(err))}") from None
    except (pa.ArrowException, OSError) as err:
        raise InputError(f"{path}: cannot be read as CSV ({err})") from None


_BAD_ROW = re.compile(r"Expected (\d+) columns, got (\d+): (.*)", re.DOTALL)


def _arrow_reason(path: Path, data: bytes | None, message: str) -> str:
    """pyarrow's complaint in the user's terms: the line (counted in the file) and what to do."""
    bad_row = _BAD_ROW.search(message)
    if bad_row:
        expected, actual, text = bad_row.groups()
        text = text.removesuffix(" ...")
        number = _line_of(path, data, text[:80]) if text else None
        where = f"line {number}" if number else "a row"
        return (
            f"{where} has {actual} of {expected} columns ({text[:80]!r}); the file is damaged or was cut off while "
            "being written (half-written?): re-export it"
        )
    if "UTF8" in message or "UTF-8" in message:
        raw = data if data is not None else read_bytes(path)
        for at, raw_line in enumerate(raw.split(b"\n"), start=1):
            try:
                raw_line.decode("utf-8")
            except UnicodeDecodeError as err:
                return f"line {at} is not UTF-8 text (byte {raw_line[err.start]:#04x}); convert the file to UTF-8"
        return "not UTF-8 text; convert the file to UTF-8"
    return f"not a well-formed CSV table ({message.splitlines()[0][:200]}); re-export it"


def _line_of(path: Path, data: bytes | None, text: str) -> int | None:
    raw = data if data is not None else read_bytes(path)
    at = raw.find(b"\n" + text.encode("utf-8", "replace"))
    return raw.count(b"\n", 0, at + 1) + 1 if at >= 0 else None


def _required_ns(path: Path, header: str, values: pa.ChunkedArray, exact: bool) -> pa.Array:
    ns, present, _ = us_to_ns(values, exact)
    if not present.all():
        row = int(np.flatnonzero(~present)[0])
        value = values[row].as_py()
        raise InputError(
            f"{path}: column {header!r}, row {row + 1}: {value!r} is not a time in µs (e.g. 1764246877078671.380); "
            "the file is damaged: re-export it"
        )
    return pa.array(ns)


def _optional_ns(header: str, values: pa.ChunkedArray, warnings: list[str]) -> pa.Array:
    ns, present, bad = us_to_ns(values)
    _warn_bad(header, values, bad, warnings)
    return pa.array(ns, pa.int64(), mask=~present)


def _optional_int(header: str, values: pa.ChunkedArray, warnings: list[str]) -> pa.Array:
    text = clean_text(values)
    ok = pc.fill_null(pc.match_substring_regex(text, _INT), False)
    _warn_bad(header, values, pc.and_(pc.is_valid(text), pc.invert(ok)).to_numpy(zero_copy_only=False), warnings)
    num = pc.cast(pc.if_else(ok, text, pa.scalar(None, pa.string())), pa.int64())
    in_range = pc.and_(pc.greater_equal(num, _INT32[0]), pc.less_equal(num, _INT32[1]))
    # Model ID style 4294967295 ("none") and damaged values do not fit int32: null
    return pc.if_else(pc.fill_null(in_range, False), num, pa.scalar(None, pa.int64()))


def _optional_float(header: str, values: pa.ChunkedArray, warnings: list[str]) -> pa.Array:
    text = clean_text(values)
    ok = pc.fill_null(pc.match_substring_regex(text, _FLOAT), False)
    _warn_bad(header, values, pc.and_(pc.is_valid(text), pc.invert(ok)).to_numpy(zero_copy_only=False), warnings)
    return pc.cast(pc.cast(pc.if_else(ok, text, pa.scalar(None, pa.string())), pa.float64()), pa.float32())


def _warn_bad(header: str, values: pa.ChunkedArray, bad: np.ndarray, warnings: list[str]) -> None:
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        warnings.append(
            f"{header}: {int(bad.sum())} value(s) are not numbers (first: row {row + 1}, {values[row].as_py()!r}); "
            "read as null"
        )


def _shapes(values: pa.ChunkedArray) -> pa.Array:
    """`"4096,1;1024"` -> 4096,1;1024; N/A or an empty cell -> null; `""` (a scalar) stays an empty string."""
    raw = pc.utf8_trim_whitespace(values.combine_chunks())
    missing = pc.is_in(raw, value_set=pa.array(["", "N/A"], pa.string()))
    return pc.if_else(missing, pa.scalar(None, pa.string()), pc.utf8_trim(raw, characters='"'))


def _pmu_columns(header: list[str]) -> dict[str, list[str]]:
    """PMU columns per our pipe: `<pipe>` -> time and ratio header names present (any side)."""
    cols = set(header)
    out: dict[str, list[str]] = {}
    for pipe, prefixes in PIPE_SIDES.items():
        out[pipe] = [
            f"{prefix}{pipe}_{kind}"
            for prefix in prefixes
            for kind in ("time(us)", "ratio")
            if f"{prefix}{pipe}_{kind}" in cols
        ]
    return out


def _pmu_pairs(pmu: dict[str, list[str]]) -> dict[str, tuple[list[str], list[str]]]:
    return {
        pipe: ([c for c in cs if c.endswith("time(us)")], [c for c in cs if c.endswith("ratio")])
        for pipe, cs in pmu.items()
        if cs
    }


def _max_of(arrays: list[pa.Array]) -> pa.Array:
    """One value per pipe: a MIX kernel reports the scalar / MTE2 pipes of both its cores; the busier one counts
    (as msprof-analyze does: max(aic_mte2_time, aiv_mte2_time))."""
    out = arrays[0]
    for arr in arrays[1:]:
        out = pc.max_element_wise(out, arr, skip_nulls=True)
    return out


_SLICE = re.compile(r"_slice_(\d+)")


def slice_key(path: Path) -> tuple[int, str]:
    """Sliced msprof outputs (op_summary_slice_0_<ts>.csv, ...) are read in slice order."""
    match = _SLICE.search(path.name)
    return (int(match.group(1)) if match else -1, path.name)


def concat_ops(parts: list[RawOps]) -> RawOps:
    if len(parts) == 1:
        return parts[0]
    keys = {k for p in parts for k in p.columns}
    cols: dict[str, pa.Array] = {}
    for key in sorted(keys):
        arrays = [p.columns.get(key) for p in parts]
        typ = next(a.type for a in arrays if a is not None)
        cols[key] = pa.concat_arrays(
            [a if a is not None else pa.nulls(p.rows, typ) for a, p in zip(arrays, parts, strict=True)]
        )
    return RawOps(cols)
