"""Authentication as in Kafka, against real broker processes: SASL/SCRAM over TLS with
confluent-kafka, kafka-python and the Java client; mutual TLS with the principal taken from
the certificate; and what a broker does with bad input during authentication (a wrong
password, an unknown mechanism, requests out of order, a replayed SCRAM message, garbage or
plaintext on a TLS port): Kafka's error code, a closed connection, nobody else disturbed,
and no password in the broker's log. Also KIP-368 re-authentication."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import Cluster
from tests.harness.raw import RawConnection
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(brokers=1, security="sasl_ssl"),
]

ROOT = Path(__file__).resolve().parents[2]
JVM = ROOT / ".cache" / "jvm"
ALICE_PASSWORD = "alice-Pa55word-never-logged"
WRONG_PASSWORD = "wrong-Pa55word-never-logged"


def add_scram_user(
    cluster: Cluster, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    mech = (
        ScramMechanism.SCRAM_SHA_512 if mechanism.endswith("512") else ScramMechanism.SCRAM_SHA_256
    )
    futures = cluster.admin().client.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 4096), password.encode())]
    )
    for f in futures.values():
        f.result(timeout=30)


def user_conf(
    cluster: Cluster, user: str, password: str, mechanism: str = "SCRAM-SHA-512"
) -> dict[str, Any]:
    cfg = cluster.client_config
    out: dict[str, Any] = {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": cfg["security.protocol"],
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if "ssl.ca.location" in cfg:
        out["ssl.ca.location"] = cfg["ssl.ca.location"]
    return out


def round_trip_confluent(conf: dict[str, Any], topic: str, n: int = 50) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    p = Producer({**conf, "enable.idempotence": True})
    for i in range(n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert p.flush(30) == 0
    c = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
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


def broker_log(cluster: Cluster) -> str:
    return "".join(
        Path(b["out"]).read_text(errors="replace") for b in cluster.json["brokers"] if b.get("out")
    )


# --- real clients -----------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_confluent_kafka_over_sasl_ssl_with_scram(cluster: Cluster, mechanism: str) -> None:
    topic = f"scram-confluent-{mechanism.lower()}"
    cluster.create_topic(topic, 2)
    user = f"carol-{mechanism[-3:]}"
    add_scram_user(cluster, user, ALICE_PASSWORD, mechanism)
    # carol has no ACLs: as the admin (a super user) we produce, then check carol is refused
    got = round_trip_confluent(cluster.conf(), topic)
    assert sorted(got) == sorted(b"v%d" % i for i in range(50))
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    md = AdminClient(user_conf(cluster, user, ALICE_PASSWORD, mechanism)).list_topics(timeout=20)
    assert topic not in md.topics, "a principal without DESCRIBE must not see the topic"
    with pytest.raises(KafkaException):
        AdminClient(user_conf(cluster, user, WRONG_PASSWORD, mechanism)).list_topics(timeout=5)


def test_kafka_python_over_sasl_ssl_with_scram(cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = "scram-kafka-python"
    cluster.create_topic(topic, 1)
    cfg = cluster.client_config
    common = {
        "bootstrap_servers": cluster.bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": cfg["sasl.username"],
        "sasl_plain_password": cfg["sasl.password"],
        "ssl_cafile": cfg["ssl.ca.location"],
    }
    producer = KafkaProducer(**common)
    for i in range(20):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=4000, **common
    )
    values = [m.value for m in consumer]
    consumer.close()
    assert values == [b"v%d" % i for i in range(20)]


def _java_classpath() -> str:
    deps = sorted(p for p in (JVM / "kafka-4").glob("*.jar") if "kafka-clients" not in p.name)
    clients = sorted((JVM / "kafka-3").glob("kafka-clients-*.jar"))
    assert clients and deps, f"Kafka Java clients missing in {JVM}: run `make setup`"
    return ":".join(str(p) for p in [clients[0], *deps])


def run_java_client(cluster: Cluster, topic: str, properties: str) -> None:
    result = subprocess.run(
        [
            "java",
            "-cp",
            _java_classpath(),
            str(ROOT / "jvm" / "ClientCheck.java"),
            cluster.bootstrap,
            topic,
            "500",
            properties,
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert result.returncode == 0 and "OK 500" in result.stdout, (
        f"Java client failed:\n{result.stdout}\n{result.stderr[-3000:]}"
    )


def test_java_client_over_sasl_ssl_with_scram(cluster: Cluster) -> None:
    """Kafka's own client, configured by the client.properties `cluster up` wrote."""
    run_java_client(cluster, "scram-java", cluster.json["client_properties"])


# --- bad input --------------------------------------------------------------------------------


def _tls_socket(cluster: Cluster) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=cluster.client_config["ssl.ca.location"])
    raw = socket.create_connection((cluster.host, cluster.port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname=cluster.host)


def _raw_tls(cluster: Cluster) -> RawConnection:
    """A TLS connection that has not authenticated."""
    from kafka_security.client_security import client_security

    tls_only = client_security(
        {"security.protocol": "SSL", "ssl.ca.location": cluster.client_config["ssl.ca.location"]}
    )
    return RawConnection(cluster.host, cluster.port, 10.0, tls_only)


def _handshake(conn: RawConnection, mechanism: str = "SCRAM-SHA-512") -> Any:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    return conn.request(SaslHandshakeRequest(mechanism=mechanism))


def _authenticate(conn: RawConnection, token: bytes) -> Any:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest

    return conn.request(SaslAuthenticateRequest(auth_bytes=token))


def _closed_within(conn: RawConnection, seconds: float) -> float:
    """Seconds until the peer closed the connection (fails if it stays open)."""
    start = time.monotonic()
    assert conn.closed_by_peer(seconds) is True, "the broker kept the connection open"
    return time.monotonic() - start


def test_wrong_password_gets_sasl_authentication_failed_then_close(cluster: Cluster) -> None:
    from kafka_security.sasl_mechanisms import make_client

    add_scram_user(cluster, "alice", ALICE_PASSWORD)
    conn = _raw_tls(cluster)
    assert int(_handshake(conn).error_code) == 0
    client = make_client("SCRAM-SHA-512", "alice", WRONG_PASSWORD)
    first = _authenticate(conn, client.first())
    assert int(first.error_code) == 0
    final = _authenticate(conn, client.respond(bytes(first.auth_bytes)) or b"")
    assert int(final.error_code) == 58, final  # SASL_AUTHENTICATION_FAILED
    assert "invalid credentials" in (final.error_message or "")
    _closed_within(conn, 5)
    conn.close()


def test_unknown_mechanism_is_refused_with_the_enabled_list(cluster: Cluster) -> None:
    conn = _raw_tls(cluster)
    response = _handshake(conn, "GSSAPI")
    assert int(response.error_code) == 33  # UNSUPPORTED_SASL_MECHANISM
    assert set(response.mechanisms) >= {"SCRAM-SHA-512", "SCRAM-SHA-256"}
    _closed_within(conn, 5)
    conn.close()


def test_requests_before_authentication_close_the_connection(cluster: Cluster) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    conn = _raw_tls(cluster)
    # ApiVersions is allowed before authenticating
    conn.send_frame(RawConnection.header(18, 0, 1))
    corr, error = struct.unpack_from(">ih", conn.recv_frame(), 0)
    assert (corr, error) == (1, 0)
    conn.send_request(
        MetadataRequest(
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    _closed_within(conn, 5)
    conn.close()


def test_authenticate_without_handshake_is_an_illegal_sasl_state(cluster: Cluster) -> None:
    conn = _raw_tls(cluster)
    response = _authenticate(conn, b"n,,n=alice,r=abc")
    assert int(response.error_code) == 34  # ILLEGAL_SASL_STATE
    _closed_within(conn, 5)
    conn.close()


def test_a_replayed_scram_exchange_is_refused(cluster: Cluster) -> None:
    """The client-final message of a successful exchange, replayed on a new connection with
    the same client-first: the server's new nonce makes it invalid."""
    from kafka_security.sasl_mechanisms import make_client

    add_scram_user(cluster, "alice", ALICE_PASSWORD)
    client = make_client("SCRAM-SHA-512", "alice", ALICE_PASSWORD)
    conn = _raw_tls(cluster)
    assert int(_handshake(conn).error_code) == 0
    client_first = client.first()
    server_first = _authenticate(conn, client_first)
    client_final = client.respond(bytes(server_first.auth_bytes))
    assert client_final is not None
    ok = _authenticate(conn, client_final)
    assert int(ok.error_code) == 0
    conn.close()

    replay = _raw_tls(cluster)
    assert int(_handshake(replay).error_code) == 0
    assert int(_authenticate(replay, client_first).error_code) == 0
    refused = _authenticate(replay, client_final)
    assert int(refused.error_code) == 58
    _closed_within(replay, 5)
    replay.close()

    # a message after completion on a good connection is out of order
    fresh = _raw_tls(cluster)
    from kafka_security.client_security import authenticate, client_security

    authenticate(client_security(user_conf(cluster, "alice", ALICE_PASSWORD)), fresh.request)
    again = _authenticate(fresh, client_final)
    assert int(again.error_code) == 34
    fresh.close()


def test_garbage_and_plaintext_on_the_tls_port(cluster: Cluster) -> None:
    for payload in (
        b"\x16\x03\x01\x00\x05hello" + b"\x00" * 64,
        struct.pack(">i", 10) + b"\x00\x12" * 5,
    ):
        s = socket.create_connection((cluster.host, cluster.port), timeout=10)
        s.sendall(payload)
        s.settimeout(15)
        try:
            data = s.recv(4096)
        except (ConnectionResetError, TimeoutError):
            data = b""
        # never a Kafka response: a TLS alert at most, then the connection closes
        assert not data.startswith(b"\x00\x00"), data[:20]
        s.close()
    # a TLS client that never completes its handshake does not block anyone
    hung = socket.create_connection((cluster.host, cluster.port), timeout=10)
    try:
        got = round_trip_confluent(cluster.conf(), "after-garbage", 5)
        assert len(got) == 5
    finally:
        hung.close()


def test_no_password_reaches_the_broker_log(cluster: Cluster) -> None:
    add_scram_user(cluster, "alice", ALICE_PASSWORD)
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    with pytest.raises(KafkaException):
        AdminClient(user_conf(cluster, "alice", WRONG_PASSWORD)).list_topics(timeout=3)
    AdminClient(user_conf(cluster, "alice", ALICE_PASSWORD)).list_topics(timeout=20)
    text = broker_log(cluster)
    for secret in (ALICE_PASSWORD, WRONG_PASSWORD, cluster.client_config["sasl.password"]):
        assert secret not in text


# --- re-authentication (KIP-368) ----------------------------------------------------------------


@pytest.mark.long  # make fault: 15 s of make test's budget (issue 30)
@pytest.mark.fault
def test_reauthentication_after_connections_max_reauth_ms(cluster_factory: Any) -> None:
    from kio.schema.metadata.v12.request import MetadataRequest

    from kafka_security.client_security import authenticate, client_security

    c = cluster_factory({"connections.max.reauth.ms": 1500}, security="sasl_plaintext")
    security = client_security(c.client_config)
    conn = RawConnection(c.host, c.port, 10.0)
    responses: list[Any] = []

    def recording(entity: Any) -> Any:
        response = conn.request(entity)
        responses.append(response)
        return response

    authenticate(security, recording)
    lifetime = responses[-1].session_lifetime
    assert 0 < lifetime.total_seconds() * 1000 <= 1500
    metadata = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    assert conn.request(metadata).brokers
    time.sleep(1.0)
    authenticate(security, conn.request)  # re-authenticate on the same connection in time
    time.sleep(0.8)
    assert conn.request(metadata).brokers  # past the first session's end, inside the second
    time.sleep(1.6)
    conn.send_request(metadata)  # the session expired: the broker closes the connection
    _closed_within(conn, 5)
    conn.close()
    # librdkafka re-authenticates by itself and keeps producing across several sessions
    from confluent_kafka import Producer

    c.create_topic("reauth", 1)
    p = Producer(c.conf({"enable.idempotence": True}))
    errors: list[Any] = []
    deadline = time.monotonic() + 5
    sent = 0
    while time.monotonic() < deadline:
        p.produce("reauth", value=b"x", on_delivery=lambda e, m: errors.append(e) if e else None)
        sent += 1
        p.poll(0.05)
    assert p.flush(30) == 0
    assert errors == []
    assert sent > 20


# --- mutual TLS ---------------------------------------------------------------------------------


# make fault: 25 s of make test's budget (issue 30); tests/integration/test_cli_security.py
# keeps a mutual-TLS cluster in make test
@pytest.mark.long
@pytest.mark.fault
def test_mutual_tls_principal_from_the_certificate(cluster_factory: Any, tmp_path: Path) -> None:
    """`--security ssl`: client certificates required; the admin's certificate maps to
    User:admin (a super user); a certificate for CN=dave maps to User:dave, who needs ACLs;
    a client without a certificate cannot connect."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from broker.security.certificates import issue

    c = cluster_factory(security="ssl")
    got = round_trip_confluent(c.conf(), "mtls", 20)
    assert len(got) == 20
    sec = Path(c.json["dir"]) / "security"
    dave = issue(sec, "dave", "dave", server=False)
    dave_conf = {
        "bootstrap.servers": c.bootstrap,
        "security.protocol": "SSL",
        "ssl.ca.location": c.client_config["ssl.ca.location"],
        "ssl.certificate.location": str(dave.certificate),
        "ssl.key.location": str(dave.key),
    }
    md = AdminClient(dave_conf).list_topics(timeout=20)
    assert "mtls" not in md.topics  # User:dave has no DESCRIBE
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    binding = AclBinding(
        ResourceType.TOPIC,
        "mtls",
        ResourcePatternType.LITERAL,
        "User:dave",
        "*",
        AclOperation.DESCRIBE,
        AclPermissionType.ALLOW,
    )
    for f in c.admin().client.create_acls([binding]).values():
        f.result(timeout=30)
    wait_for(
        lambda: "mtls" in AdminClient(dave_conf).list_topics(timeout=20).topics,
        60,
        "User:dave seeing the topic after the ACL",
    )
    no_cert = {
        k: v
        for k, v in dave_conf.items()
        if not k.startswith("ssl.c") and not k.startswith("ssl.k")
    }
    with pytest.raises(KafkaException):
        AdminClient(no_cert).list_topics(timeout=5)
    # kafka-python with the admin's certificate
    from kafka import KafkaConsumer, KafkaProducer

    tls = {
        "bootstrap_servers": c.bootstrap,
        "security_protocol": "SSL",
        "ssl_cafile": c.client_config["ssl.ca.location"],
        "ssl_certfile": c.client_config["ssl.certificate.location"],
        "ssl_keyfile": c.client_config["ssl.key.location"],
    }
    producer = KafkaProducer(**tls)
    for i in range(5):
        producer.send("mtls", value=b"kp%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("mtls", auto_offset_reset="earliest", consumer_timeout_ms=4000, **tls)
    values = {m.value for m in consumer}
    consumer.close()
    assert {b"kp%d" % i for i in range(5)} <= values
    # Kafka's Java client with the PEM key store `cluster up` wrote
    run_java_client(c, "mtls-java", c.json["client_properties"])


def test_handshake_v0_then_raw_scram_tokens(cluster: Cluster) -> None:
    """SaslHandshake v0 (old clients): the SCRAM tokens follow as raw size-prefixed frames."""
    from kio.schema.metadata.v12.request import MetadataRequest
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest

    from kafka_security.sasl_mechanisms import make_client

    add_scram_user(cluster, "alice", ALICE_PASSWORD)
    conn = _raw_tls(cluster)
    assert int(conn.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-512")).error_code) == 0
    client = make_client("SCRAM-SHA-512", "alice", ALICE_PASSWORD)
    conn.send_frame(client.first())
    conn.send_frame(client.respond(conn.recv_frame()) or b"")
    assert client.respond(conn.recv_frame()) is None and client.complete
    response = conn.request(
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )
    assert response.brokers
    conn.close()
