"""A broker restarted faster than its old ZooKeeper session expires listens before the
controller has told it anything: it must not tell clients that existing topics do not
exist (found by the fault harness: librdkafka then failed every produce to the topic at
once with "Unknown topic")."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from broker.cli.cluster_process import broker_command, spawn
from broker.protocol.errors import ErrorCode
from tests.harness.processes import kill_pid
from tests.harness.raw import api_versions_ok

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@contextlib.contextmanager
def _restarted_before_its_session_expired(cluster: Any) -> Iterator[float]:
    """SIGKILL broker 1 and start it again at once: its old ephemeral znode lives until the
    session times out, and the new process listens meanwhile. Yields a deadline 60 s on;
    the new process is killed on the way out."""
    host, port = cluster.host, cluster.port
    config = cluster.dir / "broker-1" / "server.properties"
    cluster.stop_broker(hard=True)
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = spawn(
            broker_command(config), cluster.dir / "broker-1" / "restart.out", config.parent
        )
        deadline = time.monotonic() + 60
        while not api_versions_ok(host, port, timeout_s=1.0):
            assert proc.poll() is None, "the restarted broker exited"
            assert time.monotonic() < deadline, "the restarted broker never listened"
            time.sleep(0.1)
        yield deadline
    finally:
        if proc is not None:
            kill_pid(proc.pid)


def _broker_epoch(cluster: Any) -> int:
    """The czxid of ``/brokers/ids/1`` (broker 1's epoch)."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=str(cluster.json["zookeeper"]), timeout=10.0)
    zk.start(timeout=15)
    try:
        stat = zk.exists("/brokers/ids/1")
        assert stat is not None, "broker 1 is not registered"
        return int(stat.czxid)
    finally:
        zk.stop()
        zk.close()


@pytest.mark.parametrize("auto_create", ["false", "true"])
def test_a_restarted_broker_never_calls_an_existing_topic_unknown(
    cluster_factory: Any, topic_name: str, auto_create: str
) -> None:
    """Before the fix: UNKNOWN_TOPIC_OR_PARTITION without auto-creation, and with it an
    attempt to create the topic again, answered INVALID_REPLICATION_FACTOR."""
    cluster = cluster_factory(
        zookeeper_session_timeout_ms=8000, auto_create_topics_enable=auto_create
    )
    cluster.create_topic(topic_name, 2)
    with _restarted_before_its_session_expired(cluster) as deadline:
        codes = set()
        while time.monotonic() < deadline:
            response = cluster.raw_metadata(topics=[topic_name], timeout_s=30)
            (topic,) = response.topics
            codes.add(int(topic.error_code))
            if int(topic.error_code) == ErrorCode.none:
                break
        # only "ask again" before the controller's view arrives, then the topic
        assert codes <= {int(ErrorCode.none), int(ErrorCode.leader_not_available)}, codes
        assert int(ErrorCode.none) in codes, f"the topic never came back: {codes}"


def test_a_restarted_broker_ignores_controller_requests_for_its_previous_instance(
    cluster_factory: Any, topic_name: str
) -> None:
    """KIP-380's broker epoch. A broker restarted before its old session expired listens
    while the controller still believes the old instance is alive; a LeaderAndIsr meant
    for the old instance must not make the new one (whose recovery may have cut records
    off) a leader. Kafka does not process requests before registering and then refuses an
    older broker epoch with STALE_BROKER_EPOCH. Before the fix the new instance took it."""
    from kio.serial import entity_reader
    from kio.static.primitive import i8, i32, i64

    from broker.protocol import interbroker as ib
    from tests.harness.raw import RawConnection, _skip_tagged_fields

    cluster = cluster_factory(zookeeper_session_timeout_ms=6000)
    cluster.create_topic(topic_name, 1)
    old_epoch = _broker_epoch(cluster)
    controller_epoch = cluster.controller_epoch()
    host, port = cluster.host, cluster.port
    with _restarted_before_its_session_expired(cluster) as deadline:
        request = ib.LeaderAndIsrRequest(
            controller_id=1,
            controller_epoch=i32(controller_epoch),
            broker_epoch=i64(old_epoch),
            type_=i8(0),
            topic_states=(
                ib.LeaderAndIsrTopicState(
                    topic_name=topic_name,
                    topic_id=None,
                    partition_states=(
                        ib.LeaderAndIsrPartitionState(
                            partition_index=i32(0),
                            controller_epoch=i32(controller_epoch),
                            leader=1,
                            leader_epoch=i32(1000),
                            isr=(1,),
                            partition_epoch=i32(1000),
                            replicas=(1,),
                            is_new=False,
                        ),
                    ),
                ),
            ),
            live_leaders=(ib.LeaderAndIsrLiveLeader(broker_id=1, host_name=host, port=i32(port)),),
        )
        with RawConnection(host, port, timeout_s=60) as conn:
            conn.send_request(request)
            frame = conn.recv_frame()
        response, _ = entity_reader(ib.LeaderAndIsrResponse)(frame, _skip_tagged_fields(frame, 4))
        assert int(response.error_code) == ErrorCode.stale_broker_epoch
        # the new instance registered (a newer epoch) and leads at the controller's epoch
        assert _broker_epoch(cluster) > old_epoch
        while time.monotonic() < deadline:
            (topic,) = cluster.raw_metadata(topics=[topic_name], timeout_s=30).topics
            if int(topic.error_code) == ErrorCode.none:
                break
            time.sleep(0.2)
        assert int(topic.error_code) == ErrorCode.none
