"""confluent-kafka (librdkafka) against a real single-broker Millrace cluster.

Produce/consume round trips (keys, headers, explicit timestamps, several partitions,
idempotence, every compression codec), ListOffsets (by timestamp, earliest, latest), Fetch
semantics (long poll, offset inside a batch, OFFSET_OUT_OF_RANGE, small partition fetch
limit), the admin APIs, and the produce-side validations (max.message.bytes, keyless
records on compacted topics). Consumers use assign() only: groups are not implemented yet.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka.partitioner.default import murmur2

from broker.protocol import records as rec
from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


# --- helpers -------------------------------------------------------------------------------


class Deliveries:
    """Delivery-report collector: index -> (partition, offset) or error."""

    def __init__(self) -> None:
        self.ok: dict[int, tuple[int, int]] = {}
        self.errors: dict[int, KafkaError] = {}

    def callback(self, index: int) -> Any:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors[index] = err
            else:
                self.ok[index] = (msg.partition(), msg.offset())

        return on_delivery

    def assert_all_ok(self, n: int) -> None:
        assert not self.errors, (
            f"{len(self.errors)} delivery errors, e.g. {sorted(self.errors.items())[:3]}"
        )
        assert len(self.ok) == n, f"{len(self.ok)} of {n} delivery reports received"


def flush(producer: Producer, timeout_s: float = 60.0) -> None:
    remaining = producer.flush(timeout_s)
    assert remaining == 0, f"{remaining} messages still queued after flush({timeout_s})"


def now_ms() -> int:
    return int(time.time() * 1000)


def record(i: int, base_ts: int) -> dict[str, Any]:
    return {
        "key": f"key-{i % 97}".encode(),
        "value": f"value-{i}-".encode() + b"x" * (i % 50),
        "headers": [("idx", str(i).encode()), ("kind", b"itest"), ("empty", b""), ("null", None)],
        "timestamp": base_ts + i,
    }


def produce_records(
    producer: Producer, topic: str, n: int, base_ts: int, partition: int | None = None
) -> Deliveries:
    deliveries = Deliveries()
    for i in range(n):
        r = record(i, base_ts)
        kwargs: dict[str, Any] = {}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, on_delivery=deliveries.callback(i), **r, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    flush(producer)
    deliveries.assert_all_ok(n)
    return deliveries


def index_of(msg: Any) -> int:
    headers = dict(msg.headers() or [])
    return int(headers["idx"])


def check_round_trip(
    by_partition: dict[int, list[Any]], deliveries: Deliveries, n: int, base_ts: int
) -> None:
    """Every record back exactly once, at the offset its delivery report gave, intact."""
    seen: dict[int, tuple[int, int]] = {}
    for p, msgs in by_partition.items():
        offsets = [m.offset() for m in msgs]
        assert offsets == sorted(offsets), f"partition {p}: offsets out of order {offsets[:20]}"
        assert len(set(offsets)) == len(offsets), f"partition {p}: duplicate offsets"
        for m in msgs:
            i = index_of(m)
            assert i not in seen, f"record {i} consumed twice: {seen[i]} and {(p, m.offset())}"
            seen[i] = (p, m.offset())
            expected = record(i, base_ts)
            assert m.key() == expected["key"], f"record {i}: key {m.key()!r}"
            assert m.value() == expected["value"], f"record {i}: value {m.value()[:40]!r}"
            assert m.headers() == expected["headers"], f"record {i}: headers {m.headers()}"
            assert m.timestamp() == (TIMESTAMP_CREATE_TIME, expected["timestamp"]), (
                f"record {i}: timestamp {m.timestamp()} != create time {expected['timestamp']}"
            )
    missing = sorted(set(range(n)) - set(seen))
    assert not missing, f"{len(missing)} records never consumed, e.g. {missing[:10]}"
    assert len(seen) == n
    mismatched = {i: (seen[i], deliveries.ok[i]) for i in seen if seen[i] != deliveries.ok[i]}
    assert not mismatched, (
        f"{len(mismatched)} records consumed at another (partition, offset) than their "
        f"delivery report said, e.g. {sorted(mismatched.items())[:5]}"
    )


def producer(cluster: Cluster, extra: dict[str, object] | None = None) -> Producer:
    return Producer(cluster.conf({"linger.ms": 5, "message.timeout.ms": 60000, **(extra or {})}))


def consumer(cluster: Cluster, topic: str, extra: dict[str, object] | None = None) -> Consumer:
    return Consumer(
        cluster.conf(
            {
                "group.id": f"itest-{topic}-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                **(extra or {}),
            }
        )
    )


def poll_one(c: Consumer, timeout_s: float = 60.0) -> Any:
    """The first data message (or message error) within ``timeout_s``, else None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = c.poll(1.0)
        if msg is None:
            continue
        if msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
            continue
        return msg
    return None


def poll_n(c: Consumer, n: int, timeout_s: float = 60.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        for msg in c.consume(n - len(out), timeout=1.0):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {err}")
            out.append(msg)
    return out


# --- produce / consume ------------------------------------------------------------------------


def test_keyed_records_headers_timestamps_round_trip(cluster: Cluster, topic_name: str) -> None:
    n, partitions = 3000, 3
    cluster.create_topic(topic_name, partitions)
    base_ts = now_ms() - 3_600_000
    p = producer(cluster, {"partitioner": "murmur2_random", "acks": "all"})
    deliveries = produce_records(p, topic_name, n, base_ts)

    used = {part for part, _off in deliveries.ok.values()}
    assert used == {0, 1, 2}, f"records landed only on partitions {used}"
    for i, (part, _off) in deliveries.ok.items():
        key = record(i, base_ts)["key"]
        expected = (murmur2(key) & 0x7FFFFFFF) % partitions
        assert part == expected, f"key {key!r} went to partition {part}, murmur2 says {expected}"

    by_partition = cluster.consume(topic_name, [0, 1, 2])
    check_round_trip(by_partition, deliveries, n, base_ts)
    for part, msgs in by_partition.items():
        assert [m.offset() for m in msgs] == list(range(len(msgs))), (
            f"partition {part}: offsets are not 0..{len(msgs) - 1}"
        )


def test_idempotent_producer_round_trip(cluster: Cluster, topic_name: str) -> None:
    n, partitions = 2000, 3
    cluster.create_topic(topic_name, partitions)
    base_ts = now_ms() - 60_000
    errors: list[KafkaError] = []
    p = producer(
        cluster,
        {"enable.idempotence": True, "acks": "all", "error_cb": errors.append},
    )
    deliveries = produce_records(p, topic_name, n, base_ts)
    assert not [e for e in errors if e.fatal()], f"fatal producer errors: {errors}"

    by_partition = cluster.consume(topic_name, list(range(partitions)))
    check_round_trip(by_partition, deliveries, n, base_ts)
    # per-partition production order is preserved with idempotence
    for part, msgs in by_partition.items():
        idx = [index_of(m) for m in msgs]
        assert idx == sorted(idx), f"partition {part}: production order not kept"

    # the stored batches carry the producer id and contiguous sequences
    for part in range(partitions):
        batches = cluster.batches(topic_name, part)
        assert batches, f"no batches on disk for partition {part}"
        pids = {h.producer_id for _f, h, _ok in batches}
        assert len(pids) == 1 and next(iter(pids)) >= 0, f"partition {part}: producer ids {pids}"
        seq = 0
        for _f, h, ok in batches:
            assert ok, f"partition {part}: batch at offset {h.base_offset} fails its CRC on disk"
            assert h.base_sequence == seq, (
                f"partition {part}: batch at offset {h.base_offset} has baseSequence "
                f"{h.base_sequence}, expected {seq}"
            )
            seq += h.record_count


@pytest.mark.parametrize("codec", list(CODECS))
def test_compression_codec_round_trip(cluster: Cluster, topic_name: str, codec: str) -> None:
    n = 1500
    cluster.create_topic(topic_name, 2)
    base_ts = now_ms() - 60_000
    p = producer(cluster, {"compression.type": codec, "linger.ms": 50, "acks": "all"})
    deliveries = produce_records(p, topic_name, n, base_ts)
    by_partition = cluster.consume(topic_name, [0, 1])
    check_round_trip(by_partition, deliveries, n, base_ts)

    # stored as sent: the batches on disk still carry the codec and a valid CRC
    for part in (0, 1):
        batches = cluster.batches(topic_name, part)
        assert batches, f"no batches on disk for partition {part}"
        codecs = {h.compression for _f, h, _ok in batches}
        compressed = sum(h.record_count for _f, h, _ok in batches if h.compression)
        total = sum(h.record_count for _f, h, _ok in batches)
        # librdkafka sends a batch uncompressed when compression would not shrink it, and
        # for lz4 only if the broker's ApiVersions enable its LZ4 feature
        assert codecs <= {0, CODECS[codec]} and CODECS[codec] in codecs, (
            f"partition {part}: batch compression attributes {codecs}, expected "
            f"{CODECS[codec]} ({codec})"
            + (
                "; librdkafka enables its LZ4 feature only when ApiVersions lists "
                "FindCoordinator v0, otherwise it logs 'Broker does not support compression "
                "type lz4: not compressing batch'"
                if codec == "lz4" and codecs == {0}
                else ""
            )
        )
        assert compressed * 2 >= total, (
            f"partition {part}: only {compressed} of {total} records in {codec} batches"
        )
        assert all(ok for _f, _h, ok in batches), f"partition {part}: a batch fails its CRC"
        assert sum(h.record_count for _f, h, _ok in batches) == len(by_partition[part])


# --- ListOffsets -----------------------------------------------------------------------------


def test_offsets_for_times_and_watermarks(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1)
    base_ts = now_ms() - 600_000
    n = 10
    p = producer(cluster, {"linger.ms": 0, "acks": "all"})
    for i in range(n):
        p.produce(topic_name, value=f"v{i}".encode(), partition=0, timestamp=base_ts + 1000 * i)
        flush(p)  # one batch per record: the lookup must look inside the log, not one batch

    c = consumer(cluster, topic_name)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=15)
        assert (low, high) == (0, n), f"watermarks {(low, high)} != (0, {n})"

        cases = {
            "before the first": (base_ts - 5000, 0),
            "equal to record 0": (base_ts, 0),
            "equal to record 3": (base_ts + 3000, 3),
            "between records 3 and 4": (base_ts + 3500, 4),
            "equal to the last": (base_ts + 1000 * (n - 1), n - 1),
            "after the last": (base_ts + 1000 * (n - 1) + 1, -1),
        }
        for what, (target, expected) in cases.items():
            [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, target)], timeout=15)
            assert tp.error is None, f"offsets_for_times {what}: error {tp.error}"
            assert tp.offset == expected, (
                f"offsets_for_times {what} (target {target}): offset {tp.offset}, "
                f"expected {expected}"
            )

        # and the consumer can start from the looked-up offset
        [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, base_ts + 6500)], timeout=15)
        c.assign([TopicPartition(topic_name, 0, tp.offset)])
        msgs = poll_n(c, 3)
        assert [m.value() for m in msgs] == [b"v7", b"v8", b"v9"]
    finally:
        c.close()


# --- Fetch semantics ---------------------------------------------------------------------------


def test_long_poll_delivers_record_produced_while_waiting(
    cluster: Cluster, topic_name: str
) -> None:
    cluster.create_topic(topic_name, 1)
    c = consumer(cluster, topic_name, {"fetch.wait.max.ms": 5000, "fetch.min.bytes": 1})
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        assert c.poll(2.0) is None, "empty partition returned a message"
        p = producer(cluster, {"linger.ms": 0})
        p.produce(topic_name, key=b"k", value=b"arrives-during-long-poll", partition=0)
        flush(p)
        msg = poll_one(c)
        assert msg is not None, "the record produced during the long poll never arrived"
        assert msg.error() is None, f"consumer error {msg.error()}"
        assert (msg.offset(), msg.value()) == (0, b"arrives-during-long-poll")
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_fetch_from_inside_a_batch(cluster: Cluster, topic_name: str, codec: str) -> None:
    cluster.create_topic(topic_name, 1)
    p = producer(
        cluster,
        {"linger.ms": 2000, "batch.num.messages": 10000, "compression.type": codec},
    )
    for i in range(100):
        p.produce(topic_name, value=f"m{i}".encode(), partition=0)
    flush(p)

    batches = [h for _f, h, _ok in cluster.batches(topic_name, 0)]
    containing = [h for h in batches if h.base_offset <= 50 <= h.last_offset]
    assert containing and containing[0].base_offset < 50, (
        f"setup: offset 50 is not inside a batch (batches {[(h.base_offset, h.last_offset) for h in batches]})"
    )

    c = consumer(cluster, topic_name)
    try:
        c.assign([TopicPartition(topic_name, 0, 50)])
        msgs = poll_n(c, 50)
        assert [m.offset() for m in msgs] == list(range(50, 100)), (
            f"fetch from offset 50 returned offsets {[m.offset() for m in msgs][:10]}..."
        )
        assert [m.value() for m in msgs] == [f"m{i}".encode() for i in range(50, 100)]
    finally:
        c.close()


@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
def test_offset_out_of_range_handled_by_auto_offset_reset(
    cluster: Cluster, topic_name: str, reset: str
) -> None:
    cluster.create_topic(topic_name, 1)
    p = producer(cluster, {"linger.ms": 0})
    for i in range(10):
        p.produce(topic_name, value=f"r{i}".encode(), partition=0)
    flush(p)

    c = consumer(cluster, topic_name, {"auto.offset.reset": reset})
    try:
        c.assign([TopicPartition(topic_name, 0, 1000)])
        if reset == "earliest":
            msgs = poll_n(c, 10)
            assert [m.offset() for m in msgs] == list(range(10)), (
                f"after OFFSET_OUT_OF_RANGE with earliest: offsets {[m.offset() for m in msgs]}"
            )
        elif reset == "latest":
            # The reset happens on the first fetch; until a record arrives we cannot observe
            # it, so keep producing one record at a time until one is consumed. Whatever
            # arrives first must be at or after the old end (10), never a reset to 0.
            first = None
            deadline = time.monotonic() + 60
            k = 0
            while first is None and time.monotonic() < deadline:
                msg = c.poll(1.0)
                if msg is not None:
                    first = msg
                    break
                p.produce(topic_name, value=f"after-reset-{k}".encode(), partition=0)
                flush(p)
                k += 1
            assert first is not None, "nothing consumed after the reset to latest"
            assert first.error() is None, f"consumer error {first.error()}"
            assert first.offset() >= 10, (
                f"reset to latest delivered offset {first.offset()} (the end was 10)"
            )
            assert first.value().startswith(b"after-reset-"), first.value()
        else:
            msg = poll_one(c)
            assert msg is not None, "no error surfaced for an out-of-range fetch offset"
            assert msg.error() is not None, f"got a record at offset {msg.offset()}"
            assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET, (
                f"expected _AUTO_OFFSET_RESET (broker OFFSET_OUT_OF_RANGE), got {msg.error()}"
            )
            assert "out of range" in msg.error().str().lower(), msg.error().str()
    finally:
        c.close()


@pytest.mark.parametrize("limit", ["partition", "response"])
def test_small_fetch_limits_still_progress(cluster: Cluster, topic_name: str, limit: str) -> None:
    """A batch larger than max.partition.fetch.bytes / fetch.max.bytes is still returned
    whole (KIP-74), so the consumer makes progress."""
    cluster.create_topic(topic_name, 3)
    p = producer(cluster, {"linger.ms": 200, "batch.size": 200_000})
    values = {part: [bytes([65 + i % 26]) * 3000 for i in range(40)] for part in range(3)}
    for part, vals in values.items():
        for v in vals:
            p.produce(topic_name, value=v, partition=part)
    flush(p)
    biggest = max(h.size for _f, h, _ok in cluster.batches(topic_name, 0))
    assert biggest > 1024, f"setup: largest batch is only {biggest} bytes"

    extra: dict[str, object] = {"max.partition.fetch.bytes": 1024}
    if limit == "response":
        extra = {"fetch.max.bytes": 1024, "message.max.bytes": 1000}
    by_partition = cluster.consume(topic_name, [0, 1, 2], extra=extra)
    for part, vals in values.items():
        assert [m.value() for m in by_partition[part]] == vals, f"partition {part} differs"


# --- admin -----------------------------------------------------------------------------------


def test_create_and_delete_topics(cluster: Cluster, topic_name: str) -> None:
    admin = cluster.admin()
    admin.create_topic(topic_name, 2)
    md = admin.client.list_topics(topic=topic_name, timeout=10).topics[topic_name]
    assert sorted(md.partitions) == [0, 1]
    assert all(pm.leader == 1 and pm.replicas == [1] for pm in md.partitions.values()), (
        f"partition metadata {[(pm.id, pm.leader, pm.replicas) for pm in md.partitions.values()]}"
    )
    assert cluster.log_dir(topic_name, 0).is_dir(), "no partition directory on disk"

    again = admin.client.create_topics([NewTopic(topic_name, 2, 1)], request_timeout=30)
    with pytest.raises(KafkaException) as excinfo:
        again[topic_name].result(timeout=30)
    assert excinfo.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    bad = admin.client.create_topics(
        [NewTopic(topic_name + "-bad", 1, 1, config={"no.such.config": "1"})], request_timeout=30
    )
    with pytest.raises(KafkaException) as excinfo:
        bad[topic_name + "-bad"].result(timeout=30)
    assert excinfo.value.args[0].code() == KafkaError.INVALID_CONFIG, excinfo.value

    deleted = admin.client.delete_topics([topic_name], operation_timeout=30, request_timeout=30)
    deleted[topic_name].result(timeout=60)
    wait_for(lambda: topic_name not in admin.topic_names(), 60, "the deleted topic unlisted")
    wait_for(
        lambda: not cluster.log_dir(topic_name, 0).exists(),
        60,
        f"{cluster.log_dir(topic_name, 0)} removed after delete",
    )

    # the same name can be created again, empty
    admin.create_topic(topic_name, 1)
    c = consumer(cluster, topic_name)
    try:
        wm = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=15)
        assert wm == (0, 0), f"re-created topic has watermarks {wm}"
    finally:
        c.close()

    missing = admin.client.delete_topics([topic_name + "-never"], request_timeout=30)
    with pytest.raises(KafkaException) as excinfo:
        missing[topic_name + "-never"].result(timeout=30)
    assert excinfo.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions_increase_only(cluster: Cluster, topic_name: str) -> None:
    admin = cluster.admin()
    admin.create_topic(topic_name, 1)
    admin.client.create_partitions([NewPartitions(topic_name, 3)], request_timeout=30)[
        topic_name
    ].result(timeout=60)
    admin.wait_for_leaders(topic_name, 3)

    p = producer(cluster, {"linger.ms": 0})
    deliveries = Deliveries()
    p.produce(topic_name, value=b"to-p2", partition=2, on_delivery=deliveries.callback(0))
    flush(p)
    deliveries.assert_all_ok(1)
    assert deliveries.ok[0] == (2, 0)

    for count in (2, 3):
        fut = admin.client.create_partitions([NewPartitions(topic_name, count)], request_timeout=30)
        with pytest.raises(KafkaException) as excinfo:
            fut[topic_name].result(timeout=30)
        assert excinfo.value.args[0].code() == KafkaError.INVALID_PARTITIONS, (
            f"create_partitions to {count} (from 3): {excinfo.value}"
        )
    md = admin.client.list_topics(topic=topic_name, timeout=10).topics[topic_name]
    assert sorted(md.partitions) == [0, 1, 2]


def describe_topic_configs(cluster: Cluster, topic: str) -> dict[str, Any]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return (
        cluster.admin().client.describe_configs([res], request_timeout=30)[res].result(timeout=30)
    )


def test_describe_configs_returns_real_entries(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, {"retention.ms": "123456"})
    configs = describe_topic_configs(cluster, topic_name)
    for name in (
        "retention.ms",
        "cleanup.policy",
        "max.message.bytes",
        "segment.bytes",
        "retention.bytes",
        "min.insync.replicas",
    ):
        assert name in configs, f"describe_configs lacks {name}; got {sorted(configs)}"
    retention = configs["retention.ms"]
    assert retention.value == "123456"
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (
        f"retention.ms source {retention.source}"
    )
    cleanup = configs["cleanup.policy"]
    assert cleanup.value == "delete"
    assert cleanup.source in (
        ConfigSource.DEFAULT_CONFIG.value,
        ConfigSource.STATIC_BROKER_CONFIG.value,
    ), f"cleanup.policy source {cleanup.source}"
    assert configs["segment.bytes"].value.isdigit(), configs["segment.bytes"].value


def test_describe_broker_configs(cluster: Cluster) -> None:
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = (
        cluster.admin().client.describe_configs([res], request_timeout=30)[res].result(timeout=30)
    )
    for name in ("log.retention.hours", "num.partitions", "auto.create.topics.enable"):
        assert name in configs, f"broker describe_configs lacks {name}; got {sorted(configs)[:30]}"


def test_incremental_alter_configs_round_trip(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1)
    client = cluster.admin().client

    def alter(*entries: ConfigEntry) -> None:
        res = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=list(entries))
        client.incremental_alter_configs([res], request_timeout=30)[res].result(timeout=30)

    alter(
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "50000", incremental_operation=AlterConfigOpType.SET),
    )
    configs = describe_topic_configs(cluster, topic_name)
    assert configs["retention.ms"].value == "7200000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "50000"

    # stored in ZooKeeper as Kafka does
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.json["zookeeper"])
    zk.start(timeout=30)
    try:
        data, _stat = zk.get(f"/config/topics/{topic_name}")
    finally:
        zk.stop()
        zk.close()
    stored = json.loads(data)
    assert stored.get("config", {}).get("retention.ms") == "7200000", stored

    alter(ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE))
    configs = describe_topic_configs(cluster, topic_name)
    assert configs["retention.ms"].value == "604800000", configs["retention.ms"].value
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "50000", "DELETE of one key dropped another"

    res = ConfigResource(
        ResourceType.TOPIC,
        topic_name,
        incremental_configs=[
            ConfigEntry("retention.ms", "not-a-number", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(KafkaException) as excinfo:
        client.incremental_alter_configs([res], request_timeout=30)[res].result(timeout=30)
    assert excinfo.value.args[0].code() == KafkaError.INVALID_CONFIG, excinfo.value


def test_auto_create_topic_on_metadata(cluster: Cluster) -> None:
    topic = f"auto-created-{uuid.uuid4().hex[:8]}"
    assert topic not in cluster.admin().topic_names()
    p = producer(cluster, {"linger.ms": 0})
    deliveries = Deliveries()
    p.produce(topic, value=b"first", on_delivery=deliveries.callback(0))
    flush(p)
    deliveries.assert_all_ok(1)
    assert deliveries.ok[0][1] == 0
    cluster.admin().wait_for_leaders(topic, 1)  # num.partitions=1 by default


def test_auto_create_disabled(cluster_factory: Any) -> None:
    from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName

    other = cluster_factory(auto_create_topics_enable=False)
    topic = "never-auto-created"
    with other.raw() as conn:
        resp = conn.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(name=TopicName(topic)),),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    [t] = resp.topics
    assert int(t.error_code) == 3, (
        f"Metadata for a missing topic with auto-create disabled: error {t.error_code!r}, "
        "expected UNKNOWN_TOPIC_OR_PARTITION (3)"
    )
    assert topic not in other.admin().topic_names()
    assert not other.log_dir(topic, 0).exists()


def test_delete_records_moves_low_watermark(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1)
    p = producer(cluster, {"linger.ms": 0})
    for i in range(20):
        p.produce(topic_name, value=f"d{i}".encode(), partition=0)
        if i % 5 == 4:
            flush(p)
    flush(p)

    tp = TopicPartition(topic_name, 0, 7)
    result = cluster.admin().client.delete_records([tp], request_timeout=30)
    [fut] = result.values()
    deleted = fut.result(timeout=30)
    assert deleted.low_watermark == 7, f"delete_records low watermark {deleted.low_watermark}"

    by_partition = cluster.consume(topic_name, [0])
    assert [m.offset() for m in by_partition[0]] == list(range(7, 20))
    c = consumer(cluster, topic_name)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=15)
        assert (low, high) == (7, 20), f"watermarks after delete_records: {(low, high)}"
        c.assign([TopicPartition(topic_name, 0, 3)])  # below the log start: out of range
        msg = poll_one(c)
        assert msg is not None and msg.error() is None, f"got {msg and msg.error()}"
        assert msg.offset() == 7, f"reset from below the log start went to {msg.offset()}"
    finally:
        c.close()


def test_describe_cluster(cluster: Cluster) -> None:
    desc = cluster.admin().client.describe_cluster(request_timeout=30).result(timeout=30)
    assert desc.cluster_id, "empty cluster id"
    assert [(n.id, n.host, n.port) for n in desc.nodes] == [(1, cluster.host, cluster.port)]
    assert desc.controller is not None and desc.controller.id == 1

    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.json["zookeeper"])
    zk.start(timeout=30)
    try:
        data, _stat = zk.get("/cluster/id")
    finally:
        zk.stop()
        zk.close()
    assert json.loads(data)["id"] == desc.cluster_id


# --- produce-side validation --------------------------------------------------------------


def test_max_message_bytes_enforced(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, {"max.message.bytes": "2000"})
    p = producer(cluster, {"linger.ms": 0, "compression.type": "none", "retries": 0})

    small = Deliveries()
    p.produce(topic_name, value=b"s" * 500, partition=0, on_delivery=small.callback(0))
    flush(p)
    small.assert_all_ok(1)

    big = Deliveries()
    p.produce(topic_name, value=b"b" * 5000, partition=0, on_delivery=big.callback(0))
    flush(p)
    assert 0 in big.errors, f"a 5000-byte batch was accepted at {big.ok.get(0)}"
    assert big.errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, big.errors[0]

    after = Deliveries()
    p.produce(topic_name, value=b"a" * 500, partition=0, on_delivery=after.callback(0))
    flush(p)
    after.assert_all_ok(1)
    assert after.ok[0] == (0, 1), f"the rejected batch consumed offsets: {after.ok[0]}"


def test_keyless_records_rejected_on_compacted_topic(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, {"cleanup.policy": "compact"})
    p = producer(cluster, {"linger.ms": 0, "retries": 0})

    keyless = Deliveries()
    p.produce(topic_name, value=b"no key", partition=0, on_delivery=keyless.callback(0))
    flush(p)
    assert 0 in keyless.errors, "a keyless record was accepted by a compacted topic"
    assert keyless.errors[0].code() == KafkaError.INVALID_RECORD, keyless.errors[0]
    # librdkafka does not show the broker's message; Produce v8 carries it
    batch = rec.encode_batch([rec.SimpleRecord(value=b"no key", timestamp=now_ms())])
    with cluster.raw() as conn:
        refused = conn.produce(topic_name, 0, batch, version=8)
    assert int(refused.error_code) == 87, refused
    assert "without a key" in (refused.error_message or ""), refused

    keyed = Deliveries()
    p.produce(topic_name, key=b"k", value=b"v", partition=0, on_delivery=keyed.callback(0))
    flush(p)
    keyed.assert_all_ok(1)
    assert keyed.ok[0] == (0, 0)


def test_raw_produce_v3_round_trip(cluster: Cluster, topic_name: str) -> None:
    """A hand-built Produce v3 with a v2 batch is accepted (baseline for the CRC test)."""
    cluster.create_topic(topic_name, 1)
    ts = now_ms()
    batch = rec.encode_batch([rec.SimpleRecord(value=b"raw", key=b"k", timestamp=ts)])
    with cluster.raw() as conn:
        pr = conn.produce_v3(topic_name, 0, batch)
        assert int(pr.error_code) == 0 and pr.base_offset == 0, pr
        pr = conn.produce_v3(topic_name, 5, batch)
    assert int(pr.error_code) == 3, (
        f"produce to partition 5 of a 1-partition topic: {pr.error_code!r}, expected "
        "UNKNOWN_TOPIC_OR_PARTITION (3)"
    )
    msgs = cluster.consume(topic_name, [0])[0]
    assert [(m.key(), m.value(), m.timestamp()[1]) for m in msgs] == [(b"k", b"raw", ts)]


def test_acks_zero_records_are_stored(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1)
    p = producer(cluster, {"acks": 0, "linger.ms": 5})
    for i in range(500):
        p.produce(topic_name, value=f"fire-and-forget-{i}".encode(), partition=0)
    flush(p)
    # acks=0 gets no response, so wait until the broker has appended everything
    c = consumer(cluster, topic_name)
    try:

        def appended() -> int | None:
            high = int(c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=15)[1])
            return high if high >= 500 else None

        high = wait_for(appended, 60, "500 acks=0 records appended")
        assert high == 500, f"high watermark {high} after 500 acks=0 records"
    finally:
        c.close()
    msgs = cluster.consume(topic_name, [0])[0]
    assert [m.value() for m in msgs] == [f"fire-and-forget-{i}".encode() for i in range(500)]


def test_log_append_time_topic(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, {"message.timestamp.type": "LogAppendTime"})
    old_ts = now_ms() - 3_600_000
    stamps: list[tuple[int, int]] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            stamps.append(msg.timestamp())

    before = now_ms()
    p = producer(cluster, {"linger.ms": 0})
    for i in range(20):
        p.produce(
            topic_name,
            value=f"lat-{i}".encode(),
            partition=0,
            timestamp=old_ts + i,
            on_delivery=on_delivery,
        )
    flush(p)
    after = now_ms()
    assert not errors, f"delivery errors: {errors}"
    assert len(stamps) == 20
    assert all(t == TIMESTAMP_LOG_APPEND_TIME for t, _ts in stamps), (
        f"delivery reports carry timestamp types {set(t for t, _ts in stamps)}"
    )
    msgs = cluster.consume(topic_name, [0])[0]
    assert len(msgs) == 20
    for m in msgs:
        kind, ts = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME, f"offset {m.offset()}: timestamp type {kind}"
        assert before - 1000 <= ts <= after + 1000, (
            f"offset {m.offset()}: LogAppendTime {ts} is not the broker's append time "
            f"(produced between {before} and {after}; create time was {old_ts + m.offset()})"
        )


def test_many_segments_lookup(cluster: Cluster, topic_name: str) -> None:
    """Reads and timestamp lookups that land in older segments, not just the active one."""
    cluster.create_topic(topic_name, 1, {"segment.bytes": "20000", "index.interval.bytes": "1000"})
    n = 2000
    base_ts = now_ms() - 600_000
    p = producer(cluster, {"linger.ms": 2, "batch.num.messages": 50})
    for i in range(n):
        p.produce(
            topic_name,
            value=f"seg-{i}-".encode() + b"z" * 40,
            partition=0,
            timestamp=base_ts + 10 * i,
        )
        p.poll(0)
    flush(p)
    segments = cluster.segment_files(topic_name, 0)
    assert len(segments) >= 4, f"setup: only {len(segments)} segments with segment.bytes=20000"

    for start in (0, 137, 1001, 1999):
        msgs = cluster.consume(topic_name, [0], start=start)[0]
        assert [m.offset() for m in msgs] == list(range(start, n)), (
            f"read from {start}: got offsets {[m.offset() for m in msgs][:5]}..."
        )
        assert msgs[0].value().startswith(f"seg-{start}-".encode())

    c = consumer(cluster, topic_name)
    try:
        for target_index in (0, 333, 1234, n - 1):
            for delta, expected in ((0, target_index), (-5, target_index)):
                target = base_ts + 10 * target_index + delta
                [tp] = c.offsets_for_times([TopicPartition(topic_name, 0, target)], timeout=15)
                assert tp.offset == expected, (
                    f"offsets_for_times({target}) = {tp.offset}, expected {expected}"
                )
    finally:
        c.close()


def test_admin_list_offsets_specs(cluster: Cluster, topic_name: str) -> None:
    from confluent_kafka.admin import OffsetSpec

    cluster.create_topic(topic_name, 1)
    base_ts = now_ms() - 600_000
    # offset 3 carries the largest timestamp; one batch per record
    stamps = [base_ts + 10, base_ts + 20, base_ts + 30, base_ts + 900, base_ts + 40]
    p = producer(cluster, {"linger.ms": 0})
    for i, ts in enumerate(stamps):
        p.produce(topic_name, value=f"o{i}".encode(), partition=0, timestamp=ts)
        flush(p)
    tp = TopicPartition(topic_name, 0)
    client = cluster.admin().client
    specs = {
        "earliest": (OffsetSpec.earliest(), 0),
        "latest": (OffsetSpec.latest(), 5),
        "max_timestamp": (OffsetSpec.max_timestamp(), 3),
        "for_timestamp(base+25)": (OffsetSpec.for_timestamp(base_ts + 25), 2),
        "for_timestamp(base+35)": (OffsetSpec.for_timestamp(base_ts + 35), 3),
    }
    for what, (spec, expected) in specs.items():
        result = client.list_offsets({tp: spec}, request_timeout=30)[tp].result(timeout=30)
        assert result.offset == expected, f"list_offsets {what}: {result.offset} != {expected}"
        if what == "max_timestamp":
            assert result.timestamp == base_ts + 900, f"max_timestamp ts {result.timestamp}"


def test_create_topics_validation(cluster: Cluster, topic_name: str) -> None:
    client = cluster.admin().client
    futs = client.create_topics(
        [NewTopic(topic_name, 2, 1)], validate_only=True, request_timeout=30
    )
    futs[topic_name].result(timeout=30)
    assert topic_name not in cluster.admin().topic_names(), "validate_only created the topic"
    assert not cluster.log_dir(topic_name, 0).exists()

    cases = {
        "replication factor 3 on one broker": (
            NewTopic(topic_name + "-rf3", 1, 3),
            KafkaError.INVALID_REPLICATION_FACTOR,
        ),
        "zero partitions": (NewTopic(topic_name + "-p0", 0, 1), KafkaError.INVALID_PARTITIONS),
        "invalid name": (NewTopic("bad name!", 1, 1), KafkaError.TOPIC_EXCEPTION),
        "invalid config value": (
            NewTopic(topic_name + "-cfg", 1, 1, config={"retention.ms": "soon"}),
            KafkaError.INVALID_CONFIG,
        ),
    }
    for what, (new_topic, code) in cases.items():
        fut = client.create_topics([new_topic], request_timeout=30)[new_topic.topic]
        with pytest.raises(KafkaException) as excinfo:
            fut.result(timeout=30)
        assert excinfo.value.args[0].code() == code, f"{what}: {excinfo.value}"
        assert new_topic.topic not in cluster.admin().topic_names(), f"{what}: topic created"


def test_min_insync_replicas_above_the_replication_factor_counts_as_it(
    cluster: Cluster, topic_name: str
) -> None:
    """As in Kafka 3.9 (``Partition.effectiveMinIsr``), ``min.insync.replicas`` 2 on a topic
    with one replica asks for that one replica: acks=all writes are taken (a short ISR is
    refused with NOT_ENOUGH_REPLICAS: test_batch_producer, test_cluster_replication)."""
    cluster.create_topic(topic_name, 1, {"min.insync.replicas": "2"})
    p = producer(cluster, {"acks": "all", "linger.ms": 0, "retries": 0})
    d = Deliveries()
    p.produce(topic_name, value=b"one-replica-is-all", partition=0, on_delivery=d.callback(0))
    flush(p)
    d.assert_all_ok(1)
    assert d.ok[0] == (0, 0), d.ok[0]
    batch = rec.encode_batch([rec.SimpleRecord(value=b"raw", timestamp=now_ms())])
    with cluster.raw() as conn:
        pr = conn.produce_v3(topic_name, 0, batch, acks=-1)
    assert int(pr.error_code) == 0, f"raw acks=-1: {pr.error_code!r}"
    assert int(pr.base_offset) == 1, int(pr.base_offset)


def test_metadata_invalid_topic_name_not_auto_created(cluster: Cluster) -> None:
    from kio.schema.metadata.v9.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName

    with cluster.raw() as conn:
        resp = conn.request(
            MetadataRequest(
                topics=(MetadataRequestTopic(name=TopicName("bad name!")),),
                allow_auto_topic_creation=True,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
    [t] = resp.topics
    assert int(t.error_code) == 17, (
        f"Metadata auto-create of 'bad name!': error {t.error_code!r}, expected "
        "INVALID_TOPIC_EXCEPTION (17)"
    )
    assert "bad name!" not in cluster.admin().topic_names()
