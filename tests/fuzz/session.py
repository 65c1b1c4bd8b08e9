"""One whole fuzz session against a running cluster: set-up, attack, and the final checks.

:func:`fuzz_session` creates the fuzz topics (``fuzz-a`` with 2 partitions, ``fuzz-b``,
``fuzz-c`` compacted) and a canary topic, starts the canary, runs the :class:`Runner`, then
checks what must hold afterwards:

* the broker process is alive and the canary made progress without an error;
* every segment of every partition on disk passes :mod:`tests.fuzz.logcheck`;
* a real client (confluent-kafka) reads every fuzz partition from offset 0 to its high
  watermark without an error;
* the broker's output has no traceback (a handler that raised is a bug even though the
  dispatcher only closed that connection);
* the broker's peak RSS grew at most ``rss_budget_mb`` above its RSS before the run
  (:func:`rss_budget`: working set + two frame limits per connection + twice the
  decompression bound).

Concurrency: call from one thread; it blocks until the run is over.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from broker.log import log_validator
from tests.fuzz import logcheck, strategies
from tests.fuzz.canary import Canary
from tests.fuzz.runner import Mix, Runner, Stats, pid_alive

FUZZ_PROPS = {
    "socket.request.max.bytes": "1048576",
    "message.max.bytes": "1048588",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "log.segment.bytes": "4194304",
    "offsets.topic.num.partitions": "3",
}
_PROBLEM = re.compile(r"Traceback|handler for .* failed|append to .* failed| ERROR ")


@dataclass
class SessionReport:
    stats: Stats
    problems: list[str] = field(default_factory=list)
    log: logcheck.LogReport | None = None
    canary_round_trips: int = 0
    canary_max_latency_s: float = 0.0
    consumed: int = 0
    broker_errors: list[str] = field(default_factory=list)
    rss_budget_mb: int = 0

    def summary(self) -> dict[str, Any]:
        s = self.stats
        return {
            "requests": s.requests,
            "answered": s.answered,
            "no_response_acks0": s.no_response,
            "connections_closed": s.closed,
            "unattributed": s.unattributed,
            "connections": s.connections,
            "failures": sum(s.failure_kinds.values()),
            "broker_crashes": sum(1 for f in s.failures if "is gone" in f),
            "broker_rss_start_mb": round(s.broker_rss_start_kb / 1024, 1),
            "broker_peak_rss_mb": round(s.broker_peak_rss_kb / 1024, 1),
            "broker_rss_growth_budget_mb": self.rss_budget_mb,
            "seconds": s.seconds,
            "requests_per_second": round(s.requests / s.seconds) if s.seconds else 0,
            "seed": s.seed,
            "log_partitions": self.log.partitions if self.log else 0,
            "log_batches": self.log.batches if self.log else 0,
            "log_records": self.log.records if self.log else 0,
            "log_problems": len(self.log.problems) if self.log else 0,
            "consumed_by_client": self.consumed,
            "canary_round_trips": self.canary_round_trips,
            "canary_max_latency_s": round(self.canary_max_latency_s, 2),
            "broker_errors_logged": len(self.broker_errors),
        }


MAX_REQUEST_MB = int(FUZZ_PROPS["socket.request.max.bytes"]) // 2**20
WORKING_SET_MB = 96  # what a broker grows to serving this mix (topics, groups, caches, code)
# glibc keeps freed frame-sized buffers in its heap once its mmap threshold has risen, so a
# peak also holds some of the request buffers of earlier moments
ALLOCATOR_SLACK_MB = 64


def rss_budget(connections: int) -> int:
    """How much the broker's peak RSS may grow during a run, in MiB: its working set, two
    frame limits of request bytes per connection (the runner's window, and the frame being
    read), twice the decompression bound (a codec may hold its output twice while it
    finishes) and the allocator's slack; 236 MiB for 6 connections and 1 MiB frames. The
    amplification this guards against is of another order: a claimed array count cost
    264 GB, a claimed partition count 22 GB, before they were fixed."""
    decompress_mb = log_validator.MAX_DECOMPRESSED_BYTES // 2**20
    return (
        WORKING_SET_MB + connections * 2 * MAX_REQUEST_MB + 2 * decompress_mb + ALLOCATOR_SLACK_MB
    )


def _create_topics(cluster: Any) -> str:
    """The fuzz topics (kept if an earlier test of the module's cluster made them; the
    fuzzer's own CreateTopics may have) and a fresh canary topic."""
    for name, partitions, config in (
        ("fuzz-a", 2, None),
        ("fuzz-b", 1, None),
        ("fuzz-c", 1, {"cleanup.policy": "compact"}),
    ):
        try:
            cluster.create_topic(name, partitions, config)
        except Exception as exc:
            if "exist" not in str(exc).lower():
                raise
    canary_topic = f"canary-{uuid.uuid4().hex}"
    cluster.create_topic(canary_topic, 1)
    return canary_topic


def consume_all(bootstrap: str, topic: str, timeout_s: float = 120.0) -> int:
    """Read every partition of ``topic`` from its log start to its high watermark; raise on
    any error. Returns the records read (a topic the fuzzer deleted meanwhile has none)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fuzz-check-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        total = 0
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            raise AssertionError(f"{topic}: no metadata ({meta and meta.error})")
        for p in sorted(meta.partitions):
            pm = meta.partitions[p]
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            except KafkaException as exc:
                time.sleep(2.0)
                again = consumer.list_topics(topic, timeout=30).topics.get(topic)
                if again is None or again.error is not None or p not in again.partitions:
                    # deleted meanwhile (a mutated DeleteTopics may name a fuzz topic, and
                    # deletion finishes after the run): nothing left to read
                    return total
                raise AssertionError(
                    f"{topic}[{p}] (leader {pm.leader}, replicas {pm.replicas}, isr {pm.isrs}): "
                    f"{exc}"
                ) from exc
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            deadline = time.monotonic() + timeout_s
            position = low
            while position < high:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{topic}[{p}]: stuck at {position} of {high}")
                msg = consumer.poll(1.0)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        break  # what is left below the high watermark is control records
                    raise AssertionError(f"{topic}[{p}]: consumer error {err}")
                position = (msg.offset() or 0) + 1
                total += 1
        return total
    finally:
        consumer.close()


def _broker_problems(cluster: Any) -> list[str]:
    out = []
    for b in cluster.json.get("brokers", []):
        path = b.get("out")
        if not path or not Path(path).exists():
            continue
        lines = Path(path).read_text(errors="replace").splitlines()
        for i, line in enumerate(lines):
            if _PROBLEM.search(line):
                out.append("\n".join(lines[max(0, i - 2) : i + 12]))
    return out


def fuzz_session(
    cluster: Any,
    *,
    total: int,
    seed: int,
    connections: int = 6,
    window: int = 32,
    rss_budget_mb: int | None = None,
    mix: Mix | None = None,
    progress_every: int = 0,
    fail_fast: bool = True,
) -> SessionReport:
    canary_topic = _create_topics(cluster)
    pid = cluster.broker_pid()
    canary = Canary(cluster.bootstrap, canary_topic)
    canary.start()
    runner = Runner(
        cluster.host,
        cluster.port,
        pid,
        seed=seed,
        total=total,
        connections=connections,
        window=window,
        mix=mix,
        canary=canary,
        progress_every=progress_every,
        fail_fast=fail_fast,
    )
    try:
        stats = runner.run()
    finally:
        canary.stop()
    report = SessionReport(stats, canary_round_trips=canary.round_trips)
    report.canary_max_latency_s = canary.max_latency_s
    canary.close()
    report.problems.extend(stats.failures)
    report.problems.extend(f"canary: {e}" for e in canary.errors)
    if not pid_alive(pid):
        report.problems.append(f"broker pid {pid} died")
        return report
    growth_mb = (stats.broker_peak_rss_kb - stats.broker_rss_start_kb) / 1024
    if rss_budget_mb is None:
        rss_budget_mb = rss_budget(connections)
    report.rss_budget_mb = rss_budget_mb
    if growth_mb > rss_budget_mb:
        report.problems.append(
            f"broker peak RSS grew {growth_mb:.0f} MiB during the run (budget {rss_budget_mb} MiB)"
        )
    time.sleep(1.0)  # let the last appends and fetches settle
    report.log = logcheck.check_log_dirs(
        [Path(d) for d in cluster.broker(1)["log_dirs"]], compacted=frozenset({"fuzz-c"})
    )
    report.problems.extend(f"log: {p}" for p in report.log.problems[:20])
    for topic in (*strategies.PRODUCE_TOPICS, canary_topic):
        try:
            report.consumed += consume_all(cluster.bootstrap, topic)
        except (AssertionError, KafkaException) as exc:
            report.problems.append(f"consume: {exc}")
    report.broker_errors = _broker_problems(cluster)
    report.problems.extend(f"broker logged: {e}" for e in report.broker_errors[:10])
    return report


__all__ = ["FUZZ_PROPS", "SessionReport", "consume_all", "fuzz_session", "strategies"]
