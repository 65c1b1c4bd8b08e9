"""Millrace on several hosts (``docs/operations.md``, "Several hosts"): ZooKeeper, four
brokers and a client, each host a network namespace of its own with its own address
(``tests/fault/several_hosts.py`` runs it; this test checks its report).

Proves, with the ``millrace`` command as an operator runs it on each host:

* ``millrace broker start --config server.properties`` with ``listeners`` /
  ``advertised.listeners`` naming the host's address (or binding ``0.0.0.0`` and
  advertising the address), ``broker.rack`` and ``zookeeper.connect`` with a chroot
  (``<hosts>/millrace``, created by the brokers, nothing written outside it);
* every broker's Metadata gives clients the hosts' addresses and racks, never 127.0.0.1;
* from a client host: ``millrace topics create|describe|list`` and ``millrace groups
  list|describe`` with ``--bootstrap-server``, confluent-kafka producing with ``acks=all``
  and a consumer group reading everything back, a Spark job reading and writing with
  ``format("millrace")`` (and reading back what it wrote);
* rack-aware replica placement as Kafka does it: with a fourth broker in rack r1, every
  partition of a new topic has its replicas on distinct racks and the leaders are even;
* SIGTERM (the systemd unit's ``ExecStop``) stops each broker with a controlled shutdown
  that moves every leadership at once (a running broker then leads every partition), exit
  status 0.

Three ZooKeeper members (``millrace zookeeper start --config`` with ``server.N`` lines and
``myid``) when ``millrace zookeeper start`` has the ensemble options, else one;
``MILLRACE_SEVERAL_HOSTS_ZOOKEEPERS`` picks. The report's observations (printed) include the
placement of a topic auto-created through a broker that is not the controller, which is not
rack-aware yet.

Marker ``fault`` and ``long``: ``make fault`` runs it, ``make test`` does not. Without root,
network namespaces, ``ip`` or ``iptables`` it skips and says why. Every process of the run is
SIGKILLed by pid at teardown, whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fault.netns import namespaces_available
from tests.harness.processes import kill_pid, pids_mentioning

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.fault, pytest.mark.long, pytest.mark.integration]


def _zookeepers() -> int:
    """3 when ``millrace zookeeper start`` can run an ensemble member (``--id``, ``--server``),
    else 1; ``MILLRACE_SEVERAL_HOSTS_ZOOKEEPERS`` overrides."""
    forced = os.environ.get("MILLRACE_SEVERAL_HOSTS_ZOOKEEPERS")
    if forced:
        return int(forced)
    usage = subprocess.run(
        [str(Path(sys.executable).with_name("millrace")), "zookeeper", "start", "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    ).stdout
    return 3 if "--server" in usage and "--id" in usage else 1


@pytest.mark.timeout(1500)
def test_several_hosts(tmp_path: Path) -> None:
    reason = namespaces_available()
    if reason:
        pytest.skip(f"several hosts (network namespaces): {reason}")
    run_dir = tmp_path / "hosts"
    report_path = tmp_path / "report.json"
    zookeepers = _zookeepers()
    cmd = [
        sys.executable,
        "-m",
        "tests.fault.several_hosts",
        "--dir",
        str(run_dir),
        "--report",
        str(report_path),
        "--zookeepers",
        str(zookeepers),
    ]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    print(f"several hosts: {zookeepers} ZooKeeper node(s), run in {run_dir}", file=sys.stderr)
    with (tmp_path / "runner.out").open("wb") as out:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=1400)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            for pid in pids_mentioning(str(run_dir)):
                kill_pid(pid)
    output = (tmp_path / "runner.out").read_text(errors="replace")
    assert report_path.exists(), f"no report (rc {proc.returncode}):\n{output[-4000:]}"
    report = json.loads(report_path.read_text())
    print(json.dumps(report["timings"], indent=1), file=sys.stderr)
    print(json.dumps(report["observations"])[:4000], file=sys.stderr)
    assert "error" not in report, report["error"]
    failed = [c for c in report["checks"] if not c["ok"]]
    assert not failed, json.dumps(failed, indent=1)[:20000]
    names = " | ".join(c["name"] for c in report["checks"])
    for must in (
        "registered under /millrace",
        "Metadata advertises every host's address",
        "acks=all",
        "Spark wrote the topic",
        "racks-rf3: every partition's 3 replicas on 3 distinct racks",
        "broker 1 stops on SIGTERM with exit status 0",
    ):
        assert must in names, f"check {must!r} did not run: {names}"
