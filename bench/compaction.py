"""Log compaction beside Apache Kafka: the log cleaner's throughput, its CPU cost, and produce
and fetch while it runs.

Millrace and Apache Kafka 3.9.1 run side by side, one broker each (Kafka on Millrace's
ZooKeeper, as in ``bench.compare``), with the same cleaner settings (``log.cleaner.threads=1``,
``log.cleaner.backoff.ms``, ``log.cleaner.dedupe.buffer.size``), alternating which goes
first. Every cleaning round is of the same data: ``--mb`` MB (2^20 bytes) of key + value
payload, updates of ``--value-bytes``-byte values (100) to ``--keys`` 16-byte keys, the key
of each update drawn from a generator seeded with ``--seed``, produced by confluent-kafka
into a 1-partition topic with ``cleanup.policy=compact`` and ``segment.bytes``
``--segment-mb`` (at least 2: both refuse a produce larger than ``segment.bytes``, and
librdkafka's batches reach 1 MB).

Holding the cleaner back, then triggering it: the topic is created with
``min.compaction.lag.ms`` one day, so no record is old enough to clean, and after the fill an
IncrementalAlterConfigs sets it to 0; both brokers apply the change live (Kafka's cleaner
notices it at its next ``log.cleaner.backoff.ms`` check; Millrace's is woken by the config
change). (Not ``min.cleanable.dirty.ratio``: a never-cleaned log is 100% dirty, which
exceeds any ratio below 1, and ``1.0`` does not hold Millrace back: it cleans at a ratio *of
at least* the setting, Kafka above it.)

Each run, for each system, three rounds of cleaning, each of freshly filled topics:

1. **Cleaner alone**: nothing else runs. The cleaners' own stats lines give the MB of log
   processed and the seconds (Kafka: ``kafka.log.LogCleaner`` at INFO, routed to
   ``log-cleaner.log`` as in Kafka's own log4j.properties; Millrace: ``broker.out``); MB/s is
   their quotient. As a cross-check, measured from outside: the time from the
   IncrementalAlterConfigs call to the partition's ``.log`` files having shrunk (within 5% of
   the bytes removed, polled every 50 ms), and the broker's CPU seconds (process and
   descendants: Millrace cleans in a worker process) from the trigger to the stats line, per
   MB processed.
2. **Produce while cleaning**: a confluent-kafka producer (a child process, ``acks=1``,
   ``linger.ms=5``, 100-byte records, as fast as it goes) writes to a second, ordinary topic;
   its records/s and produce latency (librdkafka's, produce() to acknowledgement, so
   including the client's queue) over ``--idle-s`` seconds with the cleaner idle, then during
   the cleaning round (the round's own seconds, ending when its stats line appears).
3. **Fetch while cleaning**: likewise a confluent-kafka consumer reading the second topic from
   offset 0 (again from 0 at its end; ``fetch.queue.backoff.ms=0``, ``fetch.wait.max.ms=10``
   so that the client itself does not pause), records/s idle and during a cleaning round.

Also reported: the rate of the fills themselves (keyed produce into a compacted topic, whose
records each broker must read to refuse keyless ones).

Results: the section "Log compaction beside Apache Kafka: N-byte values" of
``BENCHMARKS.md`` (``--quick``:
a file under /tmp), medians of ``--runs`` runs. Usage: ``python -m bench.compaction
[--quick] [--mb N] [--keys N] [--value-bytes N] [--runs N] [--segment-mb N] [--out F]``;
progress on stderr.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from bench.basics import RECORD, progress
from bench.cleaner_stats import CLEANER_LOG4J, CleanerLog, CleanerRound
from bench.client_load import Load, fetcher_child, producer_child, rate_between
from bench.common import ROOT, machine, replace_section
from bench.compare import both, log, orders
from bench.procstat import tree_cpu_seconds
from bench.systems import KAFKA_VERSION, System

HEADING = "## Log compaction beside Apache Kafka"


def heading(value_bytes: int) -> str:
    """The report section of one value size (``make bench`` runs 100, 200 and 1,024)."""
    return f"{HEADING}: {value_bytes:,}-byte values"


QUICK_OUT = Path(tempfile.gettempdir()) / "millrace-bench-compaction-quick.md"
MB = 1024 * 1024  # both cleaners' "MB"
KEY_BYTES = 16
HELD_BACK_LAG_MS = 86_400_000
POLL_S = 0.05
SHRUNK = 0.05  # "shrunk": within this share of the removed bytes of the final size
DEDUPE_BUFFER = 134_217_728  # Kafka's default log.cleaner.dedupe.buffer.size
BACKOFF_MS = 200


def broker_settings() -> dict[str, str]:
    """The cleaner settings both brokers get."""
    return {
        "log.cleaner.threads": "1",
        "log.cleaner.backoff.ms": str(BACKOFF_MS),
        "log.cleaner.dedupe.buffer.size": str(DEDUPE_BUFFER),
    }


# --------------------------------------------------------------------- the trigger


def shrink_seconds(trace: Sequence[tuple[float, int]], tolerance: float = SHRUNK) -> float | None:
    """From a trace of (seconds since the trigger, bytes of the partition's ``.log`` files)
    that starts before cleaning and ends after it: the first time the log came within
    ``tolerance`` of the removed bytes of its final size (None if it never shrank)."""
    if not trace:
        return None
    before, after = trace[0][1], trace[-1][1]
    if after >= before:
        return None
    threshold = after + tolerance * (before - after)
    for t, size in trace:
        if size <= threshold:
            return t
    return None


# --------------------------------------------------------------------- the data


@dataclass(frozen=True)
class Updates:
    """The updates every fill produces, in ``order`` (each one of ``keys``)."""

    keys: list[bytes]
    order: list[bytes]
    value: bytes = RECORD

    @classmethod
    def make(cls, mb: float, keys: int, seed: int, value_bytes: int = len(RECORD)) -> Updates:
        """``mb`` MB of key + value payload (values of ``value_bytes``), keys and order from
        the generator ``seed``."""
        rng = random.Random(seed)
        names = [rng.randbytes(KEY_BYTES // 2).hex().encode() for _ in range(keys)]
        n = int(mb * MB) // (KEY_BYTES + value_bytes)
        return cls(names, rng.choices(names, k=n), b"x" * value_bytes)

    @property
    def mb(self) -> float:
        return len(self.order) * (KEY_BYTES + len(self.value)) / MB


def fill(system: System, topic: str, updates: Updates) -> float:
    """Produce ``updates`` into partition 0 of ``topic``; seconds taken."""
    p = Producer(
        {
            "bootstrap.servers": system.bootstrap,
            "acks": 1,
            "linger.ms": 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failures: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(err)

    n = len(updates.order)
    value = updates.value
    start = time.perf_counter()
    for i, key in enumerate(updates.order):
        while True:
            try:
                p.produce(topic, value, key, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.005)
        if i % 100_000 == 0:
            p.poll(0)
            progress(f"    fill {topic}: {i:,}/{n:,}")
    if p.flush(600) != 0 or failures:
        raise SystemExit(f"{system.name}: filling {topic} failed: {failures[:1]}")
    return time.perf_counter() - start


def compacted_topic(system: System, topic: str, segment_mb: int) -> None:
    system.create_topic(
        topic,
        1,
        1,
        {
            "cleanup.policy": "compact",
            "segment.bytes": str(segment_mb * MB),
            "min.compaction.lag.ms": str(HELD_BACK_LAG_MS),
        },
    )


def set_topic_config(system: System, topic: str, name: str, value: str) -> None:
    admin = system.admin()  # referenced until the result arrives
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(60)


def partition_dir(system: System, topic: str) -> Path:
    return system.data_dirs[0] / f"{topic}-0"


def log_bytes(directory: Path) -> int:
    """Bytes of the partition's live segments (``*.log``: not ``.deleted``, ``.cleaned``)."""
    total = 0
    for f in directory.iterdir():
        if f.name.endswith(".log"):
            try:
                total += f.stat().st_size
            except FileNotFoundError:
                pass
    return total


def active_base_offset(directory: Path) -> int:
    return max(int(f.name.split(".")[0]) for f in directory.iterdir() if f.name.endswith(".log"))


def broker_cpu(system: System) -> float:
    return sum(tree_cpu_seconds(pid) for pid in system.pids)


@dataclass(frozen=True, slots=True)
class Cleaning:
    """One triggered cleaning, until the log's dirty section is cleaned."""

    rounds: list[CleanerRound]
    triggered: float  # time.monotonic()
    seen: float  # when the last round's stats line was first seen
    shrink_s: float | None
    cpu_s: float
    bytes_before: int
    bytes_after: int

    @property
    def mb(self) -> float:
        return sum(r.mb for r in self.rounds)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.rounds)

    @property
    def written_mb(self) -> float:
        return sum(r.written_mb or 0.0 for r in self.rounds)

    @property
    def records(self) -> tuple[float, float]:
        """Records read and kept by the rounds (NaN where a cleaner does not say)."""
        read = [r.records_read for r in self.rounds]
        kept = [r.records_kept for r in self.rounds]
        return (
            math.nan if None in read else float(sum(n or 0 for n in read)),
            math.nan if None in kept else float(sum(n or 0 for n in kept)),
        )


def clean(system: System, topic: str, created: int, timeout_s: float) -> Cleaning:
    """Trigger cleaning of ``topic`` (``min.compaction.lag.ms=0``) and wait until its
    cleaner has logged rounds covering the whole dirty section; ``created`` is the cleaner
    log's size before the topic was created (no round of it may be logged before)."""
    cleaner = CleanerLog(system)
    name = f"{topic}-0"
    early = cleaner.rounds(created, name)
    if early:
        raise SystemExit(f"{system.name}: {name} was cleaned before the trigger: {early[0]}")
    directory = partition_dir(system, topic)
    end = active_base_offset(directory)
    since = cleaner.mark()
    before = log_bytes(directory)
    cpu0 = broker_cpu(system)
    t0 = time.monotonic()
    set_topic_config(system, topic, "min.compaction.lag.ms", "0")
    trace = [(0.0, before)]
    while True:
        time.sleep(POLL_S)
        rounds = cleaner.rounds(since, name)
        now = time.monotonic()
        trace.append((now - t0, log_bytes(directory)))
        if rounds and rounds[-1].end >= end:
            break
        if now - t0 > timeout_s:
            raise SystemExit(
                f"{system.name}: {name} not cleaned within {timeout_s:g}s of the trigger "
                f"(rounds so far: {rounds}); see {cleaner.path}"
            )
        progress(f"    cleaning {name}: {now - t0:.1f}s, .log bytes {trace[-1][1]:,}")
    cpu = broker_cpu(system) - cpu0
    return Cleaning(rounds, t0, now, shrink_seconds(trace), cpu, before, trace[-1][1])


# --------------------------------------------------------------------- one run


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.updates = Updates.make(args.mb, args.keys, args.seed, args.value_bytes)
        self.seq = 0
        self.timeout_s = max(300.0, args.mb * 3)

    def topic(self, system: System, what: str) -> str:
        self.seq += 1
        return f"{what}-{system.name.lower()}-{self.seq}"

    def filled(self, system: System, updates: Updates | None = None) -> tuple[str, int, float]:
        """A compacted topic filled with the updates, its cleaner held back: the topic, the
        cleaner log's size before it was created, and the fill's seconds."""
        updates = updates or self.updates
        topic = self.topic(system, "compact")
        since = CleanerLog(system).mark()
        compacted_topic(system, topic, self.a.segment_mb)
        seconds = fill(system, topic, updates)
        log(
            f"  {system.name:<8} filled {topic}: {len(updates.order):,} updates "
            f"({updates.mb:,.0f} MB) in {seconds:.1f}s"
        )
        time.sleep(1.0)  # the broker quiet again
        return topic, since, seconds

    def warm_up(self, system: System) -> None:
        """A cleaning round before anything is measured (Kafka's JIT; Millrace's worker
        process starts with its first round)."""
        log(f"warming up {system.name}'s cleaner ({self.a.warm_up_mb} MB)")
        updates = Updates.make(self.a.warm_up_mb, self.a.keys, self.a.seed + 1, self.a.value_bytes)
        topic, since, _ = self.filled(system, updates)
        clean(system, topic, since, self.timeout_s)
        system.delete_topic(topic)

    def alone(self, system: System) -> dict[str, float]:
        topic, since, fill_s = self.filled(system)
        c = clean(system, topic, since, self.timeout_s)
        system.delete_topic(topic)
        m = {
            "fill MB/s": self.updates.mb / fill_s,
            "clean MB": c.mb,
            "clean s": c.seconds,
            "clean MB/s": c.mb / c.seconds,
            "written MB": c.written_mb,
            "records read": c.records[0],
            "records kept": c.records[1],
            "trigger to shrunk s": c.shrink_s if c.shrink_s is not None else math.nan,
            "trigger to stats s": c.seen - c.triggered,
            "cpu s": c.cpu_s,
            "cpu s/MB": c.cpu_s / c.mb,
        }
        log(
            f"  {system.name:<8} alone: {c.mb:,.1f} MB in {c.seconds:.2f}s "
            f"({m['clean MB/s']:,.1f} MB/s), shrunk after {m['trigger to shrunk s']:.2f}s, "
            f"CPU {c.cpu_s:.2f}s ({m['cpu s/MB']:.3f} s/MB), {c.written_mb:.1f} MB written, "
            f"{len(c.rounds)} round(s)"
        )
        return m

    def while_producing(self, system: System, target: str) -> dict[str, float]:
        topic, since, _ = self.filled(system)
        system.create_topic(target, 1, 1)
        load = Load(producer_child, system, target)
        try:
            load.started()
            time.sleep(1.0)
            idle_from = time.monotonic()
            time.sleep(self.a.idle_s)
            c = clean(system, topic, since, self.timeout_s)
            time.sleep(0.5)
        except BaseException:
            load.kill()
            raise
        windows = [(idle_from, c.triggered), (c.seen - c.seconds, c.seen)]
        failed, (idle, busy) = load.stop(windows)
        system.delete_topic(topic)
        if failed:
            raise SystemExit(f"{system.name}: {failed} records not delivered to {target}")
        m = {
            "p clean MB/s": c.mb / c.seconds,
            "p clean s": c.seconds,
            "produce idle rec/s": idle.records_s,
            "produce busy rec/s": busy.records_s,
            "produce busy/idle": busy.records_s / idle.records_s,
            "produce idle p50 ms": idle.p50_ms,
            "produce idle p99 ms": idle.p99_ms,
            "produce busy p50 ms": busy.p50_ms,
            "produce busy p99 ms": busy.p99_ms,
        }
        log(
            f"  {system.name:<8} producing: cleaner {m['p clean MB/s']:,.1f} MB/s over "
            f"{c.seconds:.2f}s; produce {idle.records_s:,.0f} -> {busy.records_s:,.0f} rec/s, "
            f"p99 {idle.p99_ms:.1f} -> {busy.p99_ms:.1f} ms"
        )
        return m

    def while_fetching(self, system: System, source: str) -> dict[str, float]:
        topic, since, _ = self.filled(system)
        load = Load(fetcher_child, system, source)
        try:
            load.started()
            time.sleep(1.0)
            idle_from = time.monotonic()
            time.sleep(self.a.idle_s)
            c = clean(system, topic, since, self.timeout_s)
            time.sleep(0.5)
        except BaseException:
            load.kill()
            raise
        times, counts = load.stop()
        system.delete_topic(topic)
        idle = rate_between(times, counts, idle_from, c.triggered)
        busy = rate_between(times, counts, c.seen - c.seconds, c.seen)
        m = {
            "f clean MB/s": c.mb / c.seconds,
            "f clean s": c.seconds,
            "fetch idle rec/s": idle,
            "fetch busy rec/s": busy,
            "fetch busy/idle": busy / idle,
        }
        log(
            f"  {system.name:<8} fetching: cleaner {m['f clean MB/s']:,.1f} MB/s over "
            f"{c.seconds:.2f}s; fetch {idle:,.0f} -> {busy:,.0f} rec/s"
        )
        return m

    def run(self, system: System) -> dict[str, float]:
        metrics = self.alone(system)
        target = self.topic(system, "produce")
        metrics |= self.while_producing(system, target)
        if self.a.fetch:
            metrics |= self.while_fetching(system, target)
        system.delete_topic(target)
        return metrics


# --------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class Row:
    """A line of the report's table: the metric ``key`` of both systems' medians in ``fmt``,
    and their ratio (no ``key``: a line of two figures per system, no ratio)."""

    label: str
    key: str
    fmt: str


ROWS = (
    Row("cleaner alone: MB/s (own stats)", "clean MB/s", "{:,.1f}"),
    Row("cleaner alone: seconds per round (own stats)", "clean s", "{:,.2f}"),
    Row("MB processed / written per round (own stats)", "", ""),
    Row("records read / kept per round (own stats)", "", ""),
    Row("trigger to log shrunk, s (disk, polled)", "trigger to shrunk s", "{:,.2f}"),
    Row("trigger to stats line, s", "trigger to stats s", "{:,.2f}"),
    Row("broker CPU s per MB cleaned", "cpu s/MB", "{:,.3f}"),
    Row("filling the compacted topic: MB/s of payload (confluent-kafka)", "fill MB/s", "{:,.1f}"),
    Row("cleaner while producing: MB/s", "p clean MB/s", "{:,.1f}"),
    Row("cleaner while producing: seconds (the window below)", "p clean s", "{:,.2f}"),
    Row("produce, cleaner idle: records/s", "produce idle rec/s", "{:,.0f}"),
    Row("produce, during cleaning: records/s", "produce busy rec/s", "{:,.0f}"),
    Row("produce during / idle", "produce busy/idle", "{:.2f}"),
    Row("produce p50 ms, idle", "produce idle p50 ms", "{:,.1f}"),
    Row("produce p50 ms, during cleaning", "produce busy p50 ms", "{:,.1f}"),
    Row("produce p99 ms, idle", "produce idle p99 ms", "{:,.1f}"),
    Row("produce p99 ms, during cleaning", "produce busy p99 ms", "{:,.1f}"),
    Row("cleaner while fetching: MB/s", "f clean MB/s", "{:,.1f}"),
    Row("cleaner while fetching: seconds (the window below)", "f clean s", "{:,.2f}"),
    Row("fetch, cleaner idle: records/s", "fetch idle rec/s", "{:,.0f}"),
    Row("fetch, during cleaning: records/s", "fetch busy rec/s", "{:,.0f}"),
    Row("fetch during / idle", "fetch busy/idle", "{:.2f}"),
)


def median(samples: list[dict[str, float]], key: str) -> float:
    values = [s[key] for s in samples if key in s and not math.isnan(s[key])]
    return statistics.median(values) if values else math.nan


def table(samples: dict[str, list[dict[str, float]]]) -> str:
    kafka, millrace = samples["Kafka"], samples["Millrace"]
    lines = []
    for row in ROWS:
        if not row.key:
            a, b, fmt = (
                ("clean MB", "written MB", "{:,.1f}")
                if row.label.startswith("MB")
                else ("records read", "records kept", "{:,.0f}")
            )
            cells = [
                f"{fmt.format(median(s, a))} / {fmt.format(median(s, b))}"
                for s in (kafka, millrace)
            ]
            lines.append(f"| {row.label} | {cells[0]} | {cells[1]} | |")
            continue
        k, m = median(kafka, row.key), median(millrace, row.key)
        if math.isnan(k) and math.isnan(m):
            continue
        ratio = f"**{m / k:.2f}**" if k and not math.isnan(m / k) else ""
        lines.append(f"| {row.label} | {row.fmt.format(k)} | {row.fmt.format(m)} | {ratio} |")
    return "\n".join(lines)


def write_report(
    out: Path, args: argparse.Namespace, samples: dict[str, list[dict[str, float]]]
) -> None:
    updates = Updates.make(args.mb, args.keys, args.seed, args.value_bytes)
    command = (
        "python -m bench.compaction"
        + (
            " --quick"
            if args.quick
            else f" --mb {args.mb:g} --keys {args.keys} --runs {args.runs} "
            f"--segment-mb {args.segment_mb} --idle-s {args.idle_s:g}"
        )
        + (f" --value-bytes {args.value_bytes}" if args.value_bytes != len(RECORD) else "")
    )
    quick = (
        "\n**Quick run (`--quick`): reduced sizes, for checking the benchmark works; not "
        "results.**\n"
        if args.quick
        else ""
    )
    section = f"""{heading(args.value_bytes)}
{quick}
Millrace and Apache Kafka {KAFKA_VERSION} side by side on one machine, one broker each (Kafka
on Millrace's ZooKeeper), confluent-kafka {confluent_kafka.__version__} (librdkafka
{confluent_kafka.libversion()[0]}) as the client, {args.runs} run(s) each alternating which
system goes first, medians; run {datetime.date.today().isoformat()} on: {machine()}.

Both brokers: `log.cleaner.threads=1`, `log.cleaner.backoff.ms={BACKOFF_MS}`,
`log.cleaner.dedupe.buffer.size={DEDUPE_BUFFER}`, other settings their defaults. Each cleaning
is of a fresh 1-partition topic (`cleanup.policy=compact`, `segment.bytes={args.segment_mb}`
MB) filled with the same {len(updates.order):,} updates ({updates.mb:,.0f} MB of key + value
payload; MB = 2^20 bytes, as both cleaners print them): {args.value_bytes}-byte values for {args.keys:,}
16-byte keys, each update's key drawn from a generator seeded with {args.seed}. The topic is
created with `min.compaction.lag.ms` one day, so nothing is cleanable while it fills, and
an IncrementalAlterConfigs then sets it to 0 (both brokers apply it live). The active
segment is never cleaned, so the round covers the full segments.

* **Cleaner alone**: MB of log processed and seconds as each cleaner reports its round
  (Kafka: `kafka.log.LogCleaner`'s "N MB of log processed in S seconds (R MB/sec)", seconds
  taken as N / R since S is printed with one decimal; Millrace: its broker's "cleaned log
  ..." line, the same figures). Cross-checks from outside: from the IncrementalAlterConfigs
  call to the partition's `.log` files within 5% of their final size (Kafka swaps each
  cleaned segment group in as it goes, Millrace all groups when its worker process returns;
  both include up to one `log.cleaner.backoff.ms` before Kafka's cleaner looks again,
  Millrace's is woken by the config change), and broker CPU seconds (the process and its
  descendants: Millrace's cleaner is a worker process) from the trigger to the stats line,
  per MB processed.
* **Produce while cleaning**: a confluent-kafka producer in its own process (`acks=1`,
  `linger.ms=5`, 100-byte records, as fast as it goes, at most 100,000 queued) writes to
  another 1-partition topic; records acknowledged per second and produce latency
  (librdkafka's, produce() to acknowledgement, so mostly time in the client's queue) over
  {args.idle_s:g} s with the cleaner idle, then over the cleaning round of another topic
  filled the same way (the round's own seconds, ending at its stats line).
* **Fetch while cleaning**: likewise a confluent-kafka consumer reading that topic from
  offset 0 (again from 0 at its end), records/s idle and during a third cleaning round. It
  sets `fetch.queue.backoff.ms=0` and `fetch.wait.max.ms=10`: with librdkafka's defaults
  the reader itself pauses for 0.5-1 s every few hundred thousand records and at each
  start-over, against either broker.
* **Fill**: the fills' own rate (confluent-kafka, `acks=1`, `linger.ms=20`, keyed records
  into the compacted topic, whose records each broker reads to refuse keyless ones).

With {os.cpu_count()} cores here, the cleaner competes with the client and the broker's
request handling for CPU, so "during / idle" is largely the CPU the cleaner takes from them.

Millrace / Kafka above 1 means more of the figure: faster for MB/s and records/s, slower
for seconds, latencies and CPU per MB.

| measure | Kafka | Millrace | Millrace / Kafka |
|---|---:|---:|---:|
{table(samples)}

Reproduce: `.venv/bin/{command}` (`make bench` runs `--mb 500 --keys 100000 --runs 3` with
`--value-bytes` 100, 200 and 1024).
"""
    replace_section(out, heading(args.value_bytes), section)


# --------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.compaction", description=__doc__)
    p.add_argument("--quick", action="store_true", help="reduced sizes, report into /tmp")
    p.add_argument("--mb", type=float, help="MB (2^20) of updates per cleaning (500; quick 50)")
    p.add_argument("--keys", type=int, help="distinct keys (100,000; quick 10,000)")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes of each value (100)")
    p.add_argument("--runs", type=int, help="runs per system (3; quick 1)")
    p.add_argument("--segment-mb", type=int, default=16, help="segment.bytes in MB (16)")
    p.add_argument("--idle-s", type=float, help="seconds measured with the cleaner idle (5; 2)")
    p.add_argument(
        "--warm-up", type=int, help="records of the broker warm-up (200,000; quick 100,000)"
    )
    p.add_argument("--warm-up-mb", type=float, help="MB of the cleaner warm-up round (40)")
    p.add_argument("--seed", type=int, default=20261125)
    p.add_argument("--no-fetch", dest="fetch", action="store_false", help="skip the fetch part")
    p.add_argument("--out", help="report (BENCHMARKS.md; --quick: " + str(QUICK_OUT) + ")")
    args = p.parse_args(argv)
    full = {"mb": 500.0, "keys": 100_000, "runs": 3, "idle_s": 5.0, "warm_up": 200_000}
    quick = {"mb": 50.0, "keys": 10_000, "runs": 1, "idle_s": 2.0, "warm_up": 100_000}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.warm_up_mb is None:
        args.warm_up_mb = 2.5 * args.segment_mb
    if args.segment_mb < 2:
        p.error("--segment-mb must be at least 2 (batches are up to 1 MB)")
    for name in ("mb", "warm_up_mb"):
        if getattr(args, name) <= args.segment_mb:
            p.error(f"--{name.replace('_', '-')} must exceed --segment-mb (one full segment)")
    if args.keys <= 0 or args.runs <= 0 or args.idle_s <= 0 or args.value_bytes <= 0:
        p.error("--keys, --value-bytes, --runs and --idle-s must be positive")
    if args.out is None:
        args.out = str(QUICK_OUT if args.quick else ROOT / "BENCHMARKS.md")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    bench = Bench(args)
    log(f"{len(bench.updates.order):,} updates of {args.keys:,} keys ({bench.updates.mb:,.0f} MB)")
    samples: dict[str, list[dict[str, float]]] = {"Kafka": [], "Millrace": []}
    with (
        tempfile.TemporaryDirectory(prefix="millrace-bench-compaction-") as t,
        both(Path(t), 1, args.warm_up, broker_settings(), CLEANER_LOG4J) as systems,
    ):
        for s in systems:
            bench.warm_up(s)
        for r, order in orders(systems, args.runs):
            for s in order:
                log(f"[compaction] run {r + 1}/{args.runs} {s.name}")
                samples[s.name].append(bench.run(s))
    write_report(Path(args.out), args, samples)
    log(f"done in {(time.perf_counter() - started) / 60:.1f} min: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
