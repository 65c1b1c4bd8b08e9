"""The Jepsen-style fault harness (``tests/fault/runner.py``) as tests: a 3-broker cluster
in a network of its own, the four workloads at once, faults from a seed, and the checkers;
a run passes when every anomaly count is 0 (no acknowledged record lost or duplicated, no
aborted read, no lost commit or skipped record, consumers agree on every offset...).

* ``test_quick_run`` (``make fault``, marker ``long``): one fault of six kinds in turn.
* ``test_fault_kind`` (``make fault``, marker ``long``): for each fault kind, a run of
  ``MILLRACE_FAULTS_PER_KIND`` faults (10 by default: 100 faults per workload over the ten
  kinds) with the seed ``MILLRACE_FAULT_SEED`` (random by default, printed); the reports go
  to ``reliability/faults/<kind>.json`` and ``python -m tests.fault.report`` turns them into
  ``RELIABILITY.md``'s table.

The runner runs as a child process inside a new network namespace; whatever it leaves
behind (a process of the run) is SIGKILLed by pid at teardown. Without root, network
namespaces or iptables, the tests skip and say why.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.fault.faults import KINDS
from tests.fault.netns import namespaces_available
from tests.harness.processes import kill_pid, pids_mentioning

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "reliability" / "faults"

pytestmark = [pytest.mark.fault, pytest.mark.integration]


def run_harness(
    run_dir: Path,
    *,
    seed: int,
    faults: int,
    kinds: list[str],
    cycle: bool,
    timeout_s: float,
    security: str | None = None,
) -> dict[str, Any]:
    reason = namespaces_available()
    if reason:
        pytest.skip(f"fault harness: {reason}")
    report_path = run_dir / "report.json"
    run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "tests.fault.runner",
        "--dir",
        str(run_dir / "cluster"),
        "--seed",
        str(seed),
        "--faults",
        str(faults),
        "--kinds",
        ",".join(kinds),
        "--report",
        str(report_path),
    ]
    if cycle:
        cmd.append("--cycle")
    if security:
        cmd += ["--security", security]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    print(f"fault harness: seed {seed}, {faults} faults of {kinds}", file=sys.stderr)
    with (run_dir / "runner.out").open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            for pid in pids_mentioning(str(run_dir / "cluster")):
                kill_pid(pid)
            _unmount_under(run_dir)
    output = (run_dir / "runner.out").read_text(errors="replace")
    assert report_path.exists(), (
        f"the runner wrote no report (rc {proc.returncode}):\n{output[-4000:]}"
    )
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert "error" not in report, report["error"]
    return report


def _check(report: dict[str, Any], faults: int) -> None:
    assert report["faults_injected"] == faults
    assert report["isr_whole_at_end"], "the cluster did not heal: some ISR is still short"
    assert not report["broker_crashes"], report["broker_crashes"]
    assert report["anomalies"] == {}, json.dumps(report["anomalies"], indent=1)
    for name, counts in report["workloads"].items():  # each workload really ran
        done = counts.get("acknowledged") or counts.get("records_read") or 0
        done = done or counts.get("commits_acknowledged") or counts.get("transactions_committed")
        assert done, f"workload {name} did nothing: {counts}"


def _unmount_under(directory: Path) -> None:
    """Unmount whatever a killed runner left mounted under ``directory`` (its small disk)."""
    for line in Path("/proc/mounts").read_text().splitlines():
        mount_point = line.split()[1]
        if mount_point.startswith(str(directory)):
            subprocess.run(["umount", "-l", mount_point], capture_output=True, check=False)


QUICK_KINDS = [
    "kill-controller",
    "pause-broker",
    "partition-zookeeper",
    "kill-coordinator",
    "restart-zookeeper",
    "corrupt-segment",
]


@pytest.mark.long
@pytest.mark.timeout(900)
def test_quick_run(tmp_path: Path) -> None:
    """Six faults, one of each of the kinds most likely to lose data, in turn (a long run:
    ``make fault`` runs it beside the runs of every kind; ``make test`` keeps the harness's
    own unit tests)."""
    report = run_harness(
        tmp_path, seed=17, faults=len(QUICK_KINDS), kinds=QUICK_KINDS, cycle=True, timeout_s=600
    )
    _check(report, len(QUICK_KINDS))


SECURED_KINDS = ["kill-broker", "pause-broker", "kill-controller"]


@pytest.mark.long
@pytest.mark.timeout(900)
def test_secured_quick_run(tmp_path: Path) -> None:
    """A short run on a SASL_SSL cluster (issue 28): replication, the controller's requests,
    transaction markers and every workload client over TLS with SCRAM, under ACLs."""
    report = run_harness(
        tmp_path,
        seed=28,
        faults=len(SECURED_KINDS),
        kinds=SECURED_KINDS,
        cycle=True,
        timeout_s=600,
        security="sasl_ssl",
    )
    _check(report, len(SECURED_KINDS))


@pytest.mark.long
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("kind", KINDS)
def test_fault_kind(tmp_path: Path, kind: str) -> None:
    faults = int(os.environ.get("MILLRACE_FAULTS_PER_KIND", "10"))
    seed = int(os.environ.get("MILLRACE_FAULT_SEED", str(random.randrange(2**31))))
    report = run_harness(
        tmp_path, seed=seed, faults=faults, kinds=[kind], cycle=False, timeout_s=1800
    )
    REPORTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(tmp_path / "report.json", REPORTS / f"{kind}.json")
    _check(report, faults)
