"""The EndToEndLatency benchmark reads the figures Kafka 3.9's tool prints (its format strings
are ``Avg latency: %.4f ms%n`` and ``Percentiles: 50th = %d, 99th = %d, 99.9th = %d%n``)
and refuses output without them."""

from __future__ import annotations

import pytest

from bench import e2e_tool

pytestmark = pytest.mark.unit

OUTPUT = """0\t1
1000\t0
Avg latency: 0.4123 ms
Percentiles: 50th = 0, 99th = 1, 99.9th = 3
"""


def test_the_tool_output_is_parsed() -> None:
    r = e2e_tool.parse("Millrace", OUTPUT)
    assert (r.system, r.avg_ms, r.p50_ms, r.p99_ms, r.p999_ms) == ("Millrace", 0.4123, 0, 1, 3)


def test_output_without_figures_stops_the_benchmark() -> None:
    with pytest.raises(SystemExit, match="printed no latencies"):
        e2e_tool.parse("Kafka", 'Topic "x" does not exist.\n')
