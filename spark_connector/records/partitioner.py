"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % numPartitions``.

Theory of operation
-------------------
The Java producer's built-in partitioner (``BuiltInPartitioner.partitionForKey`` since
KIP-794, ``DefaultPartitioner`` before it) places a record with a non-null key on partition
``Utils.toPositive(Utils.murmur2(keyBytes)) % numPartitions``, where ``toPositive`` is
``n & 0x7fffffff`` (not ``abs``) and ``murmur2`` is MurmurHash2 (32-bit) with the fixed seed
``0x9747b28c``, reading the input as little-endian 32-bit words and treating every
intermediate as a Java ``int`` (two's complement, wrap-around multiply, *unsigned* shifts
``>>>``). Records with a null key are not hashed: the client picks a partition (sticky).

librdkafka's ``murmur2_random`` partitioner (``rd_murmur2`` in ``rdmurmur2.c``) is the same
function, which is why the Spark writer configures its producer with it: the hashing then
runs in C, and this module is the pure-Python reference used to predict and check the
placement (and by anything else that needs to know a key's partition up front).

These are pure functions on ``bytes``: no I/O, no state, safe to call from any thread and
to pickle.
"""

from __future__ import annotations

_MASK32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def _to_int32(n: int) -> int:
    """The Java ``int`` with the low 32 bits of ``n``."""
    n &= _MASK32
    return n - 0x1_0000_0000 if n & 0x8000_0000 else n


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2(data)``: a signed 32-bit int, exactly as the Java client.

    >>> murmur2(b"21")
    -973932308
    >>> murmur2(b"")
    275646681
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    n_words = length // 4
    for i in range(n_words):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & ~3
    remaining = length % 4
    # Java's switch falls through: case 3 -> case 2 -> case 1.
    if remaining == 3:
        h ^= data[tail + 2] << 16
    if remaining >= 2:
        h ^= data[tail + 1] << 8
    if remaining >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff`` (so ``Integer.MIN_VALUE`` maps to 0)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives a record with a non-null ``key``.

    >>> partition_for_key(b"foobar", 12)
    6
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    return to_positive(murmur2(key)) % num_partitions
