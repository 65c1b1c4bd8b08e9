"""The console's short memory: a background thread samples the cluster every
``interval_s`` seconds and keeps the last ``capacity`` samples in memory (nothing on disk).

A sample holds, per topic, the sum of its partitions' log end offsets (ListOffsets latest),
and per consumer group its total lag (end offset - committed, summed). The produce rate of a
topic between two samples is the growth of its end offsets divided by the time between them
(records per second; transaction markers count as records, as in Kafka's offsets). A sample
that failed (a broker down, a time-out) is recorded as a gap, and its error kept for the
page.

Concurrency: the sampler thread is the only writer; pages read copies of the samples taken
under ``self._lock``. :meth:`Sampler.stop` ends the thread (it waits at most one interval).
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

from broker.cli.web_console.cluster_source import ClusterSource, error_text
from broker.cli.web_console.group_source import group_lags
from broker.types import TopicPartition

log = logging.getLogger(__name__)

Series = dict[str, list[tuple[float, float]]]


@dataclass(frozen=True, slots=True)
class Sample:
    time_s: float
    topic_ends: dict[str, int]
    group_lags: dict[str, int]


class Sampler:
    """The background sampler (see the module docstring)."""

    def __init__(self, source: ClusterSource, interval_s: float, capacity: int = 360) -> None:
        self.source = source
        self.interval_s = interval_s
        self._samples: deque[Sample] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval_s + self.source.timeout_s + 5)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                sample = self.take()
                with self._lock:
                    self._samples.append(sample)
                self.last_error = None
            except Exception as exc:  # noqa: BLE001 - any failure is a gap in the history, never fatal
                self.last_error = error_text(exc)
                log.info("console sampler: %s", self.last_error)
            self._stop.wait(max(self.interval_s - (time.monotonic() - began), 0.1))

    def take(self) -> Sample:
        cluster = self.source.cluster()
        partitions = [p for t in cluster.topics if not t.internal for p in t.partitions]
        ends, _errors = self.source.offsets(
            [TopicPartition(p.topic, p.partition) for p in partitions],
            "latest",
        )
        topic_ends: dict[str, int] = {}
        for tp, end in ends.items():
            topic_ends[tp.topic] = topic_ends.get(tp.topic, 0) + end
        return Sample(time.time(), topic_ends, group_lags(self.source))

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def rates(self, topic: str | None = None) -> Series:
        """Records per second per topic (only ``topic`` if given)."""
        samples = self.samples()
        out: Series = {}
        for a, b in itertools.pairwise(samples):
            dt = b.time_s - a.time_s
            if dt <= 0:
                continue
            for name, end in b.topic_ends.items():
                if (topic is not None and name != topic) or name not in a.topic_ends:
                    continue
                out.setdefault(name, []).append((b.time_s, max(end - a.topic_ends[name], 0) / dt))
        return out

    def lags(self, group: str | None = None) -> Series:
        out: Series = {}
        for s in self.samples():
            for name, lag in s.group_lags.items():
                if group is None or name == group:
                    out.setdefault(name, []).append((s.time_s, float(lag)))
        return out
