"""The confluent-kafka (librdkafka) load generator: the Python client a Millrace user runs.

* :func:`produce` sends ``n`` 100-byte records as fast as the client allows and measures
  throughput and the produce latency librdkafka reports per record (``Message.latency()``:
  from ``produce()`` to the delivery report, i.e. time queued + the acks round trip).
* :func:`consume` reads ``n`` records from the start of a topic (catch-up read).
* :func:`end_to_end` produces at a fixed rate from a separate process and measures, in this
  process's consumer, the time from just before ``produce()`` (stamped into the record) to
  the record's arrival (same machine, same clock: ``time.time()``).

Everything here runs in the benchmark's main thread, except the paced producer of
:func:`end_to_end`, which is a child process (so the two clients do not share a GIL).
"""

from __future__ import annotations

import multiprocessing
import statistics
import struct
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from bench.basics import RECORD, progress

_STAMP = struct.Struct(">d")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (``q`` in [0, 100])."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


@dataclass(frozen=True, slots=True)
class Consumed:
    """``records`` of :data:`RECORD` in ``seconds``."""

    records: int
    seconds: float

    @property
    def records_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.records * len(RECORD) / self.seconds / 1e6


@dataclass(frozen=True, slots=True)
class Produced(Consumed):
    """As :class:`Consumed`, with the produce latency percentiles."""

    p50_ms: float
    p99_ms: float


@dataclass(frozen=True, slots=True)
class Latency:
    rate: int
    samples: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


def produce(
    bootstrap: str,
    topic: str,
    n: int,
    config: dict[str, Any] | None = None,
    partition: int | None = 0,
) -> Produced:
    """``n`` records of :data:`RECORD` (into ``partition``, or spread by librdkafka's
    partitioner when None); ``linger.ms=5``, ``acks=1`` unless ``config`` says otherwise."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
            **(config or {}),
        }
    )
    latencies: list[float] = []
    failures: list[object] = []

    def on_delivery(err: object, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            latencies.append(msg.latency())

    kwargs: dict[str, Any] = {"on_delivery": on_delivery}
    if partition is not None:
        kwargs["partition"] = partition
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, RECORD, **kwargs)
                break
            except BufferError:
                p.poll(0.005)
        if i % 50_000 == 0:
            p.poll(0)
            progress(f"    confluent-kafka produce {i:,}/{n:,}")
    if p.flush(600) != 0 or failures:
        raise SystemExit(f"{topic}: produce failed: {len(failures)} errors, e.g. {failures[:1]}")
    seconds = time.perf_counter() - t0
    latencies.sort()
    return Produced(n, seconds, percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3)


def consume(bootstrap: str, topic: str, n: int, partitions: int = 1) -> Consumed:
    """Read ``n`` records from offset 0 of the topic's partitions (assigned, no group)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-confluent-consume",
            "enable.auto.commit": False,
            "fetch.max.bytes": 52_428_800,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    t0 = time.perf_counter()
    deadline = t0 + 600
    try:
        while got < n and time.perf_counter() < deadline:
            for m in c.consume(min(10_000, n - got), 1.0):
                if m.error() is None:
                    got += 1
            progress(f"    confluent-kafka consume {got:,}/{n:,}")
        seconds = time.perf_counter() - t0
    finally:
        c.close()
    if got != n:
        raise SystemExit(f"consumed {got} of {n} records")
    return Consumed(n, seconds)


def _paced_producer(bootstrap: str, topic: str, rate: int, seconds: float) -> None:
    """Child process: ``rate`` records/s for ``seconds``, each stamped with ``time.time()``."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    pad = RECORD[: len(RECORD) - _STAMP.size]
    start = time.perf_counter()
    sent = 0
    total = int(rate * seconds)
    while sent < total:
        due = min(total, int((time.perf_counter() - start) * rate))
        while sent < due:
            p.produce(topic, _STAMP.pack(time.time()) + pad, partition=0)
            sent += 1
        p.poll(0)
        time.sleep(0.0005)
    p.flush(60)


def end_to_end(
    bootstrap: str, topic: str, rate: int, seconds: float, warmup_s: float = 2.0
) -> Latency:
    """Produce ``rate`` records/s for ``warmup_s + seconds`` (producer in a child process,
    ``acks=1``, ``linger.ms=0``) and consume them here; latencies of records sent after the
    warm-up."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-e2e",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_END)])
    c.consume(1, 1.0)  # the assignment's first fetch is under way before the producer starts
    total = int(rate * (warmup_s + seconds))
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(
        target=_paced_producer, args=(bootstrap, topic, rate, warmup_s + seconds), daemon=True
    )
    latencies: list[float] = []
    got = 0
    t_start = time.time()
    child.start()
    try:
        deadline = time.perf_counter() + warmup_s + seconds + 60
        while got < total and time.perf_counter() < deadline:
            # poll(), not consume(n): consume() waits for n records (or its timeout), which
            # would add the time to accumulate them to every latency.
            m = c.poll(0.2)
            if m is None or m.error() is not None:
                continue
            now = time.time()
            sent = _STAMP.unpack_from(m.value() or bytes(_STAMP.size))[0]
            got += 1
            if sent - t_start >= warmup_s:
                latencies.append(now - sent)
            if got % 10_000 == 0:
                progress(f"    end-to-end at {rate:,}/s: {got:,}/{total:,}")
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()
        c.close()
    if got < total:
        raise SystemExit(f"end-to-end: received {got} of {total} records")
    latencies.sort()
    return Latency(
        rate=rate,
        samples=len(latencies),
        p50_ms=statistics.median(latencies) * 1e3,
        p99_ms=percentile(latencies, 99) * 1e3,
        p999_ms=percentile(latencies, 99.9) * 1e3,
        max_ms=latencies[-1] * 1e3,
    )
