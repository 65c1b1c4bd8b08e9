"""The leaves of the benchmarks' import graph: the record every workload sends and the
progress line a phase rewrites on stderr while it runs.

This module imports nothing from ``bench`` (``tests/unit/test_bench_imports.py`` checks the
whole package for import cycles), so ``bench.common`` and ``bench.loadgen`` both import
from it without importing each other both ways.
"""

from __future__ import annotations

import sys

RECORD = b"x" * 100


def progress(text: str) -> None:
    """Overwrite the current stderr line with ``text`` (a phase's progress)."""
    sys.stderr.write(f"\r{text:<78}")
    sys.stderr.flush()
