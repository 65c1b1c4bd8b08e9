"""kafka-python against a real single-broker Millrace cluster.

The same round trips as the confluent-kafka module through an independent client
implementation: keyed records with headers and explicit timestamps over several partitions
(keys placed by murmur2, kafka-python's default partitioner), idempotence, each compression
codec, offsets_for_times / beginning_offsets / end_offsets, and the Fetch semantics (long
poll, offset inside a batch, OFFSET_OUT_OF_RANGE reset, small partition fetch limit).
Consumers use ``group_id=None`` + assign(): groups are not implemented yet.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kafka_codec
from kafka.partitioner.default import murmur2

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_AVAILABLE = {
    "gzip": kafka_codec.has_gzip(),
    "snappy": kafka_codec.has_snappy(),
    "lz4": kafka_codec.has_lz4(),
    "zstd": kafka_codec.has_zstd(),
}


def now_ms() -> int:
    return int(time.time() * 1000)


def record(i: int, base_ts: int) -> dict[str, Any]:
    return {
        "key": f"kp-key-{i % 89}".encode(),
        "value": f"kp-value-{i}-".encode() + b"y" * (i % 40),
        "headers": [("idx", str(i).encode()), ("client", b"kafka-python"), ("empty", b"")],
        "timestamp_ms": base_ts + i,
    }


def make_producer(cluster: Cluster, **config: Any) -> KafkaProducer:
    defaults: dict[str, Any] = {
        "bootstrap_servers": cluster.bootstrap,
        "linger_ms": 5,
        "request_timeout_ms": 30000,
        "enable_idempotence": False,
        "acks": 1,
    }
    defaults.update(config)
    return KafkaProducer(**defaults)


def make_consumer(cluster: Cluster, **config: Any) -> KafkaConsumer:
    defaults: dict[str, Any] = {
        "bootstrap_servers": cluster.bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "consumer_timeout_ms": 1000,
    }
    defaults.update(config)
    return KafkaConsumer(**defaults)


def produce_records(
    producer: KafkaProducer, topic: str, n: int, base_ts: int
) -> dict[int, tuple[int, int]]:
    futures = [producer.send(topic, **record(i, base_ts)) for i in range(n)]
    producer.flush(timeout=60)
    out = {}
    errors = {}
    for i, fut in enumerate(futures):
        try:
            md = fut.get(timeout=60)
        except Exception as exc:  # noqa: BLE001 - collected and reported below
            errors[i] = exc
            continue
        out[i] = (md.partition, md.offset)
    assert not errors, f"{len(errors)} sends failed, e.g. {sorted(errors.items())[:3]}"
    return out


def consume_all(
    cluster: Cluster,
    topic: str,
    partitions: list[int],
    start: int = 0,
    timeout_s: float = 90.0,
    **config: Any,
) -> dict[int, list[Any]]:
    """Assign, seek to ``start`` and poll until every partition reaches its end offset."""
    consumer = make_consumer(cluster, **config)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        end = consumer.end_offsets(tps, timeout_ms=30000)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start)
        out: dict[int, list[Any]] = {p: [] for p in partitions}
        pending = {tp.partition for tp in tps if end[tp] > start}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=1000).items():
                out[tp.partition].extend(msgs)
                if msgs and msgs[-1].offset + 1 >= end[tp]:
                    pending.discard(tp.partition)
        assert not pending, (
            f"{topic}: partitions {sorted(pending)} did not reach their end offsets "
            f"{ {p: end[TopicPartition(topic, p)] for p in pending} } within {timeout_s}s"
        )
        return out
    finally:
        consumer.close()


def check_round_trip(
    by_partition: dict[int, list[Any]], sent: dict[int, tuple[int, int]], n: int, base_ts: int
) -> None:
    seen: dict[int, tuple[int, int]] = {}
    for p, msgs in by_partition.items():
        offsets = [m.offset for m in msgs]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets not strictly increasing"
        for m in msgs:
            i = int(dict(m.headers)["idx"])
            assert i not in seen, f"record {i} consumed twice: {seen[i]} and {(p, m.offset)}"
            seen[i] = (p, m.offset)
            expected = record(i, base_ts)
            assert m.key == expected["key"], f"record {i}: key {m.key!r}"
            assert m.value == expected["value"], f"record {i}: value {m.value[:40]!r}"
            assert list(m.headers) == expected["headers"], f"record {i}: headers {m.headers}"
            assert m.timestamp == expected["timestamp_ms"], (
                f"record {i}: timestamp {m.timestamp} != {expected['timestamp_ms']}"
            )
            assert m.timestamp_type == 0, f"record {i}: timestamp type {m.timestamp_type}"
    missing = sorted(set(range(n)) - set(seen))
    assert not missing, f"{len(missing)} records never consumed, e.g. {missing[:10]}"
    mismatched = {i: (seen[i], sent[i]) for i in seen if seen[i] != sent[i]}
    assert not mismatched, (
        f"{len(mismatched)} records consumed at another (partition, offset) than the producer "
        f"was told, e.g. {sorted(mismatched.items())[:5]}"
    )


# --- produce / consume ------------------------------------------------------------------------


def test_keyed_records_headers_timestamps_round_trip(cluster: Cluster, topic_name: str) -> None:
    n, partitions = 3000, 3
    cluster.create_topic(topic_name, partitions)
    base_ts = now_ms() - 3_600_000
    producer = make_producer(cluster, acks="all")
    try:
        sent = produce_records(producer, topic_name, n, base_ts)
    finally:
        producer.close(timeout=30)

    for i, (part, _off) in sent.items():
        key = record(i, base_ts)["key"]
        expected = (murmur2(key) & 0x7FFFFFFF) % partitions
        assert part == expected, f"key {key!r} went to partition {part}, murmur2 says {expected}"
    assert {p for p, _o in sent.values()} == set(range(partitions))

    by_partition = consume_all(cluster, topic_name, list(range(partitions)))
    check_round_trip(by_partition, sent, n, base_ts)


def test_idempotent_producer_round_trip(cluster: Cluster, topic_name: str) -> None:
    n, partitions = 2000, 3
    cluster.create_topic(topic_name, partitions)
    base_ts = now_ms() - 60_000
    producer = make_producer(cluster, enable_idempotence=True, acks="all")
    try:
        sent = produce_records(producer, topic_name, n, base_ts)
    finally:
        producer.close(timeout=30)

    by_partition = consume_all(cluster, topic_name, list(range(partitions)))
    check_round_trip(by_partition, sent, n, base_ts)
    for part, msgs in by_partition.items():
        idx = [int(dict(m.headers)["idx"]) for m in msgs]
        assert idx == sorted(idx), f"partition {part}: production order not kept"
        batches = cluster.batches(topic_name, part)
        pids = {h.producer_id for _f, h, _ok in batches}
        assert len(pids) == 1 and next(iter(pids)) >= 0, f"partition {part}: producer ids {pids}"
        seq = 0
        for _f, h, _ok in batches:
            assert h.base_sequence == seq, (
                f"partition {part}: batch at {h.base_offset} has baseSequence {h.base_sequence}, "
                f"expected {seq}"
            )
            seq += h.record_count


@pytest.mark.parametrize("codec", list(CODECS))
def test_compression_codec_round_trip(cluster: Cluster, topic_name: str, codec: str) -> None:
    assert CODEC_AVAILABLE[codec], (
        f"kafka-python has no {codec} library in this venv (python-snappy is a test extra)"
    )
    n = 1500
    cluster.create_topic(topic_name, 2)
    base_ts = now_ms() - 60_000
    producer = make_producer(cluster, compression_type=codec, linger_ms=50, acks="all")
    try:
        sent = produce_records(producer, topic_name, n, base_ts)
    finally:
        producer.close(timeout=30)
    by_partition = consume_all(cluster, topic_name, [0, 1])
    check_round_trip(by_partition, sent, n, base_ts)
    for part in (0, 1):
        batches = cluster.batches(topic_name, part)
        codecs = {h.compression for _f, h, _ok in batches}
        compressed = sum(h.record_count for _f, h, _ok in batches if h.compression)
        total = sum(h.record_count for _f, h, _ok in batches)
        # the client sends a batch uncompressed when compression would not shrink it
        assert codecs <= {0, CODECS[codec]} and CODECS[codec] in codecs, (
            f"partition {part}: stored batches have compression {codecs}, sent {codec}"
        )
        assert compressed * 2 >= total, (
            f"partition {part}: only {compressed} of {total} records in {codec} batches"
        )
        assert all(ok for _f, _h, ok in batches), f"partition {part}: a batch fails its CRC"


# --- ListOffsets ---------------------------------------------------------------------------


def test_offsets_for_times_and_beginning_end_offsets(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1)
    base_ts = now_ms() - 600_000
    n = 10
    producer = make_producer(cluster, linger_ms=0)
    try:
        for i in range(n):
            producer.send(
                topic_name, value=f"v{i}".encode(), partition=0, timestamp_ms=base_ts + 1000 * i
            ).get(timeout=60)
    finally:
        producer.close(timeout=30)

    tp = TopicPartition(topic_name, 0)
    consumer = make_consumer(cluster)
    try:
        assert consumer.beginning_offsets([tp], timeout_ms=30000) == {tp: 0}
        assert consumer.end_offsets([tp], timeout_ms=30000) == {tp: n}
        cases = {
            "before the first": (base_ts - 5000, 0),
            "equal to record 3": (base_ts + 3000, 3),
            "between records 3 and 4": (base_ts + 3500, 4),
            "equal to the last": (base_ts + 1000 * (n - 1), n - 1),
        }
        for what, (target, expected) in cases.items():
            found = consumer.offsets_for_times({tp: target}, timeout_ms=30000)[tp]
            assert found is not None, f"offsets_for_times {what}: None"
            assert found.offset == expected, (
                f"offsets_for_times {what} (target {target}): offset {found.offset}, "
                f"expected {expected}"
            )
            assert found.timestamp == base_ts + 1000 * expected, (
                f"offsets_for_times {what}: timestamp {found.timestamp}, expected "
                f"{base_ts + 1000 * expected}"
            )
        after = consumer.offsets_for_times({tp: base_ts + 1000 * n}, timeout_ms=30000)[tp]
        assert after is None, f"offsets_for_times after the last record: {after}, expected None"
    finally:
        consumer.close()


# --- Fetch semantics ---------------------------------------------------------------------------


def test_long_poll_delivers_record_produced_while_waiting(
    cluster: Cluster, topic_name: str
) -> None:
    cluster.create_topic(topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    consumer = make_consumer(cluster, fetch_max_wait_ms=5000, fetch_min_bytes=1)
    producer = make_producer(cluster, linger_ms=0)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert consumer.poll(timeout_ms=1500) == {}
        producer.send(topic_name, value=b"arrives-during-long-poll", partition=0).get(timeout=60)
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=1000).get(tp, []))
        assert got, "the record produced during the long poll never arrived"
        assert (got[0].offset, got[0].value) == (0, b"arrives-during-long-poll")
    finally:
        producer.close(timeout=30)
        consumer.close()


@pytest.mark.parametrize("codec", [None, "gzip"])
def test_fetch_from_inside_a_batch(cluster: Cluster, topic_name: str, codec: str | None) -> None:
    cluster.create_topic(topic_name, 1)
    producer = make_producer(cluster, linger_ms=2000, batch_size=1_000_000, compression_type=codec)
    try:
        futures = [
            producer.send(topic_name, value=f"m{i}".encode(), partition=0) for i in range(100)
        ]
        producer.flush(timeout=60)
        for f in futures:
            f.get(timeout=60)
    finally:
        producer.close(timeout=30)
    batches = [h for _f, h, _ok in cluster.batches(topic_name, 0)]
    containing = [h for h in batches if h.base_offset <= 50 <= h.last_offset]
    assert containing and containing[0].base_offset < 50, (
        f"setup: offset 50 is not inside a batch: {[(h.base_offset, h.last_offset) for h in batches]}"
    )
    msgs = consume_all(cluster, topic_name, [0], start=50)[0]
    assert [m.offset for m in msgs] == list(range(50, 100)), (
        f"fetch from offset 50 returned offsets {[m.offset for m in msgs][:10]}..."
    )
    assert [m.value for m in msgs] == [f"m{i}".encode() for i in range(50, 100)]


def test_offset_out_of_range_resets_to_earliest(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1)
    producer = make_producer(cluster, linger_ms=0)
    try:
        for i in range(10):
            producer.send(topic_name, value=f"r{i}".encode(), partition=0)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=30)
    tp = TopicPartition(topic_name, 0)
    consumer = make_consumer(cluster, auto_offset_reset="earliest")
    try:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=1000).get(tp, []))
        assert [m.offset for m in got] == list(range(10)), (
            f"after OFFSET_OUT_OF_RANGE with earliest reset: offsets {[m.offset for m in got]}"
        )
    finally:
        consumer.close()


def test_small_max_partition_fetch_bytes_still_progresses(
    cluster: Cluster, topic_name: str
) -> None:
    cluster.create_topic(topic_name, 1)
    values = [bytes([97 + i % 26]) * 3000 for i in range(60)]
    producer = make_producer(cluster, linger_ms=200, batch_size=200_000)
    try:
        for v in values:
            producer.send(topic_name, value=v, partition=0)
        producer.flush(timeout=60)
    finally:
        producer.close(timeout=30)
    biggest = max(h.size for _f, h, _ok in cluster.batches(topic_name, 0))
    assert biggest > 1024, f"setup: largest batch is only {biggest} bytes"
    msgs = consume_all(
        cluster, topic_name, [0], max_partition_fetch_bytes=1024, fetch_max_bytes=1024
    )[0]
    assert [m.value for m in msgs] == values


def test_reads_records_produced_by_confluent_kafka(cluster: Cluster, topic_name: str) -> None:
    """Cross-client: librdkafka's batches are readable by kafka-python, and vice versa."""
    from confluent_kafka import Producer

    cluster.create_topic(topic_name, 1)
    p = Producer(cluster.conf({"linger.ms": 10, "compression.type": "lz4"}))
    for i in range(200):
        p.produce(topic_name, key=f"c{i}".encode(), value=f"from-librdkafka-{i}".encode())
    assert p.flush(60) == 0
    kp = make_producer(cluster, compression_type="gzip")
    try:
        for i in range(200, 400):
            kp.send(topic_name, key=f"c{i}".encode(), value=f"from-kafka-python-{i}".encode())
        kp.flush(timeout=60)
    finally:
        kp.close(timeout=30)

    kmsgs = consume_all(cluster, topic_name, [0])[0]
    cmsgs = cluster.consume(topic_name, [0])[0]
    assert [(m.key, m.value) for m in kmsgs] == [(m.key(), m.value()) for m in cmsgs]
    assert [m.key for m in kmsgs] == [f"c{i}".encode() for i in range(400)]
