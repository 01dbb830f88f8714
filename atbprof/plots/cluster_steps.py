"""A cluster's step table as stacked bars per rank (msprof-analyze's split of the mean step: computing,
communication not overlapped, free, bubble); slow ranks marked. Beyond 128 ranks the bars become a stacked area."""

from __future__ import annotations

from typing import Any

from atbprof.plots.base import Plot, Theme, legend, style_axes

PARTS = (
    ("computing_us", "computing"),
    ("communication_not_overlapped_us", "communication (not overlapped)"),
    ("free_us", "free"),
    ("bubble_us", "bubble"),
)


def cluster_steps_plot(ranks: list[dict[str, Any]], name: str) -> Plot:
    """`ranks`: per rank {rank, stage, slow, computing_us, communication_not_overlapped_us, free_us, bubble_us}."""
    rows = [
        {"rank": r["rank"], "stage": r["stage"], "slow": bool(r["slow"]), **{k: round(r[k] / 1e3, 4) for k, _ in PARTS}}
        for r in sorted(ranks, key=lambda r: r["rank"])
    ]
    size = (min(4.0 + 0.22 * len(rows), 12.0), 4.6)
    return Plot("cluster-steps", f"Step time per rank: {name}", {"ranks": rows}, _draw, size=size)


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    ax = fig.add_subplot()
    style_axes(ax, theme)
    rows = data["ranks"]
    x = list(range(len(rows)))
    bottom = [0.0] * len(rows)
    area = len(rows) > 128
    for i, (key, label) in enumerate(PARTS):
        values = [r[key] for r in rows]
        if not any(values):
            continue
        top = [b + v for b, v in zip(bottom, values, strict=True)]
        if area:
            ax.fill_between(x, bottom, top, color=theme.palette[i], label=label, linewidth=0, step="mid")
        else:
            ax.bar(x, values, 0.8, bottom=bottom, color=theme.palette[i], label=label, edgecolor=theme.bg)
        bottom = top
    for i, r in enumerate(rows):
        if r["slow"]:
            ax.annotate(
                "slow",
                (i, bottom[i]),
                ha="center",
                va="bottom",
                color=theme.bad,
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
    if len(rows) <= 48:
        ax.set_xticks(x, [str(r["rank"]) for r in rows], fontsize=7, color=theme.fg)
    ax.set_xlabel("rank")
    ax.set_ylabel("mean step (ms)")
    ax.set_ylim(0, max(bottom, default=1.0) * 1.15)
    legend(ax, theme, loc="upper center", ncols=4, fontsize=8, bbox_to_anchor=(0.5, 1.0))
