"""Consumer-group benchmark (the consumer-groups issue's targets): rebalance time after a
member leaves, and OffsetCommit throughput on one coordinator.

Starts one 3-broker Millrace cluster (``millrace cluster up --brokers 3``) with
``group.initial.rebalance.delay.ms=0``, ``offsets.topic.num.partitions=50`` and
``offsets.topic.replication.factor=3``, then measures with confluent-kafka on 127.0.0.1:

1. Rebalance after a clean leave: three consumers (one thread each, polling every 50 ms) in
   one group subscribed to a 6-partition RF=3 topic, ``heartbeat.interval.ms=100``,
   eager ``range`` assignment. Once all three hold their partitions, one member calls
   ``close()`` (which sends LeaveGroup); *rebalance time* = from the ``close()`` call until
   both remaining members have received their new assignment (their ``on_assign`` callbacks,
   covering all 6 partitions), i.e. LeaveGroup to Stable as the clients see it. A new third
   member joins before the next of ``--rebalances`` runs; the median is reported.
2. OffsetCommit throughput: ``--threads`` threads, each with its own consumer in one group
   (no subscription: simple commits, generation -1), call
   ``commit(offsets=[...], asynchronous=False)`` in a loop for ``--commit-seconds`` seconds,
   each on its own partition with an increasing offset; *commits/s* = acknowledged
   OffsetCommit requests per second (``__consumer_offsets`` has RF=3 and a commit is
   acknowledged once replicated, like acks=all). The committed offsets are read back.

Results go to ``BENCHMARKS.md`` (section "Consumer groups") through the shared section
writer. Every process started is stopped (``cluster down`` in a ``finally``).

Usage: ``python -m bench.groups [--rebalances 5] [--commit-seconds 20] [--threads 4]
[--out BENCHMARKS.md]`` (``make bench`` runs the defaults, ``make bench-quick`` a reduced
version into /tmp).
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, TopicPartition

from bench.basics import progress
from bench.common import ROOT, machine, millrace, replace_section, start_cluster

HEADING = "## Consumer groups"
BROKERS = 3
CLUSTER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
}
PARTITIONS = 6
POLL_S = 0.05
# The group members' client settings (reported verbatim).
MEMBER_CONFIG: dict[str, Any] = {
    "partition.assignment.strategy": "range",
    "heartbeat.interval.ms": 100,
    "session.timeout.ms": 6000,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
}
STABLE_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- rebalance


class Member:
    """One group consumer polling in its own thread (the thread owns the consumer); records
    each ``on_assign`` (time, partitions). :meth:`leave` makes the thread call ``close()``
    and returns the moment it did."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.assigned: list[tuple[float, frozenset[int]]] = []
        self.current: frozenset[int] = frozenset()
        self.errors: list[str] = []
        self._leave = threading.Event()
        self._closing_at = 0.0
        self._closed = threading.Event()
        self._conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            **MEMBER_CONFIG,
            "error_cb": lambda err: self.errors.append(str(err)),
        }
        self._topic = topic
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _on_assign(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.current = frozenset(p.partition for p in parts)
        self.assigned.append((time.perf_counter(), self.current))

    def _on_revoke(self, _c: Consumer, _parts: list[TopicPartition]) -> None:
        self.current = frozenset()

    def _run(self) -> None:
        c = Consumer(self._conf)
        c.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        while not self._leave.is_set():
            c.poll(POLL_S)
        self._closing_at = time.perf_counter()
        c.close()
        self._closed.set()

    def leave(self) -> float:
        self._leave.set()
        self._closed.wait(30)
        return self._closing_at

    def assigned_after(self, t: float) -> float | None:
        """Time of the first ``on_assign`` after ``t`` if the member holds partitions now."""
        times = [ts for ts, _ in self.assigned if ts > t]
        return times[0] if times and self.current else None


def wait_stable(members: list[Member], timeout_s: float = STABLE_TIMEOUT_S) -> None:
    """Until every member holds partitions and together they hold all of them, disjointly."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        held = [m.current for m in members]
        if (
            all(held)
            and sum(map(len, held)) == PARTITIONS
            and len(frozenset().union(*held)) == PARTITIONS
        ):
            return
        time.sleep(0.02)
    raise SystemExit(
        f"group not stable in {timeout_s:.0f} s: {[sorted(m.current) for m in members]}"
    )


@dataclass(slots=True)
class Rebalance:
    seconds: float
    each: list[float]  # per remaining member, seconds from close() to its on_assign


def measure_rebalances(bootstrap: str, topic: str, runs: int) -> list[Rebalance]:
    group = "bench-rebalance"
    members = [Member(bootstrap, group, topic, f"member-{i}") for i in range(3)]
    made = 3
    results: list[Rebalance] = []
    try:
        for run in range(runs):
            wait_stable(members)
            time.sleep(0.5)  # let every member settle into heartbeating
            leaver = members.pop(0)
            t0 = leaver.leave()
            deadline = time.monotonic() + STABLE_TIMEOUT_S
            while True:
                seen = [m.assigned_after(t0) for m in members]
                held = [m.current for m in members]
                if all(s is not None for s in seen) and len(frozenset().union(*held)) == PARTITIONS:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"no rebalance within {STABLE_TIMEOUT_S:.0f} s after leave")
                time.sleep(0.001)
            each = [s - t0 for s in seen if s is not None]
            results.append(Rebalance(max(each), each))
            progress(f"  rebalance {run + 1}/{runs}: {max(each) * 1000:.0f} ms")
            sys.stderr.write("\n")
            members.append(Member(bootstrap, group, topic, f"member-{made}"))
            made += 1
    finally:
        for m in members:
            m.leave()
    return results


# --------------------------------------------------------------------------- commits


@dataclass(slots=True)
class Commits:
    seconds: float = 0.0
    ok: int = 0
    failed: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    verified: bool = False

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def measure_commits(bootstrap: str, topic: str, threads: int, seconds: float) -> Commits:
    group = "bench-commits"
    result = Commits()
    lock = threading.Lock()
    last: dict[int, int] = {}
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def worker(i: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"c{i}"})
        part = i % PARTITIONS
        # warm up: coordinator lookup and connection
        c.commit(offsets=[TopicPartition(topic, part, 0)], asynchronous=False)
        ok = failed = 0
        lats: list[float] = []
        errs: list[str] = []
        offset = 0
        start.wait()
        while not stop.is_set():
            offset += 1
            t = time.perf_counter()
            try:
                c.commit(offsets=[TopicPartition(topic, part, offset)], asynchronous=False)
            except KafkaException as e:
                failed += 1
                errs.append(str(e))
                continue
            lats.append(time.perf_counter() - t)
            ok += 1
            last[part] = offset
        c.close()
        with lock:
            result.ok += ok
            result.failed += failed
            result.latencies += lats
            result.errors += errs[:3]

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        time.sleep(0.5)
        progress(f"  committing: {time.perf_counter() - t0:.0f}/{seconds:.0f} s")
    stop.set()
    result.seconds = time.perf_counter() - t0
    for t in ts:
        t.join(60)
    sys.stderr.write("\n")
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    got = checker.committed([TopicPartition(topic, p) for p in last], timeout=10)
    checker.close()
    result.verified = all(tp.offset == last[tp.partition] for tp in got)
    return result


def coordinator_of(bootstrap: str, group: str) -> str:
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})
        desc = admin.describe_consumer_groups([group])[group].result(timeout=10)
        return f"broker {desc.coordinator.id}"
    except Exception as e:  # noqa: BLE001 - informational only
        return f"unknown ({e})"


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rebalances", type=int, default=5)
    ap.add_argument("--commit-seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = ap.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="millrace-bench-groups-") as tmp:
        cluster_dir = Path(tmp) / "cluster"
        sys.stderr.write(f"starting a {BROKERS}-broker cluster in {cluster_dir}\n")
        try:
            bootstrap = start_cluster(cluster_dir, BROKERS, CLUSTER_SETTINGS)
            sys.stderr.write(f"cluster up: {bootstrap}\n")
            topic = "bench-groups"
            millrace(
                "topics", "create", "--bootstrap-server", bootstrap, "--topic", topic,
                "--partitions", str(PARTITIONS), "--replication-factor", str(BROKERS),
            )  # fmt: skip
            sys.stderr.write(f"rebalances ({args.rebalances}):\n")
            rebalances = measure_rebalances(bootstrap, topic, args.rebalances)
            sys.stderr.write(f"commits ({args.threads} threads, {args.commit_seconds:g} s):\n")
            commits = measure_commits(bootstrap, topic, args.threads, args.commit_seconds)
            coordinator = coordinator_of(bootstrap, "bench-commits")
            sys.stderr.write(
                f"  {commits.ok:,} commits acknowledged, {commits.rate:,.0f}/s "
                f"({commits.failed} failed), coordinator {coordinator}\n"
            )
        finally:
            sys.stderr.write("stopping the cluster\n")
            millrace("cluster", "down", "--dir", str(cluster_dir))
    write_report(Path(args.out), args, rebalances, commits, coordinator)
    sys.stderr.write(f"wrote {args.out} ({time.monotonic() - started:.0f} s in all)\n")
    return 0


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def write_report(
    out: Path,
    args: argparse.Namespace,
    rebalances: list[Rebalance],
    commits: Commits,
    coordinator: str,
) -> None:
    cluster = ", ".join(f"`{k}={v}`" for k, v in CLUSTER_SETTINGS.items())
    member = ", ".join(f"`{k}={str(v).lower()}`" for k, v in MEMBER_CONFIG.items())
    med = statistics.median(r.seconds for r in rebalances)
    each = ", ".join(f"{r.seconds * 1000:.0f}" for r in rebalances)
    lats = commits.latencies or [0.0]
    command = (
        f".venv/bin/python -m bench.groups --rebalances {args.rebalances} "
        f"--commit-seconds {args.commit_seconds:g} --threads {args.threads}"
    )
    section = f"""{HEADING}

Three brokers and ZooKeeper on 127.0.0.1 (`millrace cluster up --brokers 3`, broker settings
{cluster}), confluent-kafka {confluent_kafka.__version__} (librdkafka
{confluent_kafka.libversion()[0]}) as the client, run {datetime.date.today().isoformat()} on:
{machine()}. Clients, brokers and ZooKeeper share the machine.

| measure | result | runs |
|---|---:|---|
| rebalance after a clean leave (close() → both remaining members assigned) | **{med * 1000:.0f} ms** (median) | {each} ms |
| OffsetCommit throughput, one coordinator ({coordinator}), {args.threads} threads | **{commits.rate:,.0f} commits/s** | {commits.ok:,} acknowledged in {commits.seconds:.1f} s, {commits.failed} failed |

Rebalance: three consumers in one group (one thread each, `poll` every {POLL_S * 1000:.0f} ms)
subscribed to a {PARTITIONS}-partition RF=3 topic; one calls `close()` (LeaveGroup), and the
time runs until both remaining members' `on_assign` callbacks have delivered the new
assignment covering all {PARTITIONS} partitions (LeaveGroup to Stable as the clients see it;
the remaining members learn of the rebalance from a heartbeat response, then rejoin and sync).
A new third member joins before each of the {args.rebalances} runs. Member settings: {member}.

Commits: {args.threads} threads, each with its own consumer in one group (no subscription:
simple commits, generation -1), each committing one offset of its own partition with
`commit(offsets=[...], asynchronous=False)` back to back for {args.commit_seconds:g} s;
`__consumer_offsets` has RF=3 and a commit is acknowledged once replicated (like acks=all).
Commit latency: median {statistics.median(lats) * 1000:.1f} ms, p99 {_pct(lats, 0.99) * 1000:.1f} ms.
Committed offsets read back afterwards {"match" if commits.verified else "DO NOT match"} the last
acknowledged ones.

Reproduce: `{command}` (`make bench` runs it with these values; `make bench-quick` a reduced
version into /tmp).
"""
    replace_section(out, HEADING, section)


if __name__ == "__main__":
    raise SystemExit(main())
