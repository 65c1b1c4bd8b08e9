"""The counts the request path records (Kafka's ``BrokerTopicStats`` and
``RequestChannel.Metrics``), and their export as Prometheus metric families.

What is recorded, and where (Kafka 3.9's rules; names in docs/metrics.md):

* per topic and for all topics (``kafka.server:type=BrokerTopicMetrics``):
  ``MessagesInPerSec`` (records a leader appended, an idempotent retry's duplicate not
  counted), ``BytesInPerSec`` (their batch bytes), ``TotalProduceRequestsPerSec`` (one per
  partition of a produce that reached the replica manager), ``FailedProduceRequestsPerSec``
  (those that failed, except for the errors Kafka does not count: not leader, unknown
  partition, record or batch too large, corrupt records, storage error),
  ``BytesRejectedPerSec`` (batches over ``max.message.bytes``), and for consumers' fetches
  ``BytesOutPerSec`` (record bytes sent), ``TotalFetchRequestsPerSec`` (one per partition read)
  and ``FailedFetchRequestsPerSec`` (reads that failed with an unexpected error). Recorded by
  the replica manager's ``append_records`` and the Fetch handler.
* for all topics only: ``ReplicationBytesInPerSec`` (what this broker's followers appended)
  and ``ReplicationBytesOutPerSec`` (record bytes sent to followers; as in Kafka 3.x, those are
  not in ``BytesOutPerSec``).
* per API (``kafka.network:type=RequestMetrics``): ``RequestsPerSec`` by request name and
  version, and the time from a request's arrival at the dispatcher to its response being
  ready (``TotalTimeMs``: the wait of an acks=all produce or a long-poll fetch included;
  a fetch is also counted as ``FetchConsumer`` or ``FetchFollower``, as Kafka does), as a
  histogram with :data:`LATENCY_BUCKETS_MS`.

Null object: :data:`NOOP_RECORDER` (a :class:`Recorder`) records nothing, and is what a
broker without ``metrics.http.listener`` uses, so metrics off costs a method call that does
nothing (the dispatcher also skips its clock reads when ``enabled`` is false).
:class:`MetricsRecorder` records.

Concurrency: event loop thread only: every method, :meth:`MetricsRecorder.families`
included (the scrape's collector calls it on the loop). Plain ints and dicts, no locks.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

__all__ = [
    "LATENCY_BUCKETS_MS",
    "NOOP_RECORDER",
    "FetchedPartition",
    "LatencyHistogram",
    "MetricsRecorder",
    "Recorder",
    "TopicCounters",
]

LATENCY_BUCKETS_MS: tuple[float, ...] = (
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    25.0,
    50.0,
    100.0,
    250.0,
    500.0,
    1000.0,
    2500.0,
    5000.0,
    10000.0,
)
"""Upper bounds (ms) of the request latency histogram's buckets (``+Inf`` added on export)."""

# Kafka's ReplicaManager.appendToLocalLog does not mark FailedProduceRequestsPerSec for these
_PRODUCE_NOT_FAILED = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.corrupt_message,
        ErrorCode.kafka_storage_error,
    }
)
# ... nor ReplicaManager.readFromLocalLog FailedFetchRequestsPerSec for these
_FETCH_NOT_FAILED = frozenset(
    {
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.offset_out_of_range,
        ErrorCode.inconsistent_topic_id,
        ErrorCode.unknown_topic_id,
        ErrorCode.topic_authorization_failed,
    }
)


@dataclass(slots=True)
class TopicCounters:
    """One topic's (or all topics') BrokerTopicMetrics counts since the broker started."""

    messages_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    total_produce_requests: int = 0
    total_fetch_requests: int = 0
    failed_produce_requests: int = 0
    failed_fetch_requests: int = 0
    bytes_rejected: int = 0


# (field of TopicCounters, Prometheus name, Kafka's JMX name)
_TOPIC_METRICS = (
    ("messages_in", "messagesin", "MessagesInPerSec"),
    ("bytes_in", "bytesin", "BytesInPerSec"),
    ("bytes_out", "bytesout", "BytesOutPerSec"),
    ("total_produce_requests", "totalproducerequests", "TotalProduceRequestsPerSec"),
    ("total_fetch_requests", "totalfetchrequests", "TotalFetchRequestsPerSec"),
    ("failed_produce_requests", "failedproducerequests", "FailedProduceRequestsPerSec"),
    ("failed_fetch_requests", "failedfetchrequests", "FailedFetchRequestsPerSec"),
    ("bytes_rejected", "bytesrejected", "BytesRejectedPerSec"),
)
assert {f.name for f in fields(TopicCounters)} == {m[0] for m in _TOPIC_METRICS}


class LatencyHistogram:
    """Counts of observations per bucket of :data:`LATENCY_BUCKETS_MS` (plus ``+Inf``),
    their sum and their number."""

    __slots__ = ("count", "counts", "sum_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.sum_ms = 0.0
        self.count = 0

    def observe(self, ms: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket ("le")
        self.counts[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.sum_ms += ms
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        """Prometheus's cumulative ``(le, count)`` buckets, ``+Inf`` last."""
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*LATENCY_BUCKETS_MS, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(running)))
        return out


class _RequestStats:
    """One request name's counts by version and its latency histogram."""

    __slots__ = ("by_version", "latency")

    def __init__(self) -> None:
        self.by_version: dict[int, int] = {}
        self.latency = LatencyHistogram()


class FetchedPartition(Protocol):
    """What is counted of one partition a fetch read (the replica manager's ``FetchResult``):
    the recorder stays a leaf that the request path's floors can use."""

    @property
    def tp(self) -> TopicPartition: ...

    @property
    def error(self) -> ErrorCode: ...

    @property
    def size(self) -> int:
        """Record bytes read."""
        ...


class Recorder:
    """The null recorder: the interface of :class:`MetricsRecorder`, recording nothing
    (``metrics.http.listener`` unset)."""

    enabled = False

    def produced(self, topic: str, records: int, nbytes: int) -> None:
        """A leader appended ``records`` records (``nbytes`` batch bytes) to ``topic``."""

    def produce_failed(self, topic: str, error: ErrorCode, nbytes: int) -> None:
        """An append to ``topic`` of ``nbytes`` failed with ``error``."""

    def fetched(self, results: Iterable[FetchedPartition], *, follower: bool) -> None:
        """A fetch read these partitions (``follower``: a replica's fetch)."""

    def replicated_in(self, nbytes: int) -> None:
        """A follower of this broker appended ``nbytes`` fetched from its leader."""

    def request_done(self, name: str, version: int, elapsed_ms: float) -> None:
        """A request named ``name`` (Kafka's request metric name) was answered."""

    def families(self) -> list[Metric]:
        """The recorded counts as Prometheus metric families (none here)."""
        return []


class MetricsRecorder(Recorder):
    """Records the counts of the module docstring in plain ints (event loop thread only)."""

    enabled = True

    def __init__(self) -> None:
        self.all_topics = TopicCounters()
        self.topics: dict[str, TopicCounters] = {}
        self.replication_bytes_in = 0
        self.replication_bytes_out = 0
        self.requests: dict[str, _RequestStats] = {}

    def _topic(self, topic: str) -> TopicCounters:
        counters = self.topics.get(topic)
        if counters is None:
            counters = self.topics[topic] = TopicCounters()
        return counters

    def produced(self, topic: str, records: int, nbytes: int) -> None:
        for c in (self._topic(topic), self.all_topics):
            c.total_produce_requests += 1
            c.messages_in += records
            c.bytes_in += nbytes

    def produce_failed(self, topic: str, error: ErrorCode, nbytes: int) -> None:
        failed = error not in _PRODUCE_NOT_FAILED
        rejected = nbytes if error == ErrorCode.message_too_large else 0
        for c in (self._topic(topic), self.all_topics):
            c.total_produce_requests += 1
            if failed:
                c.failed_produce_requests += 1
            c.bytes_rejected += rejected

    def fetched(self, results: Iterable[FetchedPartition], *, follower: bool) -> None:
        all_topics = self.all_topics
        for r in results:
            c = self._topic(r.tp.topic)
            c.total_fetch_requests += 1
            all_topics.total_fetch_requests += 1
            if r.error not in _FETCH_NOT_FAILED:
                c.failed_fetch_requests += 1
                all_topics.failed_fetch_requests += 1
            size = r.size
            if follower:
                self.replication_bytes_out += size
            else:
                c.bytes_out += size
                all_topics.bytes_out += size

    def replicated_in(self, nbytes: int) -> None:
        self.replication_bytes_in += nbytes

    def request_done(self, name: str, version: int, elapsed_ms: float) -> None:
        stats = self.requests.get(name)
        if stats is None:
            stats = self.requests[name] = _RequestStats()
        stats.by_version[version] = stats.by_version.get(version, 0) + 1
        stats.latency.observe(elapsed_ms)

    def forget_topic(self, topic: str) -> None:
        """Drop a deleted topic's series (Kafka removes its BrokerTopicMetrics)."""
        self.topics.pop(topic, None)

    def families(self) -> list[Metric]:
        out: list[Metric] = []
        for attr, name, jmx in _TOPIC_METRICS:
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}",
                f"kafka.server:type=BrokerTopicMetrics,name={jmx} (per topic, and for all "
                "topics without the topic label)",
                labels=["topic"],
            )
            family.add_metric([], getattr(self.all_topics, attr))
            for topic, counters in sorted(self.topics.items()):
                family.add_metric([topic], getattr(counters, attr))
            out.append(family)
        for name, jmx, value in (
            ("replicationbytesin", "ReplicationBytesInPerSec", self.replication_bytes_in),
            ("replicationbytesout", "ReplicationBytesOutPerSec", self.replication_bytes_out),
        ):
            out.append(
                CounterMetricFamily(
                    f"kafka_server_brokertopicmetrics_{name}",
                    f"kafka.server:type=BrokerTopicMetrics,name={jmx}",
                    value=value,
                )
            )
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=R,version=V",
            labels=["request", "version"],
        )
        latency = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "kafka.network:type=RequestMetrics,name=TotalTimeMs,request=R: milliseconds from "
            "a request's arrival to its response (delayed produce and fetch waits included)",
            labels=["request"],
        )
        for name, stats in sorted(self.requests.items()):
            for version, n in sorted(stats.by_version.items()):
                requests.add_metric([name, str(version)], n)
            latency.add_metric([name], stats.latency.cumulative(), stats.latency.sum_ms)
        out += [requests, latency]
        return out


NOOP_RECORDER = Recorder()
"""The recorder of a broker without ``metrics.http.listener``."""
