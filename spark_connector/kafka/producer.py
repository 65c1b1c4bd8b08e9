"""An idempotent, optionally transactional, Kafka producer of whole record batches: the Spark
writer's fast path, for at-least-once and for exactly-once writes.

Theory of operation
-------------------
The writer encodes each Arrow batch's rows into v2 records, a partition at a time
(:mod:`spark_connector.records.encoder`), and hands them to :meth:`BatchProducer.append_records`
(or a whole built batch to :meth:`BatchProducer.append`); :meth:`BatchProducer.flush` returns
when every batch is acknowledged, or raises :class:`ProduceError`. It speaks the standard
protocol through the connector's wire-client core
(:class:`~spark_connector.kafka.cluster.Cluster`), so it writes to Apache Kafka as to
Millrace: Metadata v9 for the partitions' leaders, InitProducerId (v1 without a transactional
id; v4 with one, from the transaction coordinator) for the producer id and epoch,
AddPartitionsToTxn v3 before a transaction's first batch to a partition, and Produce v7 with
``acks`` -1 or 1.

Merging (as the Java producer's ``RecordAccumulator``): each partition's batches wait in a
queue in the order they were appended. Records appended while the last batch of the queue is
not sent yet and holds less than ``batch.size`` bytes go into that batch: the caller asks
:meth:`BatchProducer.open_batch` for the offset delta and timestamp delta its records must
carry (the batch's record count so far; milliseconds since the batch's base timestamp, its
first records' time) and how many bytes fit, and encodes them so. A batch is built (the
61-byte header, compression, CRC-32C) when it is first sent: base sequence the one the batch
got when it was opened, record count the sum, ``lastOffsetDelta`` count - 1, ``maxTimestamp``
its last records' time. From then on its bytes never change. So tiny Arrow batches do not make
tiny requests: while a partition's requests are in flight its new records pile up in one
batch of up to ``batch.size``.

Pipelining and ordering follow the idempotent Java producer (``Sender``,
``TransactionManager``) with ``max.in.flight.requests.per.connection`` up to 5 (Kafka's limit
with idempotence: the broker keeps the last 5 batches of a producer per partition to detect
duplicates). Every batch is numbered with the partition's next sequence when it is opened
(consecutive: a batch's base sequence is the previous one's plus its record count, modulo
2**31). A Produce request carries at most one batch per partition (Kafka's rule); each broker
connection has at most ``max_in_flight`` requests in flight, answered in order, so a partition
has at most that many batches in flight, sent in sequence order, all to one broker (a
partition whose leader changed waits until its batches in flight to the old one are answered).
A batch leaves its queue when its partition answers NONE (or DUPLICATE_SEQUENCE_NUMBER: the
broker already holds it). A retriable error of a batch (the leader moved, not enough
replicas, a timeout, a lost connection), and OUT_OF_ORDER_SEQUENCE_NUMBER of a batch after
one that must be sent again, puts the partition in *retry*: nothing more is sent for it until
every batch it has in flight is answered (those after the failed one fail as out of order,
or succeed when the failed one was written after all), then, after ``retry.backoff.ms`` and
a metadata look-up, its unacknowledged batches are sent again from the head of its queue, in
order, with the same bytes (same sequence numbers: never sequenced again within the
producer's epoch), so a batch written before its acknowledgement was lost is not written
twice. OUT_OF_ORDER_SEQUENCE_NUMBER of a partition's first unacknowledged batch (the broker
lost the producer's state), any other error, or a batch still unacknowledged
``delivery.timeout.ms`` after it was opened, fails the producer: :meth:`flush` raises, naming
the partition and the error. Without idempotence (``acks=1`` or ``enable.idempotence=false``)
a retry may write a batch twice and, with more than one request in flight, out of order, as
in any Kafka producer: at-least-once (the writer keeps one in flight then, unless told).

Transactions (``transactional_id``): the constructor finds the id's coordinator and calls
InitProducerId, which bumps the id's epoch (fencing any older producer of the id and aborting
its open transaction). The producer's :attr:`producer_id` and :attr:`producer_epoch` are the
identity of its transaction: the exactly-once sink commits exactly that pair, never "whoever
holds the id now". Before a partition's first batch is sent it joins the transaction
(AddPartitionsToTxn, every partition about to be sent to at that moment in one request). The
producer never commits or aborts: the transaction stays open for the driver (see
``docs/exactly-once.md``), and :meth:`flush` returns only when no batch is in flight (so a
transaction is never ended with batches in flight); INVALID_PRODUCER_EPOCH / PRODUCER_FENCED
fail it for good. :meth:`written` tells, per partition, the offsets its batches got (first
offset and the offset after the last record), which the sink records as the batch's output.

Memory: :meth:`append` and :meth:`append_records` send what they can without waiting, and
wait for acknowledgements while more than ``buffer_bytes`` of batches are queued.

Security: the producer's connections (the cluster's, and the Produce connections beside them)
carry ``security`` (TLS and SASL, :mod:`spark_connector.kafka.security`); ``select`` is
asked only about connections whose TLS layer holds no decrypted bytes yet
(:meth:`~spark_connector.kafka.connection.Connection.pending`). An ACL the user lacks
(TOPIC_/TRANSACTIONAL_ID_/CLUSTER_AUTHORIZATION_FAILED) fails the producer at once, naming it.

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
from typing import TYPE_CHECKING

from spark_connector.kafka.cluster import TRANSACTION, Cluster
from spark_connector.kafka.connection import Connection
from spark_connector.kafka.errors import (
    AUTHORIZATION_FAILED,
    FENCED,
    LEADER_MOVED,
    NONE,
    KafkaRequestError,
    Retriable,
    acl_hint,
    error_name,
)

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = ["BatchProducer", "ProduceError", "error_name"]

log = logging.getLogger(__name__)

PRODUCE, PRODUCE_VERSION = 0, 7
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
MAX_IN_FLIGHT = 5
"""Kafka's limit of requests in flight per connection for an idempotent producer (the broker
remembers a producer's last 5 batches per partition)."""
_INIT_RETRIABLE = LEADER_MOVED | {14, 15, 16, 51}
"""... and for InitProducerId: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR, CONCURRENT_TRANSACTIONS (a new Kafka broker answers these at first; an id
whose transaction was open answers CONCURRENT_TRANSACTIONS while it is aborted)."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_RESPONSE = struct.Struct(">ihqqq")  # index, error, base offset, append time, start


class ProduceError(RuntimeError):
    """A batch the cluster refused, or did not acknowledge in time; ``fenced`` when another
    producer of the same transactional id took over."""

    def __init__(self, message: str, *, fenced: bool = False) -> None:
        super().__init__(message)
        self.fenced = fenced


def _string(value: str | None) -> bytes:
    if value is None:
        return _I16.pack(-1)
    raw = value.encode()
    return _I16.pack(len(raw)) + raw


@dataclass(slots=True, eq=False)
class _Batch:
    """One record batch of a partition's queue: ``parts`` (records sections, offset deltas
    continuing from one to the next) while it is open, ``data`` (the whole built batch) from
    its first send on; ``size`` the bytes it holds, counted against ``buffer_bytes``."""

    sequence: int
    records: int
    deadline: float
    size: int
    timestamp: int = 0
    max_timestamp: int = 0
    parts: list[bytes] = field(default_factory=list)
    data: bytes | None = None
    in_flight: bool = False
    attempts: int = 0
    last_error: str = ""


@dataclass(slots=True)
class _Partition:
    """A partition's queue of unacknowledged batches (sequence order) and its send state:
    ``in_flight`` batches sent to ``broker`` and not answered; ``retrying`` while a batch
    must be sent again (nothing is sent until ``in_flight`` is 0 and ``retry_at`` passed)."""

    topic: str
    index: int
    queue: deque[_Batch] = field(default_factory=deque)
    sequence: int = 0
    leader: int = -1
    in_flight: int = 0
    broker: int = -1
    retrying: bool = False
    retry_at: float = 0.0
    first_offset: int = -1
    end_offset: int = -1

    def next_unsent(self) -> _Batch | None:
        """The batch to send next (outside retry: the in-flight batches are the queue's
        first ``in_flight``)."""
        return self.queue[self.in_flight] if self.in_flight < len(self.queue) else None


class BatchProducer:
    """Merges appended records into v2 record batches of up to ``batch_bytes`` per partition
    and sends them to the partitions' leaders, up to ``max_in_flight`` Produce v7 requests in
    flight per broker connection (one batch per partition per request), sequence numbers
    consecutive per partition, retried in order with the same bytes (see the module
    docstring). Concurrency: one thread; blocking sockets and ``select``; never pickled."""

    def __init__(
        self,
        bootstrap: str,
        *,
        acks: int = -1,
        idempotent: bool = True,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        retry_backoff_ms: int = 100,
        buffer_bytes: int = 32 << 20,
        client_id: str = "millrace-spark-writer",
        security: ClientSecurity | None = None,
        batch_bytes: int = 1_000_000,
        codec: int = 0,
        max_in_flight: int | None = None,
    ) -> None:
        """``batch_bytes``: how large (uncompressed records) a batch may grow by merging;
        ``codec``: the compression of the batches built from :meth:`append_records`;
        ``max_in_flight``: requests in flight per broker connection (1..5; default 5 with
        idempotence, 1 without, which keeps a retried partition in order)."""
        if acks not in (-1, 1):
            raise ValueError(f"acks must be -1 (all) or 1, not {acks}")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=all")
        if transactional_id is not None and not idempotent:
            raise ValueError("a transactional producer is idempotent")
        if max_in_flight is None:
            max_in_flight = MAX_IN_FLIGHT if idempotent else 1
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1..{MAX_IN_FLIGHT}, not {max_in_flight}")
        self._cluster = Cluster(
            bootstrap,
            client_id=client_id,
            request_timeout_s=request_timeout_ms / 1000,
            security=security,
        )
        self._acks = acks
        self._idempotent = idempotent
        self.transactional_id = transactional_id
        self._transaction_timeout_ms = transaction_timeout_ms
        self._request_timeout_ms = request_timeout_ms
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self._buffer_bytes = buffer_bytes
        self._batch_bytes = batch_bytes
        self._codec = codec
        self._max_in_flight = max_in_flight
        # broker -> its requests in flight, oldest first: each the (partition, batch) it
        # carries. Produce requests are pipelined on connections of their own: the
        # cluster's are for one request at a time (metadata, coordinators)
        self._in_flight: dict[int, deque[list[tuple[_Partition, _Batch]]]] = {}
        self._connections: dict[int, Connection] = {}
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._in_transaction: set[tuple[str, int]] = set()
        self._queued_bytes = 0
        self._queued_batches = 0
        self._stale = False
        self._failure: ProduceError | None = None
        self.acked_records = 0
        self.producer_id = -1
        self.producer_epoch = -1
        if transactional_id is not None:
            self._init_transactional(transactional_id)
        elif idempotent:
            self._init_idempotent()

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
        self._cluster.close()
        self._in_flight.clear()

    def __enter__(self) -> BatchProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- producer id -----------------------------------------------------------------------

    def _init_idempotent(self) -> None:
        from kio.schema.init_producer_id.v1.request import InitProducerIdRequest
        from kio.static.primitive import i32Timedelta

        request = InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=60_000)),
        )

        def attempt() -> None:
            response = self._cluster.any_broker(request)
            self._take_producer_id("InitProducerId", response)

        self._call("InitProducerId", attempt)

    def _init_transactional(self, transactional_id: str) -> None:
        from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
        from kio.schema.types import TransactionalId
        from kio.static.primitive import i32Timedelta

        request = InitProducerIdRequest(
            transactional_id=TransactionalId(transactional_id),
            transaction_timeout=i32Timedelta.parse(
                datetime.timedelta(milliseconds=self._transaction_timeout_ms)
            ),
        )
        what = f"InitProducerId({transactional_id})"

        def attempt() -> None:
            response = self._cluster.coordinator_request(TRANSACTION, transactional_id, request)
            code = int(response.error_code)
            if code in (15, 16):  # the coordinator moved
                self._cluster.forget_coordinator(TRANSACTION, transactional_id)
            self._take_producer_id(what, response)

        self._call(what, attempt)

    def _take_producer_id(self, what: str, response: object) -> None:
        code = int(response.error_code)  # type: ignore[attr-defined]
        if code in _INIT_RETRIABLE:
            raise Retriable(what, code)
        if code != NONE:
            raise ProduceError(f"{what}: {error_name(code)}{acl_hint(code)}", fenced=code in FENCED)
        self.producer_id = int(response.producer_id)  # type: ignore[attr-defined]
        self.producer_epoch = int(response.producer_epoch)  # type: ignore[attr-defined]

    def _call(self, what: str, attempt: object) -> None:
        try:
            self._cluster.retrying(what, attempt)  # type: ignore[arg-type]
        except KafkaRequestError as exc:
            raise ProduceError(str(exc)) from exc

    # --- metadata --------------------------------------------------------------------------

    def _refresh(self, topics: list[str]) -> None:
        self._cluster.refresh(topics, auto_create=True)  # as librdkafka's producer
        for (topic, index), part in self._partitions.items():
            part.leader = self._cluster.leader(topic, index)
        self._stale = False

    def num_partitions(self, topic: str, timeout_s: float | None = None) -> int:
        """How many partitions ``topic`` has (asking the cluster, which may create it)."""
        budget = self._request_timeout_ms / 1000 if timeout_s is None else timeout_s
        what = f"Metadata({topic})"

        def attempt() -> int:
            self._refresh([topic])
            count = self._cluster.partition_count(topic)
            info = self._cluster.topics.get(topic)
            if info is not None and info.error in AUTHORIZATION_FAILED:
                raise ProduceError(
                    f"topic '{topic}': Metadata: {error_name(info.error)} (the user needs the "
                    "WRITE and DESCRIBE ACLs of the topic)"
                )
            if count <= 0:
                raise Retriable(what, 3)  # UNKNOWN_TOPIC_OR_PARTITION: maybe being created
            return count

        try:
            return self._cluster.retrying(what, attempt, budget)
        except KafkaRequestError as exc:
            if exc.code == 3:
                raise ProduceError(
                    f"topic '{topic}' is not known to the cluster at {self._cluster.bootstrap_text}"
                ) from exc
            raise ProduceError(str(exc)) from exc

    # --- appending -------------------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    def next_sequence(self, topic: str, partition: int) -> int:
        """The base sequence the next batch appended to the partition with :meth:`append`
        must carry (-1 when the producer is not idempotent)."""
        if not self._idempotent:
            return -1
        part = self._partitions.get((topic, partition))
        return 0 if part is None else part.sequence

    def _partition(self, topic: str, partition: int) -> _Partition:
        key = (topic, partition)
        part = self._partitions.get(key)
        if part is None:
            part = _Partition(topic, partition, leader=self._cluster.leader(topic, partition))
            self._partitions[key] = part
        return part

    def _open(self, part: _Partition) -> _Batch | None:
        """The partition's last batch if records may still be added to it: never sent, built
        from records sections, holding less than ``batch_bytes``."""
        if not part.queue:
            return None
        tail = part.queue[-1]
        if tail.data is not None or not tail.parts or tail.size >= self._batch_bytes:
            return None
        return tail

    def open_batch(self, topic: str, partition: int, now_ms: int) -> tuple[int, int, int]:
        """How records appended to the partition at ``now_ms`` must be encoded:
        ``(offset delta, timestamp delta, room)``: the record count and the milliseconds
        since the base timestamp of the batch they would join (0, 0 for a new batch), and
        the bytes left in it (``batch_bytes`` for a new one). Records larger than ``room``
        go into a new batch: :meth:`close_batch` first."""
        part = self._partitions.get((topic, partition))
        tail = self._open(part) if part is not None else None
        if tail is None:
            return 0, 0, self._batch_bytes
        return tail.records, max(now_ms - tail.timestamp, 0), self._batch_bytes - tail.size

    def close_batch(self, topic: str, partition: int) -> None:
        """Add nothing more to the partition's last batch."""
        part = self._partitions.get((topic, partition))
        tail = self._open(part) if part is not None else None
        if tail is not None:
            tail.data = self._build(tail)
            tail.parts = []

    def append_records(
        self, topic: str, partition: int, records: bytes, count: int, now_ms: int
    ) -> None:
        """Add ``count`` records (a records section encoded as :meth:`open_batch` said, at
        the same ``now_ms``) to the partition's open batch, or to a new one; send what can be
        sent, and wait while too much is queued."""
        self._raise_failure()
        part = self._partition(topic, partition)
        tail = self._open(part)
        size = len(records)
        if tail is None:
            self._enqueue(part, _Batch(-1, 0, 0.0, 0, now_ms, now_ms))
            tail = part.queue[-1]
        tail.parts.append(records)
        tail.records += count
        tail.size += size
        tail.max_timestamp = max(tail.max_timestamp, now_ms)
        self._queued_bytes += size
        if self._idempotent:
            part.sequence = (part.sequence + count) & 0x7FFFFFFF
        self._after_append()

    def append(self, topic: str, partition: int, batch: bytes, records: int) -> None:
        """Queue ``batch`` (whole, built with :meth:`next_sequence` as its base sequence) for
        the partition, send what can be sent, and wait while too much is queued."""
        self._raise_failure()
        part = self._partition(topic, partition)
        self._enqueue(part, _Batch(-1, records, 0.0, len(batch), data=batch))
        self._queued_bytes += len(batch)
        if self._idempotent:
            part.sequence = (part.sequence + records) & 0x7FFFFFFF
        self._after_append()

    def _enqueue(self, part: _Partition, batch: _Batch) -> None:
        batch.sequence = part.sequence if self._idempotent else -1
        batch.deadline = time.monotonic() + self._delivery_timeout_s
        part.queue.append(batch)
        self._queued_batches += 1

    def _after_append(self) -> None:
        self._pump(wait=False)
        while self._queued_bytes > self._buffer_bytes:
            self._pump(wait=True)

    def _build(self, batch: _Batch) -> bytes:
        """The whole record batch of an open one (see the module docstring)."""
        from spark_connector.records.encoder import build_batch

        return build_batch(
            b"".join(batch.parts),
            batch.records,
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=batch.sequence,
            codec=self._codec,
            timestamp_ms=batch.timestamp,
            max_timestamp_ms=batch.max_timestamp,
            transactional=self.transactional,
        )

    def flush(self) -> int:
        """Wait until every appended batch is acknowledged (none is in flight then); the
        records acknowledged so far. Raises :class:`ProduceError` if a batch was refused or
        timed out."""
        while self._queued_batches > 0:
            self._pump(wait=True)
        self._raise_failure()
        return self.acked_records

    def transaction_ended(self) -> None:
        """The transaction was ended (EndTxn, sent by the caller): the next one adds its
        partitions again."""
        self._in_transaction.clear()

    def written(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Per partition written to: (offset of its first acknowledged record, offset after
        its last one), from the Produce responses."""
        return {
            key: (p.first_offset, p.end_offset)
            for key, p in self._partitions.items()
            if p.first_offset >= 0
        }

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    # --- transactions ----------------------------------------------------------------------

    def _add_partitions(self, keys: list[tuple[str, int]]) -> None:
        """AddPartitionsToTxn for ``keys`` (retried through coordinator moves)."""
        from kio.schema.add_partitions_to_txn.v3.request import (
            AddPartitionsToTxnRequest,
            AddPartitionsToTxnTopic,
        )
        from kio.schema.types import ProducerId, TopicName, TransactionalId
        from kio.static.primitive import i16, i32

        txn_id = self.transactional_id
        assert txn_id is not None
        by_topic: dict[str, list[int]] = {}
        for topic, index in keys:
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(txn_id),
            v3_and_below_producer_id=ProducerId(self.producer_id),
            v3_and_below_producer_epoch=i16(self.producer_epoch),
            v3_and_below_topics=tuple(
                AddPartitionsToTxnTopic(
                    name=TopicName(topic), partitions=tuple(i32(p) for p in sorted(parts))
                )
                for topic, parts in sorted(by_topic.items())
            ),
        )
        what = f"AddPartitionsToTxn({txn_id})"

        def attempt() -> None:
            response = self._cluster.coordinator_request(TRANSACTION, txn_id, request)
            worst = NONE
            for topic in response.results_by_topic_v3_and_below:
                for part in topic.results_by_partition:
                    code = int(part.partition_error_code)
                    if code not in (NONE, 55):  # 55: OPERATION_NOT_ATTEMPTED
                        worst = code
            if worst in FENCED:
                raise ProduceError(
                    f"{what}: {error_name(worst)}: another producer of {txn_id} took over",
                    fenced=True,
                )
            self._cluster.check_coordinator_error(what, worst, TRANSACTION, txn_id)

        try:
            self._cluster.retrying(what, attempt, self._delivery_timeout_s)
        except KafkaRequestError as exc:
            self._fail(str(exc))
        self._in_transaction.update(keys)

    # --- sending ---------------------------------------------------------------------------

    def _fail(self, message: str, *, fenced: bool = False) -> None:
        if self._failure is None:
            self._failure = ProduceError(message, fenced=fenced)
        raise self._failure

    def _connection(self, broker: int) -> Connection:
        conn = self._connections.get(broker)
        if conn is None:
            address = self._cluster.broker_address(broker)
            if address is None:
                raise ConnectionError(f"broker {broker} is not known")
            conn = Connection(
                address[0],
                address[1],
                self._request_timeout_ms / 1000 + 5,
                self._cluster.client_id,
                self._cluster.security,
            )
            self._connections[broker] = conn
        return conn

    def _drop(self, broker: int, error: str) -> None:
        """Close the connection to ``broker``: its requests in flight will not be answered,
        so their partitions send those batches again."""
        conn = self._connections.pop(broker, None)
        if conn is not None:
            conn.close()
        requests = self._in_flight.pop(broker, deque())
        if requests:
            log.info(
                "millrace writer: produce response from broker %d lost (%d requests in "
                "flight, sent again): %s",
                broker,
                len(requests),
                error,
            )
        for request in requests:
            for part, batch in request:
                self._answered(part, batch)
                self._retry_later(part, batch, error)

    @staticmethod
    def _answered(part: _Partition, batch: _Batch) -> None:
        batch.in_flight = False
        part.in_flight -= 1

    def _retry_later(
        self, part: _Partition, batch: _Batch, error: str, *, stale: bool = True
    ) -> None:
        """Send the partition's unacknowledged batches again, from the head of its queue,
        once its batches in flight are answered and ``retry.backoff.ms`` has passed."""
        if error:
            batch.last_error = error
        part.retrying = True
        part.retry_at = time.monotonic() + self._backoff_s
        self._stale = self._stale or stale

    def _sendable(self, part: _Partition, now: float) -> _Batch | None:
        """The partition's batch that can be sent now to its leader, if any."""
        if not part.queue or part.retry_at > now:
            return None
        if part.retrying:
            if part.in_flight:
                return None  # wait until every batch in flight is answered
            part.retrying = False  # from the head again, in order
        head = part.queue[0]
        if not head.in_flight and now > head.deadline:
            self._fail(
                f"{part.topic}[{part.index}]: a batch of {head.records} records timed out "
                f"unacknowledged after {self._delivery_timeout_s:g}s "
                f"(delivery.timeout.ms) and {head.attempts} attempts"
                + (f"; last error {head.last_error}" if head.last_error else "")
            )
        if part.in_flight >= self._max_in_flight:
            return None
        if part.leader < 0 or self._cluster.broker_address(part.leader) is None:
            self._stale = True
            return None
        if part.in_flight and part.broker != part.leader:
            return None  # the leader moved: wait for the answers of the old one
        return part.next_unsent()

    def _ready(self, now: float) -> dict[int, list[tuple[_Partition, _Batch]]]:
        """The batches that can be sent now, one per partition, by leader (only to brokers
        with fewer than ``max_in_flight`` requests in flight)."""
        out: dict[int, list[tuple[_Partition, _Batch]]] = {}
        for part in self._partitions.values():
            batch = self._sendable(part, now)
            if batch is None:
                continue
            if len(self._in_flight.get(part.leader, ())) >= self._max_in_flight:
                continue
            out.setdefault(part.leader, []).append((part, batch))
        if self.transactional:
            joining = [
                (p.topic, p.index)
                for batches in out.values()
                for p, _ in batches
                if (p.topic, p.index) not in self._in_transaction
            ]
            if joining:
                self._add_partitions(joining)
        return out

    def _send(self, broker: int, batches: list[tuple[_Partition, _Batch]]) -> bool:
        """One Produce request to ``broker``; False when the connection failed."""
        by_topic: dict[str, list[tuple[_Partition, _Batch]]] = {}
        for part, batch in batches:
            by_topic.setdefault(part.topic, []).append((part, batch))
        chunks = [
            _string(self.transactional_id),
            _I16.pack(self._acks),
            _I32.pack(self._request_timeout_ms),
            _I32.pack(len(by_topic)),
        ]
        for topic, members in by_topic.items():
            chunks.append(_string(topic))
            chunks.append(_I32.pack(len(members)))
            for part, batch in members:
                if batch.data is None:
                    batch.data = self._build(batch)
                    batch.parts = []
                batch.attempts += 1
                chunks += (_I32.pack(part.index), _I32.pack(len(batch.data)), batch.data)
        for part, batch in batches:  # in flight from now: a lost connection retries them
            batch.in_flight = True
            part.in_flight += 1
            part.broker = broker
        try:
            self._connection(broker).send(PRODUCE, PRODUCE_VERSION, b"".join(chunks))
        except (OSError, ConnectionError) as exc:
            log.info("millrace writer: produce to broker %d failed: %s", broker, exc)
            error = f"connection to broker {broker} failed: {exc}"
            for part, batch in batches:  # not sent: again, after those in flight
                self._answered(part, batch)
                self._retry_later(part, batch, error)
            self._drop(broker, error)
            return False
        self._in_flight.setdefault(broker, deque()).append(batches)
        return True

    def _ack(self, part: _Partition, batch: _Batch, base_offset: int, code: int) -> None:
        if part.queue and part.queue[0] is batch:
            part.queue.popleft()
        else:  # acknowledged while an earlier batch waits to be sent again
            part.queue.remove(batch)
        self._queued_batches -= 1
        self._queued_bytes -= batch.size
        self.acked_records += batch.records
        if code == NONE and base_offset >= 0:
            if part.first_offset < 0 or base_offset < part.first_offset:
                part.first_offset = base_offset
            part.end_offset = max(part.end_offset, base_offset + batch.records)

    def _receive(self, broker: int) -> None:
        requests = self._in_flight[broker]
        try:
            frame = self._connections[broker].receive()
            results = self._parse(frame)
        except (OSError, ConnectionError, struct.error) as exc:
            self._drop(broker, f"connection to broker {broker} lost: {exc}")
            return
        batches = requests.popleft()
        if not requests:
            del self._in_flight[broker]
        refused: str | None = None
        fenced = False
        for part, batch in batches:
            self._answered(part, batch)
            result = results.get((part.topic, part.index))
            code = result[0] if result is not None else None
            if result is None:
                refused = refused or f"{part.topic}[{part.index}]: missing from the response"
            elif code in (NONE, DUPLICATE_SEQUENCE_NUMBER):
                self._ack(part, batch, result[1], code)
            elif code in LEADER_MOVED:
                log.info(
                    "millrace writer: %s[%d]: %s, retrying",
                    part.topic,
                    part.index,
                    error_name(code),
                )
                self._retry_later(part, batch, error_name(code))
            elif code == OUT_OF_ORDER_SEQUENCE_NUMBER and part.queue[0] is not batch:
                # an earlier batch of the partition failed and will be sent again first
                self._retry_later(part, batch, error_name(code), stale=False)
            else:
                assert code is not None
                fenced = fenced or code in FENCED
                refused = refused or (
                    f"{part.topic}[{part.index}]: the broker refused a batch of "
                    f"{batch.records} records: {error_name(code)}{acl_hint(code)}"
                    + (
                        f" (another producer of {self.transactional_id} took over)"
                        if code in FENCED and self.transactional
                        else ""
                    )
                )
        if refused is not None:  # after counting the batches the same response acknowledged
            self._fail(refused, fenced=fenced)

    @staticmethod
    def _parse(frame: bytearray) -> dict[tuple[str, int], tuple[int, int]]:
        """Produce v7 response -> {(topic, partition): (error code, base offset)}."""
        pos = 4  # correlation id
        (topics,) = _I32.unpack_from(frame, pos)
        pos += 4
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for _ in range(topics):
            (n,) = _I16.unpack_from(frame, pos)
            topic = bytes(frame[pos + 2 : pos + 2 + n]).decode()
            pos += 2 + n
            (count,) = _I32.unpack_from(frame, pos)
            pos += 4
            for _ in range(count):
                index, code, base, _append, _start = _PARTITION_RESPONSE.unpack_from(frame, pos)
                pos += _PARTITION_RESPONSE.size
                out[(topic, index)] = (code, base)
        return out

    def _send_ready(self) -> None:
        """Send every batch that can be sent: per broker, requests of one batch per
        partition until its connection has ``max_in_flight`` in flight or nothing is left."""
        while True:
            ready = self._ready(time.monotonic())
            sent = False
            for broker, batches in ready.items():
                sent = self._send(broker, batches) or sent
            if not sent:
                return

    def _pump(self, *, wait: bool) -> None:
        """Send what can be sent, then take in the answers that arrived (waiting for at
        least one when ``wait``)."""
        self._raise_failure()
        now = time.monotonic()
        if self._stale:
            try:
                self._refresh(sorted({p.topic for p in self._partitions.values()}))
            except ConnectionError as exc:
                log.info("millrace writer: metadata: %s", exc)
        self._send_ready()
        if not self._in_flight:
            if wait and self._queued_batches > 0:
                # Nothing sent: the partitions are backing off, or their leaders are unknown.
                waiting = [p.retry_at for p in self._partitions.values() if p.queue]
                earliest = min(waiting, default=now)
                time.sleep(earliest - now if earliest > now else self._backoff_s)
            return
        socks = {
            self._connections[b].fileno(): b for b in self._in_flight if b in self._connections
        }
        # bytes a TLS connection already decrypted are not seen by select
        buffered = [fd for fd, b in socks.items() if self._connections[b].pending()]
        timeout = self._request_timeout_ms / 1000 + 5 if wait and not buffered else 0.0
        readable, _, _ = select.select(list(socks), [], [], timeout)
        readable = list(dict.fromkeys([*buffered, *readable]))
        if wait and not readable:
            for broker in list(self._in_flight):
                log.info("millrace writer: broker %d did not answer a produce in time", broker)
                self._drop(broker, f"broker {broker} did not answer in time")
        for fd in readable:
            self._receive(socks[fd])
