"""The batch producer's pipelining, merging, ordering and retries, against a fake cluster.

A user relies on a write landing once and in order per partition, whatever the brokers answer;
these tests drive :class:`~spark_connector.kafka.producer.BatchProducer` (and the writer's
``write_rows`` around it) against :class:`FakeCluster`: brokers that keep each partition's log
with Kafka's idempotence rules (``ProducerStateManager``: a batch is appended only if its base
sequence follows the last one; one of the last 5 batches sent again is a duplicate, answered
with its first offset; any other sequence is OUT_OF_ORDER_SEQUENCE_NUMBER), answer in order,
and hold their answers until the producer waits (a network's latency), so that requests pile
up in flight. Faults are scripted per batch: refused with a retriable error, appended but
answered with one (a timeout), or the connection lost.

No socket is opened: the producer's ``Cluster``, ``Connection`` and ``select`` are replaced.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from spark_connector.kafka import producer as producer_module
from spark_connector.kafka.producer import BatchProducer
from spark_connector.records.decoder import PyColumns, iter_batches, records_section
from spark_connector.records.encoder import encode_records
from spark_connector.write import batch_write
from spark_connector.write.plan import BatchSettings, batch_settings, plan_write

pytestmark = pytest.mark.unit

NOT_LEADER = 6
REQUEST_TIMED_OUT = 7
OUT_OF_ORDER = 45
PID, EPOCH = 4000, 3

# --- the fake cluster -----------------------------------------------------------------------


@dataclass
class Stored:
    """One batch a partition's log holds."""

    base_offset: int
    sequence: int
    records: int
    data: bytes


@dataclass
class Log:
    """A partition's log and its producer state (shared by the brokers: replicated)."""

    batches: list[Stored] = field(default_factory=list)
    end: int = 0
    next_sequence: int = 0

    def append(self, data: bytes, sequence: int, records: int) -> tuple[int, int]:
        """Kafka's idempotent append (any append without a sequence): (error code, base
        offset)."""
        if sequence < 0:
            self.batches.append(Stored(self.end, sequence, records, data))
            self.end += records
            return 0, self.end - records
        for kept in self.batches[-5:]:
            if kept.sequence == sequence and kept.records == records:
                return 0, kept.base_offset  # a duplicate: answered with its offset
        if sequence != self.next_sequence:
            return OUT_OF_ORDER, -1
        self.batches.append(Stored(self.end, sequence, records, data))
        self.end += records
        self.next_sequence = sequence + records
        return 0, self.end - records


Fault = Callable[["Arrival"], str | None]
"""Looks at a batch as it arrives; returns None (normal), ``refuse:<code>`` (not appended,
answered with the code), ``answer:<code>`` (appended, answered with the code) or ``drop``
(appended, then the connection is lost before any answer)."""


@dataclass
class Arrival:
    topic: str
    partition: int
    sequence: int
    records: int
    nth: int  # how many batches of the partition arrived before this one
    data: bytes


class FakeCluster:
    """Brokers 1 and 2 on ports 9001/9002; every partition led by ``leaders`` (default 1)."""

    instance: FakeCluster
    next_faults: list[Fault] = []  # the faults of the next cluster made

    def __init__(self, bootstrap: str, **_: Any) -> None:
        FakeCluster.instance = self
        self.client_id = "test"
        self.security = None
        self.bootstrap_text = bootstrap
        self.partitions = 2
        self.leaders: dict[tuple[str, int], int] = {}
        self.logs: dict[tuple[str, int], Log] = {}
        self.arrivals: dict[tuple[str, int], int] = {}
        self.faults: list[Fault] = FakeCluster.next_faults
        FakeCluster.next_faults = []
        self.events: list[tuple[Any, ...]] = []  # ("add", keys) / ("produce", key, sequence)
        self.in_flight: dict[tuple[str, int], int] = {}
        self.in_flight_at: dict[tuple[str, int], int] = {}  # the broker they went to
        self.sent_end: dict[tuple[str, int], int] = {}  # the sequence after the last sent
        self.max_in_flight: dict[tuple[str, int], int] = {}
        self.max_requests = 0
        self.answers: list[tuple[tuple[str, int], int]] = []  # (partition, code) as answered
        self.topics: dict[str, Any] = {}
        self.connections: list[FakeConnection] = []
        self.release_all = False  # answers readable without waiting

    # what the producer asks of a Cluster
    def close(self) -> None:
        pass

    def refresh(self, topics: Any = (), *, auto_create: bool = False) -> None:
        pass

    def partition_count(self, topic: str) -> int:
        return self.partitions

    def leader(self, topic: str, partition: int) -> int:
        return self.leaders.get((topic, partition), 1)

    def broker_address(self, broker: int) -> tuple[str, int] | None:
        return ("fake", 9000 + broker) if broker in (1, 2) else None

    def retrying(
        self, what: str, attempt: Callable[[], Any], timeout_s: float | None = None
    ) -> Any:
        return attempt()

    def any_broker(self, request: Any) -> Any:
        return SimpleNamespace(error_code=0, producer_id=PID, producer_epoch=EPOCH)

    def coordinator_request(self, key_type: int, key: str, request: Any) -> Any:
        if hasattr(request, "v3_and_below_topics"):
            keys = [
                (str(t.name), int(p)) for t in request.v3_and_below_topics for p in t.partitions
            ]
            self.events.append(("add", sorted(keys)))
            return SimpleNamespace(
                results_by_topic_v3_and_below=[
                    SimpleNamespace(results_by_partition=[SimpleNamespace(partition_error_code=0)])
                ]
            )
        return SimpleNamespace(error_code=0, producer_id=PID, producer_epoch=EPOCH)

    def check_coordinator_error(self, what: str, code: int, key_type: int, key: str) -> None:
        assert code == 0

    def forget_coordinator(self, key_type: int, key: str) -> None:
        pass

    # the brokers
    def check_order(self, key: tuple[str, int], broker: int, sequence: int, records: int) -> None:
        """The idempotent producer's rules: a partition's batches in flight all at one
        broker; while some are in flight, the next batch follows the last one sent (or
        skips batches the log already holds: those acknowledged while an earlier one waited to
        be sent again); going back (a retry from the head) only once none is in flight."""
        if self.in_flight.get(key, 0):
            assert self.in_flight_at[key] == broker, f"{key}: in flight at two brokers"
            if sequence >= 0:
                end = self.sent_end[key]
                written = self.log(*key).next_sequence
                assert end <= sequence <= max(end, written), f"{key}: sent {sequence} out of order"
        self.in_flight_at[key] = broker
        self.sent_end[key] = sequence + records

    def log(self, topic: str, partition: int) -> Log:
        return self.logs.setdefault((topic, partition), Log())

    def produce(self, broker: int, arrival: Arrival) -> tuple[int, int, bool]:
        """(code, base offset, drop the connection) for one batch of a Produce request."""
        key = (arrival.topic, arrival.partition)
        self.events.append(("produce", key, arrival.sequence))
        if self.leader(*key) != broker:
            return NOT_LEADER, -1, False
        action = None
        for fault in self.faults:
            action = action or fault(arrival)
        if action is not None and action.startswith("refuse:"):
            return int(action.split(":")[1]), -1, False
        code, base = self.log(*key).append(arrival.data, arrival.sequence, arrival.records)
        if action is not None and action.startswith("answer:"):
            return int(action.split(":")[1]), -1, False
        return code, base, action == "drop"

    def values(self, topic: str, partition: int) -> list[bytes]:
        """The partition's record values, checking each stored batch's records on the way:
        offset deltas 0..n-1, timestamps between base and max, max the largest."""
        out: list[bytes] = []
        for kept in self.log(topic, partition).batches:
            (header,) = list(iter_batches(kept.data))
            assert (header.producer_id, header.producer_epoch) in ((PID, EPOCH), (-1, -1))
            section = records_section(kept.data, header)
            columns = PyColumns(with_headers=False)
            got = columns.add(
                section,
                header.record_count,
                kept.base_offset,
                header.base_timestamp,
                header.max_timestamp,
                False,
                0,
                1 << 62,
            )
            assert got == header.record_count == kept.records
            taken = columns.take()
            offsets = struct.unpack(f"<{got}q", taken[1])
            assert list(offsets) == list(range(kept.base_offset, kept.base_offset + got))
            stamps = [t // 1000 for t in struct.unpack(f"<{got}q", taken[2])]
            assert stamps == sorted(stamps)
            assert stamps[0] == header.base_timestamp and stamps[-1] == header.max_timestamp
            value_offsets = struct.unpack(f"<{got + 1}i", taken[8])
            data = taken[9]
            out += [data[value_offsets[i] : value_offsets[i + 1]] for i in range(got)]
        return out

    def sequences(self, topic: str, partition: int) -> list[tuple[int, int]]:
        return [(b.sequence, b.records) for b in self.log(topic, partition).batches]


class FakeConnection:
    """One connection to a fake broker: answers in order, held until the producer waits."""

    _fds = itertools.count(100)

    def __init__(self, host: str, port: int, *_: Any) -> None:
        self.cluster = FakeCluster.instance
        self.broker = port - 9000
        self.fd = next(self._fds)
        self.answers: deque[tuple[bytes, list[tuple[str, int]]]] = deque()
        self.dead = False
        self.correlation = 0
        self.cluster.connections.append(self)

    def fileno(self) -> int:
        return self.fd

    def pending(self) -> bool:
        return False

    def close(self) -> None:
        self.dead = True
        self._forget()

    def _forget(self) -> None:
        for _frame, keys in self.answers:
            for key in keys:
                self.cluster.in_flight[key] -= 1
        self.answers.clear()

    @property
    def in_flight(self) -> int:
        return len(self.answers)

    def send(self, api_key: int, version: int, body: bytes, *, flexible: bool = False) -> None:
        assert (api_key, version) == (0, 7)
        if self.dead:
            raise ConnectionError("closed")
        cluster = self.cluster
        pos = 0
        (n,) = struct.unpack_from(">h", body, pos)
        pos += 2 + max(n, 0)
        _acks, _timeout, topics = struct.unpack_from(">hii", body, pos)
        pos += 10
        response = [struct.pack(">i", self.correlation), struct.pack(">i", topics)]
        self.correlation += 1
        keys: list[tuple[str, int]] = []
        drop = False
        for _ in range(topics):
            (n,) = struct.unpack_from(">h", body, pos)
            topic = body[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            (count,) = struct.unpack_from(">i", body, pos)
            pos += 4
            response += [struct.pack(">h", n), topic.encode(), struct.pack(">i", count)]
            for _ in range(count):
                index, size = struct.unpack_from(">ii", body, pos)
                pos += 8
                data = bytes(body[pos : pos + size])
                pos += size
                (header,) = list(iter_batches(data))
                (sequence,) = struct.unpack_from(">i", data, 53)
                key = (topic, index)
                cluster.check_order(key, self.broker, sequence, header.record_count)
                nth = cluster.arrivals.get(key, 0)
                cluster.arrivals[key] = nth + 1
                arrival = Arrival(topic, index, sequence, header.record_count, nth, data)
                code, base, lost = cluster.produce(self.broker, arrival)
                drop = drop or lost
                cluster.answers.append((key, code))
                keys.append(key)
                response.append(struct.pack(">ihqqq", index, code, base, -1, 0))
        assert pos == len(body)
        response.append(struct.pack(">i", 0))
        for key in keys:
            cluster.in_flight[key] = cluster.in_flight.get(key, 0) + 1
            cluster.max_in_flight[key] = max(
                cluster.max_in_flight.get(key, 0), cluster.in_flight[key]
            )
        self.answers.append((b"".join(response), keys))
        cluster.max_requests = max(cluster.max_requests, len(self.answers))
        if drop:
            self.dead = True
            self._forget()

    def receive(self) -> bytearray:
        if self.dead:
            raise ConnectionError("connection reset")
        frame, keys = self.answers.popleft()
        for key in keys:
            self.cluster.in_flight[key] -= 1
        return bytearray(frame)


def fake_select(
    rlist: list[int], wlist: list[int], xlist: list[int], timeout: float
) -> tuple[list[int], list[int], list[int]]:
    """Answers are readable only when the producer waits (or ``release_all``): latency."""
    cluster = FakeCluster.instance
    if timeout == 0 and not cluster.release_all:
        return [], [], []
    by_fd = {c.fd: c for c in cluster.connections}
    return [fd for fd in rlist if by_fd[fd].dead or by_fd[fd].answers], [], []


CLOCK = SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: None, time=time.time)
"""The producer's ``time``: no sleeping; a test may replace ``monotonic``."""


@pytest.fixture(autouse=True)
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(producer_module, "Cluster", FakeCluster)
    monkeypatch.setattr(producer_module, "Connection", FakeConnection)
    monkeypatch.setattr(producer_module, "select", SimpleNamespace(select=fake_select))
    monkeypatch.setattr(producer_module, "time", CLOCK)


# --- helpers -----------------------------------------------------------------------------------

SCHEMA = StructType([StructField("key", StringType()), StructField("value", StringType())])


def _plan(**kafka: str) -> tuple[Any, BatchSettings]:
    options = {"kafka.bootstrap.servers": "fake:9001", "topic": "t"}
    options.update({f"kafka.{k.replace('_', '.')}": v for k, v in kafka.items()})
    plan = plan_write(options, SCHEMA)
    settings = batch_settings(plan)
    assert isinstance(settings, BatchSettings), settings
    return plan, settings


def _arrow(values: list[str], keys: Sequence[str | None] | None = None) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(keys or [None] * len(values), pa.string()), pa.array(values, pa.string())],
        names=["key", "value"],
    )


def _keyed_rows(n: int, width: int = 20) -> tuple[list[str], list[str]]:
    keys = [f"k{i % 7}" for i in range(n)]
    return keys, [f"v{i:06d}-" + "x" * width for i in range(n)]


def _write(
    rows: tuple[list[str], list[str]], chunk: int, **kafka: str
) -> tuple[FakeCluster, batch_write.WriteResult]:
    plan, settings = _plan(**kafka)
    keys, values = rows

    def batches() -> Iterator[pa.RecordBatch]:
        for at in range(0, len(values), chunk):
            yield _arrow(values[at : at + chunk], keys[at : at + chunk])

    result = batch_write.write_rows(plan, settings, batches())
    return FakeCluster.instance, result


def _expected(
    rows: tuple[list[str], list[str]], partition: int, partitions: int = 2
) -> list[bytes]:
    from spark_connector.records.partitioner import partition_for_key

    keys, values = rows
    return [
        v.encode()
        for k, v in zip(keys, values, strict=True)
        if partition_for_key(k.encode(), partitions) == partition
    ]


def _check_log(cluster: FakeCluster, rows: tuple[list[str], list[str]]) -> None:
    """Every row once, each partition in write order; sequences consecutive from 0."""
    for p in range(cluster.partitions):
        assert cluster.values("t", p) == _expected(rows, p), f"partition {p}"
        seqs = cluster.sequences("t", p)
        assert [s for s, _ in seqs] == list(
            itertools.accumulate([0] + [n for _, n in seqs[:-1]])
        ), seqs


# --- pipelining and merging ----------------------------------------------------------------------


def test_up_to_five_batches_in_flight_per_partition_in_order() -> None:
    rows = _keyed_rows(6000)
    cluster, result = _write(rows, 500, batch_size="4000", queue_buffering_max_kbytes="64")
    assert result.rows == 6000
    _check_log(cluster, rows)
    assert max(cluster.max_in_flight.values()) == 5
    assert cluster.max_requests == 5
    assert all(code == 0 for _, code in cluster.answers)


def test_tiny_arrow_batches_are_merged_up_to_batch_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arrow batches of 3 rows (not concatenated first): while a partition's requests are in
    flight its records pile up in one batch, so there are far fewer batches than Arrow
    batches, none over batch.size."""
    monkeypatch.setattr(batch_write, "COALESCE_ROWS", 1)
    rows = _keyed_rows(3000)
    cluster, result = _write(rows, 3, batch_size="16384")
    assert result.rows == 3000
    _check_log(cluster, rows)
    stored = [b for p in range(2) for b in cluster.log("t", p).batches]
    assert len(stored) < 3000 // 3 // 10, len(stored)
    assert max(len(b.data) - 61 for b in stored) <= 16384
    assert max(b.records for b in stored) > 100


def test_merged_batch_keeps_first_sequence_and_later_timestamps() -> None:
    producer = BatchProducer("fake:9001", batch_bytes=10_000)
    cluster = FakeCluster.instance
    cluster.leaders[("t", 0)] = 3  # unknown broker: nothing is sent, the batch stays open
    at = 1_700_000_000_000
    used = 0
    for i, now in enumerate((at, at + 5, at + 9)):
        delta, ts_delta, room = producer.open_batch("t", 0, now)
        assert (delta, ts_delta, room) == (2 * i, now - at, 10_000 - used)
        section, taken = encode_records(
            None,
            _spec([f"v{2 * i}", f"v{2 * i + 1}"]),
            None,
            0,
            2,
            room,
            None,
            delta,
            ts_delta,
        )
        assert taken == 2
        used += len(section)
        producer.append_records("t", 0, section, 2, now)
    assert producer.next_sequence("t", 0) == 6
    cluster.leaders[("t", 0)] = 1
    cluster.release_all = True
    assert producer.flush() == 6
    (kept,) = cluster.log("t", 0).batches
    (header,) = list(iter_batches(kept.data))
    assert (kept.sequence, kept.records) == (0, 6)
    assert (header.base_timestamp, header.max_timestamp) == (at, at + 9)
    assert header.last_offset_delta == 5
    assert cluster.values("t", 0) == [f"v{i}".encode() for i in range(6)]
    assert producer.written() == {("t", 0): (0, 6)}
    producer.close()


def _spec(values: list[str]) -> Any:
    from spark_connector.records.encoder import column_spec

    return column_spec(pa.array(values, pa.string()))


def test_record_larger_than_the_room_left_starts_a_new_batch() -> None:
    rows = (
        [f"k{i}" for i in range(40)],
        [("y" * 900 if i % 9 == 4 else f"v{i}") for i in range(40)],
    )
    cluster, result = _write(rows, 1, batch_size="1000")
    assert result.rows == 40
    _check_log(cluster, rows)
    # every stored batch within batch.size, unless it is one record alone
    for p in range(2):
        for b in cluster.log("t", p).batches:
            assert len(b.data) - 61 <= 1000 or b.records == 1


def test_without_idempotence_one_request_in_flight() -> None:
    rows = _keyed_rows(2000)
    cluster, result = _write(rows, 100, acks="1", batch_size="2000")
    assert result.rows == 2000
    assert cluster.max_requests == 1
    for p in range(2):
        assert cluster.values("t", p) == _expected(rows, p)


# --- retries -----------------------------------------------------------------------------------


def _once(pred: Callable[[Arrival], bool], action: str) -> Fault:
    fired: list[bool] = []

    def fault(a: Arrival) -> str | None:
        if not fired and pred(a):
            fired.append(True)
            return action
        return None

    return fault


def _write_with(
    faults: list[Fault], rows: tuple[list[str], list[str]], **kafka: str
) -> FakeCluster:
    """Write ``rows`` with ``faults``; the producer's clock runs 1 ms per reading, so that
    ``retry.backoff.ms`` (1) passes while batches are still in flight."""
    FakeCluster.next_faults = faults
    kafka.setdefault("retry_backoff_ms", "1")
    ticks = itertools.count()
    CLOCK.monotonic = lambda: next(ticks) / 1000
    try:
        cluster, result = _write(rows, 200, batch_size="3000", **kafka)
    finally:
        CLOCK.monotonic = time.monotonic
    assert result.rows == len(rows[1])
    return cluster


def test_retriable_error_resends_the_batches_after_it_in_order() -> None:
    """The third batch of partition 0 is refused (NOT_LEADER_OR_FOLLOWER, not written):
    the batches in flight behind it get OUT_OF_ORDER_SEQUENCE_NUMBER and all are sent again
    in order with their own sequence numbers."""
    rows = _keyed_rows(4000)
    sent: dict[int, bytes] = {}

    def remember(a: Arrival) -> str | None:
        if a.partition == 0:
            assert sent.setdefault(a.sequence, a.data) == a.data, "a batch changed on retry"
        return None

    cluster = _write_with(
        [
            remember,
            _once(lambda a: a.partition == 0 and a.nth == 2, f"refuse:{NOT_LEADER}"),
        ],
        rows,
    )
    _check_log(cluster, rows)
    codes = [code for key, code in cluster.answers if key == ("t", 0)]
    assert codes[2] == NOT_LEADER
    assert OUT_OF_ORDER in codes[3:8], codes[:10]
    assert max(cluster.max_in_flight.values()) == 5


def test_batch_written_but_answered_with_timeout_is_not_written_twice() -> None:
    """REQUEST_TIMED_OUT after the append: the batches behind it succeed; sent again, the
    batch is a duplicate the broker answers with its first offset."""
    rows = _keyed_rows(4000)
    cluster = _write_with(
        [_once(lambda a: a.partition == 1 and a.nth == 1, f"answer:{REQUEST_TIMED_OUT}")], rows
    )
    _check_log(cluster, rows)
    assert (("t", 1), REQUEST_TIMED_OUT) in cluster.answers


def test_lost_connection_resends_everything_in_flight_once() -> None:
    rows = _keyed_rows(4000)
    cluster = _write_with([_once(lambda a: a.partition == 0 and a.nth == 3, "drop")], rows)
    _check_log(cluster, rows)
    assert len(cluster.connections) >= 2  # a new connection after the lost one


def test_leader_moves_while_batches_are_in_flight() -> None:
    rows = _keyed_rows(4000)

    def move(a: Arrival) -> str | None:
        if a.partition == 0 and a.nth == 4:
            FakeCluster.instance.leaders[("t", 0)] = 2
        return None

    cluster = _write_with([move], rows)
    _check_log(cluster, rows)
    assert (("t", 0), NOT_LEADER) in cluster.answers


def test_leader_moves_while_batches_of_another_partition_are_in_flight() -> None:
    """Partition 1's error makes the producer look the leaders up while partition 0 has
    batches in flight to its old leader: partition 0 waits for their answers before it
    sends to the new one."""
    rows = _keyed_rows(4000)

    def move(a: Arrival) -> str | None:
        if a.partition == 1 and a.nth == 3:
            FakeCluster.instance.leaders[("t", 0)] = 2
            return f"refuse:{REQUEST_TIMED_OUT}"
        return None

    cluster = _write_with([move], rows)
    _check_log(cluster, rows)


def test_out_of_order_on_the_first_unacknowledged_batch_fails() -> None:
    """The broker lost the producer's sequence (OUT_OF_ORDER_SEQUENCE_NUMBER on the batch
    that should be next): the write fails, naming the partition and the error."""

    def forget(a: Arrival) -> str | None:
        if a.partition == 0 and a.nth == 3:
            FakeCluster.instance.log("t", 0).next_sequence += 1000
        return None

    with pytest.raises(
        batch_write.DeliveryError,
        match=r"t\[0\]: the broker refused .*OUT_OF_ORDER_SEQUENCE_NUMBER",
    ):
        _write_with([forget], _keyed_rows(4000))


def test_transactional_partitions_join_before_their_first_batch() -> None:
    rows = _keyed_rows(3000)
    plan, settings = _plan(batch_size="3000")
    keys, values = rows
    batches = (_arrow(values[a : a + 100], keys[a : a + 100]) for a in range(0, 3000, 100))
    result = batch_write.write_rows(
        plan, settings, batches, batch_write.Transactional("txn-1", 60_000)
    )
    cluster = FakeCluster.instance
    assert result.rows == 3000 and (result.producer_id, result.producer_epoch) == (PID, EPOCH)
    _check_log(cluster, rows)
    added: set[tuple[str, int]] = set()
    for event in cluster.events:
        if event[0] == "add":
            added.update(event[1])
        else:
            assert event[1] in added, f"{event[1]} produced to before AddPartitionsToTxn"
    for p in range(2):
        (header, *_) = list(iter_batches(cluster.log("t", p).batches[0].data))
        assert header.transactional
    assert all(n == 0 for n in cluster.in_flight.values())  # flush left nothing in flight
    assert result.outputs == {("t", p): (0, len(_expected(rows, p))) for p in range(2)}


@pytest.mark.parametrize(
    ("delta_base", "ts_delta"), [(0, 0), (1, 0), (63, 1), (64, 300_000), (2**31 - 5, 7)]
)
def test_records_appended_to_a_batch_encode_as_the_reference(
    delta_base: int, ts_delta: int
) -> None:
    """The native encoder and the pure-Python reference agree on records that continue a
    batch (offset deltas from ``delta_base``, a timestamp delta), varint widths included."""
    from spark_connector.records import encoder as record_encoder

    if not record_encoder.NATIVE:
        pytest.skip("the native encoder is not built")
    from spark_connector.records import _native_batches

    values = record_encoder.column_spec(pa.array(["a", None, "", "é" * 70, "z"], pa.string()))
    keys = record_encoder.column_spec(pa.array([None, "k", "kk", None, "k" * 200], pa.string()))
    for max_bytes in (1, 150, 10_000):
        args = (keys, values, None, 0, 5, max_bytes, None, delta_base, ts_delta)
        expected = record_encoder.encode_records_py(*args)
        assert _native_batches.encode_records(*args) == expected
        assert record_encoder.encode_records(*args) == expected
    with pytest.raises(ValueError, match="delta_base"):
        _native_batches.encode_records(keys, values, None, 0, 5, 100, None, -1, 0)


def test_small_arrow_batches_are_concatenated_in_order() -> None:
    sizes = [0, 3, 5000, 1, 2, 0, 4000, 100, 5000, 7]
    batches = [_arrow([f"v{n}-{i}" for i in range(n)]) for n in sizes]
    out = list(batch_write._coalesced(iter(batches)))
    assert [b.num_rows for b in out] == [5003, 4103, 5000, 7]
    got = [v for b in out for v in b.column(1).to_pylist()]
    assert got == [v for b in batches for v in b.column(1).to_pylist()]
