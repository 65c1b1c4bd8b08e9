"""Credentials and ACLs live where Kafka keeps them (``/config/users``, ``/kafka-acl``), so
an Apache Kafka 3.9.1 broker joined to a secured Millrace cluster's ZooKeeper enforces the
same users and ACLs, and what is written through Kafka is enforced by Millrace.

The Kafka broker joins the cluster as broker 2, on a SASL_PLAINTEXT listener with
SCRAM-SHA-512 between brokers and Kafka's own ``kafka.security.authorizer.AclAuthorizer``;
Millrace (broker 1) stays the controller and reaches it over that listener as
``User:broker``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.harness.cluster import Cluster
from tests.harness.kafka_tools import start_kafka_broker, stop_kafka_broker
from tests.harness.ports import free_port
from tests.harness.waiting import wait_for

# make fault (make test budget, issue 29: tests/integration/test_mixed_cluster.py runs Kafka
# brokers beside Millrace in make test)
pytestmark = [
    pytest.mark.integration,
    pytest.mark.fault,
    pytest.mark.long,
    pytest.mark.timeout(300),
]


def _ok(futures: dict[Any, Any]) -> None:
    for f in futures.values():
        f.result(timeout=60)


def _user_conf(bootstrap: str, user: str, password: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }


def _add_user(admin: AdminClient, user: str, password: str) -> None:
    _ok(
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
                )
            ]
        )
    )


def _allow(admin: AdminClient, principal: str, rtype: Any, name: str, *ops: Any) -> None:
    _ok(
        admin.create_acls(
            [
                AclBinding(
                    rtype,
                    name,
                    ResourcePatternType.LITERAL,
                    principal,
                    "*",
                    op,
                    AclPermissionType.ALLOW,
                )
                for op in ops
            ]
        )
    )


def _produce(conf: dict[str, Any], topic: str, values: list[bytes]) -> list[Any]:
    errors: list[Any] = []
    p = Producer({**conf, "message.timeout.ms": 15000})
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda e, m: errors.append(e) if e else None)
    p.flush(30)
    return errors


def _consume(conf: dict[str, Any], topic: str, group: str, n: int) -> list[bytes]:
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def test_kafka_broker_enforces_millraces_users_and_acls(
    cluster_factory: Any, tmp_path: Path
) -> None:
    millrace: Cluster = cluster_factory(
        {"offsets.topic.replication.factor": 1}, security="sasl_plaintext"
    )
    props = Path(millrace.json["brokers"][0]["config"]).read_text()
    broker_password = re.search(r'username="broker" password="([^"]+)"', props)
    assert broker_password, "the broker's JAAS line"
    port = free_port()
    kafka_address = f"127.0.0.1:{port}"
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="broker" password="{broker_password.group(1)}";'
    )
    proc = start_kafka_broker(
        tmp_path,
        {
            "broker.id": "2",
            "listeners": f"SASL_PLAINTEXT://{kafka_address}",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": jaas,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": jaas,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin;User:broker",
            "log.dirs": str(tmp_path / "data"),
            "zookeeper.connect": str(millrace.json["zookeeper"]),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
        },
    )
    try:
        admin_password = str(millrace.client_config["sasl.password"])
        on_millrace = millrace.admin().client
        on_kafka = AdminClient(_user_conf(kafka_address, "admin", admin_password))

        def joined() -> bool:
            assert proc.poll() is None, f"Kafka exited {proc.returncode}: see {tmp_path}/kafka.out"
            return 2 in on_millrace.list_topics(timeout=5).brokers

        wait_for(joined, 120, "the Kafka broker registered in the Millrace cluster")

        # a user and ACLs made through Millrace ...
        _add_user(on_millrace, "alice", "alice-secret")
        _ok(
            on_millrace.create_topics(
                [NewTopic("on-kafka", num_partitions=1, replica_assignment=[[2]])]
            )
        )
        _ok(
            on_millrace.create_topics(
                [NewTopic("closed-on-kafka", num_partitions=1, replica_assignment=[[2]])]
            )
        )
        _allow(
            on_millrace,
            "User:alice",
            ResourceType.TOPIC,
            "on-kafka",
            AclOperation.WRITE,
            AclOperation.READ,
        )
        _allow(on_millrace, "User:alice", ResourceType.GROUP, "alice-group", AclOperation.READ)

        # ... are enforced by the Kafka broker, which leads both topics
        alice = _user_conf(kafka_address, "alice", "alice-secret")

        def kafka_leads() -> bool:
            md = on_kafka.list_topics(timeout=5)
            return all(
                t in md.topics and md.topics[t].partitions[0].leader == 2
                for t in ("on-kafka", "closed-on-kafka")
            )

        wait_for(kafka_leads, 60, "Kafka leading the topics")
        wait_for(lambda: not _produce(alice, "on-kafka", [b"probe"]), 60, "alice's ACL on Kafka")
        assert _produce(alice, "on-kafka", [b"a", b"b"]) == []
        assert sorted(_consume(alice, "on-kafka", "alice-group", 3)) == [b"a", b"b", b"probe"]
        refused = _produce(alice, "closed-on-kafka", [b"x"])
        assert refused and refused[0].code() == 29, refused  # TOPIC_AUTHORIZATION_FAILED
        with pytest.raises(KafkaException):
            AdminClient(_user_conf(kafka_address, "alice", "not-her-password")).list_topics(
                timeout=5
            )

        # and the other way round: a user and an ACL made through Kafka, enforced by Millrace
        _add_user(on_kafka, "bob", "bob-secret")
        _ok(
            on_millrace.create_topics(
                [NewTopic("on-millrace", num_partitions=1, replica_assignment=[[1]])]
            )
        )
        _allow(on_kafka, "User:bob", ResourceType.TOPIC, "on-millrace", AclOperation.WRITE)
        bob = _user_conf(millrace.bootstrap, "bob", "bob-secret")
        wait_for(lambda: not _produce(bob, "on-millrace", [b"bob"]), 60, "bob's ACL on Millrace")
        refused = _produce(bob, "on-kafka", [b"y"])
        assert refused and refused[0].code() == 29, refused
    finally:
        stop_kafka_broker(proc)
