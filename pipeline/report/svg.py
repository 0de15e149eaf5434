"""Charts as inline SVG strings: drawn here in Python, so the report needs no script, no chart
library and nothing from the network. Every label goes through :func:`escape`."""

from __future__ import annotations

import html
from typing import Mapping, Sequence

from chunkline.pipeline.report.gather import Histogram, counted

# Colours of the three document outcomes, shared by the chart and the table's legend.
OUTCOME_COLOURS = {"kept": "#2e7d32", "duplicate": "#f9a825", "rejected": "#c62828"}
BAR_COLOUR = "#3b6ea5"


def escape(text: str) -> str:
    """Text safe in HTML text and in quoted attributes, and exact: ``html.unescape`` gives back
    ``text``. A carriage return is written as ``&#13;`` because the HTML parser turns a raw one
    into a line feed (WHATWG HTML, "Preprocessing the input stream"); NUL, which the parser drops
    from text, becomes U+FFFD as it would in an attribute."""
    return html.escape(text.replace("\0", "\ufffd"), quote=True).replace("\r", "&#13;")


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def stacked_bars(chart_id: str, title: str, rows: Sequence[tuple[str, Mapping[str, float]]],
                 colours: dict[str, str], width: int = 720) -> str:
    """One horizontal bar per row, its parts stacked in ``colours``' order, scaled to the
    largest row's total; each part has a ``<title>`` (its name and value)."""
    label_w, bar_h, gap, top = 130, 18, 8, 8
    total_max = max([sum(parts.values()) for _, parts in rows] + [1])
    plot_w = width - label_w - 70
    height = top + len(rows) * (bar_h + gap) + 4
    out = [f'<svg class="chart" id="{escape(chart_id)}" role="img" aria-label="{escape(title)}" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'xmlns="http://www.w3.org/2000/svg">']
    for i, (label, parts) in enumerate(rows):
        y = top + i * (bar_h + gap)
        out.append(f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end">{escape(label)}</text>')
        x = float(label_w)
        for name, colour in colours.items():
            value = parts.get(name, 0)
            if value <= 0:
                continue
            w = plot_w * value / total_max
            out.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 1):.1f}" height="{bar_h}" '
                       f'fill="{colour}"><title>{escape(f"{label}: {name} {_number(value)}")}</title></rect>')
            x += w
        out.append(f'<text x="{x + 5:.1f}" y="{y + bar_h - 5}">{_number(sum(parts.values()))}</text>')
    out.append("</svg>")
    return "".join(out)


def _tokens_range(lo: int, hi: int) -> str:
    return counted(lo, "token") if lo == hi else f"{lo:,}–{hi:,} tokens"


def histogram_svg(chart_id: str, hist: Histogram, width: int = 720, height: int = 240) -> str:
    """Chunks per token-count bin, with the budget drawn as a dashed line."""
    left, right, top, bottom = 48, 16, 12, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    top_count = max(list(hist.counts) + [1])
    x_max = hist.edges[-1] or 1

    def x_of(tokens: float) -> float:
        return left + plot_w * tokens / x_max

    out = [f'<svg class="chart" id="{escape(chart_id)}" role="img" aria-label="chunk tokens" '
           f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'xmlns="http://www.w3.org/2000/svg">',
           f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" stroke="#555"/>',
           f'<text x="{left - 6}" y="{top + 10}" text-anchor="end">{top_count:,}</text>',
           f'<text x="{left - 6}" y="{top + plot_h}" text-anchor="end">0</text>']
    for i, count in enumerate(hist.counts):
        lo, hi = hist.edges[i], hist.edges[i + 1]
        x0, x1 = x_of(lo), x_of(hi)
        h = plot_h * count / top_count
        over = hist.budget is not None and lo > hist.budget
        out.append(f'<rect class="bin" x="{x0 + 1:.1f}" y="{top + plot_h - h:.1f}" '
                   f'width="{max(x1 - x0 - 2, 1):.1f}" height="{h:.1f}" '
                   f'fill="{OUTCOME_COLOURS["rejected"] if over else BAR_COLOUR}">'
                   f'<title>{_tokens_range(lo, hi - 1)}: {counted(count, "chunk")}</title></rect>')
    step = max(1, len(hist.counts) // 6)
    for i in range(0, len(hist.edges), step):
        out.append(f'<text x="{x_of(hist.edges[i]):.1f}" y="{height - 18}" '
                   f'text-anchor="middle">{hist.edges[i]:,}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 3}" text-anchor="middle">tokens per chunk</text>')
    if hist.budget is not None:
        bx = x_of(hist.budget + 1)  # the in-budget range ends after the budget itself
        out.append(f'<line class="budget" x1="{bx:.1f}" y1="{top}" x2="{bx:.1f}" y2="{top + plot_h}" '
                   f'stroke="{OUTCOME_COLOURS["rejected"]}" stroke-dasharray="5 3" stroke-width="2"/>'
                   f'<text x="{bx - 4:.1f}" y="{top + 10}" text-anchor="end">budget {hist.budget:,}</text>')
    out.append("</svg>")
    return "".join(out)
