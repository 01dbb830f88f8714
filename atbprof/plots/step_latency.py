"""Per-step latency over a run: TTFT (the prefill step), each decode step's wall time, and its jitter (the
rolling median and 10-90 % band over 16 steps). Long runs are binned to at most 2,000 points (min, median, max
per bin), so the figure costs the same for 100 or 100,000 steps."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from atbprof.plots.base import Plot, Theme, legend, style_axes

MAX_POINTS = 2_000
WINDOW = 16


def step_latency_plot(steps: list[int], wall_ms: np.ndarray, phases: list[str], label: str) -> Plot:
    wall = np.asarray(wall_ms, dtype=np.float64)
    phase = np.array(phases)
    prefill = [(int(s), round(float(w), 4)) for s, w, p in zip(steps, wall, phase, strict=True) if p == "prefill"]
    dec = phase == "decode"
    dsteps, dwall = np.asarray(steps)[dec], wall[dec]
    data: dict[str, Any] = {"label": label, "prefill": prefill, "decode": _binned(dsteps, dwall)}
    if len(dwall) >= 2:
        data["decode_mean_ms"] = round(float(dwall.mean()), 4)
        data["decode_cv"] = round(float(dwall.std() / dwall.mean()), 5) if dwall.mean() else 0.0
    return Plot("step-latency", f"Step latency: {label}", data, _draw, size=(8.0, 4.2))


def _binned(x: np.ndarray, y: np.ndarray) -> dict[str, list[float]]:
    if not len(x):
        return {"step": [], "lo": [], "mid": [], "hi": []}
    if len(x) <= MAX_POINTS:
        win = min(WINDOW, len(y))
        pad = np.pad(y, (win - 1, 0), mode="edge")
        roll = np.lib.stride_tricks.sliding_window_view(pad, win)
        lo, mid, hi = (np.percentile(roll, q, axis=1) for q in (10, 50, 90))
        xs = x
    else:
        edges = np.linspace(0, len(x), MAX_POINTS + 1).astype(int)
        parts = [(x[a], y[a:b]) for a, b in itertools.pairwise(edges) if b > a]
        xs = np.array([p[0] for p in parts])
        lo = np.array([p[1].min() for p in parts])
        mid = np.array([np.median(p[1]) for p in parts])
        hi = np.array([p[1].max() for p in parts])
    r = lambda a: [round(float(v), 4) for v in a]  # noqa: E731
    return {"step": [int(v) for v in xs], "lo": r(lo), "mid": r(mid), "hi": r(hi)}


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    ax = fig.add_subplot()
    style_axes(ax, theme)
    d = data["decode"]
    if d["step"]:
        ax.fill_between(d["step"], d["lo"], d["hi"], color=theme.palette[0], alpha=0.25, linewidth=0, label="10-90 %")
        ax.plot(d["step"], d["mid"], color=theme.palette[0], linewidth=1.4, label="decode step (median)")
    if "decode_mean_ms" in data:
        ax.axhline(data["decode_mean_ms"], color=theme.muted, linestyle="--", linewidth=0.9)
        ax.text(
            1.0,
            data["decode_mean_ms"],
            f" mean {data['decode_mean_ms']:,.2f} ms (cv {data['decode_cv']:.1%})",
            transform=ax.get_yaxis_transform(),
            color=theme.muted,
            va="bottom",
            ha="right",
            fontsize=8,
        )
    ax.set_xlabel("step")
    ax.set_ylabel("decode step wall time (ms)")
    if data["prefill"]:
        ttft = max(w for _, w in data["prefill"])
        ax.text(
            0.01,
            0.97,
            f"TTFT {ttft:,.2f} ms (prefill, {len(data['prefill'])} step)",
            transform=ax.transAxes,
            color=theme.palette[1],
            va="top",
            fontsize=9,
        )
    if d["step"]:
        legend(ax, theme, loc="lower right", fontsize=8)
