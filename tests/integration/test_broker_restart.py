"""A broker restarted faster than its old ZooKeeper session expires listens before the
controller has told it anything: it must not tell clients that existing topics do not
exist (found by the fault harness: librdkafka then failed every produce to the topic at
once with "Unknown topic")."""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest

from broker.cli.cluster_process import broker_command, spawn
from broker.protocol.errors import ErrorCode
from tests.harness.processes import kill_pid
from tests.harness.raw import api_versions_ok

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


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
    host, port = cluster.host, cluster.port
    config = cluster.dir / "broker-1" / "server.properties"
    cluster.stop_broker(hard=True)
    proc: subprocess.Popen[bytes] | None = None
    try:
        # the old instance's ephemeral znode lives ~8 s more: the new one listens meanwhile
        proc = spawn(
            broker_command(config), cluster.dir / "broker-1" / "restart.out", config.parent
        )
        deadline = time.monotonic() + 60
        while not api_versions_ok(host, port, timeout_s=1.0):
            assert proc.poll() is None, "the restarted broker exited"
            assert time.monotonic() < deadline, "the restarted broker never listened"
            time.sleep(0.1)
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
    finally:
        if proc is not None:
            kill_pid(proc.pid)
