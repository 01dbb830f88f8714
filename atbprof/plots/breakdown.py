"""Per-token latency breakdown as stacked bars (seed 000's rows: attention with its norm, FFN with its norm,
other), one bar per run: a run alone, or base vs new of a diff."""

from __future__ import annotations

from typing import Any

from atbprof.plots.base import Plot, Theme, style_axes

ROWS = ("attention", "ffn", "other")
LABELS = {"attention": "Attention (with its norm)", "ffn": "FFN (with its norm)", "other": "other"}


def breakdown_plot(
    sides: list[dict[str, Any]], title: str = "Decode latency per token", unit: str = "ms per decode token"
) -> Plot:
    """`sides`: per bar {label, rows: {attention, ffn, other} ms/token, norm_ms (or None)}; `unit` labels the axis."""
    names = [r for r in ROWS if any(r in s["rows"] for s in sides)]
    names += sorted({r for s in sides for r in s["rows"]} - set(names))
    data = {
        "sides": [
            {
                "label": s["label"],
                "rows": {r: round(float(s["rows"].get(r, 0.0)), 4) for r in names},
                "norm_ms": None if s.get("norm_ms") is None else round(float(s["norm_ms"]), 4),
            }
            for s in sides
        ],
        "unit": unit,
    }
    return Plot("breakdown", title, data, _draw, size=(max(5.6, 3.2 + 1.6 * len(sides)), 4.6))


def _draw(fig: Any, theme: Theme, data: dict[str, Any]) -> None:
    ax = fig.add_subplot()
    style_axes(ax, theme)
    sides = data["sides"]
    x = list(range(len(sides)))
    bottom = [0.0] * len(sides)
    for i, row in enumerate(sides[0]["rows"] if sides else []):
        values = [s["rows"][row] for s in sides]
        color = theme.palette[i % len(theme.palette)]
        ax.bar(x, values, 0.55, bottom=bottom, color=color, label=LABELS.get(row, row), edgecolor=theme.bg)
        for j, v in enumerate(values):
            if v > 0.06 * max(sum(s["rows"].values()) for s in sides):
                ax.text(j, bottom[j] + v / 2, f"{v:,.2f}", ha="center", va="center", color="#ffffff", fontsize=8)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    top = max(bottom) if bottom else 1.0
    for j, s in enumerate(sides):
        total = sum(s["rows"].values())
        text = f"{total:,.2f} ms"
        if len(sides) > 1 and j > 0 and sum(sides[0]["rows"].values()):
            base = sum(sides[0]["rows"].values())
            text += f"\n{(total - base) / base * 100:+.1f} %"
        ax.text(j, bottom[j] + 0.02 * top, text, ha="center", va="bottom", color=theme.fg, fontsize=9)
    ax.set_xticks(x, [_label(s) for s in sides], color=theme.fg)
    ax.set_ylabel(data["unit"])
    ax.set_ylim(0, top * 1.22)
    ax.legend(loc="upper center", ncols=3, frameon=False, labelcolor=theme.fg, fontsize=8, bbox_to_anchor=(0.5, 1.0))


def _label(side: dict[str, Any]) -> str:
    norm = side.get("norm_ms")
    return side["label"] + (f"\nnorm-related {norm:,.2f} ms" if norm is not None else "")
