"""``__transaction_state`` record formats against Kafka 3.9.1's own classes.

Every golden below was printed by ``MessageUtil.toVersionPrefixedBytes`` with Kafka 3.9.1's
generated ``TransactionLogKey`` / ``TransactionLogValue`` (``kafka-transaction-coordinator``
3.9.1, from the jars ``make setup`` fetches), for the values the tests build. Partition
vectors of ``partition_for`` were computed with JDK 17 (``Utils.abs(s.hashCode()) % n``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.coordinator.transaction.state import TxnState
from broker.coordinator.transaction.transaction_log import (
    TransactionLogError,
    TransactionLogValue,
    UnknownTransactionKeyVersionError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for,
)
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

KEY = "000000066d792d74786e"
ONGOING_V0 = (
    "00000000000000000fa000030000ea60010000000200066f726465727300000002000000000000000200125f5f"
    "636f6e73756d65725f6f66667365747300000001000000110000018bcfe5687b0000018bcfe56800"
)
ONGOING_V1 = (
    "00010000000000000fa000030000ea600103076f726465727303000000000000000200135f5f636f6e73756d65"
    "725f6f6666736574730200000011000000018bcfe5687b0000018bcfe5680000"
)
SINGLE_V0 = (
    "00000000001cbe991a140007000dbba00200000001000374c3a9000000030000000100000005000000090000018b"
    "cfe56be70000018bcfe569f4"
)
SINGLE_V1 = (
    "00010000001cbe991a140007000dbba002020474c3a904000000010000000500000009000000018bcfe56be70000"
    "018bcfe569f400"
)
EMPTY_V0 = "00000000000000000fa000000000ea6000ffffffff0000018bcfe5687bffffffffffffffff"

ONGOING = TransactionLogValue(
    producer_id=4000,
    producer_epoch=3,
    timeout_ms=60000,
    state=TxnState.ONGOING,
    partitions=frozenset(
        {
            TopicPartition("orders", 0),
            TopicPartition("orders", 2),
            TopicPartition("__consumer_offsets", 17),
        }
    ),
    last_update_ms=1700000000123,
    start_ms=1700000000000,
)
SINGLE = TransactionLogValue(
    producer_id=123456789012,
    producer_epoch=7,
    timeout_ms=900000,
    state=TxnState.PREPARE_COMMIT,
    partitions=frozenset(TopicPartition("t\u00e9", p) for p in (1, 5, 9)),
    last_update_ms=1700000000999,
    start_ms=1700000000500,
)
EMPTY = TransactionLogValue(
    producer_id=4000,
    producer_epoch=0,
    timeout_ms=60000,
    state=TxnState.EMPTY,
    partitions=frozenset(),
    last_update_ms=1700000000123,
    start_ms=-1,
)


def test_key_matches_kafka() -> None:
    assert encode_key("my-txn").hex() == KEY
    assert decode_key(bytes.fromhex(KEY)) == "my-txn"


@pytest.mark.parametrize(
    ("value", "golden", "version"),
    [(SINGLE, SINGLE_V0, 0), (SINGLE, SINGLE_V1, 1), (EMPTY, EMPTY_V0, 0)],
)
def test_value_bytes_match_kafka(value: TransactionLogValue, golden: str, version: int) -> None:
    assert encode_value(value, version).hex() == golden
    assert decode_value(bytes.fromhex(golden)) == value


@pytest.mark.parametrize("golden", [ONGOING_V0, ONGOING_V1])
def test_multi_topic_values_written_by_kafka_decode(golden: str) -> None:
    # Kafka orders topics as its set iterates; the content is what matters
    assert decode_value(bytes.fromhex(golden)) == ONGOING
    assert decode_value(encode_value(ONGOING)) == ONGOING


def test_default_version_is_what_kafka_39_writes() -> None:
    assert encode_value(EMPTY) == bytes.fromhex(EMPTY_V0)


def test_tombstone_and_errors() -> None:
    assert decode_value(None) is None
    with pytest.raises(UnknownTransactionKeyVersionError):
        decode_key(bytes.fromhex("0001" + KEY[4:]))
    with pytest.raises(TransactionLogError, match="unexpected bytes"):
        decode_value(bytes.fromhex(EMPTY_V0 + "00"))
    with pytest.raises(TransactionLogError, match="needs"):
        decode_value(bytes.fromhex(EMPTY_V0[:-4]))
    with pytest.raises(TransactionLogError, match="unknown version"):
        decode_value(bytes.fromhex("0002" + EMPTY_V0[4:]))
    with pytest.raises(TransactionLogError, match="state id 9"):
        decode_value(bytes.fromhex(EMPTY_V0[:32] + "09" + EMPTY_V0[34:]))
    with pytest.raises(TransactionLogError, match="Empty has no partitions"):
        encode_value(
            TransactionLogValue(
                1, 0, 1000, TxnState.EMPTY, frozenset({TopicPartition("a", 0)}), 0, -1
            )
        )


@pytest.mark.parametrize(
    ("txn_id", "p50"),
    [("", 0), ("a", 47), ("console-consumer-49366", 19), ("polygenelubricants", 0)],
)
def test_partition_for_matches_kafka(txn_id: str, p50: int) -> None:
    assert partition_for(txn_id, 50) == p50


values = st.builds(
    TransactionLogValue,
    producer_id=st.integers(0, 2**63 - 1),
    producer_epoch=st.integers(0, 32767),
    timeout_ms=st.integers(1, 2**31 - 1),
    state=st.sampled_from([s for s in TxnState if s is not TxnState.EMPTY]),
    partitions=st.frozensets(
        st.builds(TopicPartition, st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)),
        max_size=20,
    ),
    last_update_ms=st.integers(-1, 2**62),
    start_ms=st.integers(-1, 2**62),
    previous_producer_id=st.integers(-1, 2**62),
    next_producer_id=st.integers(-1, 2**62),
    client_transaction_version=st.integers(0, 2),
)


@settings(max_examples=300)
@given(values, st.sampled_from([0, 1]))
def test_round_trip(value: TransactionLogValue, version: int) -> None:
    decoded = decode_value(encode_value(value, version))
    if version == 0:  # v0 has no tagged fields
        value = TransactionLogValue(
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            value.state,
            value.partitions,
            value.last_update_ms,
            value.start_ms,
        )
    assert decoded == value


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_garbage_never_escapes_as_another_error(data: bytes) -> None:
    try:
        decode_value(data)
    except TransactionLogError:
        pass
