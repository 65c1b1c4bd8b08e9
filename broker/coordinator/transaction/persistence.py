"""Transactional ids as records of ``__transaction_state`` (checklist section 18).

Writing: every state change of a transactional id is one record batch with one record (key
``TransactionLogKey``, value ``TransactionLogValue``, formats of ``transaction_log.py``), so
compaction keeps only the latest state of each id; an expired id is a tombstone (null value).
Batches are uncompressed, as Kafka enforces for this topic.

Loading: when this broker becomes leader of a ``__transaction_state`` partition, the
coordinator replays the partition from its log start to its end: later records win,
tombstones delete. Records of key versions Kafka 3.9 does not know are skipped, as Kafka
does; a malformed value is skipped with a warning.

Reading the partition is ``broker/coordinator/partition_loader.py``'s; it hands the batches to
:func:`apply_records`. Pure functions over bytes; no asyncio.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.coordinator.transaction.state import TransactionMetadata, TxnTransit
from broker.coordinator.transaction.transaction_log import (
    TransactionLogError,
    TransactionLogValue,
    UnknownTransactionKeyVersionError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker.protocol import records

__all__ = [
    "LoadedTransactions",
    "apply_records",
    "metadata_from_value",
    "tombstone_batch",
    "transit_batch",
    "value_of",
]

log = logging.getLogger(__name__)


def value_of(transit: TxnTransit) -> TransactionLogValue:
    """The record value that persists ``transit``."""
    return TransactionLogValue(
        producer_id=transit.producer_id,
        producer_epoch=transit.producer_epoch,
        timeout_ms=transit.timeout_ms,
        state=transit.state,
        partitions=transit.partitions,
        last_update_ms=transit.update_ms,
        start_ms=transit.start_ms,
        ongoing_producer_id=transit.ongoing_producer_id,
        ongoing_producer_epoch=transit.ongoing_producer_epoch,
    )


def transit_batch(transactional_id: str, transit: TxnTransit) -> bytes:
    """One batch persisting a state change of ``transactional_id``."""
    rec = records.SimpleRecord(
        key=encode_key(transactional_id),
        value=encode_value(value_of(transit)),
        timestamp=transit.update_ms,
    )
    return bytes(records.encode_batch([rec]))


def tombstone_batch(transactional_ids: Iterable[str], now_ms: int) -> bytes:
    """One batch of tombstones for expired transactional ids."""
    recs = [
        records.SimpleRecord(key=encode_key(tid), value=None, timestamp=now_ms)
        for tid in transactional_ids
    ]
    return bytes(records.encode_batch(recs))


def metadata_from_value(transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
    """In-memory metadata of a loaded record (Kafka's ``readTxnRecordValue``)."""
    return TransactionMetadata(
        transactional_id,
        producer_id=value.producer_id,
        previous_producer_id=value.previous_producer_id,
        producer_epoch=value.producer_epoch,
        timeout_ms=value.timeout_ms,
        state=value.state,
        partitions=value.partitions,
        start_ms=value.start_ms,
        update_ms=value.last_update_ms,
        ongoing_producer_id=value.ongoing_producer_id,
        ongoing_producer_epoch=value.ongoing_producer_epoch,
    )


@dataclass(slots=True)
class LoadedTransactions:
    """The latest value of every transactional id of one partition."""

    values: dict[str, TransactionLogValue] = field(default_factory=dict)
    records: int = 0


def apply_records(loaded: LoadedTransactions, blobs: Iterable[bytes]) -> None:
    """Replay record-batch blobs (whole batches, in log order) into ``loaded``."""
    for blob in blobs:
        for header in records.iter_batches(blob, allow_partial_tail=True):
            if header.is_control:
                continue
            for rec in records.decode_records(blob, header):
                if rec.key is None:
                    log.warning("skipping a __transaction_state record without a key")
                    continue
                loaded.records += 1
                try:
                    transactional_id = decode_key(rec.key)
                    value = decode_value(rec.value)
                except UnknownTransactionKeyVersionError:
                    continue
                except TransactionLogError as exc:
                    log.warning("skipping a malformed __transaction_state record: %s", exc)
                    continue
                if value is None:
                    loaded.values.pop(transactional_id, None)
                else:
                    loaded.values[transactional_id] = value
