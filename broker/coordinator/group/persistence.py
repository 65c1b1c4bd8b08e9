"""Groups and committed offsets as records of ``__consumer_offsets`` (checklist section 17).

Writing: an offset commit is one record batch with one record per partition (key
``OffsetKey``, value ``OffsetValue``); a completed rebalance writes the group's metadata
(key ``GroupMetadataKey``, value ``GroupMetadataValue``); a deleted offset or group is a
tombstone (null value), so compaction keeps only the latest state. Record formats are
``offsets_topic.py``'s, byte-compatible with Kafka 3.9.

Transactional offset commits (TxnOffsetCommit, KIP-98) are the same offset records in a
*transactional* batch stamped with the producer id and epoch of the transaction; they stay
pending until the transaction's marker (a control batch of the same producer) commits them
(they become the group's offsets) or aborts them (they vanish).

Loading: when this broker becomes leader of an offsets partition, the coordinator replays the
partition from its log start to its high watermark; later records win, tombstones delete;
transactional commits wait for their producer's marker, and those still without one at the
end stay pending. Records of key versions this broker does not know (written by newer Kafka
versions) are skipped, as Kafka does.

Reading the partition is ``broker/coordinator/partition_loader.py``'s; it hands the batches to
:func:`apply_records`. Pure functions over bytes; no asyncio.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from broker.coordinator.group.offsets_topic import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetKey,
    OffsetsRecordError,
    OffsetValue,
    UnknownKeyVersionError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker.protocol import records
from broker.protocol.control_records import InvalidControlRecordError, decode_marker
from broker.types import TopicPartition

log = logging.getLogger(__name__)


def offset_commit_batch(
    group: str,
    offsets: Mapping[TopicPartition, OffsetValue | None],
    now_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
) -> bytes:
    """One batch committing (or, with None, deleting) ``group``'s offsets; with a producer
    id, a transactional batch of that producer (a TxnOffsetCommit)."""
    recs = [
        records.SimpleRecord(
            key=encode_key(OffsetKey(group, tp.topic, tp.partition)),
            value=None if value is None else encode_value(value),
            timestamp=now_ms,
        )
        for tp, value in sorted(offsets.items())
    ]
    if producer_id >= 0:
        return bytes(
            records.encode_batch(
                recs,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                base_sequence=0,
                transactional=True,
            )
        )
    return bytes(records.encode_batch(recs))


def group_metadata_batch(group: str, value: GroupMetadataValue | None, now_ms: int) -> bytes:
    """One batch with ``group``'s metadata (None: a tombstone deleting the group)."""
    rec = records.SimpleRecord(
        key=encode_key(GroupMetadataKey(group)),
        value=None if value is None else encode_value(value),
        timestamp=now_ms,
    )
    return bytes(records.encode_batch([rec]))


PendingOffsets = dict[int, dict[str, dict[TopicPartition, OffsetValue]]]
"""producer id -> group -> partition -> offset committed in a transaction not yet ended."""


@dataclass(slots=True)
class LoadedPartition:
    """What one offsets partition holds: committed offsets and group metadata per group,
    and transactional commits still waiting for their marker."""

    offsets: dict[str, dict[TopicPartition, OffsetValue]] = field(default_factory=dict)
    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    removed_groups: set[str] = field(default_factory=set)
    pending: PendingOffsets = field(default_factory=dict)
    records: int = 0  # keyed records replayed (a compacted partition: about its live keys)


def complete_pending(
    offsets: dict[str, dict[TopicPartition, OffsetValue]],
    pending: PendingOffsets,
    producer_id: int,
    commit: bool,
) -> list[str]:
    """A marker of ``producer_id``: its pending commits become offsets (``commit``) or
    vanish; returns the groups whose offsets changed."""
    groups = pending.pop(producer_id, {})
    if not commit:
        return []
    for group, values in groups.items():
        offsets.setdefault(group, {}).update(values)
    return sorted(groups)


def apply_records(loaded: LoadedPartition, blobs: Iterable[bytes]) -> None:
    """Replay record-batch blobs (whole batches, in log order) into ``loaded``."""
    for blob in blobs:
        for header in records.iter_batches(blob, allow_partial_tail=True):
            if header.attributes & records.CONTROL_MASK:  # a transaction marker
                _apply_marker(loaded, blob, header)
                continue
            transactional = bool(header.attributes & records.TRANSACTIONAL_MASK)
            for rec in records.decode_records(blob, header):
                if rec.key is None:
                    continue
                loaded.records += 1
                try:
                    key = decode_key(rec.key)
                    value = decode_value(key, rec.value)
                except UnknownKeyVersionError:
                    continue
                except OffsetsRecordError as exc:
                    log.warning("skipping a malformed __consumer_offsets record: %s", exc)
                    continue
                if isinstance(key, OffsetKey):
                    _apply_offset(loaded, key, value, header.producer_id if transactional else None)
                else:
                    _apply_group(loaded, key, value)


def _apply_marker(loaded: LoadedPartition, blob: bytes, header: records.BatchHeader) -> None:
    """A transaction marker: its producer's pending commits become offsets or vanish."""
    if header.record_count == 0:
        return  # emptied by compaction: its transaction is gone
    try:
        marker = decode_marker(blob, header)
    except InvalidControlRecordError as exc:
        log.warning("skipping a malformed transaction marker: %s", exc)
        return
    complete_pending(loaded.offsets, loaded.pending, header.producer_id, marker.is_commit)


def _apply_offset(
    loaded: LoadedPartition, key: OffsetKey, value: object, producer_id: int | None
) -> None:
    """An offset commit (pending until its marker when transactional: ``producer_id`` set),
    or a tombstone deleting one."""
    tp = TopicPartition(key.topic, key.partition)
    if producer_id is not None:
        if isinstance(value, OffsetValue):
            loaded.pending.setdefault(producer_id, {}).setdefault(key.group, {})[tp] = value
        return
    group_offsets = loaded.offsets.setdefault(key.group, {})
    if value is None:
        group_offsets.pop(tp, None)
    elif isinstance(value, OffsetValue):
        group_offsets[tp] = value


def _apply_group(loaded: LoadedPartition, key: GroupMetadataKey, value: object) -> None:
    """A group's metadata, or a tombstone removing the group and its offsets."""
    if value is None:
        loaded.groups.pop(key.group, None)
        loaded.offsets.pop(key.group, None)
        loaded.removed_groups.add(key.group)
    elif isinstance(value, GroupMetadataValue):
        loaded.groups[key.group] = value
        loaded.removed_groups.discard(key.group)
