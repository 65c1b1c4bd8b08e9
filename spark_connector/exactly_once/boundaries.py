"""Whole micro-batches for readers: the progress records of ``__millrace_batches``
(``docs/exactly-once.md``, section "Whole micro-batches for readers").

Format
------
When the exactly-once sink commits batch ``N``, its driver transaction (the one that commits
the source offsets) also produces, for every output topic ``T`` the batch wrote, one *progress
record* to the compacted topic :data:`PROGRESS_TOPIC`:

* key: ``T`` (UTF-8), in partition ``murmur2(T) % partitions`` (Kafka's default partitioner);
* value: JSON ``{"v": 1, "topic": T, "sink": <prefix>-<sinkid>, "batch": N, "time": <ms>,
  "cut": [c0, c1, ...]}``, one ``c_p`` per partition of ``T``: the offset after the last record
  of ``T[p]`` that belongs to the state after batch ``N`` (:func:`next_cut`).

The record becomes visible to ``read_committed`` readers with the driver transaction, which
ends only after every task transaction of the batch is complete, so reading each ``T[p]`` up to
``c_p`` (read_committed) gives the output through batch ``N`` exactly: a *boundary*.

Reading
-------
:class:`ProgressLog` reads ``T``'s partition of the progress topic backwards in growing windows
(256, 1024, ... offsets before its last stable offset) until it holds what it was asked for:
the newest boundary (:meth:`ProgressLog.latest`), the boundary after a given batch
(:meth:`ProgressLog.at_batch`), or the first boundary past a stream's position
(:meth:`ProgressLog.after`). Compaction keeps the newest record of ``T`` and everything in the
active segment (1 MiB), so older batches eventually become unavailable; asking for one fails
naming the oldest and newest batches held.

Concurrency: the pure functions are safe anywhere; a :class:`ProgressLog` belongs to one thread
(it owns its connections).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_connector.kafka.cluster import Cluster
from spark_connector.kafka.errors import AUTHORIZATION_FAILED, error_name
from spark_connector.kafka.topics import create_topic
from spark_connector.records.partitioner import partition_for_key

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity
    from spark_connector.kafka.producer import BatchProducer

__all__ = [
    "PROGRESS_PARTITIONS",
    "PROGRESS_TOPIC",
    "Boundary",
    "BoundaryError",
    "ProgressLog",
    "boundaries_of",
    "ensure_progress_topic",
    "next_cut",
    "produce_boundaries",
    "progress_partition",
]

log = logging.getLogger(__name__)

PROGRESS_TOPIC = "__millrace_batches"
PROGRESS_PARTITIONS = 10
PROGRESS_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(1 << 20),
    "compression.type": "producer",
}
_VERSION = 1
_FIRST_WINDOW = 256


class BoundaryError(ValueError):
    """A boundary a reader asked for that the progress topic does not hold (the message names
    the batches it holds), or a progress topic that cannot be read."""


@dataclass(frozen=True, slots=True)
class Boundary:
    """One progress record: topic ``topic`` after batch ``batch`` of sink ``sink``."""

    topic: str
    sink: str
    batch: int
    time_ms: int
    cut: tuple[int, ...]
    offset: int = -1
    """Where the record is in the progress topic (-1: not written yet)."""

    @property
    def partitions(self) -> int:
        return len(self.cut)

    @property
    def retired(self) -> bool:
        """A tombstone: the sink writing the topic turned boundaries off (``batchBoundaries=
        false``); older boundaries no longer apply. (A live boundary always names its sink;
        its batch may be -1: the first boundary of a sink whose batch 0 is being committed.)"""
        return not self.sink

    @staticmethod
    def retirement(topic: str, offset: int = -1) -> Boundary:
        return Boundary(topic, "", -1, 0, (), offset)

    def end(self, partition: int) -> int:
        """Where ``partition`` ends at this boundary (0 for a partition created after it)."""
        return self.cut[partition] if 0 <= partition < len(self.cut) else 0

    def encode(self) -> tuple[bytes, bytes | None]:
        """The record's key and value (None: a retirement's tombstone)."""
        if self.retired:
            return self.topic.encode(), None
        value = {
            "v": _VERSION,
            "topic": self.topic,
            "sink": self.sink,
            "batch": self.batch,
            "time": self.time_ms,
            "cut": list(self.cut),
        }
        return self.topic.encode(), json.dumps(value, separators=(",", ":")).encode()

    @staticmethod
    def decode(key: bytes | None, value: bytes | None, offset: int = -1) -> Boundary | None:
        """The boundary a record holds; None for a record that is not one (a null value, an
        unknown version, a malformed value: skipped, never fatal)."""
        if key is None or value is None:
            return None
        try:
            data = json.loads(value)
            if not isinstance(data, dict) or data.get("v") != _VERSION:
                return None
            topic = str(data["topic"])
            if topic.encode() != key:
                return None
            cut = tuple(int(c) for c in data["cut"])
            sink = str(data["sink"])
            if not sink:
                return None
            return Boundary(topic, sink, int(data["batch"]), int(data["time"]), cut, offset)
        except (ValueError, KeyError, TypeError):
            log.debug("millrace: skipping a malformed progress record at offset %d", offset)
            return None

    def describe(self) -> str:
        return f"batch {self.batch} of sink {self.sink}"


def progress_partition(topic: str, partitions: int = PROGRESS_PARTITIONS) -> int:
    """The partition of the progress topic that holds ``topic``'s records."""
    return partition_for_key(topic.encode(), partitions)


def next_cut(
    previous: Boundary | None,
    partitions: int,
    written: Mapping[int, int],
    stable: Mapping[int, int],
) -> tuple[int, ...]:
    """The cut of a topic of ``partitions`` partitions after a batch: per partition, the
    largest of the previous boundary's end, the offset after the batch's last record there
    (``written``) and the partition's last stable offset once the batch's markers are written
    (``stable``: records of the topic's other writers and of earlier writers, so that a
    partition this sink never wrote is read whole). Never below the previous cut."""
    return tuple(
        max(
            previous.end(p) if previous is not None else 0,
            written.get(p, 0),
            stable.get(p, 0),
        )
        for p in range(partitions)
    )


# bootstrap servers -> the progress topic's partition count, once seen (it never changes)
_progress_counts: dict[str, int] = {}


def ensure_progress_topic(cluster: Cluster) -> int:
    """The progress topic's partition count, creating the topic first when it does not exist
    (replication factor min(3, brokers), ``min.insync.replicas`` min(2, that)). Remembered
    per process and cluster once seen."""
    known = _progress_counts.get(cluster.bootstrap_text)
    if known:
        return known
    cluster.refresh([PROGRESS_TOPIC])
    count = cluster.partition_count(PROGRESS_TOPIC)
    if count > 0:
        _progress_counts[cluster.bootstrap_text] = count
        return count
    replicas = max(1, min(3, len(cluster.brokers)))
    configs = dict(PROGRESS_CONFIGS, **{"min.insync.replicas": str(min(2, replicas))})
    log.info("millrace sink: creating %s (replication factor %d)", PROGRESS_TOPIC, replicas)
    create_topic(cluster, PROGRESS_TOPIC, PROGRESS_PARTITIONS, replicas, configs)
    return cluster.partition_count(PROGRESS_TOPIC)


def _dominates(b: Boundary, start: Mapping[int, int]) -> bool:
    """Whether ``b`` ends at or after ``start`` in every partition it has, and after it in
    at least one: the next whole batch for a stream positioned at ``start``."""
    ahead = False
    for p, c in enumerate(b.cut):
        s = start.get(p, 0)
        if c < s:
            return False
        ahead = ahead or c > s
    return ahead


def _at_or_before(b: Boundary, start: Mapping[int, int]) -> bool:
    return b.retired or all(c <= start.get(p, 0) for p, c in enumerate(b.cut))


def _current(held: list[Boundary]) -> list[Boundary]:
    """The boundaries after the newest retirement (none when it is the newest record)."""
    for i in range(len(held) - 1, -1, -1):
        if held[i].retired:
            return held[i + 1 :]
    return held


_warned_unauthorized = False


def _unauthorized(code: int) -> None:
    global _warned_unauthorized
    if not _warned_unauthorized:
        _warned_unauthorized = True
        log.warning(
            "millrace: %s: %s: reads end at the end offsets instead of micro-batch boundaries "
            "(grant the user READ and DESCRIBE on topic %s)",
            PROGRESS_TOPIC,
            error_name(code),
            PROGRESS_TOPIC,
        )


class ProgressLog:
    """Reads the boundaries of topics from the progress topic (see the module docstring).
    One thread; a context manager."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 30.0,
        client_id: str = "millrace-boundaries",
        cluster: Cluster | None = None,
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.client_id = client_id
        # ``cluster``: the caller's metadata client to share (not closed here), whose security
        # is used; ``security``: TLS and SASL of a cluster made here
        self._owns_cluster = cluster is None
        self._cluster = cluster or Cluster(
            bootstrap, client_id=client_id, request_timeout_s=timeout_s, security=security
        )
        self._count: int | None = None

    def close(self) -> None:
        if self._owns_cluster:
            self._cluster.close()

    def __enter__(self) -> ProgressLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _partitions(self) -> int:
        """The progress topic's partition count (0: it does not exist)."""
        if self._count is None:

            def attempt() -> int:
                self._cluster.refresh([PROGRESS_TOPIC])
                info = self._cluster.topics.get(PROGRESS_TOPIC)
                if info is not None and info.error in AUTHORIZATION_FAILED:
                    _unauthorized(info.error)
                    return 0
                return self._cluster.partition_count(PROGRESS_TOPIC)

            self._count = self._cluster.retrying(f"Metadata({PROGRESS_TOPIC})", attempt)
        return self._count

    # --- reading -----------------------------------------------------------------------------

    def stable_ends(self, topic: str) -> dict[int, int]:
        """``topic``'s last stable offsets now (partition -> offset; empty when it does not
        exist). A reader that takes them *before* looking up the boundaries and finds none
        may read up to them: a sink's first batch into a topic commits its first boundary
        before any of its output is visible, so these offsets hold nothing of a batch."""
        from spark_connector.kafka.topics import end_offsets

        return end_offsets(self._cluster, topic, read_committed=True)

    def scan(self, topic: str, enough: Callable[[list[Boundary]], bool]) -> list[Boundary]:
        """``topic``'s boundaries, oldest first, read backwards from the newest until
        ``enough(held)`` or the start of the log."""
        from spark_connector.kafka.fetcher import PartitionFetcher

        count = self._partitions()
        if count <= 0:
            return []
        partition = progress_partition(topic, count)
        deadline = time.monotonic() + self.timeout_s
        held: list[Boundary] = []
        with PartitionFetcher(
            self.bootstrap,
            PROGRESS_TOPIC,
            partition,
            read_committed=True,
            client_id=self.client_id,
            timeout_s=self.timeout_s,
            max_wait_ms=0,
            partition_max_bytes=1 << 20,
            cluster=self._cluster,
        ) as fetcher:
            low, high = fetcher.watermarks(deadline)
            window = _FIRST_WINDOW
            while high > low:
                lo = max(low, high - window)
                held = self._read(fetcher, topic, lo, high, deadline) + held
                if held and enough(held):
                    break
                high = lo
                window *= 4
        return held

    def _read(
        self, fetcher: object, topic: str, lo: int, hi: int, deadline: float
    ) -> list[Boundary]:
        """The boundaries of ``topic`` at offsets ``lo <= offset < hi``."""
        from spark_connector.kafka import fetcher as f
        from spark_connector.records.decoder import committed_records, iter_batches

        assert isinstance(fetcher, f.PartitionFetcher)
        key = topic.encode()
        out: list[Boundary] = []
        position = lo
        delay = 0.02
        while position < hi:
            result = fetcher.fetch(position)
            code = result.error_code
            if code == f.OFFSET_OUT_OF_RANGE:
                low, _ = fetcher.watermarks(deadline)
                if low <= position:
                    raise BoundaryError(
                        f"{PROGRESS_TOPIC}: offset {position} is out of range (log starts at {low})"
                    )
                position = low
                continue
            if code != f.NONE and code not in f.RETRIABLE and code != f.CONNECTION_ERROR:
                raise BoundaryError(f"reading {PROGRESS_TOPIC}: {f.error_name(code)}")
            blob = result.records
            batches = list(iter_batches(blob)) if code == f.NONE and blob is not None else []
            if not batches:
                if code == f.NONE and 0 <= result.last_stable_offset <= position:
                    break  # nothing more is stable below hi (hi was an older answer)
                if time.monotonic() + delay > deadline:
                    raise BoundaryError(
                        f"reading {PROGRESS_TOPIC}: no answer at offset {position} within "
                        f"{self.timeout_s:.0f} s (last: {f.error_name(code) if code else 'empty'})"
                    )
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            assert blob is not None
            for offset, k, value in committed_records(blob, result.aborted):
                if lo <= offset < hi and k == key:
                    b = Boundary.retirement(topic, offset) if value is None else None
                    b = b or Boundary.decode(k, value, offset)
                    if b is not None:
                        out.append(b)
            position = max(position, batches[-1].next_offset)
        return out

    def latest(self, topic: str) -> Boundary | None:
        """The newest boundary of ``topic`` (None: no sink writes it, or the sink turned
        boundaries off)."""
        held = self.scan(topic, lambda held: True)
        return held[-1] if held and not held[-1].retired else None

    def at_batch(self, topic: str, batch: int) -> Boundary:
        """The boundary after batch ``batch`` of the sink that wrote ``topic`` last: its record
        of that batch, or (a batch that wrote nothing to ``topic``) its newest record of an
        earlier batch. :class:`BoundaryError` names the batches held when there is none."""
        newest: list[Boundary] = []

        def enough(held: list[Boundary]) -> bool:
            if not newest:
                newest.append(held[-1])
            sink = newest[0].sink
            return any(b.sink == sink and b.batch <= batch for b in held)

        held = _current(self.scan(topic, enough))
        if not held:
            raise BoundaryError(
                f"option 'endingBatch' is {batch}, but topic '{topic}' has no batch boundaries: "
                "it is not written by the exactly-once sink (use endingBatch=none or "
                "endingOffsets)"
            )
        sink = held[-1].sink
        mine = [b for b in held if b.sink == sink]
        if batch > mine[-1].batch or batch < mine[0].batch:
            raise BoundaryError(
                f"option 'endingBatch': batch {batch} of topic '{topic}' is not available: "
                f"{PROGRESS_TOPIC} holds batches {mine[0].batch} (the oldest; older ones were "
                f"compacted away) to {mine[-1].batch} (the newest) of sink {sink}"
            )
        return [b for b in mine if b.batch <= batch][-1]

    def after(self, topic: str, start: Mapping[int, int]) -> tuple[Boundary | None, bool]:
        """The first boundary of ``topic`` past ``start`` (partition -> next offset to read): a
        whole batch for a stream to read next, or None while there is none; and whether
        ``topic`` has boundaries at all. When the boundaries right after ``start`` were
        compacted away, the oldest one held past it."""
        held = _current(self.scan(topic, lambda held: _at_or_before(held[0], start)))
        for b in held:
            if _dominates(b, start):
                return b, True
        return None, bool(held)


def boundaries_of(
    progress: ProgressLog, topics: Iterable[str], batch: int | None = None
) -> dict[str, Boundary]:
    """The boundary of every topic in ``topics`` that a sink writes: the newest, or the one
    after batch ``batch``. Topics no sink writes are left out."""
    out: dict[str, Boundary] = {}
    for topic in sorted(set(topics)):
        if batch is None:
            found = progress.latest(topic)
            if found is not None:
                out[topic] = found
        else:
            out[topic] = progress.at_batch(topic, batch)
    return out


def produce_boundaries(
    producer: BatchProducer, boundaries: Iterable[Boundary], partitions: int
) -> None:
    """Append ``boundaries`` as progress records to ``producer`` (the driver's transactional
    producer; ``partitions``: the progress topic's partition count), one record batch per
    progress partition, and wait until they are acknowledged."""
    from spark_connector.records.encoder import build_batch, encode_key_values

    by_partition: dict[int, list[Boundary]] = {}
    for b in boundaries:
        by_partition.setdefault(progress_partition(b.topic, partitions), []).append(b)
    for partition, items in sorted(by_partition.items()):
        records = encode_key_values([b.encode() for b in items])
        producer.append(
            PROGRESS_TOPIC,
            partition,
            build_batch(
                records,
                len(items),
                producer_id=producer.producer_id,
                producer_epoch=producer.producer_epoch,
                base_sequence=producer.next_sequence(PROGRESS_TOPIC, partition),
                transactional=True,
            ),
            len(items),
        )
    producer.flush()
