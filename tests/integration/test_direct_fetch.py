"""The reader's direct fetch (``fetcher=direct``, the default) reads exactly what a
confluent-kafka consumer reads (``fetcher=librdkafka``), from Millrace and from Apache Kafka
3.9.1: every codec, null keys and values, headers, create and log-append time, committed and
aborted transactions under both isolation levels, ranges starting and ending inside batches.

``read_range`` is what a Spark task runs (``spark_connector.read.consumer``); calling it here needs
no Spark. Apache Kafka is the JVM started from ``make setup``'s jars on the module cluster's
ZooKeeper under a chroot, stopped by its own pid afterwards."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from spark_connector.read.consumer import read_range, record_schema
from spark_connector.read.options import parse_read_options
from spark_connector.read.planner import OffsetRange

pytestmark = pytest.mark.integration

SCHEMA = record_schema(include_headers=True)
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module", params=["millrace", "kafka"])
def system(request: pytest.FixtureRequest, cluster: Any, tmp_path_factory: Any) -> Iterator[Any]:
    """``(bootstrap, create_topic, name)`` of a Millrace cluster or an Apache Kafka 3.9.1
    broker (``name``: ``millrace`` or ``kafka``)."""
    if request.param == "millrace":
        yield (
            cluster.bootstrap,
            lambda topic, configs: cluster.create_topic(topic, 1, configs),
            "millrace",
        )
        return
    from bench.systems import KafkaSystem, kafka_available

    if not kafka_available():
        pytest.fail("Apache Kafka 3.9.1 is not in .cache/jvm/kafka-dist: run `make setup`")
    kafka = KafkaSystem(tmp_path_factory.mktemp("kafka"), 1, str(cluster.json["zookeeper"]))
    try:
        yield (
            kafka.bootstrap,
            lambda topic, configs: kafka.create_topic(topic, 1, 1, configs),
            "kafka",
        )
    finally:
        kafka.stop()


def _produce(bootstrap: str, topic: str) -> tuple[set[bytes], set[bytes]]:
    """Mixed traffic into partition 0; returns the aborted and the committed values."""
    for i, codec in enumerate(CODECS):
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "compression.type": codec,
                "linger.ms": 20,
                "enable.idempotence": i % 2 == 0,
            }
        )
        for j in range(400):
            key = None if j % 7 == 0 else b"k%d" % j
            value = None if j % 11 == 0 else (b"%s-%d-" % (codec.encode(), j)) * (j % 5 + 1)
            headers = [("h", b"x"), ("n", None), ("\u00e9", b"")] if j % 3 == 0 else None
            p.produce(topic, value=value, key=key, partition=0, headers=headers, timestamp=j + 1)
        p.flush(30)
    aborted: set[bytes] = set()
    committed: set[bytes] = set()
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx"})
    tp.init_transactions(30)
    for n, commit in enumerate((False, True, False, True)):
        tp.begin_transaction()
        for j in range(120):
            value = b"txn%d-%d" % (n, j)
            tp.produce(topic, value=value, key=b"t", partition=0)
            (committed if commit else aborted).add(value)
        plain = Producer({"bootstrap.servers": bootstrap})
        plain.produce(topic, value=b"plain%d" % n, partition=0)  # interleaved, outside
        plain.flush(30)
        committed.add(b"plain%d" % n)
        tp.flush(30)
        if commit:
            tp.commit_transaction(30)
        else:
            tp.abort_transaction(30)
    return aborted, committed


def _read(
    bootstrap: str, topic: str, r: tuple[int, int], fetcher: str, iso: str, local: str = "true"
) -> list[Any]:
    options = parse_read_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "fetcher": fetcher,
            "kafka.isolation.level": iso,
            "includeHeaders": "true",
            "localReads": local,
        },
        streaming=False,
    )
    batches = list(read_range(options, OffsetRange(topic, 0, *r), SCHEMA))
    for b in batches:
        assert b.schema.equals(SCHEMA), b.schema
    return pa.Table.from_batches(batches, SCHEMA).to_pylist()


@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_direct_fetch_reads_what_librdkafka_reads(
    system: Any, topic_name: str, timestamps: str
) -> None:
    bootstrap, create_topic, _name = system
    topic = f"{topic_name}-{timestamps.lower()}"
    create_topic(topic, {"message.timestamp.type": timestamps})
    aborted, committed = _produce(bootstrap, topic)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x"})
    _, end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.close()
    for iso in ("read_uncommitted", "read_committed"):
        for r in ((0, end), (1, end - 3), (777, 1300)):
            direct = _read(bootstrap, topic, r, "direct", iso)
            consumer = _read(bootstrap, topic, r, "librdkafka", iso)
            assert direct == consumer, (iso, r)
            # short-circuit reads (Millrace on this machine) off: over TCP, the same rows
            assert _read(bootstrap, topic, r, "direct", iso, local="false") == consumer, (iso, r)
        rows = _read(bootstrap, topic, (0, end), "direct", iso)
        values = {row["value"] for row in rows}
        assert committed <= values
        if iso == "read_committed":
            assert not aborted & values
            assert len(rows) == 5 * 400 + len(committed)
        else:
            assert aborted <= values
        offsets = [row["offset"] for row in rows]
        assert offsets == sorted(set(offsets))
        if timestamps == "LogAppendTime":
            assert {row["timestampType"] for row in rows} == {1}
        else:
            assert {row["timestampType"] for row in rows} == {0}
            assert rows[0]["timestamp"].timestamp() == 0.001
        assert any(row["headers"] for row in rows)
        assert any(row["key"] is None for row in rows)
        assert any(row["value"] is None for row in rows)


def _fetch_all(fetcher: Any, end: int) -> list[bytes]:
    """The record bytes of every Fetch from offset 0 to ``end`` (the next offset from each
    response's last batch)."""
    from spark_connector.records.decoder import scan_batches

    out: list[bytes] = []
    offset = 0
    while offset < end:
        result = fetcher.fetch(offset)
        assert result.error_code == 0, result
        assert result.records is not None
        out.append(bytes(result.records))
        _count, offset = scan_batches(result.records)
    return out


def test_short_circuit_reads_only_from_millrace_on_this_machine(
    system: Any, topic_name: str
) -> None:
    """A Millrace leader on this machine locates the records and the fetcher reads them from
    the segment file: the same bytes Fetch sends; Apache Kafka is fetched from as before."""
    from confluent_kafka import Producer

    from spark_connector.kafka.fetcher import PartitionFetcher

    bootstrap, create_topic, name = system
    topic = f"{topic_name}-local"
    create_topic(topic, {"segment.bytes": "65536"})  # several segments
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    errors: list[Any] = []
    for i in range(3000):
        p.produce(
            topic,
            value=b"v%d-" % i * 20,
            key=b"k%d" % i,
            partition=0,
            on_delivery=lambda err, _msg: err and errors.append(err),
        )
    assert p.flush(30) == 0 and errors == []
    small = {"partition_max_bytes": 16384}  # many fetches, across segments
    with PartitionFetcher(bootstrap, topic, 0, read_committed=False, **small) as local:
        _low, end = local.watermarks(time.monotonic() + 30)
        assert end == 3000
        located = _fetch_all(local, end)
        with PartitionFetcher(
            bootstrap, topic, 0, read_committed=False, local_reads=False, **small
        ) as remote:
            assert _fetch_all(remote, end) == located
            assert remote.files_read == 0
        assert local.files_read == (len(located) if name == "millrace" else 0)


def test_records_a_fetcher_cannot_read_here_come_over_the_connection(
    cluster: Any, topic_name: str
) -> None:
    """A locator from "another machine" (a fetcher told another boot id) is not read: the
    fetcher asks again with Fetch, gets the same bytes, and stops asking for locators."""
    from spark_connector.kafka.fetcher import PartitionFetcher
    from spark_connector.kafka.local_files import LocalFiles

    cluster.create_topic(topic_name, 1)
    p = Producer({"bootstrap.servers": cluster.bootstrap, "batch.size": 4096})
    for i in range(500):
        p.produce(topic_name, value=b"x%d" % i * 10, partition=0)
    assert p.flush(30) == 0
    with PartitionFetcher(cluster.bootstrap, topic_name, 0, read_committed=False) as here:
        _low, end = here.watermarks(time.monotonic() + 30)
        expected = _fetch_all(here, end)
        assert here.files_read == len(expected)
    elsewhere = PartitionFetcher(cluster.bootstrap, topic_name, 0, read_committed=False)
    elsewhere._files = LocalFiles(boot_id=b"\x07" * 16)
    with elsewhere:
        assert _fetch_all(elsewhere, end) == expected
        assert elsewhere.files_read == 0
        assert elsewhere._files is not None and not elsewhere._files.usable


def test_millrace_local_fetch_is_listed_only_to_millrace_clients(cluster: Any) -> None:
    """ApiVersions lists key 32000 to a client naming itself ``millrace...`` only: Kafka's
    clients and tools (which name themselves otherwise, or not at all) see Kafka's APIs. A
    follower's request (replica id >= 0) is refused: followers replicate with Fetch."""
    import struct

    from spark_connector.kafka.connection import Connection, parse_bootstrap, read_uvarint

    host, port = parse_bootstrap(cluster.bootstrap)[0]

    def listed(software: str, version: int) -> set[int]:
        conn = Connection(host, port, 10.0, "t")
        try:
            if version >= 3:
                name = software.encode()
                body = bytes((len(name) + 1,)) + name + b"\x021\x00"
                conn.send(18, 3, body, flexible=True)
            else:
                conn.send(18, 0, b"")
            frame = conn.receive()
        finally:
            conn.close()
        (error,) = struct.unpack_from(">h", frame, 4)
        assert error == 0
        if version >= 3:
            count, pos = read_uvarint(frame, 6)
            keys = set()
            for _ in range(count - 1):
                keys.add(struct.unpack_from(">h", frame, pos)[0])
                pos += 7
            return keys
        (count,) = struct.unpack_from(">i", frame, 6)
        return {struct.unpack_from(">h", frame, 10 + 6 * i)[0] for i in range(count)}

    assert 32000 in listed("millrace-spark-connector", 3)
    assert 1 in listed("librdkafka", 3) and 32000 not in listed("librdkafka", 3)
    assert 32000 not in listed("", 0)

    conn = Connection(host, port, 10.0, "t")
    try:
        body = struct.pack(">iiiibii", 2, 0, 1, 1 << 20, 0, 0, -1) + struct.pack(">ii", 0, 0)
        conn.send(32000, 11, body + b"\x00\x00")
        frame = conn.receive()
    finally:
        conn.close()
    # throttle time, then the top-level error: INVALID_REQUEST (42)
    assert struct.unpack_from(">h", frame, 8)[0] == 42


def test_a_fresh_processs_first_read_loads_no_generated_protocol_code(
    system: Any, topic_name: str
) -> None:
    """A Spark task is often the first thing a new Python worker does: its leader look-up
    (Metadata, encoded by hand) must not import kio's serializer and schemas, nor the "idna"
    codec (a host name given to getaddrinfo as str), which together took ~40 ms of the first
    micro-batch in each new worker. Against both systems, in a new interpreter."""
    import subprocess
    import sys

    bootstrap, create_topic, _name = system
    topic = f"{topic_name}-fresh"
    create_topic(topic, {})
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    script = (
        "import sys\n"
        "from spark_connector.read.consumer import read_range, record_schema\n"
        "from spark_connector.read.options import parse_read_options\n"
        "from spark_connector.read.planner import OffsetRange\n"
        f"o = parse_read_options({{'kafka.bootstrap.servers': {bootstrap!r}, "
        f"'subscribe': {topic!r}}}, streaming=False)\n"
        f"rows = sum(b.num_rows for b in read_range(o, OffsetRange({topic!r}, 0, 0, 10), "
        "record_schema(False)))\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('kio.serial', 'kio.schema', "
        "'encodings.idna')))\n"
        "print(rows, loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "10 []", out
