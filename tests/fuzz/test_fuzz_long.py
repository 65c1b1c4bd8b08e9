"""The long protocol fuzzing run of ``make fault`` (issue 17): at least
``MILLRACE_FUZZ_REQUESTS`` (default 1,000,000) fuzzed requests against one real broker, with
every invariant of tests/fuzz/session.py checked; the figures go to
``benchmarks/fuzz-long.json`` (or ``MILLRACE_FUZZ_REPORT``) and RELIABILITY.md.

The seed is ``MILLRACE_FUZZ_SEED`` or else drawn from the clock, and printed first, so a
failing run replays with ``MILLRACE_FUZZ_SEED=<seed>``.
"""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fuzz.runner import write_report
from tests.fuzz.session import FUZZ_PROPS, fuzz_session

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

REQUESTS = int(os.environ.get("MILLRACE_FUZZ_REQUESTS", "1000000"))
REPORT = Path(
    os.environ.get(
        "MILLRACE_FUZZ_REPORT",
        str(Path(__file__).resolve().parents[2] / "benchmarks" / "fuzz-long.json"),
    )
)

pytestmark = [
    pytest.mark.fault,
    pytest.mark.long,
    pytest.mark.timeout(max(600, REQUESTS // 200)),
    pytest.mark.cluster_config(FUZZ_PROPS),
]


def test_long_fuzz_run(cluster: Cluster) -> None:
    seed = int(os.environ.get("MILLRACE_FUZZ_SEED", str(int(time.time()) % 1_000_000)))
    print(f"fuzz long run: seed {seed} (replay with MILLRACE_FUZZ_SEED={seed})", flush=True)
    # not fail-fast: a long run reports every kind of failure it meets, not just the first
    report = fuzz_session(
        cluster, total=REQUESTS, seed=seed, progress_every=50_000, fail_fast=False
    )
    summary = report.summary()
    write_report(
        REPORT,
        report.stats,
        {
            "summary": summary,
            "problems": report.problems[:50],
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
            "socket.request.max.bytes": FUZZ_PROPS["socket.request.max.bytes"],
        },
    )
    print(f"fuzz long run (seed {seed}): {summary}", flush=True)
    assert not report.problems, "\n".join(report.problems[:10])
    assert summary["requests"] >= REQUESTS
