"""Incremental fetch sessions (KIP-227) on a real broker, spoken raw (Fetch v12): a full
request opens a session; incremental requests name only what changed and get back only the
partitions with news; stale epochs and unknown sessions get Kafka's errors; the final epoch
closes the session. Then the clients that use sessions (Kafka's Java consumer through
``kafka-console-consumer``) against a 3-broker cluster whose followers replicate in sessions."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.harness.cluster import Cluster
from tests.harness.kafka_tools import kafka_tool_runner, ok

pytestmark = pytest.mark.integration

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71


def fetch(
    conn: Any,
    topic: str,
    session_id: int,
    epoch: int,
    partitions: dict[int, int],
    forget: tuple[int, ...] = (),
    max_wait_ms: int = 200,
) -> Any:
    from kio.schema.fetch.v12 import request as req
    from kio.schema.types import TopicName
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    topics = ()
    if partitions:
        topics = (
            req.FetchTopic(
                topic=TopicName(topic),
                partitions=tuple(
                    req.FetchPartition(
                        partition=i32(p),
                        current_leader_epoch=i32(-1),
                        fetch_offset=i64(offset),
                        last_fetched_epoch=i32(-1),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(1 << 20),
                    )
                    for p, offset in partitions.items()
                ),
            ),
        )
    forgotten = ()
    if forget:
        forgotten = (
            req.ForgottenTopic(topic=TopicName(topic), partitions=tuple(i32(p) for p in forget)),
        )
    return conn.request(
        req.FetchRequest(
            replica_id=i32(-1),  # type: ignore[arg-type]
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
            min_bytes=i32(1),
            max_bytes=i32(50 << 20),
            isolation_level=i8(0),
            session_id=i32(session_id),
            session_epoch=i32(epoch),
            topics=topics,
            forgotten_topics_data=forgotten,
        )
    )


def answered(response: Any) -> dict[int, tuple[int, int, int]]:
    """partition -> (error, high watermark, bytes of records) of each partition answered."""
    return {
        int(p.partition_index): (int(p.error_code), int(p.high_watermark), len(p.records or b""))
        for t in response.responses
        for p in t.partitions
    }


def produce(cluster: Cluster, topic: str, partition: int, values: int | list[str]) -> None:
    if isinstance(values, int):
        values = [f"v{i}" for i in range(values)]
    p = Producer(cluster.conf({"acks": "all"}))
    for v in values:
        p.produce(topic, v.encode(), partition=partition)
    assert p.flush(30) == 0


def test_a_session_answers_only_what_changed(cluster: Cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 3)
    produce(cluster, topic_name, 0, 5)
    with cluster.raw() as conn:
        full = fetch(conn, topic_name, 0, 0, {0: 0, 1: 0, 2: 0})
        assert int(full.error_code) == 0 and int(full.session_id) != 0
        sid = int(full.session_id)
        got = answered(full)
        assert set(got) == {0, 1, 2} and got[0][:2] == (0, 5) and got[0][2] > 0
        assert got[1] == (0, 0, 0) and got[2] == (0, 0, 0)

        # caught up on 0, nothing new anywhere: an empty answer after the long poll
        idle = fetch(conn, topic_name, sid, 1, {0: 5})
        assert int(idle.error_code) == 0 and int(idle.session_id) == sid
        assert answered(idle) == {}

        # new records in partition 2 only: the session still fetches it, and only it answers
        produce(cluster, topic_name, 2, 3)
        news = fetch(conn, topic_name, sid, 2, {})
        got = answered(news)
        assert set(got) == {2} and got[2][:2] == (0, 3) and got[2][2] > 0

        # a stale epoch, an unknown session
        stale = fetch(conn, topic_name, sid, 2, {})
        assert int(stale.error_code) == INVALID_FETCH_SESSION_EPOCH and answered(stale) == {}
        unknown = fetch(conn, topic_name, sid + 1, 1, {})
        assert int(unknown.error_code) == FETCH_SESSION_ID_NOT_FOUND

        # forgetting partition 2 and new records there: not answered any more
        quiet = fetch(conn, topic_name, sid, 3, {2: 3}, forget=(2,))
        assert answered(quiet) == {}
        produce(cluster, topic_name, 2, 1)
        assert answered(fetch(conn, topic_name, sid, 4, {})) == {}

        # the final epoch closes the session: a sessionless full fetch
        final = fetch(conn, topic_name, sid, -1, {2: 3})
        assert int(final.session_id) == 0 and answered(final)[2][:2] == (0, 4)
        gone = fetch(conn, topic_name, sid, 5, {})
        assert int(gone.error_code) == FETCH_SESSION_ID_NOT_FOUND


@pytest.fixture(scope="module")
def kafka_tool(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return kafka_tool_runner(tmp_path_factory.mktemp("kafka-tools"))


@pytest.mark.timeout(300)
def test_followers_and_java_consumers_in_sessions_lose_nothing(
    cluster_factory: Any, topic_name: str, kafka_tool: Any
) -> None:
    """30 partitions, RF=3, acks=all, written in rounds that each touch 3 partitions, with
    idle gaps longer than ``replica.fetch.wait.max.ms`` between (so the followers' sessions
    go incremental, mostly empty). Every ISR stays whole; then the leader of partition 0 is
    SIGKILLed and Kafka's console consumer (a Java consumer, in its own incremental fetch
    session) reads every acknowledged record back from the survivors."""
    cluster = cluster_factory(brokers=3)
    cluster.create_topic(topic_name, 30, replication_factor=3)
    cluster.wait_isr_complete(topic_name)
    expected: set[str] = set()
    for round_ in range(6):
        for partition in (round_, round_ + 10, round_ + 20):
            values = [f"v-{partition}-{i}" for i in range(50)]
            produce(cluster, topic_name, partition, values)
            expected.update(values)
        time.sleep(0.7)
    views = cluster.wait_isr_complete(topic_name)
    assert len(views) == 30
    victim = cluster.leader_of(topic_name, 0)
    survivor = next(b for b in cluster.broker_ids() if b != victim)
    cluster.stop_broker(hard=True, broker_id=victim)
    out = ok(
        kafka_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            "--bootstrap-server",
            cluster.broker_address(survivor),
            "--topic",
            topic_name,
            "--from-beginning",
            "--max-messages",
            str(len(expected)),
            "--timeout-ms",
            "60000",
            timeout_s=120,
        )
    )
    got = [line for line in out.splitlines() if line.startswith("v-")]
    assert len(got) == len(expected) and set(got) == expected
