"""A sweep's points as plain rows for its figures (the swept values and the figures drawn), and the choice of
which swept key goes on the x axis, which on the y axis of a heatmap, and which make the series."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

FIGURES = ("decode_ms_per_token", "tokens_per_s", "ttft_ms")
MAX_SERIES = 12
MAX_PANELS = 4


@dataclass(frozen=True)
class SweepRows:
    keys: list[str]
    values: dict[str, list[Any]]  # swept key -> its values in sweep order
    rows: list[dict[str, Any]]  # per point: swept values, fits, error, FIGURES

    def numeric(self) -> list[str]:
        return [
            k
            for k in self.keys
            if len(self.values[k]) > 1
            and all(isinstance(v, int | float) and not isinstance(v, bool) for v in self.values[k])
        ]

    def varying(self) -> list[str]:
        return [k for k in self.keys if len(self.values[k]) > 1]


def sweep_rows(keys: list[str], axes: dict[str, list[Any]], table: pa.Table) -> SweepRows:
    cols = ["fits", "error", *[f for f in FIGURES if f in table.column_names]]
    data = table.select([*[k for k in keys if k in table.column_names], *cols]).to_pylist()
    return SweepRows(keys, axes, data)


def label_of(key: str, value: Any) -> str:
    short = key.rsplit(".", 1)[-1]
    return f"{short}={value}"


def series_key(row: dict[str, Any], keys: list[str]) -> tuple[Any, ...]:
    return tuple(str(row.get(k)) for k in keys)
