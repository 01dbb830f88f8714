"""A roofline of a run's kernels: per op type and phase, arithmetic intensity (FLOP per HBM byte) against the
throughput achieved (FLOP per second of kernel time), under the device's compute roof and HBM slope. A point's
area is its share of the run's kernel time. Kernels with no arithmetic (copies, collectives) or no HBM traffic (in
decode the small vector kernels' tensors stay in L2) have no place on the axes; their share of the time is said in
the figure's note."""

from __future__ import annotations

from typing import Any

import numpy as np

from atbprof.plots.base import Plot, Theme, style_axes

LABELLED = 8


def roofline_plot(groups: list[dict[str, Any]], peak_flops: float, hbm_bytes_per_s: float, device: str) -> Plot:
    """`groups`: per op type and phase {op_type, phase, flops, bytes, time_ns, count} (summed over the run)."""
    total = sum(g["time_ns"] for g in groups) or 1
    points = []
    idle = 0.0
    for g in groups:
        if g["flops"] <= 0 or g["bytes"] <= 0 or g["time_ns"] <= 0:
            idle += g["time_ns"]
            continue
        points.append(
            {
                "op_type": g["op_type"],
                "phase": g["phase"],
                "intensity": round(g["flops"] / g["bytes"], 4),
                "tflops": round(g["flops"] / g["time_ns"] / 1e3, 4),
                "share": round(g["time_ns"] / total, 5),
            }
        )
    points.sort(key=lambda p: (-p["share"], p["op_type"], p["phase"]))
    data = {
        "device": device,
        "peak_tflops": round(peak_flops / 1e12, 3),
        "hbm_tbps": round(hbm_bytes_per_s / 1e12, 4),
        "points": points,
        "no_arithmetic_share": round(idle / total, 4),
    }
    note = (
        f"{data['no_arithmetic_share']:.1%} of kernel time is in kernels without arithmetic or without HBM traffic "
        "(copies, collectives, L2-resident vector kernels): not drawn"
    )
    return Plot("roofline", f"Roofline: {device}", data, _draw, size=(8.0, 5.0), notes=[note])


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    ax = fig.add_subplot()
    style_axes(ax, theme)
    ax.set_xscale("log")
    ax.set_yscale("log")
    pts = data["points"]
    peak, bw = data["peak_tflops"], data["hbm_tbps"]
    xs = [p["intensity"] for p in pts] or [1.0]
    lo, hi = min(min(xs) / 3, 0.05), max(max(xs) * 3, peak / bw * 8)
    grid = np.geomspace(lo, hi, 200)
    ax.plot(grid, np.minimum(grid * bw, peak), color=theme.fg, linewidth=1.5)
    ridge = peak / bw
    ax.annotate(f"HBM {bw:g} TB/s", (lo * 2, lo * 2 * bw), color=theme.muted, fontsize=8, rotation=0, va="bottom")
    ax.annotate(f"peak {peak:,.0f} TFLOP/s", (ridge * 1.2, peak), color=theme.muted, fontsize=8, va="bottom")
    phases = sorted({p["phase"] for p in pts})
    for i, phase in enumerate(phases):
        sel = [p for p in pts if p["phase"] == phase]
        ax.scatter(
            [p["intensity"] for p in sel],
            [max(p["tflops"], 1e-6) for p in sel],
            s=[20 + 900 * p["share"] for p in sel],
            color=theme.palette[i % len(theme.palette)],
            alpha=0.75,
            edgecolor=theme.bg,
            linewidth=0.6,
            label=phase,
        )
    for p in pts[:LABELLED]:
        ax.annotate(
            p["op_type"],
            (p["intensity"], max(p["tflops"], 1e-6)),
            color=theme.fg,
            fontsize=7,
            xytext=(4, 3),
            textcoords="offset points",
        )
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("achieved TFLOP/s (of kernel time)")
    ax.set_xlim(lo, hi)
    ymin = min([p["tflops"] for p in pts if p["tflops"] > 0] or [peak / 1e4])
    ax.set_ylim(max(ymin / 3, 1e-6), peak * 3)
    if phases:
        ax.legend(loc="lower right", frameon=False, labelcolor=theme.fg, fontsize=8, markerscale=0.5)
