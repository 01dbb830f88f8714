"""A diff as a waterfall: the base's per-step time, each group that changed (the diff's rows: added, removed,
fused, faster, slower), the rest, and the new input's time. Bars that save time are the good colour."""

from __future__ import annotations

from typing import Any

from atbprof.plots.base import Plot, Theme, style_axes

SHOWN = 12


def waterfall_plot(base_label: str, new_label: str, base_ms: float, new_ms: float, rows: list[dict[str, Any]]) -> Plot:
    """`rows`: the diff's groups {name, classification, delta_ms}; the largest |delta| are shown, the others
    (and what the groups do not cover) summed as `rest`."""
    changed = [r for r in rows if r["classification"] != "unchanged" and r["delta_ms"]]
    changed.sort(key=lambda r: (-abs(r["delta_ms"]), r["name"]))
    shown = changed[:SHOWN]
    rest = (new_ms - base_ms) - sum(r["delta_ms"] for r in shown)
    steps = [
        {"name": _short(r["name"]), "kind": r["classification"], "delta_ms": round(r["delta_ms"], 4)} for r in shown
    ]
    if abs(rest) > 1e-6:
        steps.append({"name": "rest", "kind": "rest", "delta_ms": round(rest, 4)})
    data = {"base": [base_label, round(base_ms, 4)], "new": [new_label, round(new_ms, 4)], "steps": steps}
    return Plot("waterfall", f"What changed: {base_label} -> {new_label}", data, _draw, size=(9.0, 4.8))


def _short(name: str, width: int = 34) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    ax = fig.add_subplot()
    style_axes(ax, theme)
    labels = [data["base"][0]]
    bottoms, heights, colors = [0.0], [data["base"][1]], [theme.palette[0]]
    level = data["base"][1]
    for s in data["steps"]:
        d = s["delta_ms"]
        bottoms.append(level + min(d, 0.0))
        heights.append(abs(d))
        colors.append(theme.good if d < 0 else theme.bad)
        labels.append(f"{s['name']} ({s['kind']})")
        level += d
    labels.append(data["new"][0])
    bottoms.append(0.0)
    heights.append(data["new"][1])
    colors.append(theme.palette[1])
    x = list(range(len(labels)))
    ax.bar(x, heights, 0.6, bottom=bottoms, color=colors, edgecolor=theme.bg)
    for i, s in enumerate(data["steps"], start=1):
        ax.text(
            i, bottoms[i] + heights[i], f"{s['delta_ms']:+,.3f}", ha="center", va="bottom", color=theme.fg, fontsize=7
        )
    for i in (0, len(labels) - 1):
        ax.text(i, heights[i], f"{heights[i]:,.3f}", ha="center", va="bottom", color=theme.fg, fontsize=8)
    ax.set_xticks(x, labels, rotation=35, ha="right", fontsize=7, color=theme.fg)
    ax.set_ylabel("ms per step (per token in decode)")
    top = max(b + h for b, h in zip(bottoms, heights, strict=True))
    # from zero, always: a zoomed axis makes a 14 % saving look like a sixfold drop
    ax.set_ylim(0.0, top * 1.08)
