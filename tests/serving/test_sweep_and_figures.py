"""A serving sweep over the request rate (its figures, the capacity under an SLO, its plot), and the figures and
report page of serving runs."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow.parquet as pq

from tests.serving.conftest import cli


def test_a_rate_sweep_finds_the_capacity_under_the_slo(config: Path, tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    r = cli(
        "sweep", "--config", config, "--grid", "workload.rate_qps=1,4,16,64", "--grid", "fusion=none,default",
        "--set", "workload.slo_tpot_ms=30", "--set", "workload.slo_ttft_ms=2000", "--out", out, "--workers", "0",
        "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = orjson.loads(r.stdout)
    assert doc["ran"] == 8 and doc["compare"]["figure"] == "serving.tpot_ms.p99"
    table = pq.read_table(out / "sweep.parquet")
    for column in ("serving.tpot_ms.p99", "serving.ttft_ms.p50", "serving.requests_per_s", "serving.goodput.share"):
        assert column in table.column_names
    assert table["decode_ms_per_token"].null_count == 8  # the batch figures stay empty
    by_fusion = {c["at"]["fusion"]: c for c in doc["capacity"]}
    assert set(by_fusion) == {"none", "default"}
    fused, unfused = by_fusion["default"], by_fusion["none"]
    assert fused["slo_tpot_ms"] == 30 and fused["tpot_p99_ms"] <= 30
    # what the fusion buys: a higher sustainable rate under the same SLO
    assert (fused["rate_qps"] or 0) > (unfused["rate_qps"] or 0)
    rows = table.to_pylist()
    for c in doc["capacity"]:  # the capacity is the last rate before the first miss, in the table's own figures
        mine = sorted((r for r in rows if r["fusion"] == c["at"]["fusion"]), key=lambda r: r["workload.rate_qps"])
        ok = [r["serving.tpot_ms.p99"] <= 30 and r["serving.ttft_ms.p99"] <= 2000 for r in mine]
        first_miss = ok.index(False) if False in ok else len(ok)
        want = mine[first_miss - 1]["workload.rate_qps"] if first_miss else None
        assert c["rate_qps"] == want
    assert (out / "plots" / "serving-rate.png").is_file()
    assert not (out / "plots" / "sweep-lines.png").exists()
    assert (
        "capacity under the SLO"
        in cli(
            "sweep",
            "--config",
            config,
            "--grid",
            "workload.rate_qps=1,4",
            "--set",
            "workload.slo_tpot_ms=30",
            "--out",
            tmp_path / "s2",
            "--workers",
            "0",
        ).stdout
    )


def test_a_batch_sweep_has_no_capacity_key(tmp_path: Path) -> None:
    from tests.conftest import FIXTURES

    out = tmp_path / "sweep"
    r = cli(
        "sweep",
        "--config",
        FIXTURES / "tiny-llama.yaml",
        "--grid",
        "workload.batch_size=1,2",
        "--out",
        out,
        "--workers",
        "0",
    )
    assert r.exit_code == 0, r.output
    doc = orjson.loads((out / "sweep.json").read_bytes())
    assert "capacity" not in doc["report"]
    assert not any(c.startswith("serving.") for c in pq.read_schema(out / "sweep.parquet").names)


def test_plot_and_report_of_serving_runs(config: Path, tmp_path: Path) -> None:
    a, b = tmp_path / "fused", tmp_path / "unfused"
    assert cli("run", "--config", config, "--out", a).exit_code == 0
    assert cli("run", "--config", config, "--fusion", "none", "--out", b).exit_code == 0
    r = cli("plot", a, "--out", tmp_path / "plots")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "plots").iterdir() if not p.name.startswith(".")) == ["latency-cdf.png"]
    r = cli("report", b, a, "--out", tmp_path / "page.html")
    assert r.exit_code == 0, r.output
    page = (tmp_path / "page.html").read_text()
    assert "latency (ms) over 120 requests" in page and "the same requests, paired" in page
    assert page.count("<img") >= 1
