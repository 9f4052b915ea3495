"""The activity page's charts: bars per day, drawn as inline SVG on the server.

Each chart is a ``<svg role="img">`` with a title and a description listing every value, and
each bar carries its own ``<title>``, so a screen reader reads the numbers the picture shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH = 720
HEIGHT = 160
AXIS = 4  # room under the bars
PALETTE = ("#2f5bd3", "#d3742f", "#2f9d5b", "#9d2f8f", "#8a8f2f")


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[int]  # one per day, in the chart's day order


def bar_chart(*, title: str, days: Sequence[date], series: Sequence[Series]) -> SafeString:
    """Stacked bars, one per day; the series stack in the order given."""
    count = max(len(days), 1)
    totals = [sum(s.values[i] for s in series) for i in range(len(days))]
    peak = max([*totals, 1])
    slot = WIDTH / count
    bar_width = max(slot * 0.8, 1.0)
    plot = HEIGHT - AXIS
    bars: list[SafeString] = []
    for i, day in enumerate(days):
        base = float(plot)
        for index, one in enumerate(series):
            value = one.values[i]
            if not value:
                continue
            height = value / peak * (plot - 4)
            base -= height
            bars.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}">'
                    "<title>{}: {} {}</title></rect>",
                    f"{i * slot + (slot - bar_width) / 2:.1f}",
                    f"{base:.1f}",
                    f"{bar_width:.1f}",
                    f"{height:.1f}",
                    PALETTE[index % len(PALETTE)],
                    day.isoformat(),
                    value,
                    one.label.lower(),
                )
            )
    description = "; ".join(
        f"{day.isoformat()}: " + ", ".join(f"{one.values[i]} {one.label.lower()}" for one in series)
        for i, day in enumerate(days)
        if totals[i]
    )
    # Dates go under the picture in HTML: the SVG stretches to the page's width, text too.
    axis = (
        format_html(
            '<div class="axis"><span>{}</span><span>{}</span></div>',
            days[0].isoformat(),
            days[-1].isoformat(),
        )
        if days
        else ""
    )
    legend = format_html_join(
        "",
        '<span class="key"><i style="background:{}"></i>{}</span>',
        ((PALETTE[i % len(PALETTE)], one.label) for i, one in enumerate(series)),
    )
    return format_html(
        '<figure class="chart"><figcaption>{} <span class="legend">{}</span></figcaption>'
        '<svg viewBox="0 0 {} {}" role="img" aria-labelledby="{}-t {}-d" '
        'preserveAspectRatio="none"><title id="{}-t">{}</title><desc id="{}-d">{}</desc>'
        '<line x1="0" x2="{}" y1="{}" y2="{}" class="baseline"/>{}</svg>{}</figure>',
        title,
        legend,
        WIDTH,
        HEIGHT,
        _slug(title),
        _slug(title),
        _slug(title),
        title,
        _slug(title),
        description or "No activity in this period.",
        WIDTH,
        plot,
        plot,
        mark_safe("".join(bars)),  # noqa: S308 (each bar built by format_html)
        axis,
    )


def _slug(text: str) -> str:
    return "chart-" + "".join(ch if ch.isalnum() else "-" for ch in text.lower())
