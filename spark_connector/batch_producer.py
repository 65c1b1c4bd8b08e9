"""An idempotent Kafka producer of whole record batches: the Spark writer's fast path.

Theory of operation
-------------------
The writer encodes each Arrow batch's rows into v2 record batches, one per partition
(:mod:`spark_connector.record_encoder`), and hands them to :meth:`BatchProducer.append`;
:meth:`BatchProducer.flush` returns when every batch is acknowledged, or raises
:class:`ProduceError`. It speaks the standard protocol, so it writes to Apache Kafka as to
Millrace: Metadata v9 for the partitions' leaders, InitProducerId v1 (no transactional id)
for an idempotent producer id, and Produce v7 with ``acks`` -1 or 1.

Ordering and retries follow the idempotent Java producer with one request in flight per
partition: each partition's batches wait in a queue in the order they were appended, each
numbered with the partition's next sequence when it is appended, and only the head of a
queue is ever sent. A Produce request to a broker carries the heads of the queues it leads
(Kafka allows one batch per partition per request), and each broker connection has at most
one request in flight. A batch leaves its queue when its partition answers NONE (or
DUPLICATE_SEQUENCE_NUMBER: the broker already holds it); a retriable error (the leader moved,
not enough replicas, a timeout, a lost connection) leaves it at the head, the metadata is
looked up again, and the same bytes (same sequence numbers) are sent again after
``retry.backoff.ms``, so a batch written before its acknowledgement was lost is not written
twice. Any other error, or a batch still unacknowledged ``delivery.timeout.ms`` after it was
appended, fails the producer: :meth:`flush` raises, naming the partition and the error.
Without idempotence (``acks=1`` or ``enable.idempotence=false``) a retry may write a batch
twice, as in any Kafka producer: at-least-once.

Memory: :meth:`append` sends what it can without waiting, and waits for acknowledgements
while more than ``buffer_bytes`` of batches are queued.

Concurrency: one producer belongs to one thread (a Spark task's); it uses blocking sockets
and ``select``. Nothing here is pickled.
"""

from __future__ import annotations

import datetime
import logging
import select
import struct
import time
from collections import deque
from dataclasses import dataclass, field

from spark_connector.wire import Connection, parse_bootstrap

__all__ = ["BatchProducer", "ProduceError"]

log = logging.getLogger(__name__)

PRODUCE, PRODUCE_VERSION = 0, 7
NONE = 0
DUPLICATE_SEQUENCE_NUMBER = 46
_ALWAYS_RETRIABLE = frozenset({3, 5, 6, 7, 13, 19, 20, 56, 74, 75})
"""UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), KAFKA_STORAGE_ERROR,
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH: the Java producer retries these."""
_INIT_RETRIABLE = _ALWAYS_RETRIABLE | {14, 15, 16, 51}
"""... and for InitProducerId: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR, CONCURRENT_TRANSACTIONS (a new Kafka broker answers these at first)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_RESPONSE = struct.Struct(">ihqqq")  # index, error, base offset, append time, start


class ProduceError(RuntimeError):
    """A batch the cluster refused, or did not acknowledge in time."""


def error_name(code: int) -> str:
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


def _string(value: str) -> bytes:
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


@dataclass(slots=True)
class _Batch:
    data: bytes
    records: int
    deadline: float
    attempts: int = 0
    last_error: str = ""


@dataclass(slots=True)
class _Partition:
    topic: str
    index: int
    queue: deque[_Batch] = field(default_factory=deque)
    sequence: int = 0
    leader: int = -1
    in_flight: bool = False
    retry_at: float = 0.0


class BatchProducer:
    """Sends record batches to partition leaders (see the module docstring). One thread."""

    def __init__(
        self,
        bootstrap: str,
        *,
        acks: int = -1,
        idempotent: bool = True,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        retry_backoff_ms: int = 100,
        buffer_bytes: int = 32 << 20,
        client_id: str = "millrace-spark-writer",
    ) -> None:
        if acks not in (-1, 1):
            raise ValueError(f"acks must be -1 (all) or 1, not {acks}")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=all")
        self._bootstrap = parse_bootstrap(bootstrap)
        self._acks = acks
        self._idempotent = idempotent
        self._request_timeout_ms = request_timeout_ms
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._buffer_bytes = buffer_bytes
        self._client_id = client_id
        self._brokers: dict[int, tuple[str, int]] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._counts: dict[str, int] = {}
        self._connections: dict[int, Connection] = {}
        self._in_flight: dict[int, list[_Partition]] = {}  # broker -> partitions sent
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._queued_bytes = 0
        self._stale = False
        self._failure: ProduceError | None = None
        self.acked_records = 0
        self.producer_id = -1
        self.producer_epoch = -1
        if idempotent:
            self._init_producer_id()

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._in_flight.clear()

    def __enter__(self) -> BatchProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- metadata --------------------------------------------------------------------------

    def _any_broker(self, entity: object) -> object:
        last: Exception | None = None
        for host, port in [*self._brokers.values(), *self._bootstrap]:
            try:
                conn = Connection(host, port, self._request_timeout_ms / 1000, self._client_id)
            except OSError as exc:
                last = exc
                continue
            try:
                return conn.request(entity)
            except (OSError, ConnectionError, struct.error) as exc:
                last = exc
            finally:
                conn.close()
        raise ConnectionError(f"no broker of {self._bootstrap} answered: {last}")

    def _refresh(self, topics: list[str]) -> None:
        from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
        from kio.schema.types import TopicName

        response: object = self._any_broker(
            MetadataRequest(
                topics=tuple(MetadataRequestTopic(name=TopicName(t)) for t in topics),
                allow_auto_topic_creation=True,  # as librdkafka's producer
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}  # type: ignore[attr-defined]
        self._brokers = brokers
        for t in response.topics:  # type: ignore[attr-defined]
            if int(t.error_code) != NONE:
                continue
            self._counts[str(t.name)] = len(t.partitions)
            for p in t.partitions:
                leader = int(p.leader_id) if int(p.leader_id) in brokers else -1
                self._leaders[(str(t.name), int(p.partition_index))] = leader
        for (topic, index), part in self._partitions.items():
            part.leader = self._leaders.get((topic, index), -1)
        self._stale = False

    def num_partitions(self, topic: str, timeout_s: float | None = None) -> int:
        """How many partitions ``topic`` has (asking the cluster, which may create it)."""
        deadline = time.monotonic() + (
            self._request_timeout_ms / 1000 if timeout_s is None else timeout_s
        )
        delay = 0.05
        while True:
            try:
                self._refresh([topic])
            except ConnectionError as exc:
                if time.monotonic() >= deadline:
                    raise ProduceError(str(exc)) from exc
            count = self._counts.get(topic, 0)
            if count > 0:
                return count
            if time.monotonic() >= deadline:
                raise ProduceError(
                    f"topic '{topic}' is not known to the cluster at "
                    f"{','.join(f'{h}:{p}' for h, p in self._bootstrap)}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _init_producer_id(self) -> None:
        from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
        from kio.static.primitive import i32Timedelta

        request = InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=60_000)),
        )
        deadline = time.monotonic() + self._request_timeout_ms / 1000
        delay = 0.05
        while True:
            try:
                response: object = self._any_broker(request)
            except ConnectionError as exc:
                if time.monotonic() >= deadline:
                    raise ProduceError(f"InitProducerId: {exc}") from exc
            else:
                code = int(response.error_code)  # type: ignore[attr-defined]
                if code == NONE:
                    self.producer_id = int(response.producer_id)  # type: ignore[attr-defined]
                    self.producer_epoch = int(response.producer_epoch)  # type: ignore[attr-defined]
                    return
                if code not in _INIT_RETRIABLE or time.monotonic() >= deadline:
                    raise ProduceError(f"InitProducerId: {error_name(code)}")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    # --- appending -------------------------------------------------------------------------

    def next_sequence(self, topic: str, partition: int) -> int:
        """The base sequence the next batch appended to the partition must carry (-1 when
        the producer is not idempotent)."""
        if not self._idempotent:
            return -1
        part = self._partitions.get((topic, partition))
        return 0 if part is None else part.sequence

    def append(self, topic: str, partition: int, batch: bytes, records: int) -> None:
        """Queue ``batch`` (built with :meth:`next_sequence` as its base sequence) for the
        partition, send what can be sent, and wait while too much is queued."""
        self._raise_failure()
        key = (topic, partition)
        part = self._partitions.get(key)
        if part is None:
            part = _Partition(topic, partition, leader=self._leaders.get(key, -1))
            self._partitions[key] = part
        part.queue.append(_Batch(batch, records, time.monotonic() + self._delivery_timeout_s))
        if self._idempotent:
            part.sequence = (part.sequence + records) & 0x7FFFFFFF
        self._queued_bytes += len(batch)
        self._pump(wait=False)
        while self._queued_bytes > self._buffer_bytes:
            self._pump(wait=True)

    def flush(self) -> int:
        """Wait until every appended batch is acknowledged; the records acknowledged so far.
        Raises :class:`ProduceError` if a batch was refused or timed out."""
        while self._queued_bytes > 0:
            self._pump(wait=True)
        self._raise_failure()
        return self.acked_records

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    # --- sending ---------------------------------------------------------------------------

    def _fail(self, message: str) -> None:
        if self._failure is None:
            self._failure = ProduceError(message)
        raise self._failure

    def _connection(self, broker: int) -> Connection:
        conn = self._connections.get(broker)
        if conn is None:
            host, port = self._brokers[broker]
            conn = Connection(host, port, self._request_timeout_ms / 1000 + 5, self._client_id)
            self._connections[broker] = conn
        return conn

    def _drop(self, broker: int) -> None:
        conn = self._connections.pop(broker, None)
        if conn is not None:
            conn.close()
        for part in self._in_flight.pop(broker, []):
            self._retry_later(part)

    def _retry_later(self, part: _Partition, error: str = "") -> None:
        if error and part.queue:
            part.queue[0].last_error = error
        part.in_flight = False
        part.retry_at = time.monotonic() + self._backoff_s
        self._stale = True

    def _ready(self, now: float) -> dict[int, list[_Partition]]:
        """The partitions whose head can be sent now, by leader."""
        out: dict[int, list[_Partition]] = {}
        for part in self._partitions.values():
            if not part.queue or part.in_flight or part.retry_at > now:
                continue
            head = part.queue[0]
            if now > head.deadline:
                self._fail(
                    f"{part.topic}[{part.index}]: a batch of {head.records} records timed out "
                    f"unacknowledged after {self._delivery_timeout_s:g}s "
                    f"(delivery.timeout.ms) and {head.attempts} attempts"
                    + (f"; last error {head.last_error}" if head.last_error else "")
                )
            if part.leader < 0 or part.leader not in self._brokers:
                self._stale = True
                continue
            out.setdefault(part.leader, []).append(part)
        return out

    def _send(self, broker: int, parts: list[_Partition]) -> None:
        by_topic: dict[str, list[_Partition]] = {}
        for part in parts:
            by_topic.setdefault(part.topic, []).append(part)
        chunks = [
            _I16.pack(-1),  # transactional id: null
            _I16.pack(self._acks),
            _I32.pack(self._request_timeout_ms),
            _I32.pack(len(by_topic)),
        ]
        for topic, members in by_topic.items():
            chunks.append(_string(topic))
            chunks.append(_I32.pack(len(members)))
            for part in members:
                head = part.queue[0]
                head.attempts += 1
                chunks += (_I32.pack(part.index), _I32.pack(len(head.data)), head.data)
        try:
            self._connection(broker).send(PRODUCE, PRODUCE_VERSION, b"".join(chunks))
        except (OSError, ConnectionError) as exc:
            log.info("millrace writer: produce to broker %d failed: %s", broker, exc)
            for part in parts:
                self._retry_later(part, f"connection to broker {broker} failed")
            self._drop(broker)
            return
        for part in parts:
            part.in_flight = True
        self._in_flight[broker] = parts

    def _receive(self, broker: int) -> None:
        parts = self._in_flight.pop(broker)
        try:
            frame = self._connections[broker].receive()
            results = self._parse(frame)
        except (OSError, ConnectionError, struct.error) as exc:
            log.info("millrace writer: produce response from broker %d lost: %s", broker, exc)
            self._in_flight[broker] = parts
            self._drop(broker)
            return
        refused: str | None = None
        for part in parts:
            part.in_flight = False
            code = results.get((part.topic, part.index))
            if code is None:
                refused = refused or f"{part.topic}[{part.index}]: missing from the response"
            elif code in (NONE, DUPLICATE_SEQUENCE_NUMBER):
                head = part.queue.popleft()
                self._queued_bytes -= len(head.data)
                self.acked_records += head.records
            elif code in _ALWAYS_RETRIABLE:
                log.info(
                    "millrace writer: %s[%d]: %s, retrying",
                    part.topic,
                    part.index,
                    error_name(code),
                )
                self._retry_later(part, error_name(code))
            else:
                refused = refused or (
                    f"{part.topic}[{part.index}]: the broker refused a batch of "
                    f"{part.queue[0].records} records: {error_name(code)}"
                )
        if refused is not None:  # after counting the batches the same response acknowledged
            self._fail(refused)

    @staticmethod
    def _parse(frame: bytearray) -> dict[tuple[str, int], int]:
        """Produce v7 response -> {(topic, partition): error code}."""
        pos = 4  # correlation id
        (topics,) = _I32.unpack_from(frame, pos)
        pos += 4
        out: dict[tuple[str, int], int] = {}
        for _ in range(topics):
            (n,) = _I16.unpack_from(frame, pos)
            topic = bytes(frame[pos + 2 : pos + 2 + n]).decode()
            pos += 2 + n
            (count,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(count):
                index, code, _base, _append, _start = _PARTITION_RESPONSE.unpack_from(frame, pos)
                pos += _PARTITION_RESPONSE.size
                out[(topic, index)] = code
        return out

    def _pump(self, *, wait: bool) -> None:
        """Send every ready head to its leader's idle connection, then take in the answers
        that arrived (waiting for at least one when ``wait``)."""
        self._raise_failure()
        now = time.monotonic()
        if self._stale:
            try:
                self._refresh(sorted({p.topic for p in self._partitions.values()}))
            except ConnectionError as exc:
                log.info("millrace writer: metadata: %s", exc)
        for broker, parts in self._ready(now).items():
            if broker not in self._in_flight:
                self._send(broker, parts)
        if not self._in_flight:
            if wait and self._queued_bytes > 0:
                # Nothing sent: the heads are backing off, or their leaders are unknown.
                waiting = [p.retry_at for p in self._partitions.values() if p.queue]
                earliest = min(waiting, default=now)
                time.sleep(earliest - now if earliest > now else self._backoff_s)
            return
        socks = {
            self._connections[b].fileno(): b for b in self._in_flight if b in self._connections
        }
        timeout = self._request_timeout_ms / 1000 + 5 if wait else 0.0
        readable, _, _ = select.select(list(socks), [], [], timeout)
        if wait and not readable:
            for broker in list(self._in_flight):
                log.info("millrace writer: broker %d did not answer a produce in time", broker)
                self._drop(broker)
        for fd in readable:
            self._receive(socks[fd])
