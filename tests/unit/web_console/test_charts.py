"""broker/cli/web_console/charts.py: the SVG line chart is well-formed XML in every case
(no series, one point, many series, odd names); its axis tick labels and legend entries are
laid out without overlapping (text widths estimated at the chart's own ``CHAR_W`` per
character) and inside the picture."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET

import pytest

from broker.cli.web_console.charts import (
    BOTTOM,
    CHAR_W,
    LEFT,
    MAX_SERIES,
    PLOT_HEIGHT,
    TOP,
    WIDTH,
    format_value,
    line_chart,
    nice_step,
)

pytestmark = pytest.mark.unit

SVG = "{http://www.w3.org/2000/svg}"
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def texts(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter(f"{SVG}text") if e.get("class") == cls]


def extent(e: ET.Element) -> tuple[float, float]:
    """(left, right) of a text element, from its anchor and estimated width."""
    x = float(e.get("x", "0"))
    width = len(e.text or "") * CHAR_W
    anchor = e.get("text-anchor", "start")
    if anchor == "end":
        return x - width, x
    if anchor == "middle":
        return x - width / 2, x + width / 2
    return x, x + width


def series(n: int, points: int = 30, top: float = 100.0) -> dict[str, list[tuple[float, float]]]:
    return {
        f"topic-{i}": [(T0 + s, top * ((s * (i + 1)) % 7) / 7) for s in range(points)]
        for i in range(n)
    }


def test_no_series_shows_a_note() -> None:
    root = parse(line_chart({}, "Produce rate per topic", "records/s"))
    assert not list(root.iter(f"{SVG}polyline"))
    assert [e.text for e in texts(root, "chart-note")] == ["collecting samples\u2026"]
    assert root.get("aria-label") == "Produce rate per topic"


def test_one_point_shows_the_note_not_a_line() -> None:
    root = parse(line_chart({"orders": [(T0, 5.0)]}, "t", "records/s"))
    assert not list(root.iter(f"{SVG}polyline"))
    assert texts(root, "chart-note")


def test_empty_series_are_left_out() -> None:
    root = parse(line_chart({"a": [], "b": [(T0, 1.0), (T0 + 5, 2.0)]}, "t", "u"))
    assert [p.findtext(f"{SVG}title") for p in root.iter(f"{SVG}polyline")] == ["b"]
    assert [e.text for e in texts(root, "legend")] == ["b"]


def test_two_points_make_a_line_inside_the_plot() -> None:
    root = parse(line_chart({"orders": [(T0, 0.0), (T0 + 10, 40.0)]}, "t", "u"))
    (line,) = root.iter(f"{SVG}polyline")
    points = [tuple(map(float, xy.split(","))) for xy in (line.get("points") or "").split()]
    assert points[0] == (LEFT, TOP + PLOT_HEIGHT)
    assert points[1][0] == pytest.approx(WIDTH - 16)
    assert TOP <= points[1][1] < TOP + PLOT_HEIGHT


def test_many_series_keep_the_largest_and_their_legend_does_not_overlap() -> None:
    many = {
        f"a-rather-long-topic-name-number-{i:02d}-of-the-cluster": [
            (T0, float(i)),
            (T0 + 60, float(i * 2)),
        ]
        for i in range(20)
    }
    root = parse(line_chart(many, "Produce rate per topic", "records/s"))
    lines = [p.findtext(f"{SVG}title") for p in root.iter(f"{SVG}polyline")]
    assert len(lines) == MAX_SERIES
    assert lines[0] == "a-rather-long-topic-name-number-19-of-the-cluster"  # largest last value
    legend = texts(root, "legend")
    assert len(legend) == MAX_SERIES
    assert all(e.text and e.text.endswith("\u2026") for e in legend)  # shortened to fit
    height = float(root.get("height", "0"))
    boxes = []
    for e in legend:
        left, right = extent(e)
        y = float(e.get("y", "0"))
        assert left >= 0 and right <= WIDTH and TOP + PLOT_HEIGHT + BOTTOM <= y <= height
        boxes.append((left, right, y - 11, y))
    for a, b in itertools.combinations(boxes, 2):
        apart_x = a[1] <= b[0] or b[1] <= a[0]
        apart_y = a[3] <= b[2] or b[3] <= a[2]
        assert apart_x or apart_y, (a, b)


@pytest.mark.parametrize("span_s", [1, 2, 7, 60, 3600, 86_400, 3 * 86_400])
def test_time_ticks_do_not_overlap_and_are_distinct(span_s: int) -> None:
    data = {"orders": [(T0, 1.0), (T0 + span_s / 2, 3.0), (T0 + span_s, 2.0)]}
    root = parse(line_chart(data, "t", "u"))
    ticks = [e for e in texts(root, "tick") if float(e.get("y", "0")) == TOP + PLOT_HEIGHT + 16]
    assert len(ticks) >= 2
    labels = [e.text for e in ticks]
    assert len(set(labels)) == len(labels), labels
    spans = sorted(extent(e) for e in ticks)
    assert spans[0][0] >= LEFT - 1 and spans[-1][1] <= WIDTH
    for (_l1, r1), (l2, _r2) in itertools.pairwise(spans):
        assert l2 - r1 >= CHAR_W, labels  # at least a character's gap


@pytest.mark.parametrize("top", [0.0, 0.003, 0.7, 1.0, 7.0, 99.0, 12_345.0, 2.5e6, 9.9e8, 3e11])
def test_value_ticks_fit_left_of_the_plot_and_do_not_overlap(top: float) -> None:
    data = {"lag": [(T0, 0.0), (T0 + 10, top)]}
    root = parse(line_chart(data, "t", "records"))
    ticks = [e for e in texts(root, "tick") if float(e.get("y", "0")) <= TOP + PLOT_HEIGHT + 4]
    assert 2 <= len(ticks) <= 11
    ys = sorted(float(e.get("y", "0")) for e in ticks)
    assert all(b - a >= 14 for a, b in itertools.pairwise(ys)), ys
    for e in ticks:
        left, right = extent(e)
        assert left >= 22 and right <= LEFT, (e.text, left)  # clear of the rotated unit
    values = [e.text for e in ticks]
    assert len(set(values)) == len(values), values
    assert float(ticks[0].get("y", "0")) == pytest.approx(TOP + PLOT_HEIGHT + 4)  # 0 at bottom


def test_names_and_titles_are_escaped() -> None:
    svg = line_chart({"<b>&x": [(T0, 1.0), (T0 + 1, 2.0)]}, 'lag of "g" <x>', "a&b")
    root = parse(svg)
    assert root.get("aria-label") == 'lag of "g" <x>'
    assert [e.text for e in texts(root, "legend")] == ["<b>&x"]
    assert "<b>" not in svg


def test_nice_step_and_format_value() -> None:
    assert [nice_step(s) for s in (0, 1, 7, 10, 12, 99, 1000)] == [1, 0.2, 2, 2, 5, 20, 200]
    values = (0, 5, 0.25, 1500, 25_000, 3_000_000, 1.5e9, 2e13)
    assert [format_value(v) for v in values] == [
        "0",
        "5",
        "0.25",
        "1500",
        "25k",
        "3M",
        "1.5G",
        "20T",
    ]
