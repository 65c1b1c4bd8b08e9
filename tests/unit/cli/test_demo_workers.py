"""Which of Spark's Python processes the demo kills mid-write: the executors' task workers,
never the driver's planning or commit workers (killing the commit worker fails the batch,
which Spark does not retry). Real processes, laid out as Spark lays them out: a daemon per
worker module (``python -m pyspark.daemon <module>``) and workers forked from it, which keep
its command line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.cli.demo.spark_jobs import python_workers, task_workers

pytestmark = pytest.mark.unit

# A stand-in daemon: its argv names pyspark.daemon and a worker module (as Spark starts it),
# it forks one child (same command line) and both sleep until killed.
FAKE_DAEMON = """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
print(child, flush=True)
time.sleep(120)
"""


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[dict[str, tuple[int, int]]]:
    """``{module: (daemon pid, forked worker pid)}`` for the executors' worker module and two
    driver-side modules; every process is killed afterwards."""
    script = tmp_path / "fake.py"
    script.write_text(FAKE_DAEMON)
    started: dict[str, tuple[int, int]] = {}
    procs: list[subprocess.Popen[str]] = []
    try:
        for module in (
            "pyspark.worker",
            "pyspark.sql.worker.python_streaming_sink_runner",
            "pyspark.sql.worker.plan_data_source_read",
        ):
            proc = subprocess.Popen(
                [sys.executable, str(script), "pyspark.daemon", module],
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout is not None
            started[module] = (proc.pid, int(proc.stdout.readline()))
        time.sleep(0.2)  # the children's /proc entries are in place
        yield started
    finally:
        for daemon, child in started.values():
            for pid in (child, daemon):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in procs:
            proc.wait(timeout=10)


def test_only_the_executors_workers_are_task_workers(
    daemons: dict[str, tuple[int, int]],
) -> None:
    # this process may hold Spark's own workers too (a test session's SparkSession): only
    # the stand-ins are looked at
    root = os.getpid()
    forked = {child for _daemon, child in daemons.values()}
    started = {daemon for daemon, _child in daemons.values()}
    assert forked <= set(python_workers(root))  # every daemon's children, as before
    assert set(task_workers(root)) & (forked | started) == {daemons["pyspark.worker"][1]}
    # the daemons themselves are never candidates
    assert not started & set(python_workers(root))
