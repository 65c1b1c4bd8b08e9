"""The 10,000-partition scale point's report (bench/scale_partitions.py): each row is the
systems' medians in the right columns (a swapped column would publish a wrong comparison)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import scale_partitions
from bench.scale_partitions import Sample

pytestmark = pytest.mark.unit


def test_report_rows_are_each_systems_medians(tmp_path: Path) -> None:
    samples = [
        Sample("Kafka", 60.0, 0.10, 900.0, 10_100, 20.0, 25.0),
        Sample("Millrace", 30.0, 0.05, 300.0, 30_000, 1.0, 5.0),
        Sample("Kafka", 80.0, 0.30, 1100.0, 10_300, 22.0, 27.0),
        Sample("Millrace", 50.0, 0.07, 320.0, 30_200, 3.0, 7.0),
        Sample("Kafka", 70.0, 0.20, 1000.0, 10_200, 21.0, 26.0),
        Sample("Millrace", 40.0, 0.06, 310.0, 30_100, 2.0, 6.0),
    ]
    out = tmp_path / "BENCHMARKS.md"
    args = argparse.Namespace(partitions=10_000, seconds=30, settle=30, runs=3)
    scale_partitions.write_report(out, args, samples)
    rows = [
        line
        for line in out.read_text().splitlines()
        if line.startswith("| ") and "|---" not in line
    ]
    assert rows[1:] == [
        "| create + full ISR, s | 70.0 | 40.0 | **0.57** |",
        "| idle CPU per broker, % of a core | 20.0 | 6.0 | **0.30** |",
        "| RSS per broker (largest), MiB | 1,000 | 310 | **0.31** |",
        "| open files per broker (largest) | 10,200 | 30,100 | **2.95** |",
        "| controller SIGKILL: new controller, s | 21.0 | 2.0 | **0.10** |",
        "| controller SIGKILL: every partition led, s | 26.0 | 6.0 | **0.23** |",
    ]
