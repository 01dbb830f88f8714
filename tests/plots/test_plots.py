"""Figures: every kind renders, the same data gives the same bytes (PNG and SVG), each file carries the digest of its
data, themes differ; `atbprof plot` of a run, a diff, a cluster and a sweep, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from atbprof.commands import app
from atbprof.plots.base import DARK, LIGHT, Plot, _render, png_data_digest, render
from atbprof.plots.breakdown import breakdown_plot
from atbprof.plots.cluster_matrix import cluster_matrix_plot
from atbprof.plots.cluster_steps import cluster_steps_plot
from atbprof.plots.roofline import roofline_plot
from atbprof.plots.step_latency import MAX_POINTS, step_latency_plot
from atbprof.plots.waterfall import waterfall_plot
from tests.conftest import FIXTURES

runner = CliRunner()
TINY = FIXTURES / "tiny-llama.yaml"


def _all_kinds() -> list[Plot]:
    rank = {"computing_us": 900.0, "communication_not_overlapped_us": 80.0, "free_us": 20.0, "bubble_us": 0.0}
    matrix = cluster_matrix_plot({(0, 1): 20.0}, "c")
    assert matrix is not None
    return [
        breakdown_plot([{"label": "a", "rows": {"attention": 18.2, "ffn": 19.7, "other": 2.1}, "norm_ms": 6.2}]),
        step_latency_plot(list(range(65)), np.r_[50.0, 40 + np.sin(np.arange(64))], ["prefill"] + ["decode"] * 64, "r"),
        roofline_plot(
            [{"op_type": "MatMulV2", "phase": "decode", "flops": 2e9, "bytes": 1e9, "time_ns": 1e6, "count": 32}],
            262e12,
            1.2e12,
            "910A",
        ),
        waterfall_plot("base", "new", 40.0, 34.0, [{"name": "RmsNorm", "classification": "fused", "delta_ms": -6.0}]),
        cluster_steps_plot([{"rank": r, "stage": 0, "slow": r == 1, **rank} for r in range(4)], "c"),
        matrix,
    ]


@pytest.mark.parametrize("plot", _all_kinds(), ids=lambda p: p.name)
def test_a_figure_is_the_same_bytes_every_time_and_says_its_data(plot: Plot) -> None:
    png = render(plot, LIGHT, "png")
    assert png.startswith(b"\x89PNG") and png == _render(plot, LIGHT, "png")  # drawn again, not remembered
    assert png_data_digest(png) == plot.digest()
    svg = render(plot, LIGHT, "svg")
    assert svg == _render(plot, LIGHT, "svg") and f"atbprof-data {plot.digest()}".encode() in svg
    assert render(plot, DARK, "png") != png


def test_a_long_run_is_binned_to_a_bounded_figure() -> None:
    n = 100_000
    plot = step_latency_plot(list(range(n)), np.full(n, 10.0), ["decode"] * n, "long")
    assert len(plot.data["decode"]["step"]) <= MAX_POINTS and plot.data["decode_mean_ms"] == 10.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    for name, fusion in (("base", "none"), ("fused", "default")):
        out = runner.invoke(app, ["run", "--config", str(TINY), "--fusion", fusion, "--out", str(root / name)])
        assert out.exit_code == 0, out.output
    return root


def test_plot_a_run_a_diff_and_an_html_page(runs: Path, tmp_path: Path) -> None:
    one = runner.invoke(app, ["plot", str(runs / "base"), "--out", str(tmp_path / "p")])
    assert one.exit_code == 0, one.output
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [
        ".atbprof-output.json",
        "breakdown.png",
        "roofline.png",
        "step-latency.png",
    ]
    assert f"next: atbprof report {runs / 'base'} --out {tmp_path / 'p'}.html" in one.output
    two = runner.invoke(
        app,
        [
            "plot",
            str(runs / "base"),
            str(runs / "fused"),
            "--out",
            str(tmp_path / "d"),
            "--format",
            "svg",
            "--theme",
            "dark",
        ],
    )
    assert two.exit_code == 0, two.output
    assert sorted(p.name for p in (tmp_path / "d").glob("*.svg")) == ["breakdown.svg", "waterfall.svg"]
    page = runner.invoke(app, ["plot", str(runs / "base"), "--out", str(tmp_path / "h"), "--format", "html"])
    assert page.exit_code == 0 and (tmp_path / "h" / "figures.html").read_bytes().count(b"data:image/png") == 6


def test_what_plot_refuses(runs: Path, tmp_path: Path) -> None:
    runner.invoke(app, ["plot", str(runs / "base"), "--out", str(tmp_path / "p")])
    cases = [
        (["plot", str(runs / "base"), "--out", str(tmp_path / "p")], 3, "already exists; pass --force"),
        (["plot", str(tmp_path / "nope"), "--out", str(tmp_path / "x")], 2, "no such file or directory"),
        (["plot", str(runs / "base"), str(runs / "base"), str(runs / "fused")], 2, "give one input"),
        (["plot", str(runs / "base"), "--out", str(runs / "base" / "p")], 2, "overlaps the input"),
    ]
    for args, code, message in cases:
        out = runner.invoke(app, args)
        assert out.exit_code == code and message in out.output, (args, out.output)
        assert "Traceback" not in out.output
    ok = runner.invoke(app, ["plot", str(runs / "fused"), "--out", str(tmp_path / "p"), "--force"])
    assert ok.exit_code == 0  # replaces plots of ours
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "a.png").write_bytes(b"mine")
    out = runner.invoke(app, ["plot", str(runs / "base"), "--out", str(mine), "--force"])
    assert out.exit_code == 3 and "not an atbprof plots directory" in out.output
    assert (mine / "a.png").read_bytes() == b"mine"


def test_plot_a_cluster_and_a_sweep(tmp_path: Path) -> None:
    from tests.analyze.test_cluster import _sim_cluster

    cluster = _sim_cluster(tmp_path / "c", {2: 1.15})
    out = runner.invoke(app, ["plot", str(cluster), "--out", str(tmp_path / "pc")])
    assert out.exit_code == 0, out.output
    assert {p.name for p in (tmp_path / "pc").glob("*.png")} == {"cluster-steps.png", "cluster-matrix.png"}
    sweep = runner.invoke(
        app,
        [
            "sweep",
            "--config",
            str(TINY),
            "--grid",
            "workload.batch_size=1,2",
            "--grid",
            "fusion=none,default",
            "--out",
            str(tmp_path / "s"),
            "--workers",
            "0",
            "--format",
            "json",
        ],
    )
    assert sweep.exit_code == 0, sweep.output
    out = runner.invoke(app, ["plot", str(tmp_path / "s"), "--out", str(tmp_path / "ps")])
    assert out.exit_code == 0, out.output
    # the sweep's own plots and `plot` of the sweep are the same figures
    for name in ("sweep-lines.png", "sweep-gain.png"):
        assert (tmp_path / "ps" / name).read_bytes() == (tmp_path / "s" / "plots" / name).read_bytes()


def _drawn(plot: Plot) -> object:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from atbprof.plots.base import TITLE_PT, fitted_title, new_figure

    fig = new_figure(plot, LIGHT)
    plot.draw(fig, LIGHT, plot.data)
    fig.suptitle(fitted_title(plot.title, plot.size[0]), fontsize=TITLE_PT, x=0.01, ha="left")
    FigureCanvasAgg(fig).draw()
    return fig


def test_the_waterfall_axis_starts_at_zero() -> None:
    """A 14 % saving drawn on an axis from 33.5 ms looks like a sixfold drop: the axis starts at zero."""
    plot = waterfall_plot(
        "base", "new", 39.95, 34.26, [{"name": "AddRmsNorm", "classification": "fused", "delta_ms": -5.69}]
    )
    fig = _drawn(plot)
    assert fig.axes[0].get_ylim()[0] == 0.0  # type: ignore[attr-defined]


@pytest.mark.parametrize("plot", _all_kinds(), ids=lambda p: p.name)
def test_a_long_title_stays_inside_the_figure(plot: Plot) -> None:
    long = Plot(
        plot.name,
        "What changed: " + "a-very-long-run-name-with-every-override " * 4,
        plot.data,
        plot.draw,
        size=plot.size,
    )
    fig = _drawn(long)
    box = fig.texts[-1].get_window_extent()  # type: ignore[attr-defined]
    width = fig.bbox.width  # type: ignore[attr-defined]
    assert box.x0 >= 0 and box.x1 <= width, (box, width)


def test_default_plot_directories_have_no_spaces(runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, ["plot", str(runs / "base"), str(runs / "fused")])
    assert out.exit_code == 0, out.output
    (made,) = (tmp_path / "plots").iterdir()
    assert " " not in made.name and "-vs-" in made.name
    hint = next(line for line in out.output.splitlines() if line.startswith("next: "))
    assert f"--out plots/{made.name}.html" in hint  # relative, and pasteable
