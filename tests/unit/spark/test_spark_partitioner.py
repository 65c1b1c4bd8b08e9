"""Kafka's default partitioner (murmur2) against published vectors.

Vectors: Kafka's ``UtilsTest.testMurmur2`` (Java client) and librdkafka's ``rdmurmur2.c``
unit test (``java_murmur2_results``, the values its ``murmur2_random`` partitioner must
reproduce). The placement check against librdkafka on a real broker lives in
``tests/spark/test_write.py``.
"""

from __future__ import annotations

import doctest

import pytest

from spark_connector.records import partitioner
from spark_connector.records.partitioner import murmur2, partition_for_key, to_positive

pytestmark = pytest.mark.unit

# Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
KAFKA_UTILS_TEST = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka src/rdmurmur2.c unittest: keys and the Java client's results (as uint32 hex).
LIBRDKAFKA = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}


@pytest.mark.parametrize(("key", "expected"), sorted(KAFKA_UTILS_TEST.items()))
def test_murmur2_matches_kafka_utils_test(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@pytest.mark.parametrize(("key", "expected_u32"), sorted(LIBRDKAFKA.items()))
def test_murmur2_matches_librdkafka_vectors(key: bytes, expected_u32: int) -> None:
    assert murmur2(key) & 0xFFFFFFFF == expected_u32


def test_murmur2_is_a_signed_java_int_for_every_tail_length() -> None:
    # every remainder of len % 4, bytes >= 0x80 (Java bytes are signed; & 0xff matters)
    for n in range(0, 40):
        data = bytes((0x80 + 37 * i) % 256 for i in range(n))
        h = murmur2(data)
        assert -(2**31) <= h < 2**31
        assert murmur2(data) == h  # deterministic


def test_murmur2_accepts_bytes_like() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


def test_to_positive_masks_the_sign_bit_like_java() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5
    assert to_positive(-790332482) == 1357151166


def test_partition_for_key() -> None:
    assert partition_for_key(b"foobar", 12) == 1357151166 % 12
    assert partition_for_key(b"21", 1) == 0
    for key, h in KAFKA_UTILS_TEST.items():
        for n in (1, 2, 3, 7, 100):
            assert partition_for_key(key, n) == (h & 0x7FFFFFFF) % n
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"x", 0)


def test_doctests() -> None:
    result = doctest.testmod(partitioner)
    assert result.attempted > 0
    assert result.failed == 0
