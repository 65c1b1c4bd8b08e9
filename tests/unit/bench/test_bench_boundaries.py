"""``bench.boundaries``' report: every measure in the table, the cost as how much lower the
rate with boundaries is, the shuffle's cost beside the plain exactly-once write."""

from __future__ import annotations

import argparse

import pytest

from bench import boundaries

pytestmark = pytest.mark.unit


def test_the_report_names_every_measure_and_its_cost() -> None:
    args = argparse.Namespace(
        records=1_000_000, partitions=4, max_offsets=250_000, small=20_000, runs=3
    )
    rates = {
        "write-large-on": [95.0, 100.0, 90.0],
        "write-large-off": [100.0, 100.0, 100.0],
        "write-small-on": [80.0],
        "write-small-off": [100.0],
        "read-boundary": [99.0],
        "read-none": [100.0],
        "table-boundary": [50.0],
        "table-none": [50.0],
        "dfwrite-plain": [200.0],
        "dfwrite-shuffled": [150.0],
    }
    text = boundaries.report(args, rates)
    assert text.startswith(boundaries.HEADING)
    assert "| exactly-once streaming write, 4 micro-batches of 250,000 | 95 | 100 | +5.0% |" in text
    assert (
        "| exactly-once streaming write, 50 micro-batches of 20,000 | 80 | 100 | +20.0% |" in text
    )
    assert "| batch read of the output (count) | 99 | 100 | +1.0% |" in text
    assert "| readAs=table read of the output (count) | 50 | 50 | +0.0% |" in text
    assert "| repartitioned by key into 4 partitions first | 150 (+25.0%) |" in text
