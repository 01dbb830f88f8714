"""A sweep's figures against its first numeric swept key: decode ms per token and tokens/s, one line per
combination of the other varying keys (at most 12). Points that do not fit or failed are gaps, marked x."""

from __future__ import annotations

from typing import Any

from atbprof.plots.base import Plot, Theme, legend, style_axes
from atbprof.plots.sweep_data import MAX_SERIES, SweepRows, label_of, series_key


def sweep_lines_plot(s: SweepRows, name: str) -> Plot | None:
    numeric = s.numeric()
    if not numeric:
        return None
    x = numeric[0]
    others = [k for k in s.varying() if k != x]
    series: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in s.rows:
        key = series_key(row, others)
        entry = series.setdefault(
            key, {"label": ", ".join(label_of(k, row.get(k)) for k in others) or name, "points": []}
        )
        entry["points"].append(
            [
                row.get(x),
                row.get("decode_ms_per_token"),
                row.get("tokens_per_s"),
                bool(row.get("fits") is not False and not row.get("error")),
            ]
        )
    lines = list(series.values())
    for ln in lines:
        ln["points"].sort(key=lambda p: p[0])
    data = {"x": x, "series": lines[:MAX_SERIES], "more_series": max(0, len(lines) - MAX_SERIES)}
    return Plot("sweep-lines", f"{name}: latency and throughput by {x}", data, _draw, size=(10.0, 4.4))


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    axes = fig.subplots(1, 2)
    for ax, col, ylabel in ((axes[0], 1, "decode ms per token"), (axes[1], 2, "tokens/s")):
        style_axes(ax, theme)
        for i, ln in enumerate(data["series"]):
            color = theme.palette[i % len(theme.palette)]
            pts = ln["points"]
            ax.plot(
                [p[0] for p in pts],
                [p[col] if p[3] else None for p in pts],
                marker="o",
                markersize=3.5,
                color=color,
                linewidth=1.3,
                label=ln["label"],
            )
            bad = [p[0] for p in pts if not p[3]]
            if bad:
                ax.scatter(
                    bad,
                    [0] * len(bad),
                    marker="x",
                    color=color,
                    s=24,
                    clip_on=False,
                    label="x: does not fit / failed" if i == 0 else None,
                )
        ax.set_xlabel(data["x"])
        ax.set_ylabel(ylabel)
        if all(p[0] > 0 for ln in data["series"] for p in ln["points"]):
            values = sorted({p[0] for ln in data["series"] for p in ln["points"]})
            if values and values[-1] / values[0] >= 16:
                ax.set_xscale("log", base=2)
                ax.set_xticks(values, [f"{v:g}" for v in values])
                ax.minorticks_off()
        ax.set_ylim(bottom=0)
    if data["series"] and len(data["series"]) > 1:
        legend(axes[1], theme, fontsize=7, loc="best")
    if data["more_series"]:
        axes[1].text(
            1.0,
            -0.18,
            f"{data['more_series']} more series not drawn",
            transform=axes[1].transAxes,
            ha="right",
            color=theme.muted,
            fontsize=7,
        )
