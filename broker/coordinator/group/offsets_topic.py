"""Record formats of the ``__consumer_offsets`` topic, byte-compatible with Kafka 3.9.

Theory of operation
-------------------
Every record of ``__consumer_offsets`` has a key and a value (or a null value: a tombstone,
which deletes the key under compaction). Both start with a big-endian ``int16`` version and
continue with the fields of a schema from Kafka's
``group-coordinator/src/main/resources/common/message/*.json``, serialised as Kafka's
generated message code does. The key's version also tells what kind of record it is:

========================  =====================================================================
key version 0 or 1        ``OffsetCommitKey``: ``group string, topic string, partition int32``
key version 2             ``GroupMetadataKey``: ``group string``
========================  =====================================================================

Value of an offset key (``OffsetCommitValue``, versions 0-4, flexible from 4)::

    offset int64
    leaderEpoch int32            (v3+)
    metadata string
    commitTimestamp int64
    expireTimestamp int64        (v1 only)
    tagged fields                (v4+)

Value of a group key (``GroupMetadataValue``, versions 0-4, flexible from 4)::

    protocolType string
    generation int32
    protocol nullable string
    leader nullable string
    currentStateTimestamp int64  (v2+)
    members array of:
        memberId string
        groupInstanceId nullable string   (v3+)
        clientId string
        clientHost string
        rebalanceTimeout int32            (v1+)
        sessionTimeout int32
        subscription bytes
        assignment bytes
        tagged fields                     (v4+)
    tagged fields                (v4+)

Non-flexible versions write a string as an ``int16`` byte length (``-1`` for null) and UTF-8
bytes, bytes as an ``int32`` length and the bytes, an array as an ``int32`` count. Flexible
versions write them "compact": an unsigned varint of length + 1 (``0`` for null), and end each
struct with a tagged-field section (an unsigned varint count, then ``tag, size, bytes`` each).
No field of these schemas is tagged, so decoding skips every tagged field it meets.

Versions written (as Kafka 3.9 writes them, both the ZooKeeper-mode ``GroupMetadataManager``
and ``MetadataVersion.offsetCommitValueVersion`` / ``groupMetadataValueVersion`` of the new
coordinator, with an inter-broker protocol of 2.3 or later):

- keys: ``OffsetCommitKey`` version 1, ``GroupMetadataKey`` version 2;
- ``OffsetCommitValue`` version 1 when the commit carries an expire timestamp (Kafka sets one
  only when an OffsetCommit v2-v4 request gives a ``retention_time_ms`` other than -1: commit
  time + retention), otherwise version 3 (``leaderEpoch``, no ``expireTimestamp``). Version 1
  has no ``leaderEpoch``, so it is dropped there, as Kafka does;
- ``GroupMetadataValue`` version 3 (with ``groupInstanceId``, KIP-345).

Version 4 of both values is flexible but Kafka 3.9 never writes it ("serialize with the
highest supported non-flexible version until a tagged field is introduced", KIP-915); it is
decoded so that logs written by later Kafka versions load. Every older version is decoded so
that logs written by older Kafka load: absent fields take the schema defaults (``-1``, null),
except that a version-0 member's rebalance timeout is its session timeout, as Kafka's loader
sets it.

Decoding is strict where Kafka's reader is lenient: bytes left over after the last field,
invalid UTF-8 and unknown versions raise :class:`OffsetsRecordError` rather than being ignored
or replaced, so a corrupt record is noticed instead of loaded as something else. A key of an
unknown version raises its subclass :class:`UnknownKeyVersionError` (later Kafka versions write
other record types, keys 3 and up, to this topic; a loader may skip them as Kafka 3.9 does).

:func:`partition_for` maps a group id to its partition as Kafka does:
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``.

Concurrency: pure functions and immutable values; safe from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.coordinator.message_codec import (
    MessageReader,
    MessageWriter,
    RecordFormatError,
    java_string_hash,
    partition_for,
)

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_METADATA_VALUE_VERSION = 3

_OFFSET_KEY_VERSIONS = (0, 1)
_GROUP_KEY_VERSIONS = (2,)
_MAX_VALUE_VERSION = 4
_FIRST_FLEXIBLE_VALUE_VERSION = 4

_NO_TIMESTAMP = -1
_NO_LEADER_EPOCH = -1
_java_string_hash = java_string_hash  # kept for callers and tests of this module

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberRecord",
    "OffsetKey",
    "OffsetValue",
    "OffsetsRecordError",
    "UnknownKeyVersionError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
    "partition_for",
]


class OffsetsRecordError(RecordFormatError):
    """A ``__consumer_offsets`` key or value that cannot be decoded (or a value that cannot
    be encoded in Kafka's format, such as a string longer than 32767 UTF-8 bytes)."""


class UnknownKeyVersionError(OffsetsRecordError):
    """A key whose version names no record type this module knows (Kafka 3.9 skips such
    records when it loads a partition)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"unknown __consumer_offsets key version {version}")
        self.version = version


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """Key of a committed offset: the group and the topic-partition it consumed."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetValue:
    """A committed offset. ``leader_epoch`` and ``expire_timestamp`` are ``-1`` when absent;
    timestamps are milliseconds since the epoch. Keyword-only, so the ints cannot be swapped."""

    offset: int
    leader_epoch: int = _NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp: int
    expire_timestamp: int = _NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Key of a group's metadata record."""

    group: str


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One member as stored in a group metadata record; ``subscription`` is the member's
    metadata for the group's selected protocol and ``assignment`` what the leader gave it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A group's state after a rebalance (or when it becomes empty). ``protocol`` and
    ``leader`` are None for an empty group; ``current_state_timestamp`` is ``-1`` if unknown."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...]


# ---------------------------------------------------------------------------------------------
# Writing


def _writer(version: int, flexible: bool) -> MessageWriter:
    return MessageWriter(version, flexible, OffsetsRecordError)


def encode_key(key: OffsetKey | GroupMetadataKey) -> bytes:
    """The key bytes Kafka 3.9 writes: ``OffsetCommitKey`` v1 or ``GroupMetadataKey`` v2."""
    if isinstance(key, OffsetKey):
        w = _writer(OFFSET_COMMIT_KEY_VERSION, flexible=False)
        w.string(key.group, "group")
        w.string(key.topic, "topic")
        w.int32(key.partition, "partition")
        return w.getvalue()
    if isinstance(key, GroupMetadataKey):
        w = _writer(GROUP_METADATA_KEY_VERSION, flexible=False)
        w.string(key.group, "group")
        return w.getvalue()
    raise OffsetsRecordError(f"not a __consumer_offsets key: {key!r}")


def _encode_offset_value(value: OffsetValue, version: int) -> bytes:
    w = _writer(version, flexible=version >= _FIRST_FLEXIBLE_VALUE_VERSION)
    w.int64(value.offset, "offset")
    if version >= 3:
        w.int32(value.leader_epoch, "leaderEpoch")
    w.string(value.metadata, "metadata")
    w.int64(value.commit_timestamp, "commitTimestamp")
    if version == 1:
        w.int64(value.expire_timestamp, "expireTimestamp")
    w.tagged_fields()
    return w.getvalue()


def _encode_group_value(value: GroupMetadataValue, version: int) -> bytes:
    w = _writer(version, flexible=version >= _FIRST_FLEXIBLE_VALUE_VERSION)
    w.string(value.protocol_type, "protocolType")
    w.int32(value.generation, "generation")
    w.string(value.protocol, "protocol", nullable=True)
    w.string(value.leader, "leader", nullable=True)
    if version >= 2:
        w.int64(value.current_state_timestamp, "currentStateTimestamp")
    w.array_length(len(value.members))
    for m in value.members:
        if not isinstance(m, MemberRecord):
            raise OffsetsRecordError(f"members must hold MemberRecord values, got {m!r}")
        w.string(m.member_id, "memberId")
        if version >= 3:
            w.string(m.group_instance_id, "groupInstanceId", nullable=True)
        w.string(m.client_id, "clientId")
        w.string(m.client_host, "clientHost")
        if version >= 1:
            w.int32(m.rebalance_timeout_ms, "rebalanceTimeout")
        w.int32(m.session_timeout_ms, "sessionTimeout")
        w.bytes_(m.subscription, "subscription")
        w.bytes_(m.assignment, "assignment")
        w.tagged_fields()
    w.tagged_fields()
    return w.getvalue()


def encode_value(value: OffsetValue | GroupMetadataValue) -> bytes:
    """The value bytes Kafka 3.9 writes: ``OffsetCommitValue`` v1 if ``expire_timestamp`` is
    set (its ``leader_epoch`` is then not stored) else v3; ``GroupMetadataValue`` v3."""
    if isinstance(value, OffsetValue):
        version = (
            OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRE
            if value.expire_timestamp != _NO_TIMESTAMP
            else OFFSET_COMMIT_VALUE_VERSION
        )
        return _encode_offset_value(value, version)
    if isinstance(value, GroupMetadataValue):
        return _encode_group_value(value, GROUP_METADATA_VALUE_VERSION)
    raise OffsetsRecordError(f"not a __consumer_offsets value: {value!r}")


# ---------------------------------------------------------------------------------------------
# Reading


def _reader(data: bytes | bytearray | memoryview, what: str) -> MessageReader:
    return MessageReader(data, what, OffsetsRecordError)


def _check_bytes(data: object, what: str) -> bytes | bytearray | memoryview:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise OffsetsRecordError(f"{what} must be bytes, got {type(data).__name__}")
    return data


def decode_key(data: bytes) -> OffsetKey | GroupMetadataKey:
    """Decode a key of any version Kafka has written (0-2); the version says which kind."""
    r = _reader(_check_bytes(data, "key"), "__consumer_offsets key")
    version = r.int16("version")
    if version in _OFFSET_KEY_VERSIONS:
        key: OffsetKey | GroupMetadataKey = OffsetKey(
            r.string("group"), r.string("topic"), r.int32("partition")
        )
    elif version in _GROUP_KEY_VERSIONS:
        key = GroupMetadataKey(r.string("group"))
    else:
        raise UnknownKeyVersionError(version)
    r.finish()
    return key


def _value_version(r: MessageReader, kind: str) -> int:
    version = r.int16("version")
    if not 0 <= version <= _MAX_VALUE_VERSION:
        raise r.error(f"unknown {kind} version {version}")
    r.flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    return version


def _decode_offset_value(data: bytes | bytearray | memoryview) -> OffsetValue:
    r = _reader(data, "OffsetCommitValue")
    version = _value_version(r, "OffsetCommitValue")
    offset = r.int64("offset")
    leader_epoch = r.int32("leaderEpoch") if version >= 3 else _NO_LEADER_EPOCH
    metadata = r.string("metadata")
    commit_timestamp = r.int64("commitTimestamp")
    expire_timestamp = r.int64("expireTimestamp") if version == 1 else _NO_TIMESTAMP
    r.tagged_fields()
    r.finish()
    return OffsetValue(
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=metadata,
        commit_timestamp=commit_timestamp,
        expire_timestamp=expire_timestamp,
    )


def _decode_group_value(data: bytes | bytearray | memoryview) -> GroupMetadataValue:
    r = _reader(data, "GroupMetadataValue")
    version = _value_version(r, "GroupMetadataValue")
    protocol_type = r.string("protocolType")
    generation = r.int32("generation")
    protocol = r.nullable_string("protocol")
    leader = r.nullable_string("leader")
    current_state_timestamp = r.int64("currentStateTimestamp") if version >= 2 else _NO_TIMESTAMP
    members: list[MemberRecord] = []
    for _ in range(r.array_length("members")):
        member_id = r.string("memberId")
        group_instance_id = r.nullable_string("groupInstanceId") if version >= 3 else None
        client_id = r.string("clientId")
        client_host = r.string("clientHost")
        rebalance_timeout = r.int32("rebalanceTimeout") if version >= 1 else None
        session_timeout = r.int32("sessionTimeout")
        subscription = r.bytes_("subscription")
        assignment = r.bytes_("assignment")
        r.tagged_fields()
        members.append(
            MemberRecord(
                member_id=member_id,
                group_instance_id=group_instance_id,
                client_id=client_id,
                client_host=client_host,
                # Version 0 had no rebalance timeout; Kafka's loader uses the session timeout.
                rebalance_timeout_ms=(
                    session_timeout if rebalance_timeout is None else rebalance_timeout
                ),
                session_timeout_ms=session_timeout,
                subscription=subscription,
                assignment=assignment,
            )
        )
    r.tagged_fields()
    r.finish()
    return GroupMetadataValue(
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp=current_state_timestamp,
        members=tuple(members),
    )


def decode_value(
    key: OffsetKey | GroupMetadataKey, data: bytes | None
) -> OffsetValue | GroupMetadataValue | None:
    """Decode the value stored under ``key`` (any version 0-4); ``None`` data is a tombstone
    and decodes to ``None``."""
    if data is None:
        return None
    if isinstance(key, OffsetKey):
        return _decode_offset_value(_check_bytes(data, "value"))
    if isinstance(key, GroupMetadataKey):
        return _decode_group_value(_check_bytes(data, "value"))
    raise OffsetsRecordError(f"not a __consumer_offsets key: {key!r}")
