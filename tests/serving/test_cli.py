"""`atbprof run` and `atbprof diff` of serving workloads through the CLI: the files, the JSON contract, the trace,
and one clear message (exit 2) for each bad input."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from atbprof.serving.tables import ITERATIONS_SCHEMA, REQUESTS_SCHEMA
from atbprof.validate import validate_trace
from tests.serving.conftest import cli


def test_run_writes_the_tables_the_summary_and_a_clean_trace(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = cli("run", "--config", config, "--out", out, "--format", "json", "--set", "workload.slo_tpot_ms=20")
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert doc["kind"] == "serving"
    assert doc["files"] == ["iterations.parquet", "requests.parquet", "run.json", "trace.json.gz"]
    s = doc["summary"]["serving"]
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert set(s[metric]) == {"mean", "p50", "p90", "p99"}
        assert s[metric]["p50"] <= s[metric]["p90"] <= s[metric]["p99"]
    assert s["requests"] == 120 and s["requests_per_s"] > 0 and s["output_tokens_per_s"] > 0
    assert s["goodput"]["slo_tpot_ms"] == 20 and 0 <= s["goodput"]["share"] <= 1
    run_json = orjson.loads((out / "run.json").read_bytes())
    assert run_json["summary"]["serving"] == s
    assert run_json["config"]["workload"]["kind"] == "serving"
    assert "batch_size" not in run_json["config"]["workload"]  # only the serving keys
    assert pq.read_schema(out / "requests.parquet").equals(REQUESTS_SCHEMA, check_metadata=True)
    assert pq.read_schema(out / "iterations.parquet").equals(ITERATIONS_SCHEMA, check_metadata=True)
    report = validate_trace(out / "trace.json.gz")
    assert report.findings == (), [f.to_dict() for f in report.findings]
    events = orjson.loads(gzip.decompress((out / "trace.json.gz").read_bytes()))["traceEvents"]
    requests = [e for e in events if e.get("cat") == "request"]
    assert {e["tid"] for e in requests} == set(range(1, 121))
    iterations = [e for e in events if e.get("cat") == "iteration"]
    assert len(iterations) == pq.read_metadata(out / "iterations.parquet").num_rows


def test_run_again_from_the_directory_and_diff_fusion(config: Path, tmp_path: Path) -> None:
    fused, unfused = tmp_path / "fused", tmp_path / "unfused"
    assert cli("run", "--config", config, "--out", fused).exit_code == 0
    r = cli("run", "--config", fused, "--fusion", "none", "--out", unfused)
    assert r.exit_code == 0, r.output
    assert "TTFT" in r.stdout and "TPOT" in r.stdout
    r = cli("diff", unfused, fused, "--format", "json")
    assert r.exit_code == 0, r.output
    d = orjson.loads(r.stdout)
    assert d["kind"] == "serving" and d["paired"] is True
    rows = {(x["metric"], x["statistic"]): x for x in d["rows"]}
    tpot = rows[("tpot_ms", "p99")]
    assert tpot["new"] < tpot["base"] and tpot["significant"] and tpot["ci_high"] < 0
    assert rows[("ttft_ms", "mean")]["method"] == "paired-t"
    md = cli("diff", unfused, fused, "--format", "md")
    assert md.exit_code == 0 and "| TPOT ms | p99 |" in md.stdout
    # a CI gate on the tails: unfused after fused is a regression of p99 TPOT and TTFT
    worse = cli("diff", fused, unfused, "--fail-if-slower", "5%", "--format", "json")
    assert worse.exit_code == 1 and "significant regression beyond --fail-if-slower 5%" in worse.output
    assert [r.split()[0] for r in orjson.loads(worse.stdout)["regression"]] == ["ttft_ms", "tpot_ms"]
    assert cli("diff", unfused, fused, "--fail-if-slower", "5%").exit_code == 0


def test_diff_of_a_serving_run_with_a_batch_run_is_refused(config: Path, tmp_path: Path) -> None:
    assert cli("run", "--config", config, "--out", tmp_path / "s").exit_code == 0
    r = cli("diff", tmp_path / "s", tmp_path / "nothing-here")
    assert r.exit_code == 2
    assert "not a serving run" in r.output and "Traceback" not in r.output


def test_analyze_of_a_serving_run_says_what_to_do(config: Path, tmp_path: Path) -> None:
    assert cli("run", "--config", config, "--out", tmp_path / "s").exit_code == 0
    r = cli("analyze", tmp_path / "s")
    assert r.exit_code == 2
    assert "a serving run (requests and iterations, no kernels)" in r.output


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["workload.batch_size=4"], "batch_size: a key of kind: batch, while this workload is kind: serving"),
        (["workload.kind=batch"], "requests, rate_qps, input_len, output_len: keys of kind: serving"),
        (["workload.max_num_batched_tokens=64"], "max_num_batched_tokens = 64 is below max_num_seqs = 256"),
        (["workload.input_len=9000"], "beyond llama3-8b's context of 8,192"),
        (["parallel.pp=2"], "serving simulates tensor-parallel engines (parallel.pp = 1; dp replicas of them)"),
        (
            ["parallel.dp=2", "workload.max_concurrency=4"],
            "a client limit shared by several engine replicas is not modelled",
        ),
        (["workload.lengths=no-such.csv"], "is not a file, nor one of fixed, sharegpt"),
        (["workload.rate_qps=-1"], "rate_qps"),
        (["workload.gpu_memory_utilization=0.2"], "no KV blocks fit"),
        (
            ["workload.input_len=4000", "workload.max_num_batched_tokens=2048"],
            "the prefill_first scheduler never splits a prompt",
        ),
    ],
)
def test_bad_serving_configs_get_one_message(config: Path, tmp_path: Path, sets: list[str], message: str) -> None:
    args = [a for s in sets for a in ("--set", s)]
    r = cli("run", "--config", config, "--out", tmp_path / "x", *args)
    assert r.exit_code == 2, r.output
    assert message in r.output, r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "x").exists()


def test_a_lengths_file_with_arrivals(config: Path, tmp_path: Path) -> None:
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("input_len,output_len,arrival_s\n100,20,0\n300,5,0.5\n50,1,0.5\n")
    cfg = config.read_text().replace("requests: 120, rate_qps: 4, ", "").replace("input_len: 256, ", "")
    cfg = cfg.replace("output_len: 32}", "output_len: 32, lengths: lengths.csv}")
    config.write_text(cfg)
    r = cli("run", "--config", config, "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    t = pq.read_table(tmp_path / "run" / "requests.parquet")
    assert t["input_len"].to_pylist() == [100, 300, 50]
    assert t["arrival_ns"].to_pylist() == [0, 500_000_000, 500_000_000]
    assert t["tpot_ms"].to_pylist()[2] is None  # a single-token output has no TPOT
    bad = tmp_path / "bad.csv"
    bad.write_text("input_len,output_len,arrival_s\n100,20,1.0\n300,5,0.5\n")
    r = cli("run", "--config", config, "--out", tmp_path / "x", "--set", f"workload.lengths={bad}")
    assert r.exit_code == 2
    assert f"{bad} line 3: arrival_s goes back in time" in r.output


def test_sharegpt_lengths_keep_the_benchmark_bounds(config: Path) -> None:
    from atbprof.config import load_config
    from atbprof.serving.requests import request_stream

    cfg = load_config(config, ["workload.lengths=sharegpt", "workload.requests=20000"])
    s = request_stream(cfg.workload, 0)
    assert s.input_len.min() >= 4 and s.input_len.max() <= 1024 and s.output_len.min() >= 4
    assert (s.input_len + s.output_len).max() <= 2048
    # the bounds cut the long tails: the means land below the published 161 / 338 tokens, not far
    assert 100 < s.input_len.mean() < 161.31 and 200 < s.output_len.mean() < 337.99


def test_a_long_run_draws_the_first_iterations_and_says_so(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import atbprof.serving.run as serving_run
    import atbprof.serving.trace as serving_trace

    for module in (serving_run, serving_trace):
        monkeypatch.setattr(module, "MAX_ITERATIONS", 100)
        monkeypatch.setattr(module, "MAX_REQUEST_TRACKS", 10)
    r = cli("run", "--config", config, "--out", tmp_path / "run", "--format", "json")
    assert r.exit_code == 0, r.output
    notes = orjson.loads(r.stdout)["notes"]
    assert any("draws the first 10 requests and the first 100 iterations" in n for n in notes), notes
    events = orjson.loads(gzip.decompress((tmp_path / "run" / "trace.json.gz").read_bytes()))["traceEvents"]
    assert len([e for e in events if e.get("cat") == "iteration"]) == 100
    assert {e["tid"] for e in events if e.get("cat") == "request"} == set(range(1, 11))
    assert pq.read_metadata(tmp_path / "run" / "iterations.parquet").num_rows > 100  # the tables hold every one
