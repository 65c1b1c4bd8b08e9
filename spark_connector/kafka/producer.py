"""An idempotent, optionally transactional, Kafka producer of whole record batches: the Spark
writer's fast path, for at-least-once and for exactly-once writes.

Theory of operation
-------------------
The writer encodes each Arrow batch's rows into v2 record batches, one per partition
(:mod:`spark_connector.record_encoder`), and hands them to :meth:`BatchProducer.append`;
:meth:`BatchProducer.flush` returns when every batch is acknowledged, or raises
:class:`ProduceError`. It speaks the standard protocol through the connector's wire-client
core (:class:`~spark_connector.kafka.cluster.Cluster`), so it writes to Apache Kafka as to
Millrace: Metadata v9 for the partitions' leaders, InitProducerId (v1 without a
transactional id; v4 with one, from the transaction coordinator) for the producer id and
epoch, AddPartitionsToTxn v3 before a transaction's first batch to a partition, and Produce
v7 with ``acks`` -1 or 1.

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

Transactions (``transactional_id``): the constructor finds the id's coordinator and calls
InitProducerId, which bumps the id's epoch (fencing any older producer of the id and aborting
its open transaction). The producer's :attr:`producer_id` and :attr:`producer_epoch` are the
identity of its transaction: the exactly-once sink commits exactly that pair, never "whoever
holds the id now". Before a partition's first batch is sent it joins the transaction
(AddPartitionsToTxn, every partition waiting at that moment in one request). The producer
never commits or aborts: the transaction stays open for the driver (see
``docs/exactly-once.md``); INVALID_PRODUCER_EPOCH / PRODUCER_FENCED fail it for good.
:meth:`written` tells, per partition, the offsets its batches got (first offset and the
offset after the last record), which the sink records as the batch's output.

Memory: :meth:`append` sends what it can without waiting, and waits for acknowledgements
while more than ``buffer_bytes`` of batches are queued.

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
DUPLICATE_SEQUENCE_NUMBER = 46
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
    first_offset: int = -1
    end_offset: int = -1


class BatchProducer:
    """Sends record batches to partition leaders (see the module docstring). One thread."""

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
    ) -> None:
        if acks not in (-1, 1):
            raise ValueError(f"acks must be -1 (all) or 1, not {acks}")
        if idempotent and acks != -1:
            raise ValueError("an idempotent producer needs acks=all")
        if transactional_id is not None and not idempotent:
            raise ValueError("a transactional producer is idempotent")
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
        self._in_flight: dict[int, list[_Partition]] = {}  # broker -> partitions sent
        # Produce requests are pipelined on connections of their own: the cluster's are for
        # one request at a time (metadata, coordinators)
        self._connections: dict[int, Connection] = {}
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._in_transaction: set[tuple[str, int]] = set()
        self._queued_bytes = 0
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
            part = _Partition(topic, partition, leader=self._cluster.leader(topic, partition))
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
            if part.leader < 0 or self._cluster.broker_address(part.leader) is None:
                self._stale = True
                continue
            out.setdefault(part.leader, []).append(part)
        if self.transactional:
            joining = [
                (p.topic, p.index)
                for parts in out.values()
                for p in parts
                if (p.topic, p.index) not in self._in_transaction
            ]
            if joining:
                self._add_partitions(joining)
        return out

    def _send(self, broker: int, parts: list[_Partition]) -> None:
        by_topic: dict[str, list[_Partition]] = {}
        for part in parts:
            by_topic.setdefault(part.topic, []).append(part)
        chunks = [
            _string(self.transactional_id),
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
        fenced = False
        for part in parts:
            part.in_flight = False
            result = results.get((part.topic, part.index))
            code = result[0] if result is not None else None
            if result is None:
                refused = refused or f"{part.topic}[{part.index}]: missing from the response"
            elif code in (NONE, DUPLICATE_SEQUENCE_NUMBER):
                head = part.queue.popleft()
                self._queued_bytes -= len(head.data)
                self.acked_records += head.records
                if code == NONE and result[1] >= 0:
                    if part.first_offset < 0:
                        part.first_offset = result[1]
                    part.end_offset = max(part.end_offset, result[1] + head.records)
            elif code in LEADER_MOVED:
                log.info(
                    "millrace writer: %s[%d]: %s, retrying",
                    part.topic,
                    part.index,
                    error_name(code),
                )
                self._retry_later(part, error_name(code))
            else:
                assert code is not None
                fenced = fenced or code in FENCED
                refused = refused or (
                    f"{part.topic}[{part.index}]: the broker refused a batch of "
                    f"{part.queue[0].records} records: {error_name(code)}{acl_hint(code)}"
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
        # bytes a TLS connection already decrypted are not seen by select
        buffered = [fd for fd, b in socks.items() if self._connections[b].pending()]
        timeout = self._request_timeout_ms / 1000 + 5 if wait and not buffered else 0.0
        readable, _, _ = select.select(list(socks), [], [], timeout)
        readable = list(dict.fromkeys([*buffered, *readable]))
        if wait and not readable:
            for broker in list(self._in_flight):
                log.info("millrace writer: broker %d did not answer a produce in time", broker)
                self._drop(broker)
        for fd in readable:
            self._receive(socks[fd])
