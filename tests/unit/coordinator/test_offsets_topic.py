"""``__consumer_offsets`` record formats against Kafka 3.9's schemas.

Golden bytes are written field by field from the JSON schemas in Kafka's
``group-coordinator/src/main/resources/common/message/`` (3.9 branch); each was also checked
once against ``MessageUtil.toVersionPrefixedBytes`` with Kafka 3.9.1's generated classes
(``kafka-group-coordinator-3.9.1.jar``), which produced the same hex. Partition vectors were
computed with JDK 17: ``Utils.abs(s.hashCode()) % n`` where ``Utils.abs(MIN_VALUE) == 0``.

Encodings: ``int16/int32/int64`` big-endian; non-flexible ``string`` = int16 length + UTF-8
(``ffff`` = null), ``bytes`` = int32 length + bytes, array = int32 count; flexible (v4)
compact forms = unsigned varint of length + 1 (``00`` = null), and each struct ends with a
tagged-field section (``00`` = none).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.group import offsets_topic
from broker.coordinator.group.offsets_topic import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberRecord,
    OffsetKey,
    OffsetsRecordError,
    OffsetValue,
    UnknownKeyVersionError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)

pytestmark = pytest.mark.unit


def h(*parts: str) -> bytes:
    """Concatenate hex fragments (one per field, spaces allowed, so a golden reads field by field)."""
    return bytes.fromhex("".join(parts))


# ---------------------------------------------------------------------------------------------
# partition_for


@pytest.mark.parametrize(
    ("group", "java_hash", "p50", "p7"),
    [
        ("", 0, 0, 0),
        ("a", 97, 47, 6),
        ("group-1", 293427299, 49, 4),
        # The example of the design checklist (section 16.2).
        ("console-consumer-49366", 161434669, 19, 4),
        # hashCode == Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0.
        ("polygenelubricants", -2147483648, 0, 0),
        # Negative hashes: Math.abs, not "& 0x7fffffff" (which would give 36, 26, 17).
        ("my-group", -1906497762, 12, 1),
        ("spark-kafka-source-1", -1638101322, 22, 4),
        ("test-consumer-group", -1793216381, 31, 5),
        ("gr\u00fcppe", -1233264812, 12, 3),
        ("\u7ec4-\u6d88\u8d39\u8005", -65227029, 29, 0),
        # A character outside the BMP counts as two UTF-16 code units (a surrogate pair).
        ("emoji-\U0001f680", 1164511434, 34, 2),
        ("x" * 100, 1680682496, 46, 3),
    ],
)
def test_partition_for_matches_java(group: str, java_hash: int, p50: int, p7: int) -> None:
    assert offsets_topic._java_string_hash(group) == java_hash
    assert partition_for(group, 50) == p50
    assert partition_for(group, 7) == p7
    assert partition_for(group, 1) == 0


@pytest.mark.parametrize("n", [0, -1])
def test_partition_for_rejects_non_positive_counts(n: int) -> None:
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for("g", n)


# ---------------------------------------------------------------------------------------------
# Golden bytes: what we write

OFFSET_KEY = OffsetKey("g1", "t", 3)
OFFSET_KEY_V1 = h(
    "0001",  # version 1: OffsetCommitKey
    "0002 6731",  # group: length 2, "g1"
    "0001 74",  # topic: length 1, "t"
    "00000003",  # partition: 3
)
GROUP_KEY = GroupMetadataKey("g1")
GROUP_KEY_V2 = h(
    "0002",  # version 2: GroupMetadataKey
    "0002 6731",  # group: "g1"
)

OFFSET_VALUE = OffsetValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1000)
OFFSET_VALUE_V3 = h(
    "0003",  # version 3 (no expire timestamp)
    "000000000000002a",  # offset: 42
    "00000005",  # leaderEpoch: 5
    "0001 6d",  # metadata: "m"
    "00000000000003e8",  # commitTimestamp: 1000
)
OFFSET_VALUE_EXPIRING = OffsetValue(
    offset=42, metadata="m", commit_timestamp=1000, expire_timestamp=2000
)
OFFSET_VALUE_V1 = h(
    "0001",  # version 1 (an expire timestamp is set); no leaderEpoch in v1
    "000000000000002a",  # offset: 42
    "0001 6d",  # metadata: "m"
    "00000000000003e8",  # commitTimestamp: 1000
    "00000000000007d0",  # expireTimestamp: 2000
)

MEMBER = MemberRecord(
    member_id="m1",
    group_instance_id="i1",
    client_id="c",
    client_host="/h",
    rebalance_timeout_ms=300000,
    session_timeout_ms=45000,
    subscription=b"\x01\x02",
    assignment=b"\x03",
)
GROUP_VALUE = GroupMetadataValue(
    protocol_type="consumer",
    generation=7,
    protocol="range",
    leader="m1",
    current_state_timestamp=1234,
    members=(MEMBER,),
)
GROUP_VALUE_V3 = h(
    "0003",  # version 3
    "0008 636f6e73756d6572",  # protocolType: "consumer"
    "00000007",  # generation: 7
    "0005 72616e6765",  # protocol: "range"
    "0002 6d31",  # leader: "m1"
    "00000000000004d2",  # currentStateTimestamp: 1234
    "00000001",  # members: 1 element
    "0002 6d31",  # . memberId: "m1"
    "0002 6931",  # . groupInstanceId: "i1"
    "0001 63",  # . clientId: "c"
    "0002 2f68",  # . clientHost: "/h"
    "000493e0",  # . rebalanceTimeout: 300000
    "0000afc8",  # . sessionTimeout: 45000
    "00000002 0102",  # . subscription: 2 bytes
    "00000001 03",  # . assignment: 1 byte
)
EMPTY_GROUP_VALUE = GroupMetadataValue("consumer", 8, None, None, 99, ())
EMPTY_GROUP_VALUE_V3 = h(
    "0003",  # version 3
    "0008 636f6e73756d6572",  # protocolType: "consumer"
    "00000008",  # generation: 8
    "ffff",  # protocol: null
    "ffff",  # leader: null
    "0000000000000063",  # currentStateTimestamp: 99
    "00000000",  # members: empty
)


@pytest.mark.parametrize(
    ("key", "golden"), [(OFFSET_KEY, OFFSET_KEY_V1), (GROUP_KEY, GROUP_KEY_V2)]
)
def test_key_golden_bytes(key: OffsetKey | GroupMetadataKey, golden: bytes) -> None:
    assert encode_key(key) == golden
    assert decode_key(golden) == key


@pytest.mark.parametrize(
    ("key", "value", "golden"),
    [
        (OFFSET_KEY, OFFSET_VALUE, OFFSET_VALUE_V3),
        (OFFSET_KEY, OFFSET_VALUE_EXPIRING, OFFSET_VALUE_V1),
        (GROUP_KEY, GROUP_VALUE, GROUP_VALUE_V3),
        (GROUP_KEY, EMPTY_GROUP_VALUE, EMPTY_GROUP_VALUE_V3),
    ],
)
def test_value_golden_bytes(
    key: OffsetKey | GroupMetadataKey, value: OffsetValue | GroupMetadataValue, golden: bytes
) -> None:
    assert encode_value(value) == golden
    assert decode_value(key, golden) == value


def test_expiring_offset_drops_leader_epoch_as_kafka_does() -> None:
    # v1 has no leaderEpoch field (it is "ignorable"), so Kafka writes v1 without it.
    value = dataclasses.replace(OFFSET_VALUE_EXPIRING, leader_epoch=9)
    assert encode_value(value) == OFFSET_VALUE_V1
    assert decode_value(OFFSET_KEY, encode_value(value)) == OFFSET_VALUE_EXPIRING


def test_unicode_strings_are_utf8_with_byte_lengths() -> None:
    key = OffsetKey("gr\u00fcppe", "t\U0001f680", 0)
    assert encode_key(key) == h(
        "0001",
        "0007 6772c3bc707065",  # "grüppe": 7 UTF-8 bytes (ü is c3 bc)
        "0005 74f09f9a80",  # "t🚀": 5 UTF-8 bytes
        "00000000",
    )
    assert decode_key(encode_key(key)) == key


# ---------------------------------------------------------------------------------------------
# Older (and flexible) versions written by other Kafka versions


def test_decode_offset_key_v0() -> None:
    assert decode_key(h("0000", "0002 6731", "0001 74", "00000003")) == OFFSET_KEY


def test_decode_offset_value_v0() -> None:
    data = h("0000", "000000000000002a", "0001 6d", "00000000000003e8")
    assert decode_value(OFFSET_KEY, data) == OffsetValue(
        offset=42, metadata="m", commit_timestamp=1000
    )


def test_decode_offset_value_v1_without_expiry() -> None:
    data = h("0001", "000000000000002a", "0001 6d", "00000000000003e8", "ffffffffffffffff")
    assert decode_value(OFFSET_KEY, data) == OffsetValue(
        offset=42, metadata="m", commit_timestamp=1000, expire_timestamp=-1
    )


def test_decode_offset_value_v2() -> None:
    data = h("0002", "000000000000002a", "0001 6d", "00000000000003e8")
    assert decode_value(OFFSET_KEY, data) == OffsetValue(
        offset=42, metadata="m", commit_timestamp=1000
    )


def test_decode_offset_value_v4_flexible() -> None:
    data = h(
        "0004",
        "000000000000002a",  # offset
        "00000005",  # leaderEpoch
        "02 6d",  # metadata: compact string, varint 1 + 1
        "00000000000003e8",  # commitTimestamp
        "00",  # no tagged fields
    )
    assert decode_value(OFFSET_KEY, data) == OFFSET_VALUE


def test_decode_offset_value_v4_skips_unknown_tagged_fields() -> None:
    data = h(
        "0004",
        "000000000000002a",
        "00000005",
        "02 6d",
        "00000000000003e8",
        "02",  # two tagged fields
        "00 03 aabbcc",  # tag 0, 3 bytes
        "8101 00",  # tag 129 (varint 81 01), 0 bytes
    )
    assert decode_value(OFFSET_KEY, data) == OFFSET_VALUE


MEMBER_V0_V2 = dataclasses.replace(MEMBER, group_instance_id=None)


def test_decode_group_value_v0_uses_session_timeout_as_rebalance_timeout() -> None:
    data = h(
        "0000",
        "0008 636f6e73756d6572",
        "00000007",
        "0005 72616e6765",
        "0002 6d31",
        # no currentStateTimestamp before v2
        "00000001",
        "0002 6d31",  # memberId (no groupInstanceId before v3)
        "0001 63",
        "0002 2f68",
        # no rebalanceTimeout in v0
        "0000afc8",  # sessionTimeout 45000
        "00000002 0102",
        "00000001 03",
    )
    assert decode_value(GROUP_KEY, data) == dataclasses.replace(
        GROUP_VALUE,
        current_state_timestamp=-1,
        members=(dataclasses.replace(MEMBER_V0_V2, rebalance_timeout_ms=45000),),
    )


def test_decode_group_value_v1() -> None:
    data = h(
        "0001",
        "0008 636f6e73756d6572",
        "00000007",
        "0005 72616e6765",
        "0002 6d31",
        "00000001",
        "0002 6d31",
        "0001 63",
        "0002 2f68",
        "000493e0",  # rebalanceTimeout (v1+)
        "0000afc8",
        "00000002 0102",
        "00000001 03",
    )
    assert decode_value(GROUP_KEY, data) == dataclasses.replace(
        GROUP_VALUE, current_state_timestamp=-1, members=(MEMBER_V0_V2,)
    )


def test_decode_group_value_v2() -> None:
    data = h(
        "0002",
        "0008 636f6e73756d6572",
        "00000007",
        "0005 72616e6765",
        "0002 6d31",
        "00000000000004d2",  # currentStateTimestamp (v2+)
        "00000001",
        "0002 6d31",
        "0001 63",
        "0002 2f68",
        "000493e0",
        "0000afc8",
        "00000002 0102",
        "00000001 03",
    )
    assert decode_value(GROUP_KEY, data) == dataclasses.replace(
        GROUP_VALUE, members=(MEMBER_V0_V2,)
    )


GROUP_VALUE_V4 = h(
    "0004",
    "09 636f6e73756d6572",  # protocolType: compact string, 8 + 1
    "00000007",  # generation
    "06 72616e6765",  # protocol: compact nullable string
    "03 6d31",  # leader
    "00000000000004d2",  # currentStateTimestamp
    "02",  # members: compact array, 1 + 1
    "03 6d31",  # . memberId
    "03 6931",  # . groupInstanceId
    "02 63",  # . clientId
    "03 2f68",  # . clientHost
    "000493e0",  # . rebalanceTimeout
    "0000afc8",  # . sessionTimeout
    "03 0102",  # . subscription: compact bytes, 2 + 1
    "02 03",  # . assignment: compact bytes, 1 + 1
    "00",  # . member tagged fields
    "00",  # tagged fields
)


def test_decode_group_value_v4_flexible() -> None:
    assert decode_value(GROUP_KEY, GROUP_VALUE_V4) == GROUP_VALUE


def test_decode_group_value_v4_nulls_and_tagged_fields() -> None:
    data = h(
        "0004",
        "09 636f6e73756d6572",
        "00000008",
        "00",  # protocol: null
        "00",  # leader: null
        "0000000000000063",
        "01",  # members: empty compact array
        "01 05 05 0102030405",  # one unknown tagged field: count 1, tag 5, size 5, bytes
    )
    assert decode_value(GROUP_KEY, data) == EMPTY_GROUP_VALUE


# Every version of both values, as Kafka 3.9.1's generated classes write them (the same bytes as
# the field-by-field goldens above; the v1 offset value with no expiry writes -1).
KAFKA_OFFSET_VALUES = {
    0: "0000 000000000000002a 00016d 00000000000003e8",
    1: "0001 000000000000002a 00016d 00000000000003e8 ffffffffffffffff",
    2: "0002 000000000000002a 00016d 00000000000003e8",
    3: "0003 000000000000002a 00000005 00016d 00000000000003e8",
    4: "0004 000000000000002a 00000005 026d 00000000000003e8 00",
}
_G = "0008636f6e73756d6572 00000007 000572616e6765 00026d31"  # type, generation, protocol, leader
_M = "00016300022f68"  # clientId "c", clientHost "/h"
_SUB_ASSIGN = "0000afc8 000000020102 0000000103"  # sessionTimeout, subscription, assignment
KAFKA_GROUP_VALUES = {
    0: f"0000 {_G} 00000001 00026d31 {_M} {_SUB_ASSIGN}",
    1: f"0001 {_G} 00000001 00026d31 {_M} 000493e0 {_SUB_ASSIGN}",
    2: f"0002 {_G} 00000000000004d2 00000001 00026d31 {_M} 000493e0 {_SUB_ASSIGN}",
    3: f"0003 {_G} 00000000000004d2 00000001 00026d31 00026931 {_M} 000493e0 {_SUB_ASSIGN}",
    4: GROUP_VALUE_V4.hex(),
}


@pytest.mark.parametrize("version", range(5))
def test_every_version_matches_kafkas_bytes(version: int) -> None:
    """The writer of each version (only 1 and 3 are written in production) produces Kafka's
    bytes, and the reader reads them back."""
    offset_bytes = bytes.fromhex(KAFKA_OFFSET_VALUES[version])
    assert offsets_topic._encode_offset_value(OFFSET_VALUE, version) == offset_bytes
    assert decode_value(OFFSET_KEY, offset_bytes) == dataclasses.replace(
        OFFSET_VALUE, leader_epoch=5 if version >= 3 else -1
    )
    group = (
        GROUP_VALUE if version >= 3 else dataclasses.replace(GROUP_VALUE, members=(MEMBER_V0_V2,))
    )
    group_bytes = bytes.fromhex(KAFKA_GROUP_VALUES[version])
    assert offsets_topic._encode_group_value(group, version) == group_bytes
    assert decode_value(GROUP_KEY, group_bytes) == dataclasses.replace(
        group,
        current_state_timestamp=1234 if version >= 2 else -1,
        members=(
            dataclasses.replace(group.members[0], rebalance_timeout_ms=45000)
            if version == 0
            else group.members[0],
        ),
    )


# ---------------------------------------------------------------------------------------------
# Tombstones


@pytest.mark.parametrize("key", [OFFSET_KEY, GROUP_KEY])
def test_tombstone_decodes_to_none(key: OffsetKey | GroupMetadataKey) -> None:
    assert decode_value(key, None) is None


# ---------------------------------------------------------------------------------------------
# Malformed input


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "needs 2 bytes"),
        (b"\x00", "needs 2 bytes"),
        (h("0001", "0002 67"), "group needs 2 bytes"),
        (h("0001", "0002 6731", "0001 74", "000000"), "partition needs 4 bytes"),
        (h("0001", "ffff", "0001 74", "00000003"), "non-nullable field group"),
        (h("0001", "fffe", "0001 74", "00000003"), "negative length"),
        (h("0002", "0002 ff31"), "not valid UTF-8"),
        (OFFSET_KEY_V1 + b"\x00", "1 unexpected bytes"),
    ],
)
def test_malformed_keys(data: bytes, match: str) -> None:
    with pytest.raises(OffsetsRecordError, match=match):
        decode_key(data)


@pytest.mark.parametrize("version", [3, 4, 0x7FFF, -1])
def test_unknown_key_version(version: int) -> None:
    with pytest.raises(UnknownKeyVersionError) as info:
        decode_key(version.to_bytes(2, "big", signed=True) + h("0002", "6731"))
    assert info.value.version == version
    assert isinstance(info.value, OffsetsRecordError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("key", "data", "match"),
    [
        (OFFSET_KEY, b"", "OffsetCommitValue: field version"),
        (OFFSET_KEY, h("0005", "000000000000002a"), "unknown OffsetCommitValue version 5"),
        (OFFSET_KEY, h("ffff"), "unknown OffsetCommitValue version -1"),
        (OFFSET_KEY, OFFSET_VALUE_V3[:-1], "commitTimestamp needs 8 bytes"),
        (OFFSET_KEY, OFFSET_VALUE_V3 + b"\x00", "unexpected bytes"),
        (OFFSET_KEY, h("0003", "000000000000002a", "00000005", "ffff"), "metadata"),
        # v4: the varint of the tagged-field count never ends.
        (
            OFFSET_KEY,
            h("0004", "000000000000002a", "00000005", "02 6d", "00000000000003e8", "ffffffffff"),
            "varint",
        ),
        # v4: a tagged field longer than the record.
        (
            OFFSET_KEY,
            h("0004", "000000000000002a", "00000005", "02 6d", "00000000000003e8", "01 00 05 aa"),
            "tagged field needs 5 bytes",
        ),
        # v4: compact string claiming more than 32767 bytes (varint 0x8001 + 1).
        (OFFSET_KEY, h("0004", "000000000000002a", "00000005", "828002"), "invalid length"),
        (GROUP_KEY, h("0006"), "unknown GroupMetadataValue version 6"),
        (GROUP_KEY, EMPTY_GROUP_VALUE_V3[:-4] + h("ffffffff"), "non-nullable field members"),
        (GROUP_KEY, EMPTY_GROUP_VALUE_V3[:-4] + h("7fffffff"), "claims 2147483647 elements"),
        (GROUP_KEY, GROUP_VALUE_V3[:-5] + h("ffffffff"), "non-nullable field assignment"),
        (GROUP_KEY, GROUP_VALUE_V3[:-1], "assignment needs 1 bytes"),
        (GROUP_KEY, GROUP_VALUE_V4[:-1], "tagged field count"),
        (GROUP_KEY, h("0003", "ffff"), "non-nullable field protocolType"),
    ],
)
def test_malformed_values(key: OffsetKey | GroupMetadataKey, data: bytes, match: str) -> None:
    with pytest.raises(OffsetsRecordError, match=match):
        decode_value(key, data)


def test_decode_rejects_non_bytes() -> None:
    with pytest.raises(OffsetsRecordError, match="must be bytes"):
        decode_key("0001")  # type: ignore[arg-type]
    with pytest.raises(OffsetsRecordError, match="must be bytes"):
        decode_value(OFFSET_KEY, "x")  # type: ignore[arg-type]


def _group_with_member(**changes: Any) -> GroupMetadataValue:
    """GROUP_VALUE whose one member has ``changes`` (ill-typed on purpose)."""
    return dataclasses.replace(GROUP_VALUE, members=(dataclasses.replace(MEMBER, **changes),))


@pytest.mark.parametrize(
    ("thing", "match"),
    [
        (OffsetKey("g", "t", 2**31), "partition out of range"),
        (OffsetKey("g" * 32768, "t", 0), "group is too long"),
        (OffsetKey("\ud800", "t", 0), "not encodable as UTF-8"),
        (GroupMetadataKey(None), "non-nullable field group"),  # type: ignore[arg-type]
        (OffsetValue(offset=2**63, commit_timestamp=0), "offset out of range"),
        (OffsetValue(offset=True, commit_timestamp=0), "must be an int"),
        (GroupMetadataValue("consumer", 2**31, None, None, -1, ()), "generation out of range"),
        (_group_with_member(client_id=None), "non-nullable field clientId"),
        (_group_with_member(assignment="x"), "assignment must be bytes"),
        ("not a record", "not a __consumer_offsets"),
    ],
)
def test_encode_errors(thing: Any, match: str) -> None:
    with pytest.raises(OffsetsRecordError, match=match):
        if isinstance(thing, OffsetKey | GroupMetadataKey):
            encode_key(thing)
        else:
            encode_value(thing)


# ---------------------------------------------------------------------------------------------
# Round trips (Hypothesis)

_text = st.text(max_size=40)
_int32 = st.integers(-(2**31), 2**31 - 1)
_int64 = st.integers(-(2**63), 2**63 - 1)
_keys = st.one_of(
    st.builds(OffsetKey, _text, _text, _int32),
    st.builds(GroupMetadataKey, _text),
)
_offset_values = st.builds(
    OffsetValue,
    offset=_int64,
    leader_epoch=_int32,
    metadata=_text,
    commit_timestamp=_int64,
    expire_timestamp=st.one_of(st.just(-1), _int64),
)
_members = st.builds(
    MemberRecord,
    member_id=_text,
    group_instance_id=st.none() | _text,
    client_id=_text,
    client_host=_text,
    rebalance_timeout_ms=_int32,
    session_timeout_ms=_int32,
    subscription=st.binary(max_size=64),
    assignment=st.binary(max_size=64),
)
_group_values = st.builds(
    GroupMetadataValue,
    protocol_type=_text,
    generation=_int32,
    protocol=st.none() | _text,
    leader=st.none() | _text,
    current_state_timestamp=_int64,
    members=st.lists(_members, max_size=4).map(tuple),
)


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(_keys)
def test_key_round_trip(key: OffsetKey | GroupMetadataKey) -> None:
    assert decode_key(encode_key(key)) == key


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(st.one_of(_offset_values, _group_values))
def test_value_round_trip(value: OffsetValue | GroupMetadataValue) -> None:
    key: OffsetKey | GroupMetadataKey = (
        OffsetKey("g", "t", 0) if isinstance(value, OffsetValue) else GroupMetadataKey("g")
    )
    expected = value
    if isinstance(value, OffsetValue) and value.expire_timestamp != -1:
        expected = dataclasses.replace(value, leader_epoch=-1)  # v1 has no leaderEpoch
    assert decode_value(key, encode_value(value)) == expected


@pytest.mark.property
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 4), _offset_values, _group_values)
def test_every_value_version_decodes_what_it_holds(
    version: int, offset_value: OffsetValue, group_value: GroupMetadataValue
) -> None:
    """Each version, written field by field, decodes to the value minus the fields it lacks."""
    got = decode_value(OFFSET_KEY, offsets_topic._encode_offset_value(offset_value, version))
    assert got == dataclasses.replace(
        offset_value,
        leader_epoch=offset_value.leader_epoch if version >= 3 else -1,
        expire_timestamp=offset_value.expire_timestamp if version == 1 else -1,
    )
    got_group = decode_value(GROUP_KEY, offsets_topic._encode_group_value(group_value, version))
    assert got_group == dataclasses.replace(
        group_value,
        current_state_timestamp=group_value.current_state_timestamp if version >= 2 else -1,
        members=tuple(
            dataclasses.replace(
                m,
                group_instance_id=m.group_instance_id if version >= 3 else None,
                rebalance_timeout_ms=(
                    m.rebalance_timeout_ms if version >= 1 else m.session_timeout_ms
                ),
            )
            for m in group_value.members
        ),
    )
