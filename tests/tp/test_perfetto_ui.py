"""Opt-in: a run opened in the real Perfetto UI (v52) in headless Chromium. Skipped where Chromium is absent."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from atbprof.config import load_config
from atbprof.run import run_simulation
from tests.conftest import FIXTURES
from tests.tp.perfetto_ui import chromium, open_in_ui
from tests.tp.wasm_tp import WasmTraceProcessor, bundle_dir

pytest.importorskip("playwright", reason="playwright (Python) is not installed")
if chromium() is None:
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)


ORDER = (
    "CANN",
    "Ascend Hardware",
    "Stream 2",
    "AI Core utilization %",
    "HBM bandwidth GB/s",
    "Overlap Analysis",
    "Model",
    "Steps",
    "Layers",
    "Blocks",
)


@pytest.mark.parametrize("trace_file", ["trace.json.gz", "trace.pftrace"])
def test_run_opens_in_the_perfetto_ui(tmp_path: Path, tp_engine, trace_file: str) -> None:
    overrides = ["workload.decode_tokens=2", "output.trace_format=both"]
    run = run_simulation(load_config(FIXTURES / "seed000-lnfused.yaml", overrides), tmp_path / "r")
    trace = run.out_dir / trace_file
    bundle = bundle_dir()
    assert bundle is not None
    view = open_in_ui(bundle.parent, trace, screenshot=tmp_path / "ui.png")
    assert not view.error_dialog and view.page_errors == []
    # both formats show the same tracks in the same order: the stream above its counters, Steps > Layers > Blocks
    order = [next(i for i, t in enumerate(view.track_titles) if t.startswith(n)) for n in ORDER]
    assert order == sorted(order), view.track_titles
    assert [t.split()[0] for t in view.main_threads] == ["Thread"], "only the host thread is a main thread"
    assert all(url.startswith(("https://", "http://127.0.0.1:9001/")) for url in view.blocked)  # nothing else left
    for name in (
        "CANN",
        "Ascend Hardware",
        "Stream 2",
        "Overlap Analysis",
        "Computing",
        "Free",
        "Model",
        "Steps",
        "Layers",
        "Blocks",
        "HBM bandwidth GB/s",
        "AI Core utilization %",
    ):
        assert any(t.startswith(name) for t in view.track_titles), (name, view.track_titles)
    ops = pq.read_metadata(run.out_dir / "ops.parquet").num_rows
    ui_slices = view.query("select count(*) as n from slice")[0]["n"]
    device = view.query(
        "select count(*) as n from slice join thread_track tt on slice.track_id = tt.id join thread using (utid) "
        "where thread.name like 'Stream %'"
    )[0]["n"]
    assert device == ops
    tp = WasmTraceProcessor(trace=trace, engine=tp_engine)
    try:
        assert ui_slices == tp.scalar("select count(*) from slice")  # the UI's engine agrees with the harness
        assert view.query("select count(*) as n from flow")[0]["n"] == tp.scalar("select count(*) from flow")
    finally:
        tp.close()
