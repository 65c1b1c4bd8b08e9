"""A scale point beside Apache Kafka: 10,000 partitions, RF 3, on 3 brokers (issue 31, target 6).

Three brokers each (Apache Kafka on Millrace's ZooKeeper, chroot ``/apache-kafka``, as in
``bench.idle_partitions``), the systems one after the other; one topic of ``--partitions``
partitions (10,000 by default) with RF=3, so each broker hosts every partition, leads a
third and follows two thirds. Both systems get ``zookeeper.session.timeout.ms=18000`` (Kafka's
default) and ``auto.leader.rebalance.enable=false``. Measured per system:

* **create s**: CreateTopics until every partition has a leader and a full ISR (3 replicas)
  in Metadata, as the admin client sees it;
* **idle CPU, % of a core per broker**: the brokers' CPU seconds (``/proc``, all threads;
  Millrace's with its cleaner's processes) over ``--seconds`` of no traffic, after
  ``--settle`` seconds, divided by the brokers and the time;
* **RSS MiB per broker**: the largest broker's resident memory after the idle period, and
  its **open files** (``/proc/<pid>/fd``: log segments, index files, sockets), which the
  machine's ``ulimit -n`` bounds;
* **controller failover**: the controller's process gets SIGKILL; *new controller s* is the
  time until a surviving broker's Metadata names another controller, *all partitions led s*
  until every partition also has a live leader there (the partitions the dead broker led
  moved). Kafka learns of a dead broker when its ZooKeeper session expires (18 s); Millrace's
  brokers also notice a dead peer's refused connections (``docs/failover.md``).

Writes the section "A partition scale point beside Apache Kafka" of ``BENCHMARKS.md``.

Usage: ``python -m bench.scale_partitions [--partitions N] [--seconds S] [--runs N]
[--only kafka|millrace] [--out F]``. Progress to stderr. Every process started is stopped
in a ``finally``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from bench.common import ROOT, machine, replace_section
from bench.compare import log
from bench.idle_partitions import rss_mib, wait_full_isr
from bench.procstat import cpu_seconds, tree_cpu_seconds
from bench.systems import KAFKA_VERSION, KafkaSystem, MillraceSystem, System

HEADING = "## A partition scale point beside Apache Kafka"
TOPIC = "scale"
SETTINGS = {
    "zookeeper.session.timeout.ms": "18000",
    "auto.leader.rebalance.enable": "false",
}
FAILOVER_TIMEOUT_S = 300.0


@dataclass(slots=True)
class Sample:
    system: str
    create_s: float
    cpu_share: float  # of one core, per broker
    rss_mib: float  # largest broker
    open_files: int  # largest broker
    new_controller_s: float
    all_led_s: float


def broker_pid(system: System, broker_id: int) -> int:
    """The pid of broker ``broker_id`` (Millrace: from ``cluster.json``; Kafka: ids 0..N-1
    in start order)."""
    if isinstance(system, MillraceSystem):
        info = json.loads((system.directory / "cluster.json").read_text())
        return int(next(b["pid"] for b in info["brokers"] if int(b["id"]) == broker_id))
    return system.pids[broker_id]


def controller_failover(system: System, topic: str) -> tuple[float, float]:
    """SIGKILL the controller; (seconds until another controller is named, seconds until
    every partition of ``topic`` has a live leader), both seen by the surviving brokers."""
    md = system.admin().list_topics(timeout=60)
    controller = int(md.controller_id)
    survivors = ",".join(f"{b.host}:{b.port}" for i, b in md.brokers.items() if i != controller)
    admin = AdminClient({"bootstrap.servers": survivors})
    admin.list_topics(timeout=60)  # connected before the kill
    pid = broker_pid(system, controller)
    log(f"[scale] {system.name}: SIGKILL controller {controller} (pid {pid})")
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    new_controller_s = 0.0
    while (now := time.monotonic() - t0) < FAILOVER_TIMEOUT_S:
        try:
            md = admin.list_topics(topic, timeout=10)
        except Exception:  # noqa: BLE001 - no answer in time: not seen yet
            continue
        if not new_controller_s and int(md.controller_id) not in (-1, controller):
            new_controller_s = now
        t = md.topics.get(topic)
        if (
            new_controller_s
            and t is not None
            and all(int(p.leader) not in (-1, controller) for p in t.partitions.values())
        ):
            return new_controller_s, time.monotonic() - t0
        time.sleep(0.05)
    raise SystemExit(f"{system.name}: no failover within {FAILOVER_TIMEOUT_S:g}s")


def measure(system: System, args: argparse.Namespace) -> Sample:
    t0 = time.monotonic()
    system.create_topic(TOPIC, args.partitions, 3, timeout_s=1800)
    wait_full_isr(system, TOPIC, args.partitions, 1800)
    create_s = time.monotonic() - t0
    log(f"[scale] {system.name}: {args.partitions:,} partitions, full ISR in {create_s:.1f}s")
    time.sleep(args.settle)
    tree = tree_cpu_seconds if system.name == "Millrace" else cpu_seconds
    c0 = sum(tree(p) for p in system.pids)
    w0 = time.monotonic()
    time.sleep(args.seconds)
    cpu = sum(tree(p) for p in system.pids) - c0
    share = cpu / (time.monotonic() - w0) / len(system.pids)
    rss = max(rss_mib(p) for p in system.pids)
    files = max(len(os.listdir(f"/proc/{p}/fd")) for p in system.pids)
    log(
        f"[scale] {system.name}: idle {share * 100:.1f}% of a core per broker, RSS {rss:.0f} MiB, "
        f"{files:,} open files"
    )
    new_controller_s, all_led_s = controller_failover(system, TOPIC)
    log(
        f"[scale] {system.name}: new controller after {new_controller_s:.1f}s, "
        f"every partition led after {all_led_s:.1f}s"
    )
    return Sample(system.name, create_s, share, rss, files, new_controller_s, all_led_s)


ROWS = (
    ("create + full ISR, s", "create_s", "{:.1f}", 1.0),
    ("idle CPU per broker, % of a core", "cpu_share", "{:.1f}", 100.0),
    ("RSS per broker (largest), MiB", "rss_mib", "{:,.0f}", 1.0),
    ("open files per broker (largest)", "open_files", "{:,.0f}", 1.0),
    ("controller SIGKILL: new controller, s", "new_controller_s", "{:.1f}", 1.0),
    ("controller SIGKILL: every partition led, s", "all_led_s", "{:.1f}", 1.0),
)


def write_report(out: Path, args: argparse.Namespace, samples: list[Sample]) -> None:
    def med(system: str, field: str) -> float:
        return statistics.median(getattr(s, field) for s in samples if s.system == system)

    rows = []
    for label, field, fmt, scale in ROWS:
        k, m = med("Kafka", field) * scale, med("Millrace", field) * scale
        rows.append(f"| {label} | {fmt.format(k)} | {fmt.format(m)} | **{m / max(k, 1e-9):.2f}** |")
    table = "\n".join(rows)
    section = f"""{HEADING}

A scale point: 3 brokers each (Apache Kafka {KAFKA_VERSION} on Millrace's ZooKeeper), one
topic of {args.partitions:,} partitions with RF=3 (every broker hosts all of them, leads a
third), then no traffic: idle CPU over {args.seconds} s after {args.settle} s of settling; then
SIGKILL of the controller's process, timed until a surviving broker's Metadata names a new
controller and until every partition has a live leader again. Both systems with
`zookeeper.session.timeout.ms=18000` (Kafka learns of the dead broker when its session
expires; Millrace's brokers also see its refused connections, `docs/failover.md`) and
`auto.leader.rebalance.enable=false`; the systems one after the other; lower is better in
every row. {args.runs} run(s), medians; run {datetime.date.today().isoformat()} on:
{machine()}.

| measure | Kafka | Millrace | Millrace / Kafka |
|---|---:|---:|---:|
{table}

Reproduce: `.venv/bin/python -m bench.scale_partitions --partitions {args.partitions}
--seconds {args.seconds} --runs {args.runs}`.
"""
    replace_section(out, HEADING, section)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale_partitions", description=__doc__)
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--settle", type=int, default=30)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--only", choices=["kafka", "millrace"], help="measure one system only")
    p.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    args = p.parse_args(argv)
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory(prefix="millrace-bench-scale-") as tmp:
        for r in range(args.runs):
            kinds = ["kafka", "millrace"] if r % 2 == 0 else ["millrace", "kafka"]
            for kind in kinds:
                if args.only and kind != args.only:
                    continue
                log(f"[scale] run {r + 1}/{args.runs}: {kind}")
                d = Path(tmp) / f"{kind}-{r}"
                millrace = MillraceSystem(d / "millrace", 3, SETTINGS)
                try:
                    if kind == "millrace":
                        samples.append(measure(millrace, args))
                    else:
                        kafka = KafkaSystem(d / "kafka", 3, millrace.zk_connect, SETTINGS)
                        try:
                            samples.append(measure(kafka, args))
                        finally:
                            kafka.stop()
                finally:
                    millrace.stop()
    if args.only:
        for s in samples:
            print(
                f"{s.system}: create {s.create_s:.1f}s, idle {s.cpu_share * 100:.1f}% per "
                f"broker, RSS {s.rss_mib:.0f} MiB, {s.open_files} files, new controller {s.new_controller_s:.1f}s, "
                f"every partition led {s.all_led_s:.1f}s"
            )
        return 0
    write_report(Path(args.out), args, samples)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
