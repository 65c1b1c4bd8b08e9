"""The start-up memory benchmark's pure parts (bench/startup_memory.py): the recovery point
it reads from the broker's checkpoint, and the report's rows (a swapped before/after column
would publish a wrong comparison); and ``make bench`` runs it."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import startup_memory
from bench.startup_memory import STARTS, Sample

pytestmark = pytest.mark.unit


def test_recovery_point_of_the_large_partition(tmp_path: Path) -> None:
    (tmp_path / "recovery-point-offset-checkpoint").write_text(
        f"0\n3\nother 0 7\n{startup_memory.BIG_TOPIC} 1 9\n{startup_memory.BIG_TOPIC} 0 1234\n"
    )
    assert startup_memory._recovery_point(tmp_path) == 1234


def _args(baseline: Path | None) -> argparse.Namespace:
    return argparse.Namespace(
        topics=3,
        log_mb=100,
        groups=20,
        unflushed_mb=50,
        grace=5.0,
        settle=60.0,
        runs=2,
        baseline=baseline,
        baseline_label="abc123",
    )


def _samples() -> list[Sample]:
    out = []
    for run in range(2):
        for start in STARTS:
            out.append(Sample("baseline", start, 250.0 + run * 2, 66.0, 250.0, 12.0, 50.0))
            out.append(Sample("this tree", start, 48.0 + run * 2, 48.0, 49.0, 12.0, 50.0))
    return out


def test_report_puts_the_baseline_before_this_tree(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    startup_memory.write_report(out, _args(Path("/old")), _samples())
    rows = [line for line in out.read_text().splitlines() if line.startswith("| empty")]
    assert rows == ["| empty, first start | 251 | 66 | **3.80x** | 49 | 48 | **1.02x** | 49 | 12 |"]
    assert "`abc123`" in out.read_text()


def test_report_without_a_baseline(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    samples = [s for s in _samples() if s.tree == "this tree"]
    startup_memory.write_report(out, _args(None), samples)
    text = out.read_text()
    assert text.count(startup_memory.HEADING) == 1
    rows = [line for line in text.splitlines() if line.startswith("| with data")]
    assert rows == [
        "| with data, clean restart | 49 | 48 | **1.02x** | 49 | 12 |",
        "| with data, after SIGKILL | 49 | 48 | **1.02x** | 49 | 12 |",
    ]


def test_make_bench_runs_it() -> None:
    makefile = (startup_memory.ROOT / "Makefile").read_text()
    assert "-m bench.startup_memory" in makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
