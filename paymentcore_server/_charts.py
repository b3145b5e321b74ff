"""Small charts for the console, drawn on the server as inline SVG: no script, no image request.

:func:`hourly_chart` draws a stacked bar per hour (a series per group of statuses); each bar segment is
a link to the list of the records behind it, and carries a ``<title>`` (a tooltip). The picture has a
one-sentence summary for assistive technology (``role="img"`` and ``aria-label``), and the same figures
follow it as a table that only screen readers see (``sr-only``), each figure a link too.

Colours come from the stylesheet by class (:data:`CHART_STYLE`, part of the console's one stylesheet),
with a darker palette for ``prefers-color-scheme: dark``; text and axes use ``currentColor``. Nothing
here takes text from a merchant: labels are literals, numbers and times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

import attrs

from paymentcore import HourCounts

__all__ = ["CHART_STYLE", "Series", "hourly_chart"]

#: chart colours by class, light then dark (text and axes follow the page's text colour)
CHART_STYLE = """
.chart{margin:0 0 1rem;padding:.75rem 1rem;background:#fff;border:1px solid #d0d7de;border-radius:.6rem}
.chart svg{display:block;width:100%;height:auto;overflow:visible}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(26rem,1fr));gap:0 1rem}
.chart svg text{fill:currentColor;font-size:12px}
.chart .axis{stroke:currentColor;stroke-opacity:.35;stroke-width:1}
.chart .grid{stroke:currentColor;stroke-opacity:.12;stroke-width:1}
.chart a rect:hover{opacity:.75}
.chart figcaption{font-weight:600;margin-bottom:.4rem}
.legend{list-style:none;margin:.4rem 0 0;padding:0;display:flex;flex-wrap:wrap;gap:.3rem 1rem;
font-size:.85rem}
.legend li{display:flex;align-items:center;gap:.35rem}
.swatch{display:inline-block;width:.8rem;height:.8rem;border-radius:.15rem}
.s-ok{fill:#1a7f37;background:#1a7f37}.s-bad{fill:#cf222e;background:#cf222e}
.s-rej{fill:#9a6700;background:#9a6700}.s-wait{fill:#8c959f;background:#8c959f}
.s-sent{fill:#0969da;background:#0969da}
.sr-only{position:absolute;width:1px;height:1px;padding:0;margin:-1px;overflow:hidden;clip:rect(0,0,0,0);
white-space:nowrap;border:0}
@media (prefers-color-scheme:dark){
.chart{background:#161b22;border-color:#30363d}
.s-ok{fill:#3fb950;background:#3fb950}.s-bad{fill:#f85149;background:#f85149}
.s-rej{fill:#d29922;background:#d29922}.s-wait{fill:#8b949e;background:#8b949e}
.s-sent{fill:#58a6ff;background:#58a6ff}
}
"""

WIDTH = 600
HEIGHT = 220
LEFT = 40  # room for the y axis' labels
BOTTOM = 22  # room for the hours
TOP = 8


@attrs.frozen
class Series:
    """One colour of the bars: the statuses it adds up, its label, and its class (``s-ok`` ...)."""

    statuses: tuple[str, ...]
    label: str
    css: str


def _nice_ceiling(value: int) -> int:
    """The y axis' top: the smallest of 1, 2, 5 times a power of ten not below ``value`` (at least 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def hourly_chart(
    title: str,
    hours: Sequence[HourCounts],
    series: Sequence[Series],
    *,
    chart_id: str,
    noun: str,
    link: Callable[[HourCounts, Series], str],
) -> str:
    """A ``<figure>``: the stacked bars of ``hours`` by ``series``, the legend, and the figures as a
    table for screen readers. ``link(hour, series)`` is the URL of the list behind a segment (already
    safe for an attribute: built from literals, numbers and times)."""
    values = [[sum(hour.counts.get(s, 0) for s in one.statuses) for one in series] for hour in hours]
    top = _nice_ceiling(max((sum(v) for v in values), default=0))
    plot_w, plot_h = WIDTH - LEFT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(hours), 1)
    bar = slot * 0.72
    middle = f"{TOP + plot_h / 2:.1f}"
    parts = [
        f"<line class='grid' x1='{LEFT}' y1='{TOP}' x2='{WIDTH}' y2='{TOP}'/>",
        f"<line class='grid' x1='{LEFT}' y1='{middle}' x2='{WIDTH}' y2='{middle}'/>",
        f"<line class='axis' x1='{LEFT}' y1='{TOP + plot_h}' x2='{WIDTH}' y2='{TOP + plot_h}'/>",
        f"<text x='{LEFT - 6}' y='{TOP + 4}' text-anchor='end'>{top}</text>",
        f"<text x='{LEFT - 6}' y='{TOP + plot_h / 2 + 4:.1f}' text-anchor='end'>{_half(top)}</text>",
        f"<text x='{LEFT - 6}' y='{TOP + plot_h + 4}' text-anchor='end'>0</text>",
    ]
    for i, (hour, counts) in enumerate(zip(hours, values, strict=True)):
        x = LEFT + i * slot + (slot - bar) / 2
        y = float(TOP + plot_h)
        label = _hour_label(hour)
        for one, count in zip(series, counts, strict=True):
            if not count:
                continue
            height = plot_h * count / top
            y -= height
            tip = f"{label}: {count} {one.label.lower()}"
            parts.append(
                f"<a href=\"{link(hour, one)}\"><rect class='{one.css}' x='{x:.1f}' y='{y:.1f}'"
                f" width='{bar:.1f}' height='{height:.1f}'><title>{escape(tip)}</title></rect></a>"
            )
        if (len(hours) - 1 - i) % 4 == 0:
            parts.append(
                f"<text x='{x + bar / 2:.1f}' y='{HEIGHT - 6}' text-anchor='middle'>"
                f"{hour.start.strftime('%H:%M')}</text>"
            )
    totals = [sum(v[j] for v in values) for j in range(len(series))]
    summary = f"{title}: " + ", ".join(
        f"{total} {one.label.lower()}" for total, one in zip(totals, series, strict=True)
    )
    if hours:
        summary += f", from {_hour_label(hours[0])} to {_hour_label(hours[-1])}"
    legend = "".join(
        f"<li><span class='swatch {one.css}' aria-hidden='true'></span>{escape(one.label)} ({total})</li>"
        for one, total in zip(series, totals, strict=True)
    )
    head = "".join(f"<th scope='col'>{escape(one.label)}</th>" for one in series)
    rows = "".join(
        f"<tr><th scope='row'>{escape(_hour_label(hour))}</th>"
        + "".join(
            f'<td><a href="{link(hour, one)}">{count}</a></td>'
            for one, count in zip(series, counts, strict=True)
        )
        + "</tr>"
        for hour, counts in zip(hours, values, strict=True)
    )
    return (
        f"<figure class='chart' id='{escape(chart_id)}' data-chart='{escape(chart_id)}'>"
        f"<figcaption>{escape(title)}</figcaption>"
        f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {WIDTH} {HEIGHT}' role='img'"
        f" aria-label=\"{escape(summary)}\" focusable='false'>{''.join(parts)}</svg>"
        f"<ul class='legend' aria-hidden='true'>{legend}</ul>"
        f"<table class='sr-only'><caption>{escape(title)}: {escape(noun)} created each hour (UTC), by"
        f" status now</caption><thead><tr><th scope='col'>Hour</th>{head}</tr></thead>"
        f"<tbody>{rows}</tbody></table></figure>"
    )


def _half(top: int) -> str:
    return str(top // 2) if top % 2 == 0 else f"{top / 2:.1f}"


def _hour_label(hour: HourCounts) -> str:
    end = (hour.start.hour + 1) % 24
    return f"{hour.start.strftime('%Y-%m-%d %H:00')}–{end:02d}:00 UTC"
