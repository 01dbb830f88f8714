"""A cluster analysed as Ray tasks on a real local Ray head (`ray start --head` on loopback, started here unless
RAY_ADDRESS names one CI started) gives exactly the local result; a missing head or Ray is one clear message."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from atbprof.analyze.cluster_job import analyze_cluster_path
from atbprof.commands import app
from atbprof.config.models import RunConfig
from atbprof.export import export_run
from atbprof.render.cluster import cluster_json
from atbprof.run import run_simulation

ray = pytest.importorskip("ray", reason="Ray is not installed (the `ray` extra)")
RAY_BIN = Path(sys.executable).parent / "ray"
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    given = os.environ.get("RAY_ADDRESS")
    if given:
        yield given
        return
    from atbprof.scale.local_head import local_head

    with local_head(RAY_BIN) as address:  # stops only this head, not another suite's or a user's
        try:
            yield address
        finally:
            if ray.is_initialized():
                ray.shutdown()


@pytest.fixture(scope="module")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ray-cluster")
    cfg = RunConfig.model_validate(
        {
            "name": "tp4-dp2",
            "model": {"preset": "llama2-7b"},
            "device": {"preset": "910B2"},
            "parallel": {"tp": 4, "dp": 2},
            "workload": {"batch_size": 1, "prompt_len": 64, "decode_tokens": 3},
            "execution": {"mode": "graph", "rank_slowdown": {5: 1.15}},
            "output": {"trace": False},
        }
    )
    run = run_simulation(cfg, tmp / "run")
    return export_run(run.out_dir, "ascend-pt", tmp / "export", kernel_ranks="0,5").root


def _doc(report: object) -> dict:
    doc = json.loads(json.dumps(cluster_json(report)))  # type: ignore[arg-type]
    doc["source"]["path"] = ""
    return doc


def test_ray_gives_exactly_the_local_result(ray_head: str, sim_cluster: Path, tmp_path: Path) -> None:
    local = analyze_cluster_path(sim_cluster, workers=0, tables=tmp_path / "local")
    remote = analyze_cluster_path(sim_cluster, ray=ray_head, tables=tmp_path / "ray")
    assert _doc(remote) == _doc(local)
    assert remote.cluster.slow_ranks == [5] and remote.source.complete_ranks == [0, 5]
    for table in ("steps", "ops", "bandwidth", "matrix", "findings"):  # the per-rank Parquet, file for file
        a = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local" / table).rglob("*.parquet"))
        b = sorted(p.relative_to(tmp_path / "ray") for p in (tmp_path / "ray" / table).rglob("*.parquet"))
        assert a == b and a
        for rel in a:
            assert (tmp_path / "local" / rel).read_bytes() == (tmp_path / "ray" / rel).read_bytes(), rel
    # the ranks ran as tasks on the head's workers, not in this process
    assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2.0


def test_the_cli_runs_a_cluster_on_ray(ray_head: str, sim_cluster: Path) -> None:
    out = CliRunner().invoke(app, ["analyze", str(sim_cluster), "--ray", ray_head, "--format", "json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["cluster"]["slow_ranks"] == [5]


def test_a_sweep_on_ray_gives_exactly_the_local_sweep(ray_head: str, tmp_path: Path) -> None:
    from atbprof.sweep.api import run_sweep

    args = {
        "config": ROOT / "fixtures" / "seed000-baseline.yaml",
        "spec_file": None,
        "grid": ["workload.batch_size=1,4,8", "fusion=seed000-baseline,seed000-lnfused"],
        # batch 4 and 8 do not fit: rows (8,196 tokens: LLaMA-2's context stretched 3x)
        "sets": ["workload.decode_tokens=4", "workload.prompt_len=8192", "model.rope_scaling_factor=3"],
    }
    local = run_sweep(**args, out=tmp_path / "local" / "s", workers=0)  # type: ignore[arg-type]
    remote = run_sweep(**args, out=tmp_path / "ray" / "s", ray=ray_head)  # type: ignore[arg-type]
    assert remote.report.not_fitting == local.report.not_fitting == 4  # batch 4 and 8 at 8192 on 32 GB

    def files_of(root: Path) -> list[Path]:
        return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())

    files = files_of(tmp_path / "local")
    assert files and files == files_of(tmp_path / "ray")
    for rel in files:  # sweep.parquet, sweep.json, the plots and the report: byte for byte
        assert (tmp_path / "local" / rel).read_bytes() == (tmp_path / "ray" / rel).read_bytes(), rel


def test_no_ray_head_is_one_clear_message(sim_cluster: Path) -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from atbprof.commands import app; "
        f"r = CliRunner().invoke(app, ['analyze', {str(sim_cluster)!r}, '--ray', '127.0.0.1:{_free_port()}']); "
        "print(r.exit_code); print(r.output)"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    code_line, _, output = done.stdout.partition("\n")
    assert code_line == "2", done.stdout + done.stderr
    assert "no Ray cluster there" in output and "ray start --head" in output and "Traceback" not in output


def test_ray_binary_is_beside_the_interpreter() -> None:
    assert RAY_BIN.is_file() or shutil.which("ray")


def test_workers_import_the_drivers_atbprof_from_any_directory(ray_head: str, tmp_path: Path) -> None:
    """Ray puts the driver's working directory first on its workers' path. A driver started inside a directory
    holding another `atbprof` (a source checkout whose built parts are missing, beside an installed atbprof) must
    still have its workers run its own atbprof."""
    shadow = tmp_path / "checkout"
    (shadow / "atbprof").mkdir(parents=True)
    (shadow / "atbprof" / "__init__.py").write_text("raise ImportError('the checkout, not the installed atbprof')\n")
    code = (
        "import os; from atbprof.scale.pool import map_ordered, _parent_gone; "
        f"print(list(map_ordered(_parent_gone, [os.getpid(), os.getpid()], ray={ray_head!r})))"
    )
    # -I: the driver itself imports the installed atbprof (no working directory on its own path)
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=shadow, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[False, False]"
    assert Path.cwd() != shadow


def test_ray_auto_runs_locally_on_one_machine(ray_head: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--ray auto` joined to a one-node head no bigger than this machine runs in the local pool and says why; a
    head with more CPUs than this machine (as several nodes have) is used; a named address is used as given."""
    from atbprof.scale.pool import choose_ray

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert choose_ray(ray_head) == (ray_head, None)
    assert choose_ray(None) == (None, None)
    if not ray.is_initialized():
        ray.init(address=ray_head, logging_level="ERROR", log_to_driver=False)
    cpus = int(ray.cluster_resources()["CPU"])
    monkeypatch.setattr(os, "cpu_count", lambda: cpus)  # this machine as big as the head: one machine
    address, why = choose_ray("auto")
    assert address is None and why is not None
    assert f"this machine alone ({cpus} CPUs)" in why and "local process pool" in why
    assert ray.is_initialized()  # the caller's own Ray session is left as it was
    monkeypatch.setattr(os, "cpu_count", lambda: cpus - 1)  # the head offers more CPUs than this machine has
    address, why = choose_ray("auto")
    assert address == "auto" and why is not None and f"{cpus} CPUs (this machine {cpus - 1})" in why
    monkeypatch.setenv("RAY_ADDRESS", ray_head)
    assert choose_ray("auto") == (ray_head, f"--ray auto: RAY_ADDRESS names a cluster ({ray_head}): running on it")


def test_the_cli_says_what_ray_auto_chose(ray_head: str, sim_cluster: Path, tmp_path: Path) -> None:
    """Through the command: the note on stderr, and the same report as the local pool gives."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_ADDRESS"] = ray_head
    base = [sys.executable, "-m", "atbprof", "analyze", str(sim_cluster), "--format", "json"]
    done = subprocess.run([*base, "--ray", "auto"], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"--ray auto: RAY_ADDRESS names a cluster ({ray_head})" in done.stderr
    local = subprocess.run([*base, "--workers", "0"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert json.loads(done.stdout) == json.loads(local.stdout)
