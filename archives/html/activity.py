"""A feed's activity chart: entries per day (or week, month, year for long-lived feeds),
creates, updates and deletes stacked, as an SVG rendered here (/feeds/<slug>/activity.svg).

The counts are entries per UTC day and kind, from GROUP BY queries on ranges of the feed's
log (any database Django runs on): those of sealed pages are kept per process and only
added to, so a chart after a write counts only the new entries. The chart has at most about
MAX_BARS bars whatever the feed's age, and is rendered again only when the feed has new
entries (its ETag is the feed's counters').
"""

from __future__ import annotations

import hashlib
from datetime import date, datetime, timedelta
from pathlib import Path

from django.db.models import Count
from django.db.models.functions import TruncDay
from lxml import etree

from archives.documents import atom, urls
from archives.documents.base import inputs_etag
from archives.documents.feeds import FeedDocument
from archives.documents.pagecache import PageCache
from archives.models import Entry, Feed

SVG_TYPE = "image/svg+xml"
SVG_NS = "http://www.w3.org/2000/svg"
RENDERER = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
MAX_BARS = 120
KINDS = [  # stacked bottom to top; Okabe-Ito colours, told apart with colour-blindness too
    (Entry.Kind.CREATE, "created", "#009E73"),
    (Entry.Kind.UPDATE, "updated", "#0072B2"),
    (Entry.Kind.DELETE, "deleted", "#D55E00"),
]
WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 52, 40, 44, 44


def _next_month(day: date, months: int) -> date:
    months += day.month - 1
    return date(day.year + months // 12, months % 12 + 1, 1)


class Unit:
    """A bar's width in time: how days fall in bars."""

    def __init__(self, name: str, days: int, label: str):
        self.name, self.days, self.label = name, days, label

    def start(self, day: date) -> date:
        if self.name == "week":
            return day - timedelta(days=day.weekday())  # ISO weeks, from Monday
        if self.name == "month":
            return day.replace(day=1)
        if self.name == "year":
            return day.replace(month=1, day=1)
        return day

    def after(self, start: date) -> date:
        if self.name in {"day", "week"}:
            return start + timedelta(days=self.days)
        return _next_month(start, 1 if self.name == "month" else 12)


UNITS = [Unit("day", 1, "%Y-%m-%d"), Unit("week", 7, "%Y-%m-%d"), Unit("month", 31, "%Y-%m"),
         Unit("year", 366, "%Y")]


def unit_for(first: date, last: date) -> Unit:
    """The narrowest bar that keeps the chart to about MAX_BARS bars."""
    span = (last - first).days + 1
    return next((unit for unit in UNITS if span <= unit.days * MAX_BARS), UNITS[-1])


DayCounts = dict[date, dict[str, int]]

# Entries per day and kind of each feed's sealed pages, by feed uuid: sealed entries never
# change, so after the first chart of a feed in a process only the entries sealed since,
# and the few unsealed ones, are counted again.
sealed_days = PageCache(8 * 1024 * 1024)


def _days(feed: Feed, first_seq: int, last_seq: int) -> DayCounts:
    """Entries first_seq..last_seq per UTC day and kind: one GROUP BY on the (feed, seq)
    index's range."""
    grouped = (Entry.objects.filter(feed=feed, seq__gte=first_seq, seq__lte=last_seq)
               .order_by()  # no Meta ordering in the GROUP BY
               .annotate(day=TruncDay("updated")).values_list("day", "kind")
               .annotate(n=Count("*")))
    found: DayCounts = {}
    for day, kind, n in grouped:
        found.setdefault(day.date() if isinstance(day, datetime) else day, {})[kind] = n
    return found


def _merged(*parts: DayCounts) -> DayCounts:
    merged: DayCounts = {}
    for part in parts:
        for day, kinds in part.items():
            into = merged.setdefault(day, {})
            for kind, n in kinds.items():
                into[kind] = into.get(kind, 0) + n
    return merged


def day_counts(feed: Feed) -> DayCounts:
    """The feed's entries per day and kind."""
    counted_seq, sealed = sealed_days.get(feed.uuid) or (0, {})
    if counted_seq < feed.sealed_seq:
        sealed = _merged(sealed, _days(feed, counted_seq + 1, feed.sealed_seq))
        sealed_days.put(feed.uuid, (feed.sealed_seq, sealed), size=64 * len(sealed) + 64)
    return _merged(sealed, _days(feed, feed.sealed_seq + 1, feed.last_seq))


def counts(feed: Feed) -> tuple[Unit, list[tuple[date, dict[str, int]]]]:
    """The feed's entries per bar and kind, every bar from the first entry's to the last's
    (empty ones too)."""
    days = day_counts(feed)
    if not days:
        return UNITS[0], []
    first, last = min(days), max(days)
    unit = unit_for(first, last)
    found = _merged(*({unit.start(day): kinds} for day, kinds in days.items()))
    bars, start, end = [], unit.start(first), unit.start(last)
    while start <= end:
        bars.append((start, found.get(start, {})))
        start = unit.after(start)
    return unit, bars


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 4, 6, 8, 10, 20, 40, ... at least `value` (even, past 1: the
    axis is labelled at its half)."""
    scale = 1
    while True:
        for step in (1, 2, 4, 6, 8):
            if step * scale >= value:
                return step * scale
        scale *= 10


def render(feed: Feed) -> bytes:
    unit, bars = counts(feed)
    totals = {kind: sum(bar.get(kind, 0) for _, bar in bars) for kind, _, _ in KINDS}
    summary = (f"Entries per {unit.name} of the feed {feed.title}: "
               + ", ".join(f"{totals[kind]} {label}" for kind, label, _ in KINDS))
    svg = etree.Element(f"{{{SVG_NS}}}svg", nsmap={None: SVG_NS}, width=str(WIDTH),
                        height=str(HEIGHT), viewBox=f"0 0 {WIDTH} {HEIGHT}", role="img",
                        style="font-family:system-ui,sans-serif;font-size:12px")
    svg.set("aria-labelledby", "chart-title")
    _element(svg, "title", summary, id="chart-title")
    _legend(svg, totals)
    plot_width, plot_height, bottom = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM, HEIGHT - BOTTOM
    if not bars:
        _element(svg, "text", "No entries yet", x=str(WIDTH // 2), y=str(HEIGHT // 2),
                 **{"text-anchor": "middle"})
        return etree.tostring(svg, xml_declaration=True, encoding="utf-8")
    top_value = _nice_ceiling(max(sum(bar.values()) for _, bar in bars) or 1)
    for value in (0, top_value // 2, top_value) if top_value > 1 else (0, top_value):
        y = bottom - plot_height * value / top_value
        _element(svg, "line", x1=str(LEFT), x2=str(WIDTH - RIGHT), y1=f"{y:.1f}", y2=f"{y:.1f}",
                 stroke="#ccc")
        _element(svg, "text", str(value), x=str(LEFT - 6), y=f"{y + 4:.1f}",
                 **{"text-anchor": "end"})
    _element(svg, "text", f"entries per {unit.name}", x="14", y=str(TOP + plot_height // 2),
             transform=f"rotate(-90 14 {TOP + plot_height // 2})", **{"text-anchor": "middle"})
    width = plot_width / len(bars)
    bar_width = min(width * 0.8, 48)  # a few bars stay bars, not walls
    for index, (start, bar) in enumerate(bars):
        if not bar:
            continue
        group = etree.SubElement(svg, f"{{{SVG_NS}}}g")
        _element(group, "title", f"{start.strftime(unit.label)}: "
                 + ", ".join(f"{bar.get(kind, 0)} {label}" for kind, label, _ in KINDS))
        y = bottom
        for kind, _, colour in KINDS:
            height = plot_height * bar.get(kind, 0) / top_value
            if height:
                y -= height
                _element(group, "rect", x=f"{LEFT + (index + 0.5) * width - bar_width / 2:.2f}",
                         y=f"{y:.2f}", width=f"{bar_width:.2f}", height=f"{height:.2f}",
                         fill=colour)
    for index in sorted({round(k * (len(bars) - 1) / 5) for k in range(6)}):
        x = LEFT + (index + 0.5) * width
        _element(svg, "line", x1=f"{x:.1f}", x2=f"{x:.1f}", y1=str(bottom),
                 y2=str(bottom + 4), stroke="#555")
        _element(svg, "text", bars[index][0].strftime(unit.label), x=f"{x:.1f}",
                 y=str(bottom + 18), **{"text-anchor": "middle"})
    _element(svg, "line", x1=str(LEFT), x2=str(WIDTH - RIGHT), y1=str(bottom), y2=str(bottom),
             stroke="#555")
    _element(svg, "text", f"{unit.name} (UTC)", x=str(LEFT + plot_width // 2),
             y=str(HEIGHT - 6), **{"text-anchor": "middle"})
    return etree.tostring(svg, xml_declaration=True, encoding="utf-8")


def _legend(svg: etree._Element, totals: dict[Entry.Kind, int]) -> None:
    x = LEFT
    for kind, label, colour in KINDS:
        _element(svg, "rect", x=str(x), y="12", width="12", height="12", fill=colour)
        text = f"{label} ({totals[kind]})"
        _element(svg, "text", text, x=str(x + 18), y="22")
        x += 40 + 8 * len(text)


def _element(parent: etree._Element, name: str, text: str | None = None, **attributes: str):
    element = etree.SubElement(parent, f"{{{SVG_NS}}}{name}", attributes)
    element.text = text
    return element


# The newest chart of each feed, trusted while its ETag is current.
charts = PageCache(8 * 1024 * 1024)


class ActivityChart(FeedDocument):
    """/feeds/<slug>/activity.svg. Entries are never changed or removed, so the feed's
    counters stand for them; revalidated by ETag only."""

    content_type = SVG_TYPE
    honours_if_modified_since = False

    def etag(self) -> str:
        feed = self.feed
        return inputs_etag("activity", RENDERER, feed.uuid, feed.title, feed.last_seq,
                           feed.last_updated)

    def last_modified(self) -> None:
        return None

    def links(self) -> list[atom.Link]:
        return [atom.Link("up", urls.html_url(urls.subscription_url(self.feed.slug)))]

    def body(self) -> bytes:
        cached = charts.get(self.feed.slug)
        if cached is not None and cached[0] == self.etag():
            return cached[1]
        body = render(self.feed)
        charts.put(self.feed.slug, (self.etag(), body), size=len(body))
        return body
