"""A cluster's communication matrix as a heatmap: sending rank (rows) by receiving rank (columns), the bandwidth
each link reached over all its transports (GB/s); links that carried nothing are blank."""

from __future__ import annotations

from typing import Any

import numpy as np

from atbprof.plots.base import Plot, Theme

MAX_RANKS = 1_024


def cluster_matrix_plot(links: list[dict[str, Any]], name: str) -> Plot | None:
    """`links`: {src_rank, dst_rank, size_mb, time_ms} (transports summed here); None without links."""
    acc: dict[tuple[int, int], list[float]] = {}
    for m in links:
        a = acc.setdefault((int(m["src_rank"]), int(m["dst_rank"])), [0.0, 0.0])
        a[0] += float(m["size_mb"])
        a[1] += float(m["time_ms"])
    if not acc:
        return None
    ranks = sorted({r for pair in acc for r in pair})[:MAX_RANKS]
    cells = [
        [s, d, round(v[0] / v[1], 3) if v[1] > 0 else 0.0]
        for (s, d), v in sorted(acc.items())
        if s in ranks and d in ranks
    ]
    data = {"ranks": ranks, "cells": cells}
    return Plot("cluster-matrix", f"Communication matrix (GB/s): {name}", data, _draw, size=(6.4, 5.4))


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    ax = fig.add_subplot()
    ranks = data["ranks"]
    pos = {r: i for i, r in enumerate(ranks)}
    grid = np.full((len(ranks), len(ranks)), np.nan)
    for s, d, bw in data["cells"]:
        grid[pos[s], pos[d]] = bw
    import matplotlib

    from atbprof.plots.sweep_grid import _ink

    cmap = matplotlib.colormaps["viridis" if theme.name == "light" else "magma"]
    values = [c[2] for c in data["cells"]]
    norm = matplotlib.colors.Normalize(min(values, default=0.0), max(max(values, default=1.0), 1e-9))
    im = ax.imshow(grid, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
    ax.set_facecolor(theme.bg)
    for spine in ax.spines.values():
        spine.set_color(theme.grid)
    ax.tick_params(colors=theme.fg)
    if len(ranks) <= 32:
        ax.set_xticks(range(len(ranks)), [str(r) for r in ranks], fontsize=7)
        ax.set_yticks(range(len(ranks)), [str(r) for r in ranks], fontsize=7)
        for s, d, bw in data["cells"]:
            ax.text(pos[d], pos[s], f"{bw:.1f}", ha="center", va="center", fontsize=6, color=_ink(cmap(norm(bw))))
    ax.set_xlabel("receiving rank", color=theme.fg)
    ax.set_ylabel("sending rank", color=theme.fg)
    bar = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02)
    bar.ax.tick_params(colors=theme.fg)
    bar.set_label("GB/s", color=theme.fg)
    bar.outline.set_edgecolor(theme.grid)
