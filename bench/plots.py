"""The PNG plots beside the "Millrace beside Apache Kafka" report: one question per plot.

Each plot asks one question in its title, with its unit and "higher/lower is better"; the
comparison that answers it is what the legend names; every bar carries its value, so nobody
has to read it off the axis:

- ``throughput.png``: which broker moves more records per second (workloads 1 to 3), per client?
- ``latency.png``: which broker delivers a record sooner at a fixed rate (workload 4)?
- ``partitions.png``: how does each broker's produce rate change with the partition count (6a)?
- ``spark-read.png``: does ``format("millrace")`` read a topic faster than Spark's own
  ``format("kafka")``? One panel per broker, the in-memory Arrow source (no broker at all)
  drawn as a dashed ceiling line.
- ``spark-write.png``: which ``df.write`` into a topic is fastest: Spark's ``format("kafka")``
  or ``format("millrace")`` (its batch producer, exactly-once, ``producer=librdkafka``)?
- ``spark-brokers.png``: does the broker under Spark matter (each Spark case, Kafka broker
  beside Millrace broker)?

Figures are built with matplotlib's object API (:class:`~matplotlib.figure.Figure`, no pyplot
and no global backend state), so a builder returns its figure for a test to inspect and
:func:`write_all` saves them. A builder returns ``None`` when the run has none of its data (a
``--only`` run), and that file is not written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from bench.results import SYSTEMS, Run

DPI = 110
BROKER_COLORS = {"Kafka": "#4c72b0", "Millrace": "#dd8452"}
SPARK_OWN = 'format("kafka")'
OURS = 'format("millrace")'
# Spark's own connector grey, ours teal; the variants of ours in darker and lighter teal.
WRITER_COLORS = ("#8c8c8c", "#2a9d8f", "#1d5f57", "#8fd3c8", "#b5838d")
THROUGHPUT_WORKLOADS = (
    ("1", "produce, 1 broker, acks=1"),
    ("2", "produce, 3 brokers, RF=3, acks=all"),
    ("3", "consume (catch-up read)"),
)
LATENCY_METRICS = ("p50 ms", "p99 ms", "p99.9 ms", "max ms")
SPARK_PARTITIONS = 2  # workload 5's topics, as bench.compare creates them


@dataclass(frozen=True, slots=True)
class Series:
    """One legend entry of a grouped bar chart: its bars' values, one per group (``None``
    where the run has no figure)."""

    label: str
    color: str
    values: tuple[float | None, ...]


@dataclass(frozen=True, slots=True)
class SparkCase:
    """A workload-5 case name split into what Spark did and with which connector:
    ``'noop write: format("kafka")'`` is kind ``noop write``, connector ``format("kafka")``;
    the ceiling case has no connector."""

    case: str
    kind: str
    connector: str

    @classmethod
    def of(cls, case: str) -> SparkCase:
        kind, _, connector = case.rpartition(": ")
        if not connector.startswith("format("):
            return cls(case, case, "")
        return cls(case, kind, connector)

    @property
    def is_write(self) -> bool:
        return self.kind.startswith("write")

    @property
    def is_ceiling(self) -> bool:
        return self.kind.startswith("ceiling")


@dataclass(frozen=True, slots=True)
class Plot:
    """One PNG: its file name, the alt text of its Markdown image, and its builder."""

    file: str
    alt: str
    build: Callable[[Run], Figure | None]


# --- number formatting ---------------------------------------------------------------------


def short(value: float) -> str:
    """A bar's value in three significant digits: 3.55M, 347k, 44.1k, 0.81."""
    if abs(value) >= 1e6:
        return f"{value / 1e6:.3g}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}"


def _tick(value: float, _pos: float | None = None) -> str:
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


# --- drawing helpers -----------------------------------------------------------------------


def _figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def grouped_bars(
    ax: Axes, groups: Sequence[str], series: Sequence[Series], *, horizontal: bool = False
) -> None:
    """Bars side by side per group, one colour per series, each labelled with its value
    (``—`` where missing). Horizontal bars list the groups top to bottom."""
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        offsets = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v or 0.0 for v in s.values]
        if horizontal:
            bars = ax.barh(offsets, heights, width, label=s.label, color=s.color)
        else:
            bars = ax.bar(offsets, heights, width, label=s.label, color=s.color)
        labels = ["—" if v is None else short(v) for v in s.values]
        ax.bar_label(bars, labels=labels, padding=2, fontsize=8)
    value_axis = ax.xaxis if horizontal else ax.yaxis
    value_axis.set_major_formatter(FuncFormatter(_tick))
    if horizontal:
        ax.set_yticks(range(len(groups)), list(groups))
        ax.invert_yaxis()
        ax.margins(x=0.12)
        ax.grid(axis="x", alpha=0.3)
    else:
        ax.set_xticks(range(len(groups)), list(groups))
        ax.margins(y=0.12)
        ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)


def _broker_series(values: Callable[[str], tuple[float | None, ...]]) -> list[Series]:
    return [Series(f"{s} broker", BROKER_COLORS[s], values(s)) for s in SYSTEMS]


def _has_data(series: Sequence[Series]) -> bool:
    return any(v is not None for s in series for v in s.values)


# --- the broker plots ----------------------------------------------------------------------


def throughput(run: Run) -> Figure | None:
    """Workloads 1 to 3, records/s, one row per (workload, client), legend = broker."""
    rows = [(w, name, c) for w, name in THROUGHPUT_WORKLOADS for c in run.cases(w)]
    series = _broker_series(lambda s: tuple(run.median(w, c, s, "records/s") for w, _n, c in rows))
    if not rows or not _has_data(series):
        return None
    fig = _figure(8.0, 1.2 + 0.62 * len(rows))
    ax = fig.subplots()
    grouped_bars(ax, [f"{w}. {name}\n{c}" for w, name, c in rows], series, horizontal=True)
    ax.set_xlabel("records/s (100-byte records)")
    ax.legend(loc="best")
    fig.suptitle(
        "Produce and consume: Kafka broker vs Millrace broker\n(records/s, higher is better)"
    )
    return fig


def latency(run: Run) -> Figure | None:
    """Workload 4: end-to-end latency percentiles, legend = broker."""
    cases = run.cases("4")
    groups = [(c, m) for c in cases for m in LATENCY_METRICS]
    series = _broker_series(lambda s: tuple(run.median("4", c, s, m) for c, m in groups))
    if not groups or not _has_data(series):
        return None
    fig = _figure(7.0, 4.4)
    ax = fig.subplots()
    one = len(cases) == 1

    def label(case: str, metric: str) -> str:
        pct = metric.removesuffix(" ms")
        return pct if one else f"{case}\n{pct}"

    grouped_bars(ax, [label(c, m) for c, m in groups], series)
    ax.set_ylabel("end-to-end latency, ms")
    ax.set_xlabel("percentile (max = the slowest record)")
    ax.legend(loc="best")
    at = f" at {cases[0]}" if one else ""
    fig.suptitle(f"End-to-end latency{at}: Kafka broker vs Millrace broker\n(ms, lower is better)")
    return fig


def partitions(run: Run) -> Figure | None:
    """Workload 6a: produce records/s against the topic's partition count, legend = broker."""
    cases = run.cases("6a")
    if not cases:
        return None
    xs = [int(c.split()[0].replace(",", "")) for c in cases]
    rates = {s: [run.median("6a", c, s, "records/s") for c in cases] for s in SYSTEMS}
    # Per partition count, the higher point's label goes above it and the lower's below.
    tops = {x: [r[i] or 0.0 for r in rates.values()] for i, x in enumerate(xs)}
    fig = _figure(7.0, 4.4)
    ax = fig.subplots()
    for system, ys in rates.items():
        pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
        if not pts:
            continue
        px, py = zip(*pts, strict=True)
        ax.plot(px, py, marker="o", label=f"{system} broker", color=BROKER_COLORS[system])
        for x, y in pts:
            above = y >= max(tops[x])
            ax.annotate(
                short(y),
                (x, y),
                textcoords="offset points",
                xytext=(0, 7 if above else -8),
                ha="center",
                va="bottom" if above else "top",
                fontsize=8,
                color=BROKER_COLORS[system],
            )
    ax.set_xscale("log")
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.minorticks_off()
    ax.set_ylim(0, max(max(t) for t in tops.values()) * 1.15)
    ax.yaxis.set_major_formatter(FuncFormatter(_tick))
    ax.set_xlabel("partitions in the topic (log scale)")
    ax.set_ylabel("records/s (kafka-producer-perf-test, acks=1)")
    ax.legend(loc="lower left")
    ax.grid(alpha=0.3)
    fig.suptitle(
        "Produce rate by partition count: Kafka broker vs Millrace broker\n"
        "(records/s, higher is better)"
    )
    return fig


# --- the Spark plots -----------------------------------------------------------------------


def _spark_cases(run: Run) -> list[SparkCase]:
    return [SparkCase.of(c) for c in run.cases("5")]


def _connector_label(connector: str) -> str:
    return f"{connector}, Spark's own" if connector == SPARK_OWN else connector


def _read_kind_label(kind: str) -> str:
    """'stream, maxOffsetsPerTrigger=1,000,000' -> three short lines."""
    if kind == "count":
        return "count()"
    return kind.replace(", ", "\n").replace("=", "\n= ")


def _topic(run: Run) -> str:
    rows = run.context.get("args", {}).get("spark_records")
    size = f"{rows:,} rows, " if isinstance(rows, int) else ""
    return f"{size}{SPARK_PARTITIONS} partitions"


def spark_read(run: Run) -> Figure | None:
    """Workload 5's reads: format("millrace") beside format("kafka") per read kind (legend =
    connector), one panel per broker, the in-memory source's rate as a dashed ceiling."""
    cases = _spark_cases(run)
    reads = [c for c in cases if c.connector and not c.is_write]
    if not reads:
        return None
    kinds = _unique(c.kind for c in reads)
    connectors = sorted(_unique(c.connector for c in reads), key=lambda c: c != OURS)
    colors = {OURS: WRITER_COLORS[1], SPARK_OWN: WRITER_COLORS[0]}
    ceiling = next((c.case for c in cases if c.is_ceiling), None)
    panels = [
        (
            system,
            [
                Series(
                    _connector_label(conn),
                    colors.get(conn, WRITER_COLORS[-1]),
                    tuple(run.median("5", f"{k}: {conn}", system, "rows/s") for k in kinds),
                )
                for conn in connectors
            ],
        )
        for system in SYSTEMS
    ]
    panels = [(s, series) for s, series in panels if _has_data(series)]
    if not panels:
        return None
    fig = _figure(1.0 + 4.6 * len(panels), 5.0)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    top = 0.0
    for ax, (system, series) in zip(axes, panels, strict=True):
        grouped_bars(ax, [_read_kind_label(k) for k in kinds], series)
        ax.set_title(f"against the {system} broker", fontsize=10)
        top = max(top, *(v or 0.0 for s in series for v in s.values))
        limit = run.median("5", ceiling, system, "rows/s") if ceiling else None
        if limit is not None:
            draw_ceiling(ax, limit)
            top = max(top, limit)
    axes[0].set_ylim(0, top * 1.2)
    axes[0].set_ylabel("rows/s")
    fig.suptitle(
        f"Spark local[2] reading a topic ({_topic(run)}): {OURS} vs {SPARK_OWN}\n"
        "(rows/s, higher is better)"
    )
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels))
    return fig


def draw_ceiling(ax: Axes, rate: float) -> None:
    """The rate Spark reaches with no broker at all (counting an in-memory Arrow Python
    source), as a labelled dashed line; its gid is ``ceiling``."""
    line = ax.axhline(rate, color="black", linestyle="--", linewidth=1.2)
    line.set_gid("ceiling")
    ax.annotate(
        f"ceiling, no broker (in-memory Arrow source): {short(rate)}",
        (0.01, rate),
        xycoords=("axes fraction", "data"),
        textcoords="offset points",
        xytext=(0, 3),
        fontsize=8,
    )


def _writer_label(case: SparkCase) -> str:
    variant = case.kind.removeprefix("write").strip(" ,")
    if case.connector == SPARK_OWN:
        return _connector_label(case.connector) + (f", {variant}" if variant else "")
    if case.connector == OURS and not variant:
        return f"{OURS}, batch producer (default)"
    return f"{case.connector}, {variant}" if variant else case.connector


def spark_write(run: Run) -> Figure | None:
    """Workload 5's writes: one bar per writer (legend), grouped by the broker written to."""
    writes = sorted(
        (c for c in _spark_cases(run) if c.is_write and c.connector),
        key=lambda c: (c.connector != SPARK_OWN, c.kind != "write"),
    )
    series = [
        Series(
            _writer_label(c),
            WRITER_COLORS[min(i, len(WRITER_COLORS) - 1)],
            tuple(run.median("5", c.case, s, "rows/s") for s in SYSTEMS),
        )
        for i, c in enumerate(writes)
    ]
    if not series or not _has_data(series):
        return None
    fig = _figure(8.0, 5.0)
    ax = fig.subplots()
    grouped_bars(ax, [f"into the {s} broker" for s in SYSTEMS], series)
    ax.set_ylabel("rows/s (string key, 100-byte value)")
    fig.legend(loc="outside lower center", ncol=2)
    fig.suptitle(
        f"Spark local[2] writing a topic (df.write, {_topic(run)}): which writer is fastest?\n"
        "(rows/s, higher is better)"
    )
    return fig


def _spark_case_label(case: SparkCase) -> str:
    """'stream, maxOffsetsPerTrigger=1,000,000: format("kafka")' -> one line per part."""
    return "\n".join([*case.kind.split(", "), case.connector])


def spark_brokers(run: Run) -> Figure | None:
    """Every workload-5 case with a broker under it, the Kafka broker beside the Millrace
    broker (legend): does the broker matter to Spark?"""
    cases = [c for c in _spark_cases(run) if c.connector]
    series = _broker_series(lambda s: tuple(run.median("5", c.case, s, "rows/s") for c in cases))
    if not cases or not _has_data(series):
        return None
    fig = _figure(8.0, 1.3 + 0.72 * len(cases))
    ax = fig.subplots()
    grouped_bars(ax, [_spark_case_label(c) for c in cases], series, horizontal=True)
    ax.set_xlabel("rows/s")
    ax.legend(loc="best")
    fig.suptitle(
        "Spark local[2] on each broker: Kafka broker vs Millrace broker\n"
        "(same connector and job per row; rows/s, higher is better)"
    )
    return fig


PLOTS = (
    Plot(
        "throughput.png",
        "Produce and consume records/s: Kafka broker vs Millrace broker",
        throughput,
    ),
    Plot("latency.png", "End-to-end latency percentiles: Kafka broker vs Millrace broker", latency),
    Plot("spark-read.png", f"Spark reading a topic: {OURS} vs {SPARK_OWN}", spark_read),
    Plot("spark-write.png", "Spark writing a topic: each writer's rows/s", spark_write),
    Plot("spark-brokers.png", "Spark on the Kafka broker vs on the Millrace broker", spark_brokers),
    Plot(
        "partitions.png",
        "Produce records/s by partition count: Kafka broker vs Millrace broker",
        partitions,
    ),
)


def write_all(run: Run, directory: Path) -> list[Path]:
    """Save every plot the run has data for into ``directory``; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in PLOTS:
        fig = plot.build(run)
        if fig is None:
            continue
        path = directory / plot.file
        fig.savefig(path, dpi=DPI)
        written.append(path)
    return written


def markdown(written: Iterable[Path], base: Path) -> str:
    """The Markdown image lines for ``written``, relative to the directory ``base``."""
    alt = {p.file: p.alt for p in PLOTS}
    return "\n".join(f"![{alt.get(p.name, p.stem)}]({os.path.relpath(p, base)})" for p in written)
