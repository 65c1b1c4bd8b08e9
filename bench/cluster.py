"""Cluster benchmark (the cluster issue's targets): replicated produce throughput and the
unavailability of a partition when its leader is killed or shut down.

Starts one 3-broker Millrace cluster (``millrace cluster up --brokers 3``) with
``zookeeper.session.timeout.ms=6000`` and ``auto.leader.rebalance.enable=false`` (so no
preferred-leader election moves a leader in the middle of a measurement), then measures with
confluent-kafka on 127.0.0.1:

1. Produce throughput: ``--records`` records of 100 bytes into a fresh 1-partition topic,
   ``acks=all``, ``enable.idempotence=true``, ``linger.ms=5``; RF=3 with
   ``min.insync.replicas=2`` against RF=1, alternating, ``--runs`` runs each (medians
   reported); the brokers' CPU is the three broker processes' CPU time over wall time.
2. Hard kill: an idempotent acks=all producer sends one record every 2 ms to a 1-partition
   RF=3 topic (``min.insync.replicas=2``); the partition's leader is killed with
   ``millrace cluster stop-broker --hard`` (SIGKILL); the killed broker is restarted and the
   partition's ISR is back to 3 replicas before the next of ``--kills`` kills.
3. The same with a controlled shutdown (``millrace cluster stop-broker``, SIGTERM).

For each kill, with *signal* = the moment ``stop-broker`` announces (on stderr, flushed
immediately before ``os.kill``) that it is sending the signal:

* *unavailability* = from the signal to the acknowledgement of the first record that was
  produced after the signal;
* *largest ack gap* = the largest interval between two successive acknowledgements, among
  acknowledgements from 1 s before the signal up to that first post-signal acknowledgement;
* what the client saw: delivery errors, client error callbacks and librdkafka debug lines
  (``debug=broker,topic,metadata,msg``) between the signal and recovery, classified.

Results go to ``BENCHMARKS.md`` (section "Cluster (3 brokers)") through the shared section
writer. Every process started is stopped (``cluster down`` in a ``finally``).

Usage: ``python -m bench.cluster [--records 1000000] [--runs 3] [--kills 3]
[--out BENCHMARKS.md] [--client-log FILE]`` (``make bench`` runs the defaults,
``make bench-quick`` a reduced version).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import logging
import math
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient

from bench.basics import progress
from bench.common import (
    ROOT,
    Phase,
    machine,
    millrace,
    produce,
    replace_section,
    start_cluster,
)
from broker.cli.cluster_process import CLUSTER_ZK_TICK_MS

HEADING = "## Cluster (3 brokers)"
BROKERS = 3
SESSION_TIMEOUT_MS = 6000
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "auto.leader.rebalance.enable": "false",
}
MIN_ISR = 2
SEND_INTERVAL_S = 0.002
WARM_UP_S = 1.0  # steady acknowledgements before the signal
FIRST_ACK_TIMEOUT_S = 30.0
AFTER_RECOVERY_S = 1.0
RECOVERY_TIMEOUT_S = 60.0
# The failover probe's client settings (reported verbatim).
PROBE_CONFIG: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 0,
    "message.timeout.ms": 120_000,
    "topic.metadata.refresh.fast.interval.ms": 50,
    "topic.metadata.refresh.interval.ms": 300_000,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 250,
    "reconnect.backoff.ms": 100,
    "reconnect.backoff.max.ms": 1000,
}
PROBE_DEBUG = "broker,topic,metadata,msg"
# librdkafka debug lines worth counting, by what they show.
CLIENT_EVENTS: dict[str, re.Pattern[str]] = {
    "NOT_LEADER_OR_FOLLOWER responses": re.compile(r"Not leader for partition|NOT_LEADER", re.I),
    "NOT_ENOUGH_REPLICAS responses": re.compile(r"NOT_ENOUGH_REPLICAS|not enough replicas", re.I),
    "connection failures/disconnects": re.compile(
        r"Connection refused|Disconnected|Connect to .* failed|transport failure", re.I
    ),
    "metadata requests": re.compile(r"Sent MetadataRequest|Request metadata|Requesting metadata"),
    "leader updates applied": re.compile(r"applying leader-id update"),
    "partition drains": re.compile(r"beginning partition drain"),
}
LEADER_UPDATE = re.compile(r"applying leader-id update -?\d+ -> (-?\d+)")


# --------------------------------------------------------------------------- cluster helpers


def broker_pids(cluster_dir: Path) -> list[int]:
    info = json.loads((cluster_dir / "cluster.json").read_text())
    return [int(b["pid"]) for b in info["brokers"] if b.get("pid")]


def create_topic(bootstrap: str, topic: str, rf: int, replicas: list[int] | None = None) -> None:
    """A 1-partition topic with ``rf`` replicas (``replicas`` in this order if given) and
    ``min.insync.replicas=2`` when ``rf`` allows it."""
    configs = ["--config", f"min.insync.replicas={MIN_ISR}"] if rf >= MIN_ISR else []
    if replicas:
        layout = ["--replica-assignment", ":".join(str(b) for b in replicas)]
    else:
        layout = ["--partitions", "1", "--replication-factor", str(rf)]
    millrace(
        "topics", "create", "--bootstrap-server", bootstrap, "--topic", topic, *layout, *configs
    )


@dataclass(frozen=True, slots=True)
class PartitionState:
    leader: int
    isr: tuple[int, ...]
    controller: int


def partition_state(admin: AdminClient, topic: str) -> PartitionState:
    md = admin.list_topics(topic, timeout=10)
    p = md.topics[topic].partitions[0]
    return PartitionState(int(p.leader), tuple(sorted(p.isrs)), int(md.controller_id))


def wait_full_isr(admin: AdminClient, topic: str, timeout_s: float = 120.0) -> PartitionState:
    """Until the partition has a leader and all 3 replicas in its ISR (per Metadata)."""
    deadline = time.monotonic() + timeout_s
    state = None
    while time.monotonic() < deadline:
        try:
            state = partition_state(admin, topic)
            if state.leader >= 0 and len(state.isr) == BROKERS:
                return state
        except confluent_kafka.KafkaException:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{topic}: ISR not back to {BROKERS} replicas in {timeout_s:.0f} s: {state}")


# --------------------------------------------------------------------------- throughput


def produce_all(bootstrap: str, topic: str, n: int, pids: list[int]) -> Phase:
    """``n`` records, acks=all, idempotent, linger.ms=5; CPU summed over ``pids``."""
    return produce(bootstrap, topic, n, pids, {"acks": "all", "enable.idempotence": True})


# --------------------------------------------------------------------------- failover


class _Capture(logging.Handler):
    """Keeps (time, message) of every librdkafka log line (served by the probe's poll)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.perf_counter(), record.getMessage()))


class Probe:
    """One record (value = its sequence number) every ``SEND_INTERVAL_S`` to partition 0 of
    ``topic`` from a thread; records the send time of each record, and the acknowledgement
    time (or error) of each delivery report. The thread owns the producer; the lists are
    appended by it only and read after :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, name: str) -> None:
        self.topic = topic
        self.sent: list[float] = []
        self.acks: list[tuple[int, float]] = []
        self.failed: list[tuple[int, str]] = []
        self.client_errors: list[tuple[float, str]] = []
        self.capture = _Capture()
        logger = logging.getLogger(f"bench.cluster.{name}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(self.capture)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                **PROBE_CONFIG,
                "debug": PROBE_DEBUG,
                "logger": logger,
                "error_cb": self._on_error,
            }
        )
        self.unflushed = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"probe-{name}", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        # one kind per message: without addresses, timings and suppression counts
        text = re.sub(r"\s*\(after .*\)|\S+:\d+/\d+:\s*", "", err.str())
        text = re.sub(r"ipv4#\S+", "<broker>", text)
        self.client_errors.append((time.perf_counter(), f"{err.name()}: {text.strip()}"))

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        now = time.perf_counter()
        seq = int(msg.value() or b"-1")
        if err is None:
            self.acks.append((seq, now))
        else:
            self.failed.append((seq, f"{err.name()}: {err.str()}"))

    def _run(self) -> None:
        next_send = time.perf_counter()
        seq = 0
        while not self._stop.is_set():
            try:
                self.producer.produce(
                    self.topic, str(seq).encode(), partition=0, on_delivery=self._on_delivery
                )
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.sent.append(time.perf_counter())
            seq += 1
            next_send += SEND_INTERVAL_S
            while (wait := next_send - time.perf_counter()) > 0:
                self.producer.poll(wait)
            if wait < -0.1:  # fell behind (e.g. a pause): do not burst to catch up
                next_send = time.perf_counter()
        self.unflushed = self.producer.flush(PROBE_CONFIG["message.timeout.ms"] / 1000)

    def start(self) -> Probe:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def first_ack_sent_after(self, t: float) -> float | None:
        """Ack time of the first acknowledged record sent after ``t`` (acks come in order)."""
        sent = self.sent
        for seq, at in list(self.acks):
            if sent[seq] > t:
                return at
        return None


@dataclass(frozen=True, slots=True)
class Outage:
    """One kill: times in seconds relative to the signal (``inf``: no recovery)."""

    victim: int
    new_leader: int
    controller: int
    first_ack_s: float
    max_gap_s: float
    max_latency_s: float
    leader_seen_s: float
    stop_s: float
    sent: int
    acked: int
    failed: int
    events: dict[str, int] = field(default_factory=dict)
    client_errors: tuple[str, ...] = ()

    @property
    def unavailable_s(self) -> float:
        """The figure compared with the target: the larger of the two measures."""
        return max(self.max_gap_s, self.first_ack_s)


class StopCommand:
    """``millrace cluster stop-broker`` (``--hard``: SIGKILL) in a thread, so the probe can be
    watched while the command waits for the process to exit. ``signalled`` is set at the
    perf_counter time the command announced the signal (its stderr line, flushed just
    before ``os.kill``); ``finished`` when it exited."""

    def __init__(self, cluster_dir: Path, broker: int, hard: bool) -> None:
        self.cmd = [sys.executable, "-m", "broker.cli.main", "cluster", "stop-broker"]
        self.cmd += ["--dir", str(cluster_dir), "--broker", str(broker)]
        self.cmd += ["--hard"] if hard else []
        self.signalled: float | None = None
        self.finished: float | None = None
        self.returncode: int | None = None
        self.output: list[str] = []
        self.announced = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stop-broker", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        proc = subprocess.Popen(self.cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            if self.signalled is None and re.search(r"(killing|stopping) broker \d+ \(pid", line):
                self.signalled = time.perf_counter()
                self.announced.set()
            self.output.append(line)
        self.returncode = proc.wait()
        self.finished = time.perf_counter()
        self.announced.set()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self.returncode != 0 or self.signalled is None:
            raise SystemExit(f"stop-broker failed ({self.returncode}):\n{''.join(self.output)}")


def measure_kill(
    cluster_dir: Path,
    bootstrap: str,
    admin: AdminClient,
    topic: str,
    hard: bool,
    run: int,
    client_log: list[str],
) -> Outage:
    kind = "hard kill" if hard else "controlled shutdown"
    label = f"{kind} {run + 1}"
    before = wait_full_isr(admin, topic)
    probe = Probe(bootstrap, topic, f"{'hard' if hard else 'ctl'}-{run}").start()
    try:
        _wait_first_ack(probe, topic)
        time.sleep(WARM_UP_S)
        progress(f"  {label}: stopping leader {before.leader} ...")
        stop = StopCommand(cluster_dir, before.leader, hard)
        signalled, recovered = _await_recovery(probe, stop, label)
        time.sleep(AFTER_RECOVERY_S)
    finally:
        stopped = time.perf_counter()
        probe.stop()
    stop.join(RECOVERY_TIMEOUT_S + 120)
    assert stop.finished is not None
    after = partition_state(admin, topic)
    # successive acknowledgements from 1 s before the signal until the probe was stopped
    # (AFTER_RECOVERY_S after recovery and stop-broker's return); an unfinished outage
    # counts up to the stop
    window = [at for _, at in probe.acks if signalled - 1.0 <= at <= stopped]
    gaps = [b - a for a, b in itertools.pairwise([*window, stopped])]
    latencies = [
        at - probe.sent[seq] for seq, at in probe.acks if signalled - 1.0 <= probe.sent[seq]
    ]
    events, leader_seen = _client_events(
        probe, signalled, stopped, before.leader, label, client_log
    )
    errors = tuple(sorted({e for at, e in probe.client_errors if signalled <= at <= stopped}))
    outage = Outage(
        victim=before.leader,
        new_leader=after.leader,
        controller=before.controller,
        first_ack_s=recovered - signalled if recovered is not None else math.inf,
        max_gap_s=max(gaps, default=0.0),
        max_latency_s=max(latencies, default=0.0),
        leader_seen_s=leader_seen,
        stop_s=stop.finished - signalled,
        sent=len(probe.sent),
        acked=len(probe.acks),
        failed=len(probe.failed) + max(probe.unflushed, 0),
        events=events,
        client_errors=errors,
    )
    _report_and_restart(cluster_dir, admin, topic, probe, outage, label)
    return outage


def _wait_first_ack(probe: Probe, topic: str) -> None:
    first_ack_by = time.perf_counter() + FIRST_ACK_TIMEOUT_S
    while not probe.acks and time.perf_counter() < first_ack_by:
        time.sleep(0.01)
    if not probe.acks:
        raise SystemExit(f"{topic}: no acknowledgement {FIRST_ACK_TIMEOUT_S:.0f} s after start")


def _await_recovery(probe: Probe, stop: StopCommand, label: str) -> tuple[float, float | None]:
    """When ``stop`` signalled the leader, and when the first record sent after that was
    acknowledged (None: not within RECOVERY_TIMEOUT_S); waits for stop-broker's return too."""
    stop.announced.wait(60)
    if stop.signalled is None:
        stop.join(60)
    signalled = stop.signalled
    assert signalled is not None
    deadline = signalled + RECOVERY_TIMEOUT_S
    recovered = None
    # until a record produced after the signal is acknowledged and stop-broker returned
    while (recovered is None or stop.finished is None) and time.perf_counter() < deadline:
        time.sleep(0.05)
        recovered = probe.first_ack_sent_after(signalled)
        state = "waiting for the first ack" if recovered is None else "waiting for stop-broker"
        progress(f"  {label}: {state} ({time.perf_counter() - signalled:.1f} s)")
    return signalled, recovered


def _client_events(
    probe: Probe,
    signalled: float,
    stopped: float,
    victim: int,
    label: str,
    client_log: list[str],
) -> tuple[dict[str, int], float]:
    """The client's log lines between the signal and the probe's stop (copied to
    ``client_log``): how many of each CLIENT_EVENTS, and when it first saw a leader other
    than ``victim`` (seconds after the signal; inf: never)."""
    events: Counter[str] = Counter()
    leader_seen = math.inf
    for at, text in probe.capture.lines:
        if signalled <= at <= stopped:
            client_log.append(f"{label} +{at - signalled:8.3f}s {text}")
            for what, pattern in CLIENT_EVENTS.items():
                if pattern.search(text):
                    events[what] += 1
            update = LEADER_UPDATE.search(text)
            if update and int(update[1]) not in (-1, victim):
                leader_seen = min(leader_seen, at - signalled)
    return dict(events), leader_seen


def _report_and_restart(
    cluster_dir: Path, admin: AdminClient, topic: str, probe: Probe, outage: Outage, label: str
) -> None:
    """Print the outage; fail if records were lost; restart the stopped broker and wait for
    the full ISR."""
    progress(
        f"  {label}: leader {outage.victim} -> {outage.new_leader}: largest ack gap "
        f"{outage.max_gap_s:.3f} s, first post-signal ack {outage.first_ack_s:.3f} s, client "
        f"saw the new leader at {outage.leader_seen_s:.3f} s, {outage.failed} failed; "
        f"stop-broker returned after {outage.stop_s:.2f} s"
    )
    sys.stderr.write("\n")
    if outage.failed:
        raise SystemExit(f"{topic}: {outage.failed} records not delivered: {probe.failed[:3]}")
    progress(f"  restarting broker {outage.victim} and waiting for the full ISR ...")
    millrace("cluster", "start-broker", "--dir", str(cluster_dir), "--broker", str(outage.victim))
    wait_full_isr(admin, topic)
    sys.stderr.write("\n")


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="records per throughput run")
    ap.add_argument("--runs", type=int, default=3, help="throughput runs per RF")
    ap.add_argument("--kills", type=int, default=3, help="kills of each kind")
    ap.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    ap.add_argument("--client-log", help="write the librdkafka lines seen during outages here")
    args = ap.parse_args()
    started = time.monotonic()
    throughput: dict[int, list[Phase]] = {3: [], 1: []}
    outages: dict[bool, list[Outage]] = {True: [], False: []}
    client_log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="millrace-bench-cluster-") as tmp:
        cluster_dir = Path(tmp) / "cluster"
        sys.stderr.write(f"starting a {BROKERS}-broker cluster in {cluster_dir}\n")
        try:
            bootstrap = start_cluster(cluster_dir, BROKERS, CLUSTER_SETTINGS)
            pids = broker_pids(cluster_dir)
            sys.stderr.write(f"cluster up: {bootstrap} (broker pids {pids})\n")
            for run in range(args.runs):
                for rf in (3, 1):
                    topic = f"tput-rf{rf}-{run}"
                    create_topic(bootstrap, topic, rf)
                    phase = produce_all(bootstrap, topic, args.records, pids)
                    throughput[rf].append(phase)
                    progress(
                        f"  run {run + 1}/{args.runs} RF={rf}: {phase.rate:,.0f} records/s, "
                        f"{phase.mb_s:.1f} MB/s"
                    )
                    sys.stderr.write("\n")
                    millrace("topics", "delete", "--bootstrap-server", bootstrap, "--topic", topic)
            quiet = logging.getLogger("bench.cluster.admin")
            quiet.addHandler(logging.NullHandler())
            quiet.propagate = False
            admin_conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet}
            admin = AdminClient(admin_conf)
            # the controller last in the replica list: leadership alternates between the
            # other two brokers, so no kill also fails the controller over
            controller = int(admin.list_topics(timeout=10).controller_id)
            replicas = [b for b in range(1, BROKERS + 1) if b != controller] + [controller]
            for hard in (True, False):
                topic = "failover-hard" if hard else "failover-controlled"
                create_topic(bootstrap, topic, BROKERS, replicas)
                for run in range(args.kills):
                    outages[hard].append(
                        measure_kill(cluster_dir, bootstrap, admin, topic, hard, run, client_log)
                    )
        finally:
            sys.stderr.write("stopping the cluster\n")
            millrace("cluster", "down", "--dir", str(cluster_dir))
            if args.client_log:
                Path(args.client_log).write_text("\n".join(client_log) + "\n")
    write_report(Path(args.out), args, throughput, outages)
    sys.stderr.write(f"wrote {args.out} ({time.monotonic() - started:.0f} s in all)\n")
    return 0


# --------------------------------------------------------------------------- report


def _command(args: argparse.Namespace) -> str:
    parts = [".venv/bin/python -m bench.cluster", f"--records {args.records}"]
    parts += [f"--runs {args.runs}", f"--kills {args.kills}"]
    return " ".join(parts)


def _throughput_rows(throughput: dict[int, list[Phase]]) -> str:
    rows = []
    for rf, label in ((3, f"RF=3, min.insync.replicas={MIN_ISR}"), (1, "RF=1")):
        phases = throughput[rf]
        rate = statistics.median(p.rate for p in phases)
        mb_s = statistics.median(p.mb_s for p in phases)
        cpu = statistics.median(p.cpu_share for p in phases)
        each = ", ".join(f"{p.rate:,.0f}" for p in phases)
        rows.append(f"| {label} | {rate:,.0f} | {mb_s:.1f} | {cpu * 100:.0f}% | {each} |")
    return "\n".join(rows)


def _s(seconds: float) -> str:
    return "none" if math.isinf(seconds) else f"{seconds:.3f}"


def _outage_rows(outages: dict[bool, list[Outage]]) -> str:
    rows = []
    for hard, label in ((True, "hard kill (SIGKILL)"), (False, "controlled shutdown (SIGTERM)")):
        runs = outages[hard]
        limit = SESSION_TIMEOUT_MS / 1000 + 1 if hard else 0.5
        target = f"≤ {limit:g} s" if hard else f"< {limit:g} s"
        met = sum(o.unavailable_s <= limit for o in runs)
        med = {
            attr: statistics.median(getattr(o, attr) for o in runs)
            for attr in ("unavailable_s", "max_gap_s", "first_ack_s", "leader_seen_s", "stop_s")
        }
        rows.append(
            f"| {label} | **{_s(med['unavailable_s'])}** | {_s(med['max_gap_s'])} | "
            f"{_s(med['first_ack_s'])} | {_s(med['leader_seen_s'])} | {med['stop_s']:.2f} | "
            f"{target}: {met} of {len(runs)} kills |"
        )
    return "\n".join(rows)


def _each_kill_rows(outages: dict[bool, list[Outage]]) -> str:
    rows = []
    for hard, label in ((True, "hard kill"), (False, "controlled shutdown")):
        for i, o in enumerate(outages[hard]):
            rows.append(
                f"| {label} {i + 1} | {o.victim} → {o.new_leader} | {_s(o.unavailable_s)} | "
                f"{_s(o.max_gap_s)} | {_s(o.first_ack_s)} | {_s(o.leader_seen_s)} | "
                f"{o.stop_s:.2f} |"
            )
    return "\n".join(rows)


def _client_rows(outages: dict[bool, list[Outage]]) -> str:
    rows = []
    for hard, label in ((True, "hard kill"), (False, "controlled shutdown")):
        runs = outages[hard]
        seen = []
        for what in CLIENT_EVENTS:
            counts = [o.events.get(what, 0) for o in runs]
            seen.append(f"{what}: {'/'.join(str(c) for c in counts)}")
        errors = sorted({e for o in runs for e in o.client_errors})
        latency = max(o.max_latency_s for o in runs)
        failed = sum(o.failed for o in runs)
        sent = sum(o.sent for o in runs)
        rows.append(
            f"| {label} | {sent:,} sent, {failed} failed; longest send→ack {latency:.3f} s | "
            + "; ".join(seen)
            + " | "
            + ("; ".join(f"`{e}`" for e in errors) if errors else "none")
            + " |"
        )
    return "\n".join(rows)


def write_report(
    out: Path,
    args: argparse.Namespace,
    throughput: dict[int, list[Phase]],
    outages: dict[bool, list[Outage]],
) -> None:
    rf3 = statistics.median(p.rate for p in throughput[3])
    rf1 = statistics.median(p.rate for p in throughput[1])
    probe = ", ".join(f"`{k}={str(v).lower()}`" for k, v in PROBE_CONFIG.items())
    cluster = ", ".join(f"`{k}={v}`" for k, v in CLUSTER_SETTINGS.items())
    section = f"""{HEADING}

Three brokers and ZooKeeper on 127.0.0.1 (`millrace cluster up --brokers 3`, broker settings
{cluster}), confluent-kafka {confluent_kafka.__version__} (librdkafka
{confluent_kafka.libversion()[0]}) as the client, run {datetime.date.today().isoformat()} on:
{machine()}. Clients, brokers and ZooKeeper share the machine.

### Produce throughput

{args.records:,} records of 100 bytes per run into a fresh 1-partition topic, `acks=all`,
`enable.idempotence=true`, `linger.ms=5`; medians of {args.runs} runs per replication
factor (runs alternate RF=3 / RF=1). "brokers CPU" is the CPU time of the three broker
processes together over wall time (100% = one core).

| topic | records/s | MB/s | brokers CPU | each run (records/s) |
|---|---:|---:|---:|---|
{_throughput_rows(throughput)}

RF=3 runs at {rf3 / rf1:.0%} of the RF=1 rate.

### Unavailability when the partition leader goes away

A probe producer (`acks=all`, idempotent) sends one record every {SEND_INTERVAL_S * 1000:g} ms
to a 1-partition topic with RF=3 and `min.insync.replicas={MIN_ISR}` (replicas listed with the
controller last, so leadership alternates between the two other brokers and no kill also
moves the controller); the partition's current leader is stopped with
`millrace cluster stop-broker --hard` (SIGKILL) or `millrace cluster stop-broker` (SIGTERM,
controlled shutdown). **ZooKeeper session timeout: {SESSION_TIMEOUT_MS} ms.** The *signal* is
the moment `stop-broker` announces, immediately before `os.kill`, that it sends the signal.

* **largest ack gap**: the largest interval between two successive acknowledgements (delivery
  reports) from 1 s before the signal until {AFTER_RECOVERY_S:g} s after both the recovery
  and `stop-broker`'s return (a still-open gap counts until then);
* **first post-signal ack**: from the signal to the acknowledgement of the first record
  *produced after* the signal (during a controlled shutdown the old leader may still
  acknowledge a few before it hands over, so this alone can understate the outage);
* **unavailability** (the figure compared with the issue's target) = the larger of the two;
* **new leader seen**: when librdkafka first applied a metadata update naming another leader;
* **stop-broker returned**: when `stop-broker` saw the process gone (it sends SIGKILL after 60 s
  if a SIGTERM-ed broker has not exited).

Between kills the broker is restarted (`cluster start-broker`) and the partition's ISR is back
to 3 replicas. Medians of {args.kills} kill(s) of each kind (seconds); no delivery failed in
any run (checked).

| event | unavailability | largest ack gap | first post-signal ack | new leader seen | stop-broker returned | target |
|---|---:|---:|---:|---:|---:|---|
{_outage_rows(outages)}

For the hard kills, "new leader seen" is the broker side plus the client's metadata polling:
the ZooKeeper session of the killed broker expires (ZooKeeper checks expiry every `tickTime`,
{CLUSTER_ZK_TICK_MS} ms in `cluster up`'s ZooKeeper, counted from the broker's last heartbeat,
which the client sends every third of the session timeout), the controller elects a leader from
the ISR and propagates it. From there to the first acknowledgement took a median of
{statistics.median(o.first_ack_s - o.leader_seen_s for o in outages[True]):.3f} s in the
client (librdkafka drops the dead broker once it is missing from Metadata, parks the partition
on its internal broker and re-queries on its 1 s topic scan; see the debug lines with
`--client-log`).

Each kill (seconds after the signal):

| kill | leader | unavailability | largest ack gap | first post-signal ack | new leader seen | stop-broker returned |
|---|---|---:|---:|---:|---:|---:|
{_each_kill_rows(outages)}

Probe client settings: {probe} (librdkafka re-queries metadata from
`topic.metadata.refresh.fast.interval.ms` doubling up to `retry.backoff.max.ms` while a
partition's leader is unknown or failing). What the client saw from the signal until the
probe stopped (librdkafka debug `{PROBE_DEBUG}` lines matched, per kill, and its error
callbacks):

| event | records | librdkafka lines per kill | error callbacks |
|---|---|---|---|
{_client_rows(outages)}

Reproduce: `{_command(args)}` (`make bench` runs it with these values; `make bench-quick` a
reduced version into /tmp).
"""
    replace_section(out, HEADING, section)


if __name__ == "__main__":
    raise SystemExit(main())
