"""The benchmark plots (bench/plots.py, ``python -m bench.report --plots-only``): each PNG is
written from a saved run, and each plot's legend names the comparison it is about (brokers,
or Spark's connectors and writers), with the Spark read ceiling a line rather than a bar."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from matplotlib.axes import Axes
from matplotlib.legend import Legend
from matplotlib.patches import Rectangle

from bench import plots, report
from bench.procstat import Usage
from bench.results import Measurement, Run

pytestmark = pytest.mark.unit

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
READS = ("count", "noop write", "stream, maxOffsetsPerTrigger=1,000,000")
WRITES = ("write", "write exactly-once", "write, producer=librdkafka")
CEILING = "ceiling: count of an in-memory Arrow Python source (no broker)"
EXPECTED = (
    "throughput.png",
    "latency.png",
    "spark-read.png",
    "spark-write.png",
    "spark-brokers.png",
    "partitions.png",
)


def _run() -> Run:
    """A small run with every plotted workload: both brokers, Millrace's figures a bit
    higher, the ceiling at 6M rows/s on the Kafka run and 5M on the Millrace run."""
    run = Run(context={"args": {"spark_records": 10_000_000}})
    use = Usage(cpu_s=1.0, peak_rss_mib=50.0, seconds=2.0)
    for system, f in (("Kafka", 1.0), ("Millrace", 1.1)):

        def add(w: str, case: str, metrics: dict[str, float], system: str = system) -> None:
            run.add(Measurement.of(w, case, system, metrics, use))

        for w in ("1", "2", "3"):
            add(w, "confluent-kafka", {"records/s": 200_000 * f})
        add("4", "20,000 records/s", {"p50 ms": 0.3 * f, "p99 ms": 0.8, "max ms": 9.0})
        for i, kind in enumerate(READS):
            add("5", f'{kind}: format("millrace")', {"rows/s": (3 - i) * 1e6 * f})
            add("5", f'{kind}: format("kafka")', {"rows/s": 1.2e6 * f})
        for kind in WRITES:
            add("5", f'{kind}: format("millrace")', {"rows/s": 1.8e6 * f})
        add("5", 'write: format("kafka")', {"rows/s": 0.9e6 * f})
        add("5", CEILING, {"rows/s": 6e6 if system == "Kafka" else 5e6})
        for n in ("1", "10", "1,000"):
            add("6a", f"{n} partition(s)", {"records/s": 300_000 * f})
    return run


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _texts(legend: Legend | None) -> list[str]:
    assert legend is not None
    return [t.get_text() for t in legend.get_texts()]


def test_plots_only_writes_every_png_and_leaves_the_report_alone(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    _run().save(results)
    out = tmp_path / "BENCHMARKS.md"
    assert report.main(["--plots-only", str(results), "--out", str(out)]) == 0
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(EXPECTED)
    for name in EXPECTED:
        width, height = _png_size(tmp_path / name)
        assert 500 <= width <= 1500 and 300 <= height <= 1200, (name, width, height)
        assert (tmp_path / name).stat().st_size > 10_000, name


def test_spark_read_compares_connectors_under_a_ceiling_line() -> None:
    fig = plots.spark_read(_run())
    assert fig is not None
    assert _texts(fig.legends[0]) == ['format("millrace")', 'format("kafka"), Spark\'s own']
    axes: list[Axes] = list(fig.axes)
    assert [ax.get_title() for ax in axes] == [
        "against the Kafka broker",
        "against the Millrace broker",
    ]
    for ax, ceiling in zip(axes, (6e6, 5e6), strict=True):
        lines = [line for line in ax.get_lines() if line.get_gid() == "ceiling"]
        assert len(lines) == 1
        assert list(lines[0].get_ydata()) == [ceiling, ceiling]
        # Three read kinds times two connectors; the ceiling is not a bar.
        assert len(ax.patches) == 6
        bars = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert max(bar.get_height() for bar in bars) < ceiling
        assert ax.get_ylim()[1] > ceiling
        assert ax.get_xticklabels()[0].get_text() == "count()"


def test_spark_write_legend_is_the_writers_and_brokers_plots_name_brokers() -> None:
    run = _run()
    write = plots.spark_write(run)
    assert write is not None
    assert _texts(write.legends[0]) == [
        'format("kafka"), Spark\'s own',
        'format("millrace"), batch producer (default)',
        'format("millrace"), exactly-once',
        'format("millrace"), producer=librdkafka',
    ]
    for build in (plots.throughput, plots.latency, plots.spark_brokers, plots.partitions):
        fig = build(run)
        assert fig is not None
        assert _texts(fig.axes[0].get_legend()) == ["Kafka broker", "Millrace broker"], (
            build.__name__
        )
        assert "is better" in fig.get_suptitle()


def test_a_run_without_a_workload_skips_its_plot(tmp_path: Path) -> None:
    run = _run()
    run.measurements = [m for m in run.measurements if m.workload != "5"]
    written = plots.write_all(run, tmp_path)
    assert [p.name for p in written] == ["throughput.png", "latency.png", "partitions.png"]
    assert plots.markdown(written[:1], tmp_path.parent) == (
        f"![Produce and consume records/s: Kafka broker vs Millrace broker]"
        f"({tmp_path.name}/throughput.png)"
    )


def test_short_values_keep_three_significant_digits() -> None:
    assert [plots.short(v) for v in (3_549_631.9, 347_101.7, 44_076.2, 0.808)] == [
        "3.55M",
        "347k",
        "44.1k",
        "0.808",
    ]
