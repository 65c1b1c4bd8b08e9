"""Durability of the log across broker crashes and restarts (issue 2, "Log storage").

* SIGKILL (``cluster stop-broker --hard``) after acks=1 produces, restart: every
  acknowledged record is served, intact and in order, and new produces continue the offsets.
* A torn tail (garbage, half a batch, a batch with a bad CRC appended to the active segment
  after SIGKILL) is truncated by recovery: acknowledged records are served, nothing corrupt
  is, and new batches are appended right after the valid data.
* A clean shutdown (SIGTERM) leaves Kafka's ``.kafka_cleanshutdown`` marker and checkpoints;
  the restarted broker serves everything.
* Idempotent producer state survives a restart: the same producer instance keeps producing
  across it with no duplicates and no OutOfOrderSequence fatal error.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import KafkaError, Producer

from broker.protocol import records as rec

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    # a SIGKILLed broker's ephemeral /brokers/ids/1 lives until its ZooKeeper session expires
    pytest.mark.cluster_config({"zookeeper.session.timeout.ms": "6000"}),
]


@pytest.fixture(autouse=True)
def _broker_running(cluster: Cluster) -> None:
    """An earlier failed test may have left broker 1 stopped."""
    cluster.ensure_running()


class Deliveries:
    def __init__(self) -> None:
        self.ok: dict[int, tuple[int, int]] = {}
        self.errors: dict[int, KafkaError] = {}
        self.lock = threading.Lock()

    def callback(self, index: int) -> Any:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            with self.lock:
                if err is not None:
                    self.errors[index] = err
                else:
                    self.ok[index] = (msg.partition(), msg.offset())

        return on_delivery

    def assert_all_ok(self, indexes: range) -> None:
        assert not self.errors, (
            f"{len(self.errors)} delivery errors, e.g. {sorted(self.errors.items())[:3]}"
        )
        missing = [i for i in indexes if i not in self.ok]
        assert not missing, f"{len(missing)} records without a delivery report, e.g. {missing[:5]}"


def value_of(i: int) -> bytes:
    return f"durable-{i:06d}-".encode() + bytes([48 + i % 10]) * (i % 64)


def produce(
    producer: Producer,
    topic: str,
    indexes: range,
    deliveries: Deliveries,
    partition: int | None = None,
    flush: bool = True,
) -> None:
    for i in indexes:
        kwargs: dict[str, Any] = {"key": f"k{i % 31}".encode(), "value": value_of(i)}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, on_delivery=deliveries.callback(i), **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if flush:
        assert producer.flush(120) == 0, "records still queued after flush(120)"
        deliveries.assert_all_ok(indexes)


def check_served(
    cluster: Cluster, topic: str, partitions: list[int], deliveries: Deliveries
) -> None:
    """What the broker serves is exactly the acknowledged records, at their offsets."""
    by_partition = cluster.consume(topic, partitions)
    expected: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    for i, (p, off) in deliveries.ok.items():
        expected[p].append((off, value_of(i)))
    for p in partitions:
        got = [(m.offset(), m.value()) for m in by_partition[p]]
        want = sorted(expected[p])
        assert len(got) == len(want), (
            f"partition {p}: broker serves {len(got)} records, {len(want)} were acknowledged"
        )
        bad = [(g, w) for g, w in zip(got, want, strict=True) if g != w]
        assert not bad, f"partition {p}: {len(bad)} records differ, e.g. {bad[:3]}"


def make_producer(cluster: Cluster, extra: dict[str, object] | None = None) -> Producer:
    return Producer(
        cluster.conf(
            {
                "linger.ms": 5,
                "acks": 1,
                "message.timeout.ms": 120000,
                "reconnect.backoff.max.ms": 1000,
                "retry.backoff.ms": 100,
                **(extra or {}),
            }
        )
    )


def test_sigkill_restart_keeps_acknowledged_records(cluster: Cluster, topic_name: str) -> None:
    n, partitions = 3000, 3
    # small segments: recovery has to walk several of them (batches must fit in a segment,
    # or the broker refuses them with RECORD_LIST_TOO_LARGE, as Kafka does)
    cluster.create_topic(topic_name, partitions, {"segment.bytes": "40000"})
    deliveries = Deliveries()
    produce(make_producer(cluster, {"batch.size": 16384}), topic_name, range(n), deliveries)
    segments = {p: len(cluster.segment_files(topic_name, p)) for p in range(partitions)}
    assert all(c >= 2 for c in segments.values()), f"setup: segments per partition {segments}"

    cluster.stop_broker(hard=True)
    cluster.start_broker()
    cluster.admin().wait_for_leaders(topic_name, partitions)
    check_served(cluster, topic_name, list(range(partitions)), deliveries)

    counts = {p: 0 for p in range(partitions)}
    for p, _off in deliveries.ok.values():
        counts[p] += 1
    produce(make_producer(cluster), topic_name, range(n, n + 60), deliveries)
    for i in range(n, n + 60):
        p, off = deliveries.ok[i]
        assert off == counts[p], (
            f"after restart, partition {p} appended at offset {off}, expected {counts[p]}"
        )
        counts[p] += 1
    check_served(cluster, topic_name, list(range(partitions)), deliveries)


def _tail(kind: str, next_offset: int) -> bytes:
    ts = int(time.time() * 1000)
    batch = rec.encode_batch(
        [rec.SimpleRecord(value=b"x" * 200, key=b"torn", timestamp=ts) for _ in range(5)],
        base_offset=next_offset,
    )
    if kind == "garbage":
        return bytes((i * 37 + 11) % 256 for i in range(777))
    if kind == "half-batch":
        return batch[: len(batch) // 2]
    if kind == "bad-crc-batch":
        bad = bytearray(batch)
        bad[-3] ^= 0xFF
        return bytes(bad)
    if kind == "zeros":
        return b"\x00" * 4096  # preallocated-looking tail
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["garbage", "half-batch", "bad-crc-batch", "zeros"])
def test_torn_tail_truncated_on_recovery(cluster: Cluster, topic_name: str, kind: str) -> None:
    n = 500
    cluster.create_topic(topic_name, 1)
    deliveries = Deliveries()
    produce(make_producer(cluster), topic_name, range(n), deliveries, partition=0)

    cluster.stop_broker(hard=True)
    segment = cluster.active_segment(topic_name, 0)
    valid_size = segment.stat().st_size
    batches = cluster.batches(topic_name, 0)
    assert sum(h.record_count for _f, h, _ok in batches) == n, "setup: records on disk"
    with segment.open("ab") as f:
        f.write(_tail(kind, n))
    cluster.start_broker()
    cluster.admin().wait_for_leaders(topic_name, 1)

    check_served(cluster, topic_name, [0], deliveries)
    produce(make_producer(cluster), topic_name, range(n, n + 10), deliveries, partition=0)
    offsets = [deliveries.ok[i][1] for i in range(n, n + 10)]
    assert offsets == list(range(n, n + 10)), f"offsets after recovery: {offsets}"
    check_served(cluster, topic_name, [0], deliveries)

    # on disk: only valid batches, the new ones right after the old valid data
    segments = cluster.segment_files(topic_name, 0)
    total = 0
    for seg in segments:
        data = seg.read_bytes()
        headers = list(rec.iter_batches(data))  # raises on a torn tail
        assert sum(h.size for h in headers) == len(data), f"{seg.name}: trailing bytes"
        assert all(rec.crc_ok(data, h) for h in headers), f"{seg.name}: a batch fails its CRC"
        total += sum(h.record_count for h in headers)
    assert total == n + 10, f"{total} records on disk, expected {n + 10}"
    if segment in segments:
        assert segment.read_bytes()[valid_size : valid_size + 8] in (
            b"",
            n.to_bytes(8, "big"),
        ), "the first new batch does not start right after the old valid data"


def _read_checkpoint(path: Any) -> dict[tuple[str, int], int]:
    lines = path.read_text().split("\n")
    assert lines[0].strip() == "0", f"{path.name}: version line {lines[0]!r}"
    count = int(lines[1])
    out = {}
    for line in lines[2 : 2 + count]:
        topic, partition, offset = line.split()
        out[(topic, int(partition))] = int(offset)
    return out


def test_clean_shutdown_marker_and_restart(cluster: Cluster, topic_name: str) -> None:
    n = 1000
    cluster.create_topic(topic_name, 2)
    deliveries = Deliveries()
    produce(make_producer(cluster), topic_name, range(n), deliveries)

    cluster.stop_broker(hard=False)
    log_root = cluster.log_dirs()[0]
    listing = sorted(p.name for p in log_root.iterdir())
    assert (log_root / ".kafka_cleanshutdown").exists(), (
        f"no .kafka_cleanshutdown in {log_root} after SIGTERM; it holds {listing}"
    )
    checkpoint = log_root / "recovery-point-offset-checkpoint"
    assert checkpoint.exists(), f"no recovery-point-offset-checkpoint in {log_root}: {listing}"
    points = _read_checkpoint(checkpoint)
    for p in (0, 1):
        leo = sum(1 for part, _o in deliveries.ok.values() if part == p)
        assert points.get((topic_name, p)) == leo, (
            f"recovery point of {topic_name}-{p} is {points.get((topic_name, p))}, "
            f"log end offset {leo}"
        )
    for p in (0, 1):
        d = cluster.log_dir(topic_name, p)
        names = sorted(x.name for x in d.iterdir())
        for suffix in (".log", ".index", ".timeindex"):
            assert any(x.endswith(suffix) for x in names), f"{d.name}: no {suffix} in {names}"
        assert "leader-epoch-checkpoint" in names, f"{d.name}: {names}"

    cluster.start_broker()
    cluster.admin().wait_for_leaders(topic_name, 2)
    check_served(cluster, topic_name, [0, 1], deliveries)
    produce(make_producer(cluster), topic_name, range(n, n + 20), deliveries)
    check_served(cluster, topic_name, [0, 1], deliveries)


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_idempotent_producer_survives_restart(
    cluster: Cluster, topic_name: str, hard: bool
) -> None:
    cluster.create_topic(topic_name, 1)
    errors: list[KafkaError] = []
    producer = make_producer(
        cluster,
        {"enable.idempotence": True, "acks": "all", "error_cb": errors.append},
    )
    deliveries = Deliveries()
    produce(producer, topic_name, range(500), deliveries, partition=0)
    pids_before = {h.producer_id for _f, h, _ok in cluster.batches(topic_name, 0)}

    # keep producing from another thread while the broker goes down and comes back
    stop = threading.Event()
    produced = [500]

    def keep_producing() -> None:
        i = 500
        while not stop.is_set() and i < 5000:
            produce(producer, topic_name, range(i, i + 1), deliveries, partition=0, flush=False)
            i += 1
            produced[0] = i
            if i % 50 == 0:
                time.sleep(0.01)

    thread = threading.Thread(target=keep_producing, name="idempotent-producer", daemon=True)
    thread.start()
    try:
        while produced[0] < 1500 and thread.is_alive():
            time.sleep(0.01)
        cluster.stop_broker(hard=hard)
        time.sleep(0.5)  # let some records queue up while it is down
        cluster.start_broker()
    finally:
        stop.set()
        thread.join(timeout=60)
    total = produced[0]
    produce(producer, topic_name, range(total, total + 200), deliveries, partition=0)
    total += 200
    assert producer.flush(120) == 0
    fatal = [e for e in errors if e.fatal()]
    assert not fatal, f"fatal idempotent-producer errors across the restart: {fatal}"
    assert not [e for e in errors if e.code() == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER], errors
    deliveries.assert_all_ok(range(total))

    offsets = [deliveries.ok[i][1] for i in range(total)]
    assert offsets == list(range(total)), (
        "delivery offsets are not 0..N-1 in production order (duplicates or reordering): "
        f"first anomaly at {next(i for i, o in enumerate(offsets) if o != i)}"
    )
    msgs = cluster.consume(topic_name, [0])[0]
    values = [m.value() for m in msgs]
    assert len(values) == total, f"{len(values)} records stored for {total} produced"
    assert values == [value_of(i) for i in range(total)], "stored records differ"

    # a new idempotent producer after the restart gets a producer id never used before
    fresh = make_producer(cluster, {"enable.idempotence": True, "acks": "all"})
    d = Deliveries()
    produce(fresh, topic_name, range(total, total + 1), d, partition=0)
    last = cluster.batches(topic_name, 0)[-1][1]
    assert last.producer_id not in pids_before, (
        f"producer id {last.producer_id} reused after the restart (before: {pids_before})"
    )


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


@pytest.mark.parametrize("hard", [False, True], ids=["sigterm", "sigkill"])
def test_producer_state_and_ids_survive_restart_raw(
    cluster: Cluster, topic_name: str, hard: bool
) -> None:
    """After a restart a retried batch is still recognised as a duplicate (original offset
    back, nothing appended), the next sequence is accepted, and InitProducerId never hands
    out a producer id that was used before the restart."""
    cluster.create_topic(topic_name, 1)
    with cluster.raw() as conn:
        pid, epoch = conn.init_producer_id()
        b0 = _idempotent_batch(pid, epoch, 0, 0, 5)
        b1 = _idempotent_batch(pid, epoch, 5, 5, 5)
        assert conn.produce_v3(topic_name, 0, b0).base_offset == 0
        assert conn.produce_v3(topic_name, 0, b1).base_offset == 5

    cluster.stop_broker(hard=hard)
    cluster.start_broker()
    cluster.admin().wait_for_leaders(topic_name, 1)

    with cluster.raw() as conn:
        pr = conn.produce_v3(topic_name, 0, b1)
        assert (int(pr.error_code), pr.base_offset) == (0, 5), (
            f"retry of the last batch after restart: error {pr.error_code!r}, base offset "
            f"{pr.base_offset}; expected the original offset 5 (producer state lost?)"
        )
        pr = conn.produce_v3(topic_name, 0, _idempotent_batch(pid, epoch, 10, 10, 3))
        assert (int(pr.error_code), pr.base_offset) == (0, 10), (
            f"next sequence after restart: {pr.error_code!r} at {pr.base_offset}"
        )
        new_pid, _ = conn.init_producer_id()
        assert new_pid != pid, f"producer id {pid} handed out again after the restart"

    msgs = cluster.consume(topic_name, [0])[0]
    assert [m.value() for m in msgs] == [f"idem-{i}".encode() for i in range(13)], (
        f"log after restart holds {[m.value() for m in msgs]}"
    )
