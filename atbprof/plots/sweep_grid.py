"""A sweep over two keys as a grid: the compared gain (or decode ms per token) per cell, and what fits (a point
that does not fit the device's HBM is 'no fit', one that failed 'failed'). The first two varying keys make the
grid; each value of a third makes a panel (at most 4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from atbprof.plots.base import Plot, Theme
from atbprof.plots.sweep_data import MAX_PANELS, SweepRows


def sweep_grid_plot(
    s: SweepRows, name: str, gains: list[dict[str, Any]] | None, compare_axis: str | None
) -> Plot | None:
    keys = [k for k in s.varying() if k != compare_axis]
    if len(keys) < 2:
        return None
    xk, yk = keys[0], keys[1]
    pk = keys[2] if len(keys) > 2 else None
    panels = [str(v) for v in s.values[pk]][:MAX_PANELS] if pk else [""]
    xs = [str(v) for v in s.values[xk]]
    ys = [str(v) for v in s.values[yk]]
    if gains is not None:
        what, rows = "gain %", [dict(g["at"], value=g["gain_pct"]) for g in gains]
    else:
        what, rows = "decode ms/token", [dict(r, value=r.get("decode_ms_per_token")) for r in s.rows]
    cells: dict[str, list[list[Any]]] = {}
    for r in rows:
        p = str(r.get(pk)) if pk else ""
        if p in panels:
            cells.setdefault(p, []).append([str(r.get(xk)), str(r.get(yk)), r["value"]])
    fits: dict[str, list[list[Any]]] = {}
    for r in s.rows:
        p = str(r.get(pk)) if pk else ""
        if p in panels:
            state = (
                "failed"
                if r.get("error") and r.get("fits") is not False
                else "no fit"
                if r.get("fits") is False
                else "ok"
            )
            fits.setdefault(p, []).append([str(r.get(xk)), str(r.get(yk)), state])
    data = {
        "x": xk,
        "y": yk,
        "panel": pk,
        "panels": panels,
        "xs": xs,
        "ys": ys,
        "what": what,
        "cells": cells,
        "fits": fits,
    }
    return Plot(
        "sweep-grid",
        f"{name}: {what} and what fits, by {xk} and {yk}",
        data,
        _draw,
        size=(4.2 * len(panels) + 1.5, 4.6),
    )


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    panels = data["panels"]
    axes = np.atleast_1d(fig.subplots(1, len(panels), squeeze=False)[0])
    xs, ys = data["xs"], data["ys"]
    values = [c[2] for p in panels for c in data["cells"].get(p, []) if c[2] is not None]
    vmin, vmax = (min(values), max(values)) if values else (0.0, 1.0)
    import matplotlib

    cmap = matplotlib.colormaps["viridis" if theme.name == "light" else "magma"]
    norm = matplotlib.colors.Normalize(vmin, vmax if vmax > vmin else vmin + 1)
    im = None
    for ax, p in zip(axes, panels, strict=True):
        grid = np.full((len(ys), len(xs)), np.nan)
        for x, y, v in data["cells"].get(p, []):
            if v is not None and x in xs and y in ys:
                grid[ys.index(y), xs.index(x)] = v
        im = ax.imshow(grid, cmap=cmap, norm=norm, aspect="auto", origin="lower")
        for x, y, state in data["fits"].get(p, []):
            i, j = ys.index(y), xs.index(x)
            v = grid[i, j]
            text = state if state != "ok" else (f"{v:,.1f}" if not np.isnan(v) else "")
            color = theme.bad if state != "ok" else _ink(cmap(norm(v))) if not np.isnan(v) else theme.fg
            ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
        ax.set_xticks(range(len(xs)), xs, fontsize=7, color=theme.fg)
        ax.set_yticks(range(len(ys)), ys, fontsize=7, color=theme.fg)
        ax.set_xlabel(data["x"], color=theme.fg)
        ax.set_ylabel(data["y"], color=theme.fg)
        ax.tick_params(colors=theme.fg)
        ax.set_facecolor(theme.bg)
        if data["panel"]:
            ax.set_title(f"{data['panel']}={p}", color=theme.fg, fontsize=9)
    if im is not None:
        bar = fig.colorbar(im, ax=list(axes), fraction=0.03, pad=0.02)
        bar.ax.tick_params(colors=theme.fg)
        bar.set_label(data["what"], color=theme.fg)
        bar.outline.set_edgecolor(theme.grid)


def _ink(rgba: tuple[float, ...]) -> str:
    """Black or white text, whichever reads on a cell of colour `rgba` (its relative luminance)."""
    r, g, b = rgba[:3]
    return "#000000" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "#ffffff"
