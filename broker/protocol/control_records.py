"""Transaction markers: the control records that end a transaction on a partition (KIP-98).

A marker is a record batch of its own whose attributes have the *transactional* (0x10) and
*control* (0x20) bits set, carrying the producer id and epoch of the transaction it ends, a
base sequence of -1 and exactly one record::

    key   = ControlRecordType   version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)
    value = EndTxnMarker        version int16 (0), coordinator_epoch int32

(Kafka's ``ControlRecordType`` / ``EndTransactionMarker``; the same bytes as
``kio.schema.control_record_type_schema`` / ``kio.schema.end_txn_marker`` v0.) Consumers never
see control records; a read_committed consumer uses them, with the fetch response's aborted
transactions, to drop aborted data.

Concurrency: pure functions over bytes; safe from any thread.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import (
    NO_SEQUENCE,
    BatchHeader,
    SimpleRecord,
    decode_records,
    encode_batch,
)

__all__ = [
    "ControlType",
    "EndTxnMarker",
    "InvalidControlRecordError",
    "decode_marker",
    "encode_marker_batch",
]

CONTROL_RECORD_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlType(enum.IntEnum):
    """Control record types (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1


class InvalidControlRecordError(KafkaError):
    code = ErrorCode.corrupt_message


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """A commit or abort marker as read from a control batch."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def is_commit(self) -> bool:
        return self.control_type is ControlType.COMMIT


def encode_marker_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """One control batch holding a commit or abort marker for ``producer_id``."""
    record = SimpleRecord(
        key=_KEY.pack(CONTROL_RECORD_VERSION, int(control_type)),
        value=_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch),
        timestamp=timestamp_ms,
    )
    return encode_batch(
        [record],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        transactional=True,
        control=True,
    )


def decode_marker(buf: bytes | bytearray | memoryview, header: BatchHeader) -> EndTxnMarker:
    """The marker of a control batch (``header`` must be a control batch of ``buf``).

    Raises InvalidControlRecordError for a control batch that is not one well-formed marker
    (Kafka's ``EndTransactionMarker.deserialize``: a known type, a value of at least 6 bytes;
    later value versions may append fields, which are ignored)."""
    if not header.is_control:
        raise InvalidControlRecordError("not a control batch")
    recs = decode_records(buf, header)
    if len(recs) != 1:
        raise InvalidControlRecordError(
            f"a control batch holds one record, this one holds {len(recs)}"
        )
    key, value = recs[0].key, recs[0].value
    if key is None or len(key) < _KEY.size:
        raise InvalidControlRecordError("control record key is missing or too short")
    _version, type_id = _KEY.unpack_from(key)
    try:
        control_type = ControlType(type_id)
    except ValueError:
        raise InvalidControlRecordError(f"unknown control record type {type_id}") from None
    if value is None or len(value) < _VALUE.size:
        raise InvalidControlRecordError("end transaction marker value is missing or too short")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise InvalidControlRecordError(f"invalid end transaction marker version {version}")
    return EndTxnMarker(control_type, coordinator_epoch)
