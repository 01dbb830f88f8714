"""A cluster's communication matrix as a heatmap: sending rank (rows) by receiving rank (columns), the bandwidth
each link reached over all its transports (GB/s); links that carried nothing are blank."""

from __future__ import annotations

from typing import Any

import numpy as np

from atbprof.plots.base import Plot, Theme

MAX_RANKS = 1_024


def cluster_matrix_plot(bandwidths: dict[tuple[int, int], float], name: str) -> Plot | None:
    """`bandwidths`: per src -> dst link its GB/s over all transports (cluster_report.link_bandwidths); None
    without links."""
    if not bandwidths:
        return None
    ranks = sorted({r for pair in bandwidths for r in pair})[:MAX_RANKS]
    shown = set(ranks)
    cells = [[s, d, round(bw, 3)] for (s, d), bw in sorted(bandwidths.items()) if s in shown and d in shown]
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
