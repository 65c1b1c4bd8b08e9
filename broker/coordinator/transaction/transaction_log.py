"""Record formats of the ``__transaction_state`` topic, byte-compatible with Kafka 3.9.

Every record's key names a transactional id; its value is the id's whole transaction
metadata after a state change (or null: a tombstone written when an idle transactional id
expires, so compaction forgets it). Both start with a big-endian ``int16`` version and
continue with the fields of Kafka's ``TransactionLogKey.json`` / ``TransactionLogValue.json``
(``transaction-coordinator/src/main/resources/common/message/``), in Kafka's generated-message
encoding (:mod:`broker.coordinator.message_codec`)::

    TransactionLogKey   v0:  transactional_id string

    TransactionLogValue v0 (non-flexible), v1 (flexible, tagged fields):
        producer_id int64
        producer_epoch int16
        transaction_timeout_ms int32
        transaction_status int8           (TxnState ids: Empty 0 ... PrepareEpochFence 7)
        transaction_partitions nullable array of:
            topic string
            partition_ids array of int32
        transaction_last_update_timestamp_ms int64
        transaction_start_timestamp_ms int64
        [v1 tagged fields: 0 previous_producer_id int64, 1 next_producer_id int64,
                           2 client_transaction_version int16,
                           19712 ongoing_producer_id int64, 19713 ongoing_producer_epoch int16]

Kafka 3.9 writes key version 0 and value version 0 (``TransactionVersion.TV_0``: flexible
values only once ``transaction.version`` 1 is finalised, which ZooKeeper-mode clusters never
do), with a null partition array for the Empty state and one entry per topic otherwise.
Both value versions are decoded, so logs written by Kafka 4 load. Millrace writes version 1 only
for a transaction kept by KIP-939's ``KeepPreparedTxn``: the pair it was written with goes into
two tagged fields of Millrace's own (tags 19712 and 19713, far from Kafka's), which Kafka's
generated readers skip as unknown tags; a two-phase transaction's timeout is Integer.MAX_VALUE,
which Kafka's timer also never reaches. Decoding is strict (bytes
left over, lengths that lie, unknown versions or state ids raise
:class:`TransactionLogError`); a key of an unknown version raises
:class:`UnknownTransactionKeyVersionError`, which a loader skips as Kafka does.

:func:`partition_for` places a transactional id as Kafka does:
``Utils.abs(transactionalId.hashCode()) % transaction.state.log.num.partitions``.

Concurrency: pure functions and immutable values; safe from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.coordinator.message_codec import (
    MessageReader,
    MessageWriter,
    RecordFormatError,
    partition_for,
)
from broker.coordinator.transaction.state import TxnState
from broker.types import TopicPartition

__all__ = [
    "KEY_VERSION",
    "TRANSACTION_STATE_TOPIC",
    "VALUE_VERSION",
    "TransactionLogError",
    "TransactionLogValue",
    "UnknownTransactionKeyVersionError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0
_MAX_VALUE_VERSION = 1
_FIRST_FLEXIBLE_VALUE_VERSION = 1
_NO_PRODUCER_ID = -1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2
_TAG_ONGOING_PRODUCER_ID = 19712  # Millrace's (KIP-939's kept transaction)
_TAG_ONGOING_PRODUCER_EPOCH = 19713
_NO_PRODUCER_EPOCH = -1


class TransactionLogError(RecordFormatError):
    """A ``__transaction_state`` key or value that cannot be decoded or encoded."""


class UnknownTransactionKeyVersionError(TransactionLogError):
    """A key of a version Kafka 3.9 does not know (a loader skips the record)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"unknown __transaction_state key version {version}")
        self.version = version


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    """The persisted metadata of one transactional id (``TransactionLogValue``).

    ``partitions`` is empty for the Empty state (written as a null array)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = _NO_PRODUCER_ID
    next_producer_id: int = _NO_PRODUCER_ID
    client_transaction_version: int = 0
    ongoing_producer_id: int = _NO_PRODUCER_ID
    ongoing_producer_epoch: int = _NO_PRODUCER_EPOCH

    @property
    def needs_tags(self) -> bool:
        """Whether only the flexible version (1) can hold this value."""
        return self.ongoing_producer_id != _NO_PRODUCER_ID


def encode_key(transactional_id: str) -> bytes:
    """``TransactionLogKey`` v0 bytes."""
    w = MessageWriter(KEY_VERSION, flexible=False, error=TransactionLogError)
    w.string(transactional_id, "transactional_id")
    return w.getvalue()


def decode_key(data: bytes | bytearray | memoryview) -> str:
    """The transactional id of a key; UnknownTransactionKeyVersionError for other versions."""
    r = MessageReader(data, "__transaction_state key", TransactionLogError)
    version = r.int16("version")
    if version != KEY_VERSION:
        raise UnknownTransactionKeyVersionError(version)
    transactional_id = r.string("transactional_id")
    r.finish()
    return transactional_id


def encode_value(value: TransactionLogValue, version: int | None = None) -> bytes:
    """``TransactionLogValue`` bytes: version 0 as Kafka 3.9 writes, unless the value needs
    tagged fields (a kept transaction) or ``version`` says 1."""
    if version is None:
        version = 1 if value.needs_tags else VALUE_VERSION
    if version not in (0, 1):
        raise TransactionLogError(f"cannot write TransactionLogValue version {version}")
    if value.state is TxnState.EMPTY and value.partitions:
        raise TransactionLogError(
            f"a transaction in state Empty has no partitions, got {sorted(value.partitions)}"
        )
    flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    w = MessageWriter(version, flexible, TransactionLogError)
    w.int64(value.producer_id, "producer_id")
    w.int16(value.producer_epoch, "producer_epoch")
    w.int32(value.timeout_ms, "transaction_timeout_ms")
    w.int8(value.state.id, "transaction_status")
    _write_partitions(w, value)
    w.int64(value.last_update_ms, "transaction_last_update_timestamp_ms")
    w.int64(value.start_ms, "transaction_start_timestamp_ms")
    if flexible:
        tags = _value_tags(value)
        w.uvarint(len(tags))
        for tag, raw in tags:
            w.uvarint(tag)
            w.uvarint(len(raw))
            w.raw(raw)
    return w.getvalue()


def _write_partitions(w: MessageWriter, value: TransactionLogValue) -> None:
    """The partitions, by topic (a null array for the Empty state)."""
    if value.state is TxnState.EMPTY:
        w.array_length(None)
        return
    by_topic: dict[str, list[int]] = {}
    for tp in value.partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    w.array_length(len(by_topic))
    for topic in sorted(by_topic):
        w.string(topic, "topic")
        ids = sorted(by_topic[topic])
        w.array_length(len(ids))
        for p in ids:
            w.int32(p, "partition_ids")
        w.tagged_fields()


def _value_tags(value: TransactionLogValue) -> list[tuple[int, bytes]]:
    """The tagged fields of a flexible value (those not at their defaults), in tag order."""
    ongoing = value.ongoing_producer_id != _NO_PRODUCER_ID
    fields = (
        (
            _TAG_PREVIOUS_PRODUCER_ID,
            value.previous_producer_id,
            8,
            value.previous_producer_id != _NO_PRODUCER_ID,
        ),
        (
            _TAG_NEXT_PRODUCER_ID,
            value.next_producer_id,
            8,
            value.next_producer_id != _NO_PRODUCER_ID,
        ),
        (
            _TAG_CLIENT_TRANSACTION_VERSION,
            value.client_transaction_version,
            2,
            value.client_transaction_version != 0,
        ),
        (_TAG_ONGOING_PRODUCER_ID, value.ongoing_producer_id, 8, ongoing),
        (_TAG_ONGOING_PRODUCER_EPOCH, value.ongoing_producer_epoch, 2, ongoing),
    )
    return [
        (tag, field.to_bytes(size, "big", signed=True))
        for tag, field, size, present in fields
        if present
    ]


def decode_value(data: bytes | bytearray | memoryview | None) -> TransactionLogValue | None:
    """A value of version 0 or 1; None for a tombstone."""
    if data is None:
        return None
    r = MessageReader(data, "TransactionLogValue", TransactionLogError)
    version = r.int16("version")
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise r.error(f"unknown version {version}")
    r.flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    producer_id = r.int64("producer_id")
    producer_epoch = r.int16("producer_epoch")
    timeout_ms = r.int32("transaction_timeout_ms")
    status = r.int8("transaction_status")
    try:
        state = TxnState.from_id(status)
    except ValueError as exc:
        raise r.error(str(exc)) from exc
    partitions = _read_partitions(r)
    last_update_ms = r.int64("transaction_last_update_timestamp_ms")
    start_ms = r.int64("transaction_start_timestamp_ms")
    tagged = _read_tags(r) if r.flexible else {}
    r.finish()
    if state is TxnState.EMPTY:
        partitions = set()  # Kafka ignores partitions of an Empty transaction
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=frozenset(partitions),
        last_update_ms=last_update_ms,
        start_ms=start_ms,
        previous_producer_id=tagged.get(_TAG_PREVIOUS_PRODUCER_ID, _NO_PRODUCER_ID),
        next_producer_id=tagged.get(_TAG_NEXT_PRODUCER_ID, _NO_PRODUCER_ID),
        client_transaction_version=tagged.get(_TAG_CLIENT_TRANSACTION_VERSION, 0),
        ongoing_producer_id=tagged.get(_TAG_ONGOING_PRODUCER_ID, _NO_PRODUCER_ID),
        ongoing_producer_epoch=tagged.get(_TAG_ONGOING_PRODUCER_EPOCH, _NO_PRODUCER_EPOCH),
    )


def _read_partitions(r: MessageReader) -> set[TopicPartition]:
    """The partitions (a null array: none)."""
    partitions: set[TopicPartition] = set()
    count = r.nullable_array_length("transaction_partitions", min_element_bytes=6)
    for _ in range(count or 0):
        topic = r.string("topic")
        for _ in range(r.array_length("partition_ids", min_element_bytes=4)):
            partitions.add(TopicPartition(topic, r.int32("partition_ids")))
        r.tagged_fields()
    return partitions


_TAGGED_FIELDS = {
    _TAG_PREVIOUS_PRODUCER_ID: (8, "tagged producer id"),
    _TAG_NEXT_PRODUCER_ID: (8, "tagged producer id"),
    _TAG_CLIENT_TRANSACTION_VERSION: (2, "client_transaction_version"),
    _TAG_ONGOING_PRODUCER_ID: (8, "ongoing_producer_id"),
    _TAG_ONGOING_PRODUCER_EPOCH: (2, "ongoing_producer_epoch"),
}
"""The tagged fields of a value: each one's size (int64 or int16) and name."""


def _read_tags(r: MessageReader) -> dict[int, int]:
    """A flexible value's known tagged fields, by tag (others, or of another size, skipped)."""
    fields: dict[int, int] = {}
    for _ in range(r.uvarint("tagged field count")):
        tag = r.uvarint("tag")
        size = r.uvarint("tagged field size")
        known = _TAGGED_FIELDS.get(tag)
        if known is None or known[0] != size:
            r.raw(size, "tagged field")
        elif size == 8:
            fields[tag] = r.int64(known[1])
        else:
            fields[tag] = r.int16(known[1])
    return fields
