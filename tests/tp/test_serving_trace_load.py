"""A serving run's trace.json.gz in the real Perfetto trace_processor (v52, WASM under Node): every iteration a
slice on its engine replica's track, every request a track with its queued / prefill / decode spans at the times
requests.parquet gives, the counters there, and no import error or data loss in the stats table."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from atbprof.config import load_config
from atbprof.serving.run import run_serving
from tests.serving.conftest import SERVING_8B
from tests.tp.wasm_tp import WasmEngine, WasmTraceProcessor, require_wasm_trace_processor

require_wasm_trace_processor()


@pytest.mark.parametrize("replicas", [1, 2])
def test_the_serving_trace_loads_with_every_iteration_and_request(
    tmp_path: Path, tp_engine: WasmEngine, replicas: int
) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(SERVING_8B)
    sets = ["workload.lengths=sharegpt", "workload.rate_qps=8", f"parallel.dp={replicas}"]
    run_serving(load_config(config, sets), tmp_path / "run")
    tp = WasmTraceProcessor(trace=tmp_path / "run" / "trace.json.gz", engine=tp_engine)
    lossy = tp.rows("select name, value from stats where severity in ('error', 'data_loss') and value > 0")
    assert lossy == []
    iterations = pq.read_table(tmp_path / "run" / "iterations.parquet")
    rows = tp.rows(
        "select p.name, s.ts, s.dur from slice s join thread_track tt on s.track_id = tt.id join thread t "
        "using(utid) join process p using(upid) where t.name = 'iterations' order by s.ts"
    )
    engine = [(ts, dur) for _, ts, dur in rows]
    for k in range(replicas):  # each replica's iterations on its own engine's track
        own = iterations.filter(iterations["replica"].to_numpy() == k)
        name = ": engine" + (f" {k}" if replicas > 1 else "")
        assert [ts for p, ts, _ in rows if p.endswith(name)] == own["start_ns"].to_pylist()
        assert [ts + dur for p, ts, dur in rows if p.endswith(name)] == own["end_ns"].to_pylist()
    assert len(rows) == iterations.num_rows
    requests = pq.read_table(tmp_path / "run" / "requests.parquet").to_pylist()
    spans = tp.rows(
        "select t.name, s.name, s.ts, s.dur from slice s join thread_track tt on s.track_id = tt.id join thread t "
        "using(utid) where t.name like 'request %' order by s.ts"
    )
    by_request: dict[int, dict[str, tuple[int, int]]] = {}
    for thread, name, ts, dur in spans:
        by_request.setdefault(int(thread.split()[1]), {})[name] = (ts, ts + dur)
    assert sorted(by_request) == list(range(len(requests)))
    for r in requests:
        got = by_request[r["request_id"]]
        assert got["prefill"][1] == r["first_token_ns"] and got["decode"] == (r["first_token_ns"], r["finish_ns"])
        assert got.get("queued", (r["arrival_ns"], r["first_scheduled_ns"]))[0] == r["arrival_ns"]
    counters = dict(
        tp.rows("select t.name, count(*) from counter c join counter_track t on c.track_id = t.id group by t.name")
    )
    tracks = ("sequences running", "sequences waiting", "KV cache blocks used")
    assert {k: v for k, v in counters.items() if k in tracks} == dict.fromkeys(tracks, iterations.num_rows)
    peak = tp.scalar(
        "select max(c.value) from counter c join counter_track t on c.track_id = t.id "
        "where t.name = 'KV cache blocks used'"
    )
    assert peak == max(iterations["kv_blocks_used"].to_pylist())
    assert pytest.approx(sum(d for _, d in engine) / 1e6, rel=1e-9) == sum(iterations["duration_ms"].to_pylist())
