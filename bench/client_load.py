"""Client load beside a cleaning round, measured over time windows: a confluent-kafka
producer or consumer in a child process (so it does not share the benchmark's GIL) runs until
told to stop; its figures are then taken over windows the benchmark chose afterwards (with the
cleaner idle, and during the round), all in ``time.monotonic()`` seconds (one clock for every
process on Linux).

* Producer (:func:`producer_child`): as fast as it goes, ``acks=1``, ``linger.ms=5``,
  100-byte records into partition 0, at most 100,000 queued; it stamps the time of every
  :data:`MARK_EVERY`-th send and keeps librdkafka's latency of each record (produce() to
  acknowledgement); :func:`produce_windows` turns these into records acknowledged per second
  and latency percentiles per window.
* Consumer (:func:`fetcher_child`): reads a topic from offset 0, again from 0 at its end, and
  keeps (time, records read so far) after each ``consume()``; :func:`rate_between` gives the
  records per second over a window. ``fetch.queue.backoff.ms=0`` and ``fetch.wait.max.ms=10``:
  with librdkafka's defaults the reader stalls for 0.5-1 s every few hundred thousand
  records and at each start-over, on either broker, longer than a short cleaning round.

:class:`Load` is the parent's handle: ``started()`` once the child's first record went
through, ``stop(windows)`` for its figures. Used from the benchmark's main thread.
"""

from __future__ import annotations

import bisect
import math
import multiprocessing
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from bench.basics import RECORD
from bench.systems import System

MARK_EVERY = 256  # the producer child stamps the time of every MARK_EVERY-th send


@dataclass(frozen=True, slots=True)
class Window:
    """Produce figures over one time window (``time.monotonic()`` seconds)."""

    records_s: float
    p50_ms: float
    p99_ms: float


class LatencyHistogram:
    """Latencies counted in bins of :data:`RESOLUTION_S`: the percentiles of tens of millions
    of records without keeping them all."""

    RESOLUTION_S = 1e-5

    def __init__(self) -> None:
        self.bins: dict[int, int] = {}
        self.count = 0

    def add(self, seconds: float) -> None:
        b = round(seconds / self.RESOLUTION_S)
        self.bins[b] = self.bins.get(b, 0) + 1
        self.count += 1

    def percentile(self, q: float) -> float:
        """Nearest rank, as :func:`bench.loadgen.percentile` (seconds; NaN when empty)."""
        if not self.count:
            return math.nan
        rank = max(0, min(self.count - 1, round(q / 100 * self.count + 0.5) - 1))
        seen = 0
        for b in sorted(self.bins):
            seen += self.bins[b]
            if seen > rank:
                return b * self.RESOLUTION_S
        raise AssertionError("unreachable: the bins hold count records")


def produce_windows(
    marks: Sequence[float],
    latencies: Sequence[float],
    windows: Sequence[tuple[float, float]],
    mark_every: int = MARK_EVERY,
) -> list[Window]:
    """Records acknowledged per second, and the latencies of the records sent, within each
    window. Record ``i`` was sent at about ``marks[i // mark_every]`` (the producer stamps the
    time of every ``mark_every``-th send) and acknowledged ``latencies[i]`` seconds later
    (NaN: not delivered); delivery reports come in send order (one partition)."""
    if not marks:
        return [Window(0.0, math.nan, math.nan) for _ in windows]
    longest = max((x for x in latencies if not math.isnan(x)), default=0.0)
    out = []
    for t0, t1 in windows:
        # only records sent between t0 - longest and t1 can be acknowledged in the window
        first = max(0, bisect.bisect_left(marks, t0 - longest) - 1) * mark_every
        last = min(len(latencies), bisect.bisect_right(marks, t1) * mark_every)
        acked = 0
        sent = LatencyHistogram()
        for i in range(first, last):
            latency = latencies[i]
            if math.isnan(latency):  # not delivered
                continue
            at = marks[i // mark_every]
            if t0 <= at + latency < t1:
                acked += 1
            if t0 <= at < t1:
                sent.add(latency)
        out.append(Window(acked / (t1 - t0), sent.percentile(50) * 1e3, sent.percentile(99) * 1e3))
    return out


def count_at(times: Sequence[float], counts: Sequence[int], t: float) -> float:
    """A cumulative count at time ``t``, linearly interpolated between its samples."""
    if not times or t <= times[0]:
        return float(counts[0]) if counts else 0.0
    for i in range(1, len(times)):
        if t <= times[i]:
            span = times[i] - times[i - 1]
            share = (t - times[i - 1]) / span if span > 0 else 1.0
            return counts[i - 1] + share * (counts[i] - counts[i - 1])
    return float(counts[-1])


def rate_between(times: Sequence[float], counts: Sequence[int], t0: float, t1: float) -> float:
    """Records per second from a cumulative count trace over [t0, t1]."""
    return (count_at(times, counts, t1) - count_at(times, counts, t0)) / (t1 - t0)


def producer_child(bootstrap: str, topic: str, conn: Connection) -> None:
    """Child process: produce as fast as possible until told to stop, then report the
    figures over the windows the parent sends."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "queue.buffering.max.messages": 100_000,
        }
    )
    latencies = array("d")
    marks = array("d")
    nan = float("nan")

    def on_delivery(err: object, msg: Any) -> None:
        latencies.append(nan if err is not None else msg.latency())

    sent = 0
    announced = False
    while True:
        try:
            p.produce(topic, RECORD, partition=0, on_delivery=on_delivery)
        except BufferError:
            p.poll(0.005)
            continue
        if sent % MARK_EVERY == 0:
            marks.append(time.monotonic())
            p.poll(0)
            if not announced and latencies:
                conn.send("producing")
                announced = True
            if conn.poll():
                break
        sent += 1
    conn.recv()
    p.flush(120)
    windows = conn.recv()
    failed = sum(1 for x in latencies if math.isnan(x))
    conn.send((failed, produce_windows(marks, latencies, windows)))


def fetcher_child(bootstrap: str, topic: str, conn: Connection) -> None:
    """Child process: read ``topic`` from offset 0 (again from 0 at its end) until told to
    stop, then send the trace of (time, records read so far)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-compaction-fetch",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 52_428_800,
            # librdkafka's defaults would stall the reader for most of a second, whatever
            # the broker: after a full local queue it waits fetch.queue.backoff.ms (1 s)
            # before fetching again, and at the end of the topic its last fetch waits
            # fetch.wait.max.ms (500 ms) before the reader can start over.
            "fetch.queue.backoff.ms": 0,
            "fetch.wait.max.ms": 10,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    times, counts = array("d"), array("q")
    got = 0
    announced = False
    while not conn.poll():
        for m in c.consume(10_000, 0.2):
            err = m.error()
            if err is None:
                got += 1
            elif err.code() == KafkaError._PARTITION_EOF:
                c.assign([TopicPartition(topic, 0, 0)])
        times.append(time.monotonic())
        counts.append(got)
        if not announced and got:
            conn.send("fetching")
            announced = True
    c.close()
    conn.recv()
    conn.send((list(times), list(counts)))


class Load:
    """A producer or fetcher child process and its pipe."""

    def __init__(
        self, target: Callable[[str, str, Connection], None], system: System, topic: str
    ) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(system.bootstrap, topic, child), daemon=True)
        self.proc.start()
        child.close()

    def started(self, timeout_s: float = 60.0) -> None:
        if not self.conn.poll(timeout_s):
            self.kill()
            raise SystemExit("the load's child process did not start within 60 s")
        self.conn.recv()

    def stop(self, request: object = None, timeout_s: float = 300.0) -> Any:
        self.conn.send("stop")
        self.conn.send(request)
        if not self.conn.poll(timeout_s):
            self.kill()
            raise SystemExit("the load's child process did not report")
        result = self.conn.recv()
        self.proc.join(30)
        return result

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
