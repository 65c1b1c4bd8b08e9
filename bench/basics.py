"""The leaves of the benchmarks' import graph: the record every workload sends, the
progress line a phase rewrites on stderr while it runs, and the median of samples that may
be none.

This module imports nothing from ``bench`` (``tests/unit/test_bench_imports.py`` checks the
whole package for import cycles), so ``bench.common`` and ``bench.loadgen`` both import
from it without importing each other both ways.
"""

from __future__ import annotations

import statistics
import sys

RECORD = b"x" * 100


def progress(text: str) -> None:
    """Overwrite the current stderr line with ``text`` (a phase's progress)."""
    sys.stderr.write(f"\r{text:<78}")
    sys.stderr.flush()


def median_or_nan(values: list[float]) -> float:
    """The median of ``values``; NaN when there are none (a report prints it as ``nan``)."""
    return statistics.median(values) if values else float("nan")
