"""Crash failover beside Apache Kafka: the unavailability after SIGKILL of a partition leader.

Issue 29 part 1 (design: ``docs/failover.md``). One 3-broker Millrace cluster
(``millrace cluster up``) and one 3-broker Apache Kafka 3.9.1 cluster in ZooKeeper mode (on
the same embedded ZooKeeper, chroot ``/apache-kafka``), the same broker settings: Kafka's
defaults (``zookeeper.session.timeout.ms=18000``, which the ZooKeeper of ``cluster up``,
tickTime ``CLUSTER_ZK_TICK_MS``, caps at 20 ticks) and ``auto.leader.rebalance.enable=false``.
Run one after the other (the idle cluster waits).

For each kill: a probe producer (``bench.cluster.Probe``: confluent-kafka, ``acks=all``,
idempotent, one record every 2 ms) writes to a 1-partition topic with RF=3 and
``min.insync.replicas=2``; once acknowledgements flow, the partition leader's process gets
SIGKILL (``os.kill`` by its pid; the *signal* time is taken just before). *Unavailability* =
the larger of (signal to the acknowledgement of the first record produced after it) and the
largest gap between two successive acknowledgements around the kill. Then the broker is
restarted (Millrace: ``cluster start-broker`` at once; Kafka: once its old registration is
gone, since Kafka refuses to start while it exists) and the ISR is complete again before the
next kill. ``--kills`` kills per system (20 in ``make bench``), p50/p99/max reported.

Results go to ``BENCHMARKS.md`` (section "Crash failover beside Apache Kafka"). Every
process started is stopped in a ``finally``.

Usage: ``python -m bench.failover [--kills 20] [--out BENCHMARKS.md] [--skip-kafka]``.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

from bench.basics import progress
from bench.cluster import PROBE_CONFIG, SEND_INTERVAL_S, Probe
from bench.common import ROOT, machine, millrace, replace_section
from bench.systems import KAFKA_VERSION, KafkaSystem, MillraceSystem
from broker.cli.cluster_process import CLUSTER_ZK_TICK_MS

HEADING = "## Crash failover beside Apache Kafka"
BROKERS = 3
SETTINGS = {
    "zookeeper.session.timeout.ms": "18000",
    "auto.leader.rebalance.enable": "false",
    "min.insync.replicas": "2",
}
WARM_UP_S = 0.5
AFTER_RECOVERY_S = 0.5
RECOVERY_TIMEOUT_S = 90.0


@dataclass(frozen=True, slots=True)
class Kill:
    victim: int
    first_ack_s: float
    max_gap_s: float
    leader_moved_s: float

    @property
    def unavailable_s(self) -> float:
        return max(self.first_ack_s, self.max_gap_s)


class Target:
    """What the kill loop needs of a system: pids, restart, its admin client."""

    def __init__(self, name: str, bootstrap: str) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def pid(self, broker_id: int) -> int:
        raise NotImplementedError

    def restart(self, broker_id: int) -> None:
        raise NotImplementedError


class MillraceTarget(Target):
    def __init__(self, system: MillraceSystem) -> None:
        super().__init__("Millrace", system.bootstrap)
        self.directory = system.directory

    def _info(self) -> dict[str, object]:
        return dict(json.loads((self.directory / "cluster.json").read_text()))

    def pid(self, broker_id: int) -> int:
        brokers = self._info()["brokers"]
        assert isinstance(brokers, list)
        return int(next(b["pid"] for b in brokers if int(b["id"]) == broker_id))

    def restart(self, broker_id: int) -> None:
        millrace(
            "cluster", "start-broker", "--dir", str(self.directory), "--broker", str(broker_id)
        )


class KafkaTarget(Target):
    def __init__(self, system: KafkaSystem, zk_connect: str) -> None:
        super().__init__("Apache Kafka", system.bootstrap)
        self.system = system
        self.zk_connect = zk_connect + "/apache-kafka"

    def pid(self, broker_id: int) -> int:
        return self.system.pids[broker_id]

    def restart(self, broker_id: int) -> None:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.zk_connect, timeout=10.0)
        zk.start(timeout=15)
        try:  # Kafka refuses to start while its previous registration exists
            while zk.exists(f"/brokers/ids/{broker_id}") is not None:
                time.sleep(0.2)
        finally:
            zk.stop()
            zk.close()
        self.system.restart(broker_id)


def create_topic(target: Target, topic: str) -> None:
    futures = target.admin.create_topics([NewTopic(topic, 1, BROKERS)])
    for f in futures.values():
        f.result(60)


def partition(target: Target, topic: str, timeout_s: float = 10.0) -> tuple[int, tuple[int, ...]]:
    md = target.admin.list_topics(topic=topic, timeout=timeout_s)
    p = md.topics[topic].partitions[0]
    return int(p.leader), tuple(int(r) for r in p.isrs)


def leader_moved(target: Target, topic: str, victim: int) -> bool:
    """Whether the cluster's metadata names a leader other than ``victim``."""
    try:
        leader, _isr = partition(target, topic, timeout_s=0.5)
    except Exception:  # noqa: BLE001 - no answer in time: not seen yet
        return False
    return leader >= 0 and leader != victim


def wait_full_isr(target: Target, topic: str) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            leader, isr = partition(target, topic)
            if leader >= 0 and len(isr) == BROKERS:
                return leader
        except Exception:  # noqa: BLE001 - metadata not there yet
            pass
        time.sleep(0.2)
    raise SystemExit(f"{target.name}: {topic} did not get its full ISR within 120 s")


def one_kill(target: Target, topic: str, run: int) -> Kill:
    leader = wait_full_isr(target, topic)
    probe = Probe(target.bootstrap, topic, f"{target.name}-{run}").start()
    try:
        deadline = time.perf_counter() + 30
        while not probe.acks and time.perf_counter() < deadline:
            time.sleep(0.01)
        if not probe.acks:
            raise SystemExit(f"{target.name}: no acknowledgement 30 s after the probe started")
        time.sleep(WARM_UP_S)
        pid = target.pid(leader)
        signalled = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        recovered = None
        moved = math.inf
        while (recovered is None or moved == math.inf) and (
            time.perf_counter() < signalled + RECOVERY_TIMEOUT_S
        ):
            time.sleep(0.01)
            recovered = probe.first_ack_sent_after(signalled)
            if moved == math.inf and leader_moved(target, topic, leader):
                moved = time.perf_counter() - signalled
        time.sleep(AFTER_RECOVERY_S)
    finally:
        stopped = time.perf_counter()
        probe.stop()
    window = [at for _, at in probe.acks if signalled - 1.0 <= at <= stopped]
    gaps = [b - a for a, b in itertools.pairwise([*window, stopped])]
    kill = Kill(
        victim=leader,
        first_ack_s=recovered - signalled if recovered is not None else math.inf,
        max_gap_s=max(gaps, default=0.0),
        leader_moved_s=moved,
    )
    failed = len(probe.failed) + max(probe.unflushed, 0)
    progress(
        f"  {target.name} kill {run + 1}: leader {leader}: unavailable "
        f"{kill.unavailable_s:.3f} s, leadership moved after {kill.leader_moved_s:.3f} s"
        f"{f', {failed} failed' if failed else ''}"
    )
    if failed:
        raise SystemExit(f"{target.name}: {failed} records not delivered: {probe.failed[:3]}")
    target.restart(leader)
    return kill


def kills(target: Target, count: int) -> list[Kill]:
    topic = f"failover-{int(time.time())}"
    create_topic(target, topic)
    out = []
    for run in range(count):
        out.append(one_kill(target, topic, run))
    wait_full_isr(target, topic)
    sys.stderr.write("\n")
    return out


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per system (20)")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--skip-kafka", action="store_true", help="Millrace only")
    args = parser.parse_args()
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    results: dict[str, list[Kill]] = {}
    with tempfile.TemporaryDirectory(prefix="millrace-failover-") as tmp:
        millrace_system = MillraceSystem(Path(tmp) / "millrace", BROKERS, SETTINGS)
        kafka_system: KafkaSystem | None = None
        try:
            progress(f"Millrace: {args.kills} SIGKILLs of the leader")
            results["Millrace"] = kills(MillraceTarget(millrace_system), args.kills)
            if not args.skip_kafka:
                kafka_system = KafkaSystem(
                    Path(tmp) / "kafka", BROKERS, millrace_system.zk_connect, SETTINGS
                )
                progress(f"Apache Kafka {KAFKA_VERSION}: {args.kills} SIGKILLs of the leader")
                target = KafkaTarget(kafka_system, millrace_system.zk_connect)
                results[f"Apache Kafka {KAFKA_VERSION}"] = kills(target, args.kills)
        finally:
            if kafka_system is not None:
                kafka_system.stop()
            millrace_system.stop()
    write_report(args.out, args, results)
    progress(f"wrote {args.out}")
    return 0


def write_report(out: Path, args: argparse.Namespace, results: dict[str, list[Kill]]) -> None:
    rows = []
    for name, ks in results.items():
        for what, values in (
            ("leadership moved", [k.leader_moved_s for k in ks]),
            ("producer unavailable", [k.unavailable_s for k in ks]),
        ):
            rows.append(
                f"| {name} | {what} | {len(ks)} | {quantile(values, 0.5):.3f} "
                f"| {quantile(values, 0.99):.3f} | {max(values):.3f} "
                f"| {statistics.mean(values):.3f} |"
            )
    each = []
    for name, ks in results.items():
        each.append(
            f"* {name}: " + ", ".join(f"{k.leader_moved_s:.2f}/{k.unavailable_s:.2f}" for k in ks)
        )
    settings = ", ".join(f"`{k}={v}`" for k, v in SETTINGS.items())
    probe = ", ".join(f"`{k}={str(v).lower()}`" for k, v in PROBE_CONFIG.items())
    section = f"""{HEADING}

`python -m bench.failover --kills {args.kills}`, run {datetime.date.today().isoformat()} on:
{machine()}. Three Millrace brokers (`millrace cluster up`), then three Apache Kafka
{KAFKA_VERSION} brokers (ZooKeeper mode) on the same ZooKeeper, all on 127.0.0.1, the same
broker settings: {settings} (Kafka's default session timeout; the ZooKeeper of `cluster up`
has tickTime {CLUSTER_ZK_TICK_MS} ms and caps sessions at 20 ticks,
{20 * CLUSTER_ZK_TICK_MS / 1000:g} s, for both). confluent-kafka
{confluent_kafka.__version__} probe: one record every {SEND_INTERVAL_S * 1000:g} ms to a
1-partition topic with RF=3, {probe}. The partition's leader gets SIGKILL; **unavailability**
= the larger of (signal to the acknowledgement of the first record produced after it) and
the largest gap between successive acknowledgements; the broker is restarted and the ISR is
complete before the next kill (Kafka's only once its old registration expired: it refuses to
start before). **Leadership moved** = signal to the first Metadata answer (polled every 10 ms
through the admin client) naming another leader. No record failed in any run (checked).
Seconds:

| system | measure | kills | p50 | p99 | max | mean |
|---|---|---:|---:|---:|---:|---:|
{chr(10).join(rows)}

Each kill (leadership moved / producer unavailable, seconds):
{chr(10).join(each)}

Millrace's controller holds an idle connection to every broker; a dead process's port refuses
connections, and the controller fences the broker at once (`docs/failover.md`). Kafka in
ZooKeeper mode waits for the broker's session to expire. What the producer sees after the
leadership moved is the client's own recovery: librdkafka's idempotent producer drains the
partition's in-flight requests to the dead leader and sometimes resumes only at its next
metadata refresh, about 1 s later (seen in its debug log: "wait for outstanding requests to
finish before producing to new leader", then "applying leader-id update -1 -> 2" 1.0 s later);
Kafka's clients see the same after Kafka's failover (about 1.8 s from the leader's move to the
first acknowledgement on both systems). The victim was whichever broker led the partition, the
controller included when it did: the other brokers find a dead controller's process the same
way and elect a new controller at once (`docs/failover.md`).
"""
    replace_section(out, HEADING, section)


if __name__ == "__main__":
    sys.exit(main())
