"""``make demo`` end to end (smaller): the embedded ZooKeeper from pyspark's jars and a
broker start, events go through and come back, the Spark streaming job counts them all
through ``format("millrace")``, and every process is stopped afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.processes import pid_alive, pids_mentioning

pytestmark = pytest.mark.integration


@pytest.mark.timeout(300)
def test_demo_runs_and_stops_everything(tmp_path: Path) -> None:
    run_dir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli.demo", "--run-dir", str(run_dir), "--records", "3000"],
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    try:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "every event was consumed back exactly once" in result.stdout
        assert "records consumed : 3,000" in result.stdout
        assert "every event is in the output exactly once" in result.stdout
        assert "the counts add up to all 3,000 events" in result.stdout
        assert "the Delta table holds all 3,000 events" in result.stdout
        info = json.loads((run_dir / "cluster" / "cluster.json").read_text())
        pids = [info.get("zookeeper_pid"), *(b.get("pid") for b in info["brokers"])]
        assert not [p for p in pids if isinstance(p, int) and pid_alive(p)], (
            "demo left processes running"
        )
        assert not pids_mentioning(str(run_dir)), "demo left processes running"
    finally:
        for pid in pids_mentioning(str(run_dir)):
            subprocess.run(["kill", "-9", str(pid)], check=False)
