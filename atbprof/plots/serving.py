"""Serving figures: latency CDFs of one or more serving runs (TTFT, TPOT), and a rate sweep's latency-throughput
curves (p99 TTFT and TPOT by rate; output tokens/s against p99 TPOT). CDFs are drawn from at most 1,000 quantiles
per side, so a run of a million requests costs what one of a thousand does."""

from __future__ import annotations

from typing import Any

import numpy as np

from atbprof.plots.base import Plot, Theme, legend, style_axes

QUANTILES = np.linspace(0.0, 1.0, 1001)


def _cdf(values: np.ndarray) -> list[float]:
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return [] if not len(v) else [round(float(x), 4) for x in np.quantile(v, QUANTILES)]


def latency_cdf_plot(sides: list[tuple[str, np.ndarray, np.ndarray]], title: str) -> Plot:
    """`sides`: (label, TTFT ms per request, TPOT ms per request)."""
    data = {"sides": [{"label": label, "ttft": _cdf(ttft), "tpot": _cdf(tpot)} for label, ttft, tpot in sides]}
    return Plot("latency-cdf", f"Latency CDFs: {title}", data, _draw_cdf, size=(10.0, 4.2))


def _draw_cdf(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    axes = fig.subplots(1, 2)
    share = QUANTILES.tolist()
    for ax, key, label in ((axes[0], "ttft", "TTFT ms"), (axes[1], "tpot", "TPOT ms")):
        style_axes(ax, theme)
        for i, side in enumerate(data["sides"]):
            if side[key]:
                ax.plot(
                    side[key], share, color=theme.palette[i % len(theme.palette)], linewidth=1.4, label=side["label"]
                )
        for q in (0.5, 0.9, 0.99):
            ax.axhline(q, color=theme.grid, linewidth=0.7, linestyle=":")
        ax.set_xlabel(label)
        ax.set_ylabel("share of requests")
        ax.set_ylim(0, 1.0)
        ax.set_xlim(left=0)
    if len(data["sides"]) > 1:
        legend(axes[1], theme, fontsize=7, loc="lower right")


def rate_sweep_plot(series: list[dict[str, Any]], name: str) -> Plot | None:
    """`series`: per combination of the other swept keys, `label` and `points` of (rate, TTFT p99, TPOT p99,
    output tokens/s), in rate order."""
    if not series:
        return None
    return Plot(
        "serving-rate",
        f"{name}: latency and throughput by request rate",
        {"series": series},
        _draw_rate,
        size=(12.0, 4.2),
    )


def _draw_rate(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    axes = fig.subplots(1, 3)
    panels = (
        (0, 1, "request rate (requests/s)", "TTFT p99 ms"),
        (0, 2, "request rate (requests/s)", "TPOT p99 ms"),
        (3, 2, "output tokens/s", "TPOT p99 ms"),
    )
    for ax, (xi, yi, xlabel, ylabel) in zip(axes, panels, strict=True):
        style_axes(ax, theme)
        for i, s in enumerate(data["series"]):
            pts = [p for p in s["points"] if p[xi] is not None and p[yi] is not None]
            ax.plot(
                [p[xi] for p in pts],
                [p[yi] for p in pts],
                marker="o",
                markersize=3.5,
                linewidth=1.3,
                color=theme.palette[i % len(theme.palette)],
                label=s["label"],
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
    if len(data["series"]) > 1:
        legend(axes[2], theme, fontsize=7, loc="best")
