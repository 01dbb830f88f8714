"""sweep.parquet: one row per point, its swept values as columns named as their keys, then whether it fit, its
error, and every figure of the run summary under its run.json name (nested ones dotted: `memory.total_gb`,
`breakdown_ms_per_token.attention`, `fusion_fired.add_norm`).

The schema is fixed but for three families: a column per swept key (its type from its values: int64, float64,
bool, else string; a key some points leave unset is null there), `fusion_fired.<rule>` per rule that fired in
some point, and the `serving.*` figures when a point serves requests (`workload.kind: serving`). Column order
and row order (point index) are fixed, so the same sweep gives the same bytes.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa

from atbprof.sweep.figures import FIGURES, SERVING_FIGURES
from atbprof.sweep.spec import SweepSpec

__all__ = ["FIGURES", "SWEEP_SCHEMA_VERSION", "check_sweep_table", "sweep_table"]

SWEEP_SCHEMA_VERSION = "1"


_KINDS = {bool: pa.bool_(), int: pa.int64(), float: pa.float64()}


def _key_type(values: list[Any]) -> pa.DataType:
    kinds = {type(v) for v in values if v is not None}
    if kinds == {bool}:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64()
    if kinds <= {int, float} and bool not in kinds:
        return pa.float64()
    return pa.string()


def _key_value(value: Any, typ: pa.DataType) -> Any:
    if value is None or typ != pa.string():
        return value
    return value if isinstance(value, str) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _dig(doc: dict[str, Any] | None, dotted: str) -> Any:
    node: Any = doc
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _figure(outcome: dict[str, Any], name: str) -> Any:
    summary = outcome.get("summary")
    if name.startswith("memory."):
        return _dig(outcome.get("memory"), name.removeprefix("memory."))
    if summary is None:
        return None
    if name == "devices":
        par = summary.get("parallel") or {}
        return int(par.get("tp", 1)) * int(par.get("pp", 1)) * int(par.get("dp", 1)) if par else 1
    if name == "near_misses":
        return len(summary.get("near_misses") or [])
    if name == "fusion_disabled":
        return [f"{k}: {v}" for k, v in sorted((summary.get("fusion_disabled") or {}).items())]
    return _dig(summary, name)


def _fired(outcome: dict[str, Any]) -> dict[str, int] | None:
    """Per rule, how often it fired over the phases' graphs (summary.fusion_fired is phase -> rule -> count)."""
    summary = outcome.get("summary")
    if summary is None:
        return None
    out: dict[str, int] = {}
    for per_rule in (summary.get("fusion_fired") or {}).values():
        for rule, n in per_rule.items():
            out[rule] = out.get(rule, 0) + int(n)
    return out


def sweep_table(spec: SweepSpec, outcomes: list[dict[str, Any]]) -> pa.Table:
    """The sweep.parquet table of `outcomes` (one per point, in point order)."""
    cols: dict[str, pa.Array] = {"point": pa.array([o["point"] for o in outcomes], pa.int32())}
    fields = [pa.field("point", pa.int32(), nullable=False, metadata={"doc": "the point's index"})]
    for key in spec.swept_keys():
        values = [spec.points[o["point"]].get(key) for o in outcomes]
        typ = _key_type(values)
        cols[key] = pa.array([_key_value(v, typ) for v in values], typ)
        fields.append(pa.field(key, typ, metadata={"doc": "swept config key"}))
    fits = []
    for o in outcomes:
        mem = o.get("memory")
        fits.append(bool(mem["fits"]) if isinstance(mem, dict) and "fits" in mem else None)
    cols["fits"] = pa.array(fits, pa.bool_())
    fields.append(pa.field("fits", pa.bool_(), metadata={"doc": "fits the device's HBM (null: not known)"}))
    cols["error"] = pa.array([o.get("error") for o in outcomes], pa.string())
    fields.append(pa.field("error", pa.string(), metadata={"doc": "why the point has no figures (null: ran)"}))
    serving = any("serving" in (o.get("summary") or {}) for o in outcomes)
    for name, typ, doc in [*FIGURES, *(SERVING_FIGURES if serving else [])]:
        raw = [_figure(o, name) for o in outcomes]
        cols[name] = pa.array([None if v is None else (int(v) if typ == pa.int64() else v) for v in raw], typ)
        fields.append(pa.field(name, typ, metadata={"doc": doc}))
    fired = [_fired(o) for o in outcomes]
    for rule in sorted({r for f in fired if f for r in f}):
        cols[f"fusion_fired.{rule}"] = pa.array([None if f is None else f.get(rule, 0) for f in fired], pa.int64())
        doc = "times the rule fired in the run (prefill and decode steps' graphs)"
        fields.append(pa.field(f"fusion_fired.{rule}", pa.int64(), metadata={"doc": doc}))
    meta = {"atbprof.table": "sweep", "atbprof.schema_version": SWEEP_SCHEMA_VERSION}
    schema = pa.schema(fields, metadata=meta)
    return pa.table([cols[f.name] for f in schema], schema=schema)


def check_sweep_table(table: pa.Table, spec: SweepSpec, source: str) -> None:
    """A sweep.parquet as `sweep_table` writes it for `spec`: its columns and types, one row per point in order,
    no NaN or infinite figure; else InputError naming the file and what is wrong (nothing is drawn from it)."""
    import numpy as np
    import pyarrow.compute as pc

    from atbprof.errors import InputError

    def bad(why: str) -> InputError:
        return InputError(f"{source}: {why}; it is not the sweep.parquet atbprof wrote: run `atbprof sweep` again")

    want = [("point", pa.int32()), ("fits", pa.bool_()), ("error", pa.string())] + [(n, t) for n, t, _ in FIGURES]
    for name, typ in want:
        if name not in table.column_names:
            raise bad(f"no column {name}")
        if not table.schema.field(name).type.equals(typ):
            raise bad(f"column {name} is {table.schema.field(name).type}, expected {typ}")
    missing = [k for k in spec.swept_keys() if k not in table.column_names]
    if missing:
        raise bad(f"no column for the swept key {missing[0]}")
    if table.num_rows != len(spec.points):
        raise bad(f"{table.num_rows} rows for a sweep of {len(spec.points)} points")
    points = table.column("point").to_numpy(zero_copy_only=False)
    if not np.array_equal(points, np.arange(len(spec.points))):
        raise bad("its rows are not the points 0..N-1 in order")
    for name, typ, _ in FIGURES:
        if typ == pa.float64():
            col = table.column(name)
            if pc.any(pc.invert(pc.is_finite(col.drop_null()))).as_py():
                raise bad(f"column {name} holds NaN or an infinite value")
