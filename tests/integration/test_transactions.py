"""Transactions (KIP-98) with real clients against a 3-broker cluster, every topic RF=3:

* confluent-kafka (librdkafka): committed and aborted transactions across partitions, seen
  by read_committed and read_uncommitted consumers; the read_committed end offset (LSO);
  ``send_offsets_to_transaction`` with a consumer group (offsets appear with the commit,
  not after an abort); zombie fencing (a second producer with the same transactional id);
  a transaction left open is aborted by the coordinator after ``transaction.timeout.ms``
  and read_committed consumers move past it;
* kafka-python's transactional producer;
* the unmodified Kafka Java client 3.9 and 4.1 (jvm/TxnCheck.java);
* Kafka 3.9.1's ``kafka-transactions`` tool and ``millrace transactions`` (list, describe,
  describe-producers, abort of a hanging transaction written without a coordinator's
  knowledge).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.harness.kafka_tools import TOOLS, Tool, kafka_tool_runner, ok
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(
        {
            "zookeeper.session.timeout.ms": "6000",
            "transaction.state.log.num.partitions": "5",
            "offsets.topic.num.partitions": "5",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
            "group.initial.rebalance.delay.ms": "0",
            "min.insync.replicas": "2",
            "default.replication.factor": "3",
        },
        brokers=3,
    ),
]

ROOT = Path(__file__).resolve().parents[2]
JVM = ROOT / ".cache" / "jvm"


def _producer(cluster: Any, txn_id: str, **extra: Any) -> Producer:
    return Producer(cluster.conf({"transactional.id": txn_id, "linger.ms": 5, **extra}))


def _read(
    cluster: Any, topic: str, partitions: int, isolation: str, timeout_s: float = 30.0
) -> list[Any]:
    """Every record of ``topic`` a consumer with ``isolation`` sees up to its end offsets."""
    consumer = Consumer(
        cluster.conf(
            {
                "group.id": f"reader-{topic}-{isolation}",
                "isolation.level": isolation,
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Any] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            eof.discard(msg.partition())
            out.append(msg)
        assert len(eof) == partitions, f"{topic}: not read to the end within {timeout_s}s"
        return out
    finally:
        consumer.close()


def _lso(cluster: Any, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(cluster.conf({"group.id": "lso", "isolation.level": "read_committed"}))
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_commit_and_abort_seen_by_each_isolation_level(cluster: Any) -> None:
    topic = cluster.create_topic("txn-basic", 3, replication_factor=3)
    p = _producer(cluster, "txn-basic")
    p.init_transactions(60)
    expected_committed = set()
    for t in range(4):
        p.begin_transaction()
        for i in range(60):
            key = f"t{t}-{i}"
            p.produce(topic, key=key, value=b"commit" if t % 2 == 0 else b"abort", partition=i % 3)
            if t % 2 == 0:
                expected_committed.add(key)
        p.flush(30)
        if t % 2 == 0:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
    committed = _read(cluster, topic, 3, "read_committed")
    assert sorted(m.key().decode() for m in committed) == sorted(expected_committed)
    assert {m.value() for m in committed} == {b"commit"}
    everything = _read(cluster, topic, 3, "read_uncommitted")
    assert len(everything) == 240
    # 4 transactions x 20 records + one marker per transaction on each partition
    assert _lso(cluster, topic, 3) == [84, 84, 84]


def test_an_open_transaction_holds_back_read_committed(cluster: Any) -> None:
    topic = cluster.create_topic("txn-open", 1, replication_factor=3)
    plain = Producer(cluster.conf())
    plain.produce(topic, value=b"before")
    plain.flush(30)
    p = _producer(cluster, "txn-open")
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"pending")
    p.flush(30)
    plain.produce(topic, value=b"after")  # behind the open transaction
    plain.flush(30)
    assert _lso(cluster, topic, 1) == [1]
    assert [m.value() for m in _read(cluster, topic, 1, "read_committed")] == [b"before"]
    p.commit_transaction(60)
    wait_for(lambda: _lso(cluster, topic, 1) == [4], 30, "the LSO after the commit")
    values = [m.value() for m in _read(cluster, topic, 1, "read_committed")]
    assert values == [b"before", b"pending", b"after"]


def test_offsets_committed_in_the_transaction(cluster: Any) -> None:
    source = cluster.create_topic("txn-src", 2, replication_factor=3)
    sink = cluster.create_topic("txn-sink", 2, replication_factor=3)
    feed = Producer(cluster.conf())
    for i in range(40):
        feed.produce(source, key=str(i), value=b"x", partition=i % 2)
    feed.flush(30)
    group = "txn-copier"
    consumer = Consumer(
        cluster.conf(
            {
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
    )
    p = _producer(cluster, "txn-copier")
    p.init_transactions(60)
    try:
        consumer.assign([TopicPartition(source, 0, 0), TopicPartition(source, 1, 0)])
        batch: list[Any] = []
        deadline = time.monotonic() + 30
        while len(batch) < 40 and time.monotonic() < deadline:
            batch += [m for m in consumer.consume(100, 1.0) if m.error() is None]
        assert len(batch) == 40

        def positions() -> list[TopicPartition]:
            return [TopicPartition(source, 0, 20), TopicPartition(source, 1, 20)]

        # an aborted attempt: no output, no offsets
        p.begin_transaction()
        for m in batch:
            p.produce(sink, key=m.key(), value=b"aborted", partition=m.partition())
        p.send_offsets_to_transaction(positions(), consumer.consumer_group_metadata(), 30)
        p.abort_transaction(60)
        assert [tp.offset for tp in consumer.committed(positions(), 10)] == [-1001, -1001]
        # the committed attempt: output and offsets together
        p.begin_transaction()
        for m in batch:
            p.produce(sink, key=m.key(), value=b"copied", partition=m.partition())
        p.send_offsets_to_transaction(positions(), consumer.consumer_group_metadata(), 30)
        p.commit_transaction(60)
        wait_for(
            lambda: [tp.offset for tp in consumer.committed(positions(), 10)] == [20, 20],
            30,
            "the group's offsets after the commit",
        )
    finally:
        consumer.close()
    out = _read(cluster, sink, 2, "read_committed")
    assert sorted(int(m.key()) for m in out) == list(range(40))
    assert {m.value() for m in out} == {b"copied"}


def test_a_zombie_is_fenced(cluster: Any) -> None:
    topic = cluster.create_topic("txn-zombie", 1, replication_factor=3)
    zombie = _producer(cluster, "txn-zombie")
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(30)
    fresh = _producer(cluster, "txn-zombie")
    fresh.init_transactions(60)  # aborts the zombie's transaction, bumps the epoch
    fresh.begin_transaction()
    fresh.produce(topic, value=b"fresh")
    fresh.commit_transaction(60)
    with pytest.raises(KafkaException) as info:
        zombie.produce(topic, value=b"late")
        zombie.commit_transaction(30)
    error = info.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert [m.value() for m in _read(cluster, topic, 1, "read_committed")] == [b"fresh"]


def test_the_coordinator_aborts_a_timed_out_transaction(cluster: Any) -> None:
    topic = cluster.create_topic("txn-timeout", 1, replication_factor=3)
    hung = _producer(cluster, "txn-hung", **{"transaction.timeout.ms": 2000})
    hung.init_transactions(60)
    hung.begin_transaction()
    hung.produce(topic, value=b"hung")
    hung.flush(30)
    after = _producer(cluster, "txn-after")
    after.init_transactions(60)
    after.begin_transaction()
    after.produce(topic, value=b"after")
    after.commit_transaction(60)
    wait_for(lambda: _lso(cluster, topic, 1) == [4], 60, "the LSO past the aborted transaction")
    assert [m.value() for m in _read(cluster, topic, 1, "read_committed")] == [b"after"]
    with pytest.raises(KafkaException):
        hung.commit_transaction(30)  # its epoch was bumped by the coordinator's abort


def test_kafka_python_transactions(cluster: Any) -> None:
    from kafka import KafkaProducer

    topic = cluster.create_topic("txn-kafka-python", 2, replication_factor=3)
    p = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="txn-kp")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(20):
            p.send(topic, key=b"c%d" % i, value=b"commit", partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(20):
            p.send(topic, key=b"a%d" % i, value=b"abort", partition=i % 2)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    committed = _read(cluster, topic, 2, "read_committed")
    assert sorted(m.key() for m in committed) == sorted(b"c%d" % i for i in range(20))
    assert len(_read(cluster, topic, 2, "read_uncommitted")) == 40


def _java_classpath(major: str) -> str:
    deps = sorted(p for p in (JVM / "kafka-4").glob("*.jar") if "kafka-clients" not in p.name)
    clients = sorted((JVM / f"kafka-{major}").glob("kafka-clients-*.jar"))
    assert clients and deps, f"Kafka Java clients missing in {JVM}: run `make setup`"
    return ":".join(str(p) for p in [clients[0], *deps])


# the 3.9 client in make fault (13 s of make test's budget, issue 30); 4.x in make test
@pytest.mark.parametrize(
    "major", [pytest.param("3", marks=[pytest.mark.long, pytest.mark.fault]), "4"]
)
def test_java_client_transactions(cluster: Any, major: str) -> None:
    result = subprocess.run(
        [
            "java",
            "-cp",
            _java_classpath(major),
            str(ROOT / "jvm" / "TxnCheck.java"),
            cluster.bootstrap,
            f"java{major}",
            "200",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0 and "OK" in result.stdout, (
        f"Java client {major}.x transactions failed:\n{result.stdout}\n{result.stderr[-4000:]}"
    )


@pytest.fixture(scope="module")
def kafka_tool(tmp_path_factory: pytest.TempPathFactory) -> Tool:
    return kafka_tool_runner(tmp_path_factory.mktemp("kafka-transactions-tool"))


def _columns(text: str) -> list[list[str]]:
    return [line.split() for line in text.strip().splitlines()]


def test_transaction_tools_list_describe_and_abort_a_hanging_transaction(
    cluster: Any, kafka_tool: Tool
) -> None:
    topic = cluster.create_topic("txn-tools", 1, replication_factor=3)
    p = _producer(cluster, "txn-tools")
    p.init_transactions(60)
    p.begin_transaction()
    p.produce(topic, value=b"open")
    p.flush(30)
    tool = TOOLS + "TransactionsCommand"
    bs = ["--bootstrap-server", cluster.bootstrap]
    listed = _columns(ok(kafka_tool(tool, *bs, "list")))
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert next(r for r in listed if r[0] == "txn-tools")[::3] == ["txn-tools", "Ongoing"]
    described = _columns(ok(kafka_tool(tool, *bs, "describe", "--transactional-id", "txn-tools")))
    assert described[0][:5] == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
    ]
    assert described[1][1] == "txn-tools" and described[1][4] == "Ongoing"
    assert described[1][-1] == f"{topic}-0"
    producers = _columns(
        ok(kafka_tool(tool, *bs, "describe-producers", "--topic", topic, "--partition", "0"))
    )
    assert producers[0][0] == "ProducerId" and producers[1][-1] == "0"  # open at offset 0
    ours = _columns(cluster.cli("transactions", "--bootstrap-server", cluster.bootstrap, "list"))
    assert any(r[0] == "txn-tools" and r[-1] == "Ongoing" for r in ours[1:])
    ours = _columns(
        cluster.cli(
            "transactions",
            "--bootstrap-server",
            cluster.bootstrap,
            "describe-producers",
            "--topic",
            topic,
            "--partition",
            "0",
        )
    )
    assert ours[1][0] == producers[1][0] and ours[1][-1] == "0"
    p.commit_transaction(60)
    wait_for(lambda: _lso(cluster, topic, 1) == [2], 30, "the commit")

    # a hanging transaction: a transactional batch the coordinator never heard of (a
    # producer id/epoch written straight to the partition leader, verification off for it
    # because no transactional id is sent), aborted with the tool by its start offset
    from broker.protocol import records

    batch = records.encode_batch(
        [records.SimpleRecord(value=b"hanging", timestamp=int(time.time() * 1000))],
        producer_id=987654,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )
    leader = cluster.leader_of(topic, 0)
    with cluster.raw(broker_id=leader) as conn:
        response = conn.produce_v3(topic, 0, batch, acks=-1)
    assert int(response.error_code) == 0, response
    hanging_at = int(response.base_offset)
    assert _lso(cluster, topic, 1) == [hanging_at]
    hanging = _columns(
        ok(
            kafka_tool(
                tool, *bs, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0"
            )
        )
    )
    assert any(r[2] == "987654" for r in hanging[1:]), hanging
    ok(
        kafka_tool(
            tool,
            *bs,
            "abort",
            "--topic",
            topic,
            "--partition",
            "0",
            "--start-offset",
            str(hanging_at),
        )
    )
    wait_for(lambda: _lso(cluster, topic, 1) == [hanging_at + 2], 30, "the LSO after the abort")
    values = [m.value() for m in _read(cluster, topic, 1, "read_committed")]
    assert values == [b"open"]


def test_dump_log_shows_markers_and_kafka_reads_our_txnindex(
    cluster: Any, kafka_tool: Tool
) -> None:
    topic = cluster.create_topic("txn-dump", 1, replication_factor=3)
    p = _producer(cluster, "txn-dump")
    p.init_transactions(60)
    for commit in (False, True):
        p.begin_transaction()
        p.produce(topic, value=b"v")
        p.flush(30)
        p.commit_transaction(60) if commit else p.abort_transaction(60)
    leader = cluster.leader_of(topic, 0)
    wait_for(lambda: _lso(cluster, topic, 1) == [4], 30, "both transactions decided")
    segment = cluster.segment_files(topic, 0, leader)[0]
    txnindex = segment.with_suffix(".txnindex")
    assert txnindex.exists()
    ours = cluster.cli("dump-log", "--files", str(segment), str(txnindex), "--print-data-log")
    assert "isTransactional: true" in ours
    assert "endTxnMarker: ABORT coordinatorEpoch:" in ours
    assert "endTxnMarker: COMMIT coordinatorEpoch:" in ours
    theirs = ok(kafka_tool("kafka.tools.DumpLogSegments", "--files", str(txnindex)))
    entry = [line for line in theirs.splitlines() if "producerId" in line]
    assert len(entry) == 1, theirs
    assert "firstOffset: 0 lastOffset: 1 lastStableOffset: 2" in entry[0], entry
    assert entry[0].split("producerId: ")[1].split()[0] in ours
