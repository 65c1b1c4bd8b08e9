"""The faults and the scheduler that injects them, chosen at random from a seed.

Each fault kind is injected, held for a random time, then healed:

* ``kill-broker`` / ``kill-controller`` / ``kill-coordinator``: SIGKILL a broker (any; the
  controller; the coordinator of the workloads' group or transactional id), restarted when
  healed;
* ``pause-broker``: SIGSTOP a broker for longer than the ZooKeeper session timeout (it
  comes back still believing what it believed: a zombie leader), SIGCONT when healed;
* ``restart-zookeeper``: SIGKILL ZooKeeper, restarted when healed;
* ``partition-brokers``: cut one broker off from the other brokers (ZooKeeper and the
  clients still reach it);
* ``reject-brokers``: as ``partition-brokers``, but the cut resets connections (a firewall
  that rejects): requests across it are reset and new connections refused, as if nothing
  listened. The controller's idle watch connection carries no packet and sees nothing; a
  watch that reconnects during the cut takes the refusals for a dead process and fails the
  live broker over (a false report, docs/failover.md), to take it back after the cut;
* ``partition-zookeeper``: cut one broker off from ZooKeeper for longer than its session;
* ``partition-clients``: cut one broker off from the clients;
* ``lossy-link``: drop 30% of the packets between one broker and the others (a slow,
  flaky link);
* ``corrupt-segment``: SIGKILL a broker, then truncate its active segment of a workload
  partition mid-batch (a torn write) or flip a byte inside one of its batches, and restart
  it: recovery must cut the log at the first bad batch and the replica fetch the rest. Only
  a partition with another in-sync replica is damaged (one broker's disk fails; damage to
  the last in-sync replica loses acknowledged records in Kafka too).
* ``disk-full``: broker 3's second log directory (a small tmpfs the runner mounts when this
  kind is in the run) is filled with a ballast file: the directory goes offline (KIP-112),
  its partitions move, the broker keeps serving the rest; healed by removing the ballast
  and restarting the broker, as Kafka needs to bring a directory back.

Between faults the scheduler waits for every broker to be registered again. A broker
process that exits without having been killed is a crash: counted, its output kept, and
restarted.

Concurrency: the scheduler runs on the runner's main thread.
"""

from __future__ import annotations

import errno
import logging
import random
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.fault.cluster import FaultCluster
from tests.fault.workloads import CLIENT_SETTINGS

log = logging.getLogger("fault.faults")

KINDS = (
    "kill-broker",
    "kill-controller",
    "kill-coordinator",
    "pause-broker",
    "restart-zookeeper",
    "partition-brokers",
    "reject-brokers",
    "partition-zookeeper",
    "partition-clients",
    "lossy-link",
    "corrupt-segment",
    "disk-full",
)

SESSION_TIMEOUT_S = 6.0  # zookeeper.session.timeout.ms of the fault cluster


@dataclass
class FaultEvent:
    """One injected fault, as the report lists it."""

    number: int
    kind: str
    target: str
    at_s: float
    held_s: float
    note: str = ""
    recovered_s: float = 0.0


@dataclass
class Scheduler:
    """Injects ``count`` faults of ``kinds`` into ``cluster``, from ``seed``."""

    cluster: FaultCluster
    seed: int
    kinds: tuple[str, ...] = KINDS
    coordinator_keys: tuple[tuple[str, int], ...] = (("fault-group", 0), ("copier-0", 1))
    corrupt_topics: tuple[str, ...] = ()
    hold_scale: float = 1.0
    events: list[FaultEvent] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._damaged: tuple[str, int, int] | None = None  # (topic, partition, broker id)
        self.brokers = [f"b{b}" for b in self.cluster.broker_ids]

    # -- the loop --

    def run(self, count: int) -> None:
        for number in range(1, count + 1):
            kind = self.rng.choice(self.kinds)
            self.inject(number, kind)

    def inject(self, number: int, kind: str) -> FaultEvent:
        at = time.monotonic() - self.started
        t0 = time.monotonic()
        target, note = getattr(self, "_" + kind.replace("-", "_"))()
        event = FaultEvent(number, kind, target, round(at, 1), round(time.monotonic() - t0, 1))
        event.note = note
        t1 = time.monotonic()
        self.recover()
        if self._damaged is not None:
            self._wait_repaired(*self._damaged)
            self._damaged = None
        event.recovered_s = round(time.monotonic() - t1, 1)
        self.events.append(event)
        log.info("fault %d: %s %s (%s) held %.1fs", number, kind, target, note, event.held_s)
        return event

    def _hold(self, low: float, high: float) -> None:
        time.sleep(self.rng.uniform(low, high) * self.hold_scale)

    def recover(self, timeout_s: float = 90.0) -> None:
        """Restart whatever crashed on its own, then wait until every broker is registered."""
        self.cluster.topology.heal()
        for node in ["zk", *self.brokers]:
            if node in self.cluster.paused:
                self.cluster.signal(node, signal.SIGCONT)
            proc = self.cluster.procs.get(node)
            if proc is not None and proc.poll() is not None:
                self.crashes.append(f"{node} exited with {proc.returncode}")
                log.error("%s exited on its own with %s", node, proc.returncode)
                self.cluster.restart(node)
        if not self.cluster.wait_registered(self.cluster.broker_ids, timeout_s):
            log.warning("not every broker registered within %gs", timeout_s)

    def _pick_broker(self) -> str:
        return self.rng.choice(self.brokers)

    # -- fault kinds: each returns (target, note) after healing --

    def _kill(self, node: str, low: float = 0.5, high: float = 5.0) -> None:
        self.cluster.kill(node)
        self._hold(low, high)
        self.cluster.restart(node)

    def _kill_broker(self) -> tuple[str, str]:
        node = self._pick_broker()
        self._kill(node)
        return node, ""

    def _kill_controller(self) -> tuple[str, str]:
        controller = self.cluster.controller()
        node = f"b{controller}" if controller is not None else self._pick_broker()
        self._kill(node)
        return node, "controller" if controller is not None else "no controller: any broker"

    def _kill_coordinator(self) -> tuple[str, str]:
        key, key_type = self.rng.choice(self.coordinator_keys)
        coordinator = self.cluster.coordinator(key, key_type)
        node = f"b{coordinator}" if coordinator is not None else self._pick_broker()
        what = "transaction" if key_type else "group"
        self._kill(node)
        return node, f"{what} coordinator of {key}"

    def _pause_broker(self) -> tuple[str, str]:
        node = self._pick_broker()
        self.cluster.signal(node, signal.SIGSTOP)
        self._hold(SESSION_TIMEOUT_S + 1.0, SESSION_TIMEOUT_S + 5.0)
        self.cluster.signal(node, signal.SIGCONT)
        return node, "SIGSTOP past the ZooKeeper session timeout"

    def _restart_zookeeper(self) -> tuple[str, str]:
        self._kill("zk", 0.5, 4.0)
        return "zk", ""

    def _partition_brokers(self) -> tuple[str, str]:
        node = self._pick_broker()
        for other in self.brokers:
            if other != node:
                self.cluster.topology.cut(node, other)
        self._hold(3.0, 12.0)
        self.cluster.topology.heal()
        return node, "cut off from the other brokers"

    def _reject_brokers(self) -> tuple[str, str]:
        node = self._pick_broker()
        for other in self.brokers:
            if other != node:
                self.cluster.topology.reject(node, other)
        self._hold(3.0, 12.0)
        self.cluster.topology.heal()
        return node, "cut off from the other brokers by resets"

    def _partition_zookeeper(self) -> tuple[str, str]:
        node = self._pick_broker()
        self.cluster.topology.cut(node, "zk")
        self._hold(SESSION_TIMEOUT_S + 1.0, SESSION_TIMEOUT_S + 6.0)
        self.cluster.topology.heal()
        return node, "cut off from ZooKeeper past its session timeout"

    def _partition_clients(self) -> tuple[str, str]:
        node = self._pick_broker()
        self.cluster.topology.cut_from_clients(node)
        self._hold(2.0, 8.0)
        self.cluster.topology.heal()
        return node, "cut off from the clients"

    def _lossy_link(self) -> tuple[str, str]:
        node = self._pick_broker()
        for other in self.brokers:
            if other != node:
                self.cluster.topology.lossy(node, other, 0.3)
        self._hold(4.0, 10.0)
        self.cluster.topology.heal()
        return node, "30% packet loss to the other brokers"

    def _corrupt_segment(self) -> tuple[str, str]:
        node = self._pick_broker()
        broker_id = int(node[1:])
        # Only a replica another in-sync replica backs up: the fault is one broker's damaged
        # disk, which replication must survive. Damage to the last in-sync replica loses
        # acknowledged records in Kafka too (its guarantee assumes an in-sync replica that
        # keeps its log; KIP-966 is Kafka's answer, in KRaft mode).
        backed = self._backed_up_partitions(broker_id)
        self.cluster.kill(node)
        note = "no partition with another in-sync replica to corrupt"
        segments = []
        for topic, partition in backed:
            for d in self.cluster.log_dirs(broker_id):
                logs = sorted((d / f"{topic}-{partition}").glob("*.log"))
                if logs and logs[-1].stat().st_size > 200:
                    segments.append((logs[-1], topic, partition))  # the active segment
        if segments:
            segment, topic, partition = self.rng.choice(segments)
            note = corrupt(segment, self.rng)
            self._damaged = (topic, partition, broker_id)
        self._hold(0.2, 2.0)
        self.cluster.restart(node)
        return node, note

    def _wait_repaired(self, topic: str, partition: int, broker_id: int) -> None:
        """Wait until the damaged replica is in its partition's ISR again (replication has
        repaired it). Until then it is one failure away from being the only in-sync copy
        of records its recovery cut off (the controller counts a restarted broker in the
        ISR until its old session expires), a double fault Kafka does not survive either.

        Read from ZooKeeper: the partition state must name the broker in its ISR in a write
        made after the broker's new registration (the controller first takes the restarted
        broker out of the ISR; the leader adds it back once it has caught up)."""
        import json

        deadline = time.monotonic() + 120.0
        state_path = f"/brokers/topics/{topic}/partitions/{partition}/state"
        while time.monotonic() < deadline:
            if broker_id in self.cluster.registered():
                try:
                    zk = self.cluster._zk()
                except Exception:  # noqa: BLE001 - ZooKeeper not reachable yet
                    zk = None
                if zk is not None:
                    try:
                        _, reg = zk.get(f"/brokers/ids/{broker_id}")
                        data, st = zk.get(state_path)
                        if st.mzxid > reg.czxid and broker_id in json.loads(data)["isr"]:
                            return
                    except Exception:  # noqa: BLE001 - read again
                        pass
                    finally:
                        zk.stop()
                        zk.close()
            time.sleep(0.5)
        log.warning("%s-%d: broker %d not back in the ISR after 120 s", topic, partition, broker_id)

    def _backed_up_partitions(self, broker_id: int) -> list[tuple[str, int]]:
        """The workload partitions whose ISR holds ``broker_id`` and another broker."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap, **CLIENT_SETTINGS})
        try:
            md = admin.list_topics(timeout=10)
        except Exception:  # noqa: BLE001 - no metadata: nothing is known to be backed up
            return []
        out = []
        for topic in self.corrupt_topics:
            t = md.topics.get(topic)
            if t is None:
                continue
            for p in t.partitions.values():
                if broker_id in p.isrs and len(p.isrs) >= 2:
                    out.append((topic, p.id))
        return sorted(out)

    def _disk_full(self) -> tuple[str, str]:
        small = self.cluster.extra_log_dirs.get(3)
        if not small:
            return "b3", "no small log directory in this run"
        ballast = small[0] / BALLAST
        fill_up(ballast)
        self._hold(3.0, 8.0)
        ballast.unlink(missing_ok=True)
        self.cluster.kill("b3")
        self.cluster.restart("b3")
        return "b3", f"{small[0].name} filled, then freed and the broker restarted"


BALLAST = "ballast.bin"


def fill_up(path: Path) -> None:
    """Write zeros to ``path`` until its file system is full."""
    chunk = bytes(1 << 20)
    with path.open("ab", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise


def corrupt(segment: Path, rng: random.Random) -> str:
    """Truncate ``segment`` inside its last 20% (a torn tail) or flip one byte in it,
    past the first batch's header; returns what was done."""
    size = segment.stat().st_size
    low = max(61, int(size * 0.8))
    where = rng.randrange(low, size)
    if rng.random() < 0.5:
        with segment.open("r+b") as f:
            f.truncate(where)
        return f"{segment.parent.name}/{segment.name} truncated from {size} to {where} bytes"
    with segment.open("r+b") as f:
        f.seek(where)
        byte = f.read(1)
        f.seek(where)
        f.write(bytes([byte[0] ^ 0xFF]))
    return f"{segment.parent.name}/{segment.name}: byte {where} of {size} flipped"


def summary(events: list[FaultEvent]) -> list[dict[str, Any]]:
    return [asdict(e) for e in events]
