"""Readers for what the exports and msprof-analyze write: raw CSV rows, trace JSON, xlsx sheets (no openpyxl)."""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET
import zipfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from atbprof.export.common import EPOCH_BASE_NS

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "ascend_samples"
QWEN = SAMPLES / "msinsight_qwen3_0.6b_level2_rank0"
_XL = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_REL = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"


def sample(*parts: str) -> Path:
    """A file of the real Ascend samples (shared/anchors); tests that need one skip when it is absent."""
    import pytest

    path = SAMPLES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real Ascend sample {path} not available")
    return path


def header(path: Path) -> list[str]:
    with open(path, newline="") as fh:
        return next(csv.reader(fh))


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def us_to_ns(text: str) -> int:
    """Absolute or relative µs text (three decimals, maybe a trailing TAB) -> integer ns, exactly."""
    return int(Decimal(text.strip()) * 1000)


def rel_ns(text: str) -> int:
    return us_to_ns(text) - EPOCH_BASE_NS


def load_json(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def processes(events: list[dict[str, Any]]) -> dict[str, int]:
    """process_name -> pid (the only safe way to find a layer: pids are opaque)."""
    return {e["args"]["name"]: e["pid"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}


def read_xlsx(path: Path) -> dict[str, list[list[str | None]]]:
    """Every sheet of an .xlsx as rows of cell text (shared and inline strings, numbers as written)."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        shared: list[str] = []
        if "xl/sharedStrings.xml" in names:
            for si in ET.fromstring(z.read("xl/sharedStrings.xml")).iter(f"{_XL}si"):
                shared.append("".join(t.text or "" for t in si.iter(f"{_XL}t")))
        rels = {r.get("Id"): r.get("Target", "") for r in ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))}
        book: dict[str, list[list[str | None]]] = {}
        for sheet in ET.fromstring(z.read("xl/workbook.xml")).iter(f"{_XL}sheet"):
            target = rels[sheet.get(f"{_REL}id")].lstrip("/")
            target = target if target.startswith("xl/") else f"xl/{target}"
            table = []
            for row in ET.fromstring(z.read(target)).iter(f"{_XL}row"):
                cells: list[str | None] = []
                for c in row.iter(f"{_XL}c"):
                    v, kind = c.find(f"{_XL}v"), c.get("t")
                    if kind == "s" and v is not None:
                        cells.append(shared[int(v.text or 0)])
                    elif kind == "inlineStr":
                        cells.append("".join(t.text or "" for t in c.iter(f"{_XL}t")))
                    else:
                        cells.append(v.text if v is not None else None)
                table.append(cells)
            book[sheet.get("name", "")] = table
        return book


def problem_rows(book: dict[str, list[list[str | None]]]) -> dict[str, str]:
    """The advisor's "problems" sheet: category -> description."""
    return {str(r[0]): str(r[1]) for r in book.get("problems", [])[1:] if r and r[0]}


def sequence_tables(book: dict[str, list[list[str | None]]]) -> list[tuple[int, int, int]]:
    """Fusible Operator Analysis sub-tables: (start index, end index, occurrences) rows, from any sheet whose header
    starts with "start index" (the sheet names differ by language and are truncated to 31 characters)."""
    out = []
    for table in book.values():
        if table and table[0] and table[0][0] == "start index":
            for r in table[1:]:
                if r and r[0] and re.fullmatch(r"\s*\d+\s*", r[0]) and r[1] and r[5]:
                    out.append((int(r[0]), int(str(r[1])), int(float(str(r[5])))))
    return out
