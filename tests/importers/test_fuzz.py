"""Mutated real samples (truncated, bytes flipped, lines dropped or duplicated, columns deleted, gzipped) fed to every
importer: each either imports or raises InputError - no other exception escapes, and none needs the safety net."""

from __future__ import annotations

import gzip
import shutil
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atbprof.errors import InputError
from atbprof.importers import load_profile
from atbprof.importers.ascend_dirs import load_ascend_pt, load_msprof_dir
from atbprof.importers.base import Profile
from atbprof.importers.detect import load_kineto, load_op_table, load_timeline
from atbprof.importers.guard import UNEXPECTED
from tests.importers.conftest import LEVEL0, LEVEL1, MSTT, OUT, QWEN, TRACES, shared

Importer = Callable[[Path], Profile]


def _lines(path: Path, n: int) -> bytes:
    return b"\n".join(shared(path).read_bytes().split(b"\n")[:n]) + b"\n"


def _events(path: Path, n: int) -> bytes:
    """The metadata and the first n other events of each process (small enough that a mutation matters)."""
    raw = shared(path).read_bytes()
    doc = orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    per_process: dict[object, int] = {}
    kept = []
    for event in events:
        pid = event.get("pid")
        if event.get("ph") == "M" or per_process.get(pid, 0) < n:
            kept.append(event)
            per_process[pid] = per_process.get(pid, 0) + (event.get("ph") != "M")
    if isinstance(doc, dict):
        return orjson.dumps({**doc, "traceEvents": kept}, option=orjson.OPT_INDENT_2)
    return orjson.dumps(kept)


@cache
def samples() -> dict[str, bytes]:
    return {
        "qwen_kernel_details": _lines(QWEN / OUT / "kernel_details.csv", 40),
        "level0_kernel_details": _lines(LEVEL0 / OUT / "kernel_details.csv", 40),
        "level1_kernel_details": _lines(LEVEL1 / OUT / "kernel_details.csv", 40),
        "gpt_kernel_details": _lines(MSTT / "kernel_details_gpt_layernorm_train.csv", 40),
        "op_statistic": _lines(QWEN / OUT / "op_statistic.csv", 20),
        "mstt_trace_view": _events(MSTT / "trace_view.json", 60),
        "level0_trace_view": _events(LEVEL0 / OUT / "trace_view.json", 60),
        "amd_kineto": _events(TRACES / "hta_amd_mi250_minitoy_train_ROCm6_2_kineto.json.gz", 60),
        "ns_kineto": _events(TRACES / "hta_ns_resolution_rank0.pt.trace.json.gz", 60),
        "resnet_kineto": _events(TRACES / "kineto_tbplugin_resnet50_worker0.pt.trace.json.gz", 60),
    }


SPLICES = [b'"', b",", b"\t", b"N/A", b"-1", b"1e999", b"\xff\xfe", b"{}", b"[[", b"18446744073709551615", b"\r"]


class Case:
    """A mutated sample; printed short (hypothesis prints failing cases, the bytes would be 100 kB)."""

    def __init__(self, sample: str, data: bytes, steps: tuple[str, ...]) -> None:
        self.sample, self.data, self.steps = sample, data, steps

    def __repr__(self) -> str:
        return f"Case({self.sample!r}, {len(self.data)} bytes, {self.steps}, head={self.data[:60]!r})"


@st.composite
def mutated(draw: st.DrawFn) -> Case:
    name = draw(st.sampled_from(sorted(samples())))
    data = bytearray(samples()[name])
    steps: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "drop_line", "dup_line", "drop_column", "splice"]))
        steps.append(kind)
        lines = bytes(data).split(b"\n")
        if kind == "truncate":
            data = data[: draw(st.integers(0, len(data)))]
        elif kind == "flip" and data:
            for _ in range(draw(st.integers(1, 8))):
                at = draw(st.integers(0, len(data) - 1))
                data[at] ^= draw(st.integers(1, 255))
        elif kind == "drop_line" and lines:
            del lines[draw(st.integers(0, len(lines) - 1))]
            data = bytearray(b"\n".join(lines))
        elif kind == "dup_line" and lines:
            at = draw(st.integers(0, len(lines) - 1))
            lines.insert(at, lines[at])
            data = bytearray(b"\n".join(lines))
        elif kind == "drop_column":
            col = draw(st.integers(0, 50))
            data = bytearray(b"\n".join(b",".join(c for i, c in enumerate(ln.split(b",")) if i != col) for ln in lines))
        elif kind == "splice" and data:
            at = draw(st.integers(0, len(data)))
            data[at:at] = draw(st.sampled_from(SPLICES))
    if draw(st.integers(0, 4)) == 0:
        return Case(name, gzip.compress(bytes(data)), (*steps, "gzip"))
    return Case(name, bytes(data), tuple(steps))


def _check(load: Importer, path: Path) -> None:
    try:
        load(path)
    except InputError as err:
        assert UNEXPECTED not in str(err), str(err)  # the safety net must not be what caught it
        assert str(path) in str(err) or str(path.parent) in str(err)


FILE_IMPORTERS: list[Importer] = [load_profile, load_op_table, load_timeline, load_kineto]


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_files(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input"
        path.write_bytes(case.data)
        for load in FILE_IMPORTERS:
            _check(load, path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_mutated_files_inside_profile_directories(case: Case) -> None:
    name, data = case.sample, case.data
    with tempfile.TemporaryDirectory() as tmp:
        pt = Path(tmp) / "x_ascend_pt" / OUT
        pt.mkdir(parents=True)
        (pt / ("trace_view.json" if "trace" in name or "kineto" in name else "kernel_details.csv")).write_bytes(data)
        _check(load_ascend_pt, pt.parent)
        _check(load_profile, pt.parent)
        ms = Path(tmp) / "PROF_000001_20260606121448940_ABCDEFGHIJKLMNOP" / "mindstudio_profiler_output"
        ms.mkdir(parents=True)
        target = "msprof_20260606121514.json" if "trace" in name or "kineto" in name else "op_summary_202606061215.csv"
        (ms / target).write_bytes(data)
        _check(load_msprof_dir, ms.parent)


@pytest.mark.parametrize(
    "name", ["qwen_kernel_details", "level0_trace_view", "mstt_trace_view", "amd_kineto", "ns_kineto", "resnet_kineto"]
)
def test_unmutated_fuzz_samples_import(name: str, tmp_path: Path) -> None:
    """The fuzz starting points are valid (so mutations test damage, not a broken sample)."""
    path = tmp_path / "input"
    path.write_bytes(samples()[name])
    assert load_profile(path).ops.num_rows > 0


def test_fuzz_directory_copy_of_a_real_profile(tmp_path: Path) -> None:
    """A real profile directory copied whole, its kernel_details cut in the middle: an InputError."""
    copy = tmp_path / "copy"
    shutil.copytree(shared(LEVEL0), copy)
    table = copy / OUT / "kernel_details.csv"
    table.write_bytes(table.read_bytes()[:5000])
    with pytest.raises(InputError, match=r"kernel_details\.csv: line 61 has 5 of 8 columns .*half-written"):
        load_profile(copy)
