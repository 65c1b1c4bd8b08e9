"""Client quotas on a real broker, with clients nobody here wrote: quotas set and shown with
Kafka 3.9's ``kafka-configs.sh`` (``kafka.admin.ConfigCommand``: AlterClientQuotas,
DescribeClientQuotas, and DescribeUserScramCredentials for the user view) or a raw
AlterClientQuotas; librdkafka producers and consumers held to ``producer_byte_rate`` and
``consumer_byte_rate`` (the rate they achieve once past the first windows' burst, and the
throttle events librdkafka reports); a SCRAM user's quota on a SASL cluster, stored beside
its credentials.

Rates are checked with generous bounds: this is a behaviour test, not a benchmark.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.harness.cluster import Cluster
from tests.harness.kafka_tools import Tool, kafka_tool_runner, ok
from tests.harness.raw import RawConnection

# Rates over 3 windows of 1 s (Kafka's default is 11): a client first gets a burst of
# (windows - 1) seconds' worth of its quota, then its rate is held to the quota once the
# burst's window has expired; with 3 windows that is after 3 s instead of 11 s.
WINDOWS = 3
pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(quota_window_num=WINDOWS),
]

CONFIG_COMMAND = "kafka.admin.ConfigCommand"
QUOTA = 100_000  # bytes per second
MEASURE_FROM_S = 3.5  # past the burst and its window
MEASURE_TO_S = 7.5
CLUSTER_AUTHORIZATION_FAILED = 31


@pytest.fixture(scope="module")
def tool(tmp_path_factory: pytest.TempPathFactory) -> Tool:
    return kafka_tool_runner(tmp_path_factory.mktemp("kafka-configs"))


def configs(tool: Tool, cluster: Cluster, *args: str, command_config: str | None = None) -> str:
    extra = ["--command-config", command_config] if command_config else []
    return ok(tool(CONFIG_COMMAND, "--bootstrap-server", cluster.bootstrap, *extra, *args))


def zk_config(cluster: Cluster, path: str) -> dict[str, str] | None:
    data = cluster.zk_get(path)
    if data is None:
        return None
    obj = json.loads(data) if data else {}
    assert obj.get("version", 1) == 1
    return dict(obj.get("config") or {})


def alter_quota(cluster: Cluster, entity: dict[str, str | None], **values: float | None) -> None:
    """AlterClientQuotas v1, raw (confluent-kafka has no client-quota admin API)."""
    from kio.schema.alter_client_quotas.v1 import request as req

    request = req.AlterClientQuotasRequest(
        entries=(
            req.EntryData(
                entity=tuple(
                    req.EntityData(entity_type=k, entity_name=v) for k, v in entity.items()
                ),
                ops=tuple(
                    req.OpData(key=k, value=float(v or 0.0), remove=v is None)
                    for k, v in values.items()
                ),
            ),
        ),
        validate_only=False,
    )
    with cluster.raw() as conn:
        response = conn.request(request)
    assert [int(e.error_code) for e in response.entries] == [0], response


def steady_rate(events: list[tuple[float, int]], start: float) -> float:
    """Bytes per second between MEASURE_FROM_S and MEASURE_TO_S after ``start``."""
    window = [n for t, n in events if MEASURE_FROM_S <= t - start < MEASURE_TO_S]
    return sum(window) / (MEASURE_TO_S - MEASURE_FROM_S)


# ------------------------------------------------------------------ kafka-configs.sh


def test_kafka_configs_alters_and_describes_client_and_user_quotas(
    cluster: Cluster, tool: Tool
) -> None:
    configs(
        tool,
        cluster,
        "--alter",
        "--add-config",
        "producer_byte_rate=1024,request_percentage=200",
        "--entity-type",
        "clients",
        "--entity-name",
        "app-1",
    )
    configs(
        tool,
        cluster,
        "--alter",
        "--add-config",
        "consumer_byte_rate=4096",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    assert zk_config(cluster, "/config/clients/app-1") == {
        "producer_byte_rate": "1024",
        "request_percentage": "200.0",
    }
    assert zk_config(cluster, "/config/clients/<default>") == {"consumer_byte_rate": "4096"}
    out = configs(tool, cluster, "--describe", "--entity-type", "clients")
    assert "Quota configs for client-id 'app-1' are " in out, out
    assert "producer_byte_rate=1024.0" in out and "request_percentage=200.0" in out, out
    assert "Quota configs for the default client-id are consumer_byte_rate=4096.0" in out, out
    out = configs(tool, cluster, "--describe", "--entity-type", "clients", "--entity-name", "app-1")
    assert "app-1" in out and "default" not in out, out

    # users, the default user, a user's client, the default user's default client
    configs(
        tool,
        cluster,
        "--alter",
        "--add-config",
        "producer_byte_rate=2048",
        "--entity-type",
        "users",
        "--entity-name",
        "bob",
    )
    configs(
        tool,
        cluster,
        "--alter",
        "--add-config",
        "consumer_byte_rate=300",
        "--entity-type",
        "users",
        "--entity-name",
        "bob",
        "--entity-type",
        "clients",
        "--entity-name",
        "app-1",
    )
    configs(
        tool,
        cluster,
        "--alter",
        "--add-config",
        "request_percentage=50",
        "--entity-type",
        "users",
        "--entity-default",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    assert zk_config(cluster, "/config/users/bob") == {"producer_byte_rate": "2048"}
    assert zk_config(cluster, "/config/users/bob/clients/app-1") == {"consumer_byte_rate": "300"}
    assert zk_config(cluster, "/config/users/<default>/clients/<default>") == {
        "request_percentage": "50.0"
    }
    out = configs(tool, cluster, "--describe", "--entity-type", "users", "--entity-name", "bob")
    assert "Quota configs for user-principal 'bob' are producer_byte_rate=2048.0" in out, out
    assert "client-id" not in out, out  # strict: only the user entity itself
    out = configs(
        tool,
        cluster,
        "--describe",
        "--entity-type",
        "users",
        "--entity-type",
        "clients",
    )
    assert (
        "Quota configs for user-principal 'bob', client-id 'app-1' are consumer_byte_rate=300.0"
        in out
    ), out
    assert (
        "Quota configs for the default user-principal, the default client-id are "
        "request_percentage=50.0" in out
    ), out

    # every change was announced as Kafka does, for the other brokers to follow
    notices = _notices(cluster)
    for path in ("clients/app-1", "clients/<default>", "users/bob", "users/bob/clients/app-1"):
        assert path in notices, notices

    # deleting a key keeps the others; a key that is not set is refused by the tool
    configs(
        tool,
        cluster,
        "--alter",
        "--delete-config",
        "request_percentage",
        "--entity-type",
        "clients",
        "--entity-name",
        "app-1",
    )
    assert zk_config(cluster, "/config/clients/app-1") == {"producer_byte_rate": "1024"}
    bad = tool(
        CONFIG_COMMAND,
        "--bootstrap-server",
        cluster.bootstrap,
        "--alter",
        "--add-config",
        "producer_byte_rate=1.5",
        "--entity-type",
        "clients",
        "--entity-name",
        "app-1",
    )
    assert bad.returncode != 0
    assert "must be a LONG value" in bad.stdout + bad.stderr, bad.stdout + bad.stderr
    assert zk_config(cluster, "/config/clients/app-1") == {"producer_byte_rate": "1024"}

    # the defaults would apply to every later test's clients: removed (raw, no JVM)
    alter_quota(cluster, {"user": None, "client-id": None}, request_percentage=None)
    alter_quota(cluster, {"client-id": None}, consumer_byte_rate=None)
    assert zk_config(cluster, "/config/users/<default>/clients/<default>") == {}
    out = configs(tool, cluster, "--describe", "--entity-type", "clients", "--entity-default")
    assert "Quota configs" not in out, out


def _notices(cluster: Cluster) -> set[str]:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=str(cluster.json["zookeeper"]), timeout=10.0)
    zk.start(timeout=15)
    try:
        out = set()
        for name in zk.get_children("/config/changes"):
            data, _ = zk.get(f"/config/changes/{name}")
            notice = json.loads(data)
            assert notice["version"] == 2
            out.add(notice["entity_path"])
        return out
    finally:
        zk.stop()
        zk.close()


# ------------------------------------------------------------------ enforcement


def _produce_for(
    conf: dict[str, Any], topic: str, seconds: float, value: bytes
) -> tuple[list[tuple[float, int]], list[float], float]:
    """Produce as fast as the client is let for ``seconds``; (delivery times and sizes,
    throttle times librdkafka reported, start)."""
    from confluent_kafka import Producer

    delivered: list[tuple[float, int]] = []
    throttles: list[float] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))

    producer = Producer(
        {
            **conf,
            "linger.ms": 5,
            "batch.size": 16384,
            "queue.buffering.max.messages": 2000,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.purge(in_queue=True)
    producer.flush(15)
    return delivered, throttles, start


def test_producer_byte_rate_of_a_client_id_holds_librdkafka_to_the_quota(
    cluster: Cluster, topic_name: str
) -> None:
    cluster.create_topic(topic_name)
    alter_quota(cluster, {"client-id": "slow-producer"}, producer_byte_rate=QUOTA)
    delivered, throttles, start = _produce_for(
        cluster.conf({"client.id": "slow-producer"}), topic_name, MEASURE_TO_S, b"x" * 1000
    )
    rate = steady_rate(delivered, start)
    assert 0.4 * QUOTA <= rate <= 1.6 * QUOTA, (rate, len(delivered))
    assert throttles and max(throttles) > 0, throttles
    # another client id is not held back
    fast, _, _ = _produce_for(
        cluster.conf({"client.id": "fast-producer"}), topic_name, 1.5, b"x" * 1000
    )
    assert sum(n for _, n in fast) / 1.5 > 5 * QUOTA, len(fast)


def test_consumer_byte_rate_of_a_client_id_holds_librdkafka_to_the_quota(
    cluster: Cluster, topic_name: str
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster.create_topic(topic_name)
    # batches of 16 KB: a fetch is cut to a quota window's worth, but returns at least one
    # whole batch, so batches must be smaller than that window for the quota to be reachable
    producer = Producer(cluster.conf({"linger.ms": 5, "batch.size": 16384}))
    value = b"y" * 1000
    for _ in range(1500):  # 1.5 MB: more than the burst and MEASURE_TO_S at the quota
        producer.produce(topic_name, value)
        producer.poll(0)
    assert producer.flush(30) == 0
    alter_quota(cluster, {"client-id": "slow-consumer"}, consumer_byte_rate=QUOTA)
    throttles: list[float] = []
    consumer = Consumer(
        cluster.conf(
            {
                "client.id": "slow-consumer",
                "group.id": f"{topic_name}-g",
                "enable.auto.commit": False,
                "throttle_cb": lambda event: throttles.append(event.throttle_time),
            }
        )
    )
    consumed: list[tuple[float, int]] = []
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        start = time.monotonic()
        while time.monotonic() - start < MEASURE_TO_S:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() is None:
                consumed.append((time.monotonic(), len(msg.value())))
    finally:
        consumer.close()
    rate = steady_rate(consumed, start)
    assert 0.3 * QUOTA <= rate <= 1.7 * QUOTA, (rate, len(consumed))
    assert len(consumed) < 1500  # not everything: the quota held it back
    assert throttles and max(throttles) > 0, throttles


def test_request_percentage_throttles_any_api_and_mutes_the_connection(cluster: Cluster) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    # (ANONYMOUS, busy-client): the most specific level, whatever defaults are configured
    entity: dict[str, str | None] = {"user": "ANONYMOUS", "client-id": "busy-client"}
    alter_quota(cluster, entity, request_percentage=0.001)
    request = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    try:
        with cluster.raw() as conn:
            header = conn.header
            conn.header = lambda *a, **k: header(*a, **{**k, "client_id": "busy-client"})  # type: ignore[method-assign]
            first = conn.request(request)
            throttle_s = first.throttle_time.total_seconds()
            # a whole Metadata request's handler time is far over 0.001 % of one thread;
            # request-time throttles are capped at one window (1 s)
            assert 0 < throttle_s <= 1.0, first.throttle_time
            sent = time.monotonic()
            conn.request(request)  # read only once the mute has ended
            assert time.monotonic() - sent >= throttle_s * 0.8
    finally:
        alter_quota(cluster, entity, request_percentage=None)
    with cluster.raw() as conn:  # other client ids are not throttled
        assert conn.request(request).throttle_time.total_seconds() == 0


# ------------------------------------------------------------------ users (SASL)


def test_a_scram_users_quota_is_kept_beside_its_credentials_and_enforced(
    cluster_factory: Any, tool: Tool
) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    c = cluster_factory(brokers=1, security="sasl_plaintext", quota_window_num=WINDOWS)
    admin = c.admin().client
    password = "alice-quota-Pa55"
    for f in admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
            )
        ]
    ).values():
        f.result(timeout=30)
    topic = "alice-quota"
    c.create_topic(topic)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            "User:alice",
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE)
    ]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=30)
    command_config = str(c.json["client_properties"])
    configs(
        tool,
        c,
        "--alter",
        "--add-config",
        f"producer_byte_rate={QUOTA}",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        command_config=command_config,
    )
    stored = zk_config(c, "/config/users/alice")
    assert stored is not None and stored["producer_byte_rate"] == str(QUOTA), stored
    assert "SCRAM-SHA-512" in stored, stored  # the credential survived the quota write
    out = configs(
        tool,
        c,
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        command_config=command_config,
    )
    assert f"Quota configs for user-principal 'alice' are producer_byte_rate={QUOTA}.0" in out
    assert (
        "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=4096"
        in out
    )

    # enforced on alice's connections whatever their client id, not on the admin's
    alice = {
        "bootstrap.servers": c.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": password,
        "client.id": "any-client",
    }
    delivered, throttles, start = _produce_for(alice, topic, MEASURE_TO_S, b"z" * 1000)
    rate = steady_rate(delivered, start)
    assert 0.4 * QUOTA <= rate <= 1.6 * QUOTA, (rate, len(delivered))
    assert throttles, "librdkafka saw no throttle"
    admin_run, _, _ = _produce_for(c.conf({"client.id": "any-client"}), topic, 1.5, b"z" * 1000)
    assert sum(n for _, n in admin_run) / 1.5 > 5 * QUOTA

    # a credential change keeps the quota
    for f in admin.alter_user_scram_credentials(
        [
            UserScramCredentialUpsertion(
                "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"other-pw"
            )
        ]
    ).values():
        f.result(timeout=30)
    stored = zk_config(c, "/config/users/alice")
    assert stored is not None
    assert {"SCRAM-SHA-512", "SCRAM-SHA-256", "producer_byte_rate"} <= set(stored), stored

    # alice has no ACL on the cluster: she may neither see nor change quotas
    from kio.schema.alter_client_quotas.v1 import request as alter_req
    from kio.schema.describe_client_quotas.v1 import request as describe_req

    from kafka_security.client_security import client_security

    b = c.broker(1)
    with RawConnection(str(b["host"]), int(b["port"]), 30.0, client_security(alice)) as conn:
        described = conn.request(
            describe_req.DescribeClientQuotasRequest(components=(), strict=False)
        )
        altered = conn.request(
            alter_req.AlterClientQuotasRequest(
                entries=(
                    alter_req.EntryData(
                        entity=(alter_req.EntityData(entity_type="user", entity_name="alice"),),
                        ops=(alter_req.OpData(key="producer_byte_rate", value=1e9, remove=False),),
                    ),
                ),
                validate_only=False,
            )
        )
    assert int(described.error_code) == CLUSTER_AUTHORIZATION_FAILED and described.entries is None
    assert [int(e.error_code) for e in altered.entries] == [CLUSTER_AUTHORIZATION_FAILED]
    assert zk_config(c, "/config/users/alice")["producer_byte_rate"] == str(QUOTA)  # type: ignore[index]
