"""Hostile input on raw sockets while a well-behaved confluent-kafka client keeps working.

Each attack (malformed frame, oversized frame, negative size, CRC-corrupted batch,
ApiVersions with an unknown version) runs while a canary thread produces and consumes with
confluent-kafka through connections opened before the attack; afterwards the canary must
have made progress without errors, and a fresh round trip must succeed. The broker must
answer with an error code or close the offending connection, never hang or crash
(DESIGN.md principle 4, issue 2 "Broker core").
"""

from __future__ import annotations

import datetime
import os
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from broker.protocol import records as rec

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

SOCKET_REQUEST_MAX_BYTES = 1_048_576

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(180),
    pytest.mark.cluster_config({"socket.request.max.bytes": str(SOCKET_REQUEST_MAX_BYTES)}),
]


class Canary:
    """A producer and an assign()-ed consumer on their own topic, looping produce -> consume
    in a background thread. Collects every error; counts round trips."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.topic = topic
        self.errors: list[str] = []
        self.round_trips = 0
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.producer = Producer(
            cluster.conf({"linger.ms": 0, "acks": "all", "message.timeout.ms": 30000})
        )
        self.consumer = Consumer(
            cluster.conf(
                {
                    "group.id": f"canary-{uuid.uuid4().hex[:6]}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                }
            )
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])

    def round_trip(self, timeout_s: float = 30.0) -> None:
        """Produce one record and consume it back (raises AssertionError on any failure)."""
        value = f"canary-{self._next}".encode()
        delivered: list[Any] = []

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            delivered.append(err if err is not None else msg.offset())

        self.producer.produce(self.topic, value=value, partition=0, on_delivery=on_delivery)
        remaining = self.producer.flush(timeout_s)
        assert remaining == 0 and delivered, f"canary record {self._next} not delivered"
        assert isinstance(delivered[0], int), f"canary delivery error: {delivered[0]}"
        assert delivered[0] == self._next, (
            f"canary record {self._next} stored at offset {delivered[0]}"
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"canary consumer error: {msg.error()}")
            assert (msg.offset(), msg.value()) == (self._next, value), (
                f"canary read {(msg.offset(), msg.value())}, expected {(self._next, value)}"
            )
            self._next += 1
            self.round_trips += 1
            return
        raise AssertionError(f"canary record {self._next} was not consumed within {timeout_s}s")

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.round_trip()
            except AssertionError as exc:
                self.errors.append(str(exc))
                return
            except Exception as exc:  # noqa: BLE001 - reported by stop()
                self.errors.append(repr(exc))
                return
            time.sleep(0.05)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="canary", daemon=True)
        self._thread.start()

    def stop_and_check(self, during: str) -> None:
        before = self.round_trips
        # at least one full round trip after the attack, still in the background thread
        deadline = time.monotonic() + 60
        while self.round_trips <= before and not self.errors and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "canary thread stuck"
        assert not self.errors, f"canary client failed during/after {during}: {self.errors}"
        assert self.round_trips > before, f"canary made no progress after {during}"
        self.round_trip()  # and once more from the test thread

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.consumer.close()
        self.producer.flush(10)


@pytest.fixture
def canary(cluster: Cluster, topic_name: str) -> Iterator[Canary]:
    topic = f"canary-{topic_name}"[:200]
    cluster.create_topic(topic, 1)
    c = Canary(cluster, topic)
    try:
        c.round_trip()  # connections are up before the attack
        c.start()
        yield c
    finally:
        c.close()


def assert_alive(cluster: Cluster) -> None:
    pid = cluster.broker_pid()
    assert os.path.exists(f"/proc/{pid}"), f"broker pid {pid} died"


# --- malformed frames --------------------------------------------------------------------------

MALFORMED = {
    # shorter than a request header
    "truncated-header": b"\x00\x03",
    # Metadata v9 (flexible) header, then a body whose compact array length is absurd
    "garbage-metadata-body": struct.pack(">hhih", 3, 9, 77, 4) + b"test" + b"\x00" + b"\xff" * 40,
    # Produce v3 whose topic array claims 2^31-1 entries
    "huge-array-count": struct.pack(">hhih", 0, 3, 78, 4)
    + b"test"
    + b"\xff\xff"
    + struct.pack(">hii", 1, 30000, 0x7FFFFFFF),
    # fixed pseudo-random bytes (api key 0x8d3a: unknown)
    "random-bytes": bytes((i * 151 + 0x8D) % 256 for i in range(200)),
    # a known API at an unknown version
    "metadata-v999": struct.pack(">hhih", 3, 999, 79, 4) + b"test" + b"\x00" * 8,
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_frame_is_rejected(cluster: Cluster, canary: Canary, case: str) -> None:
    payload = MALFORMED[case]
    with cluster.raw(timeout_s=30) as conn:
        conn.send_frame(payload)
        try:
            reaction = conn.closed_by_peer(timeout_s=30)
        except TimeoutError:
            pytest.fail(f"{case}: the broker neither answered nor closed the connection within 30s")
        if reaction is not True:
            assert isinstance(reaction, bytes) and len(reaction) >= 8, (
                f"{case}: unexpected reaction {reaction!r}"
            )
            if case in ("garbage-metadata-body", "huge-array-count", "metadata-v999"):
                corr = struct.unpack_from(">i", reaction, 4)[0]
                assert corr == struct.unpack_from(">i", payload, 4)[0], (
                    f"{case}: answered with correlation id {corr}"
                )
    canary.stop_and_check(case)
    broker_alive(cluster)


def test_oversized_frame_closes_connection_without_reading_it(
    cluster: Cluster, canary: Canary
) -> None:
    pid = cluster.broker_pid()
    rss_before = _rss_kib(pid)
    with cluster.raw(timeout_s=30) as conn:
        conn.send_raw(struct.pack(">i", 200 * 2**20))  # 200 MB announced, nothing sent
        try:
            reaction = conn.closed_by_peer(timeout_s=30)
        except TimeoutError:
            pytest.fail(
                "a 200 MB frame size (> socket.request.max.bytes=1048576) did not get the "
                "connection closed within 30s: the broker is waiting for the bytes"
            )
        assert reaction is True, f"expected a closed connection, got {reaction!r}"
    rss_after = _rss_kib(pid)
    assert rss_after - rss_before < 100 * 1024, (
        f"broker RSS grew by {(rss_after - rss_before) // 1024} MiB on an oversized frame"
    )

    # just above the limit, with the bytes actually sent: also closed
    with cluster.raw(timeout_s=30) as conn:
        body = struct.pack(">hhih", 18, 0, 5, 4) + b"test"
        body += b"\x00" * (SOCKET_REQUEST_MAX_BYTES + 1 - len(body))
        try:
            conn.send_frame(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed while we were still sending: fine
        else:
            try:
                reaction = conn.closed_by_peer(timeout_s=30)
            except TimeoutError:
                pytest.fail(
                    "a frame of socket.request.max.bytes + 1 was neither answered nor closed"
                )
            assert reaction is True, f"expected a closed connection, got {reaction!r}"
    canary.stop_and_check("oversized frame")
    broker_alive(cluster)


def test_negative_size_closes_connection(cluster: Cluster, canary: Canary) -> None:
    with cluster.raw(timeout_s=30) as conn:
        conn.send_raw(struct.pack(">i", -5) + b"whatever")
        try:
            reaction = conn.closed_by_peer(timeout_s=30)
        except TimeoutError:
            pytest.fail("a negative frame size did not close the connection within 30s")
        assert reaction is True, f"expected a closed connection, got {reaction!r}"
    canary.stop_and_check("negative size")
    broker_alive(cluster)


@pytest.mark.parametrize("where", ["record-bytes", "header-field", "compressed-payload"])
def test_crc_corrupted_batch_rejected(
    cluster: Cluster, canary: Canary, topic_name: str, where: str
) -> None:
    cluster.create_topic(topic_name, 1)
    ts = int(time.time() * 1000)
    records = [
        rec.SimpleRecord(value=f"value-{i}".encode() * 5, key=f"k{i}".encode(), timestamp=ts + i)
        for i in range(10)
    ]
    compression = 4 if where == "compressed-payload" else 0
    good = rec.encode_batch(records, compression_type=compression)
    bad = bytearray(good)
    if where == "header-field":
        bad[rec.MAX_TIMESTAMP_OFFSET + 7] ^= 0x01  # maxTimestamp is CRC-covered
    else:
        bad[rec.HEADER_SIZE + 5] ^= 0xFF
    assert not rec.crc_ok(bytes(bad), rec.read_header(bytes(bad))), "setup: CRC still valid"

    # zstd needs Produce v7 (below it Kafka answers UNSUPPORTED_COMPRESSION_TYPE first)
    version = 7 if compression == 4 else 3
    with cluster.raw(timeout_s=30) as conn:
        pr = conn.produce(topic_name, 0, bytes(bad), version=version)
        assert int(pr.error_code) == 2, (
            f"CRC-corrupted batch ({where}): error {pr.error_code!r}, expected CORRUPT_MESSAGE (2)"
        )
        # the same connection still works, and nothing of the bad batch was stored
        pr = conn.produce(topic_name, 0, good, version=version)
        assert int(pr.error_code) == 0, f"valid batch after the corrupt one: {pr.error_code!r}"
        assert pr.base_offset == 0, f"the corrupt batch consumed offsets: base {pr.base_offset}"

    msgs = cluster.consume(topic_name, [0])[0]
    assert [(m.offset(), m.key(), m.value()) for m in msgs] == [
        (i, r.key, r.value) for i, r in enumerate(records)
    ]
    stored = cluster.batches(topic_name, 0)
    assert len(stored) == 1 and stored[0][2], f"on disk: {stored}"
    canary.stop_and_check(f"CRC-corrupted batch ({where})")
    broker_alive(cluster)


def test_old_magic_batch_rejected(cluster: Cluster, canary: Canary, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1)
    batch = bytearray(
        rec.encode_batch([rec.SimpleRecord(value=b"v", timestamp=int(time.time() * 1000))])
    )
    batch[rec.MAGIC_OFFSET] = 1  # magic is not CRC-covered in v2, so the CRC still "passes"
    with cluster.raw(timeout_s=30) as conn:
        pr = conn.produce_v3(topic_name, 0, bytes(batch))
    # Kafka's ProduceRequest.validateRecords: v3+ carries magic 2 only -> INVALID_RECORD
    assert int(pr.error_code) == 87, (
        f"magic-1 batch: error {pr.error_code!r}, expected INVALID_RECORD (87) as Kafka"
    )
    canary.stop_and_check("old magic batch")


def test_api_versions_unsupported_version(cluster: Cluster, canary: Canary) -> None:
    with cluster.raw(timeout_s=30) as conn:
        # a future ApiVersions version: flexible header v2 and a compact body
        conn.send_frame(conn.header(18, 99, 555, flexible=True) + b"\x06kafka\x043.9\x00")
        frame = conn.recv_frame()
        corr, error, count = struct.unpack_from(">ihi", frame, 0)
        assert corr == 555, f"correlation id {corr}"
        assert error == 35, f"ApiVersions v99: error {error}, expected UNSUPPORTED_VERSION (35)"
        assert 0 < count < 200, f"v0-framed api_keys array count {count}"
        entries = [struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)]
        assert len(frame) >= 10 + 6 * count, "response shorter than its api_keys array"
        by_key = {k: (lo, hi) for k, lo, hi in entries}
        assert 18 in by_key and by_key[18][0] == 0, f"ApiVersions range missing: {by_key}"

        # the client retries with a version the broker has: the same connection still works
        conn.send_frame(conn.header(18, 0, 556))
        frame = conn.recv_frame()
        corr, error = struct.unpack_from(">ih", frame, 0)
        assert (corr, error) == (556, 0)
    canary.stop_and_check("ApiVersions v99")


def test_api_versions_advertises_what_clients_need(cluster: Cluster) -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    with cluster.raw() as conn:
        resp = conn.request(
            ApiVersionsRequest(client_software_name="raw", client_software_version="1.0")
        )
    assert int(resp.error_code) == 0
    ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
    for key in (0, 1, 2, 3, 18, 19, 20, 21, 22, 32, 37, 44, 60):
        assert key in ranges, f"api key {key} not advertised: {sorted(ranges)}"


def broker_alive(cluster: Cluster) -> None:
    assert_alive(cluster)
    with cluster.raw(timeout_s=30) as conn:
        conn.send_frame(conn.header(18, 0, 4242))
        frame = conn.recv_frame()
    corr, error = struct.unpack_from(">ih", frame, 0)
    assert (corr, error) == (4242, 0), f"fresh ApiVersions v0 after the attack: {(corr, error)}"


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def test_pipelined_requests_answered_in_order(cluster: Cluster, topic_name: str) -> None:
    """Responses come back in request order, even when an earlier request (a long-poll
    Fetch on an empty partition) completes later than the ones queued behind it."""
    from kio.schema.api_versions.v0.request import ApiVersionsRequest
    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.metadata.v1.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName
    from kio.static.primitive import i32, i64

    cluster.create_topic(topic_name, 1)
    fetch = FetchRequest(
        max_wait=kio_timedelta_ms(1500),
        min_bytes=i32(1_000_000),
        topics=(
            FetchTopic(
                topic=TopicName(topic_name),
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1_000_000)
                    ),
                ),
            ),
        ),
    )
    metadata = MetadataRequest(topics=(MetadataRequestTopic(name=TopicName(topic_name)),))
    with cluster.raw(timeout_s=60) as conn:
        plan = [(fetch, 1, 4)]
        for _ in range(10):
            plan.append((ApiVersionsRequest(), 18, 0))
            plan.append((metadata, 3, 1))
        plan.append((fetch, 1, 4))
        sent = [(conn.send_request(req), key, ver) for req, key, ver in plan]
        got = []
        for _corr, key, ver in sent:
            corr, resp = conn.read_response(key, ver)
            got.append(corr)
            if key == 1:
                [t] = resp.responses
                [part] = t.partitions
                assert int(part.error_code) == 0 and part.high_watermark == 0, part
            elif key == 3:
                [t] = resp.topics
                assert int(t.error_code) == 0, t
    assert got == [corr for corr, _k, _v in sent], f"responses out of order: {got}"


def kio_timedelta_ms(ms: int) -> Any:
    from kio.static.primitive import i32Timedelta

    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def test_idle_connection_closed(cluster_factory: Any) -> None:
    other = cluster_factory({"connections.max.idle.ms": "3000"})
    with other.raw(timeout_s=60) as conn:
        conn.send_frame(conn.header(18, 0, 1))
        assert struct.unpack_from(">ih", conn.recv_frame(), 0) == (1, 0)
        try:
            reaction = conn.closed_by_peer(timeout_s=60)
        except TimeoutError:
            pytest.fail("an idle connection outlived connections.max.idle.ms=3000 by 60s")
        assert reaction is True, f"idle connection got unsolicited bytes {reaction!r}"


def _idempotent_batch(pid: int, epoch: int, seq: int, first: int, count: int) -> bytes:
    ts = int(time.time() * 1000)
    return rec.encode_batch(
        [
            rec.SimpleRecord(value=f"idem-{first + i}".encode(), key=b"k", timestamp=ts)
            for i in range(count)
        ],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def test_idempotent_sequence_checks_raw(cluster: Cluster, topic_name: str) -> None:
    """Duplicates of recent batches get their original offsets back; gaps are rejected."""
    cluster.create_topic(topic_name, 1)
    with cluster.raw() as conn:
        pid, epoch = conn.init_producer_id()
        assert pid >= 0 and epoch >= 0, (pid, epoch)
        other_pid, _ = conn.init_producer_id()
        assert other_pid != pid, "InitProducerId handed out the same producer id twice"

        b0 = _idempotent_batch(pid, epoch, 0, 0, 5)
        b1 = _idempotent_batch(pid, epoch, 5, 5, 5)
        pr = conn.produce_v3(topic_name, 0, b0)
        assert (int(pr.error_code), pr.base_offset) == (0, 0), pr
        pr = conn.produce_v3(topic_name, 0, b1)
        assert (int(pr.error_code), pr.base_offset) == (0, 5), pr

        for what, batch, offset in (("latest", b1, 5), ("older", b0, 0)):
            pr = conn.produce_v3(topic_name, 0, batch)
            assert (int(pr.error_code), pr.base_offset) == (0, offset), (
                f"duplicate of the {what} batch: error {pr.error_code!r}, base offset "
                f"{pr.base_offset}; expected no error and the original offset {offset}"
            )

        gap = _idempotent_batch(pid, epoch, 20, 20, 2)
        pr = conn.produce_v3(topic_name, 0, gap)
        assert int(pr.error_code) == 45, (
            f"sequence gap (expected 10, sent 20): {pr.error_code!r}, expected "
            "OUT_OF_ORDER_SEQUENCE_NUMBER (45)"
        )
        pr = conn.produce_v3(topic_name, 0, _idempotent_batch(pid, epoch, 10, 10, 2))
        assert (int(pr.error_code), pr.base_offset) == (0, 10), pr

    msgs = cluster.consume(topic_name, [0])[0]
    assert [m.value() for m in msgs] == [f"idem-{i}".encode() for i in range(12)], (
        f"log holds {[m.value() for m in msgs]}"
    )
