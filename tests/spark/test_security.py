"""``format("millrace")`` on a secured cluster (``cluster up --security sasl_ssl``: TLS, SCRAM,
ACLs enforced, ``allow.everyone.if.no.acl.found=false``), as a user with only the ACLs a job
needs, on the connector's own fast path (direct fetches, the batch producer, the
exactly-once sink's transactions), verified by reading the topics back as the admin with
confluent-kafka:

* a batch read with Spark's option names (``kafka.security.protocol``,
  ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``, PEM);
* a batch write with librdkafka's names (``kafka.sasl.username`` / ``password``,
  ``kafka.ssl.ca.location``);
* an exactly-once streaming write (a JKS trust store), its source offsets committed to a
  group in the same transaction;
* errors: a wrong password fails at once naming the login, a bad
  ``kafka.security.protocol`` names it, and a topic the user may not read fails with Kafka's
  TOPIC_AUTHORIZATION_FAILED (no DESCRIBE: when the driver plans; DESCRIBE but no READ: in
  the task's Fetch).

The ACLs granted (``_grant``) are what the connector needs (README, "Using it from Spark")."""

from __future__ import annotations

import secrets
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_connector.kafka.security import check_login
from spark_connector.read.options import parse_read_options
from spark_connector.write.plan import BatchSettings, batch_settings, plan_write

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(
        {
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
        },
        security="sasl_ssl",
    ),
]

USER = "alice"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
SOURCE, OUT, EOS_OUT, HIDDEN, DESCRIBE_ONLY = (
    "sec-in",
    "sec-out",
    "sec-eos-out",
    "sec-hidden",
    "sec-describe-only",
)
PREFIX, GROUP = "sec-app", "sec-app-group"
PROGRESS = "__millrace_batches"
RECORDS = 600
PARTITIONS = 2


def _jaas(password: str) -> str:
    return f'{SCRAM} required username="{USER}" password="{password}";'


def _grant(cluster: Any) -> None:
    """alice's ACLs: READ on the source, WRITE on the outputs (DESCRIBE with each), DESCRIBE
    only on one topic, none on another; the progress topic of the exactly-once sink (created
    by its first commit: CREATE); the sink's transactional ids (prefixed WRITE) and its
    offsets group (READ)."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    def acl(kind: Any, name: str, op: Any, pattern: Any = ResourcePatternType.LITERAL) -> Any:
        return AclBinding(kind, name, pattern, f"User:{USER}", "*", op, AclPermissionType.ALLOW)

    topic, group, txn = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
    read, write, describe = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
    bindings = [
        acl(topic, SOURCE, read),
        acl(topic, SOURCE, describe),
        acl(topic, OUT, write),
        acl(topic, OUT, describe),
        acl(topic, EOS_OUT, write),
        acl(topic, EOS_OUT, describe),
        acl(topic, DESCRIBE_ONLY, describe),
        acl(topic, PROGRESS, read),
        acl(topic, PROGRESS, write),
        acl(topic, PROGRESS, describe),
        acl(topic, PROGRESS, AclOperation.CREATE),
        acl(txn, PREFIX, write, ResourcePatternType.PREFIXED),
        acl(group, GROUP, read),
    ]
    admin = _admin(cluster)
    for binding, future in admin.create_acls(bindings).items():
        future.result(30)
        assert binding is not None


def _admin(cluster: Any) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(cluster.conf())


def _add_user(cluster: Any, password: str) -> None:
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    upserts = [
        UserScramCredentialUpsertion(USER, ScramCredentialInfo(mechanism, 4096), password.encode())
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    ]
    admin = _admin(cluster)  # referenced until the results arrive (a collected one cancels)
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)


@pytest.fixture(scope="module")
def secured(cluster: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """alice (SCRAM, a random password) with her ACLs; the topics; the source's records; the
    CA as a PEM file and as a JKS trust store."""
    import spark_connector

    spark_connector.register(spark)
    password = secrets.token_urlsafe(12)
    _add_user(cluster, password)
    for name in (SOURCE, OUT, EOS_OUT, HIDDEN, DESCRIBE_ONLY):
        cluster.create_topic(name, PARTITIONS)
    _grant(cluster)
    ca = str(cluster.client_config["ssl.ca.location"])
    jks_path = tmp_path_factory.mktemp("truststore") / "truststore.jks"
    _jks_truststore(ca, jks_path, "changeit")
    records = [(f"k{i}", f"v{i}") for i in range(RECORDS)]
    _produce(cluster, SOURCE, records)
    _produce(cluster, DESCRIBE_ONLY, records[:10])
    java = {
        "kafka.bootstrap.servers": cluster.bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": _jaas(password),
        "kafka.ssl.truststore.location": ca,
        "kafka.ssl.truststore.type": "PEM",
    }
    # the new credential reaches the broker through ZooKeeper: wait until alice can log in
    params = {k[len("kafka.") :]: v for k, v in java.items()}
    deadline = time.monotonic() + 30
    while True:
        try:
            check_login(cluster.bootstrap, params, 10.0)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return {
        "password": password,
        "java": java,
        "ca": ca,
        "jks": str(jks_path),
        "records": records,
    }


def _jks_truststore(ca_pem: str, path: Path, password: str) -> None:
    import ssl

    import jks

    der = ssl.PEM_cert_to_DER_cert(Path(ca_pem).read_text())
    entry = jks.TrustedCertEntry.new("millrace-ca", der)
    jks.KeyStore.new("jks", [entry]).save(str(path), password)


def _produce(cluster: Any, topic: str, records: list[tuple[str, str]]) -> None:
    from confluent_kafka import Producer

    producer = Producer(cluster.conf({"partitioner": "murmur2_random"}))
    for key, value in records:
        producer.produce(topic, value.encode(), key.encode())
    assert producer.flush(30) == 0


def _consume(cluster: Any, topic: str, timeout_s: float = 60.0) -> list[tuple[str, str]]:
    """Every record of ``topic`` a read_committed confluent-kafka consumer (as the admin)
    sees, up to the end of every partition."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        cluster.conf(
            {
                "group.id": f"check-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            }
        )
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: list[tuple[str, str]] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(eof) < PARTITIONS and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                assert msg.error().code() == -191, msg.error()  # _PARTITION_EOF
                eof.add(msg.partition())
                continue
            eof.discard(msg.partition())
            out.append((msg.key().decode(), msg.value().decode()))
        assert len(eof) == PARTITIONS, f"{topic}: not read to its end in {timeout_s:g}s"
        return sorted(out)
    finally:
        consumer.close()


def _reader(spark: Any, options: dict[str, str], topic: str) -> Any:
    reader = spark.read.format("millrace").option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(df: Any) -> list[tuple[str, str]]:
    return sorted(
        (bytes(r.key).decode(), bytes(r.value).decode())
        for r in df.select("key", "value").collect()
    )


# --- the fast path as a restricted user --------------------------------------------------------


def test_batch_read_with_spark_option_names(spark: Any, secured: dict[str, Any]) -> None:
    """SASL_SSL with SCRAM-SHA-256 and a PEM trust store, Spark's option names: every record,
    read by the tasks' direct fetcher (not librdkafka's consumer)."""
    options = secured["java"]
    assert parse_read_options({**options, "subscribe": SOURCE}, streaming=False).uses_direct_fetch()
    assert _rows(_reader(spark, options, SOURCE)) == sorted(secured["records"])


def test_batch_write_with_librdkafka_names(
    spark: Any, cluster: Any, secured: dict[str, Any]
) -> None:
    """librdkafka's names (``kafka.sasl.username`` / ``password``, ``kafka.ssl.ca.location``)
    work too, and the write goes through the batch producer."""
    options = {
        "kafka.bootstrap.servers": cluster.bootstrap,
        "kafka.security.protocol": "sasl_ssl",
        "kafka.sasl.mechanisms": "SCRAM-SHA-512",
        "kafka.sasl.username": USER,
        "kafka.sasl.password": secured["password"],
        "kafka.ssl.ca.location": secured["ca"],
        "topic": OUT,
    }
    rows = [(f"w{i}", f"x{i}") for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string")
    assert isinstance(batch_settings(plan_write(options, df.schema)), BatchSettings)
    writer = df.write.format("millrace").mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()
    assert _consume(cluster, OUT) == sorted(rows)


def test_exactly_once_stream_with_jks_truststore(
    spark: Any, cluster: Any, secured: dict[str, Any], tmp_path: Path
) -> None:
    """An exactly-once streaming write (tasks' transactions, the driver's commit, the
    progress topic, the source offsets committed to a group) over SASL_SSL with a JKS trust
    store: the output holds every source record once, the group's offsets are the source's
    end."""
    options = {
        **{k: v for k, v in secured["java"].items() if not k.startswith("kafka.ssl.")},
        "kafka.ssl.truststore.location": secured["jks"],
        "kafka.ssl.truststore.type": "JKS",
        "kafka.ssl.truststore.password": "changeit",
        "kafka.ssl.endpoint.identification.algorithm": "https",
        "kafka.ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    }
    stream = spark.readStream.format("millrace").option("subscribe", SOURCE)
    stream = stream.option("startingOffsets", "earliest")
    for key, value in options.items():
        stream = stream.option(key, value)
    writer = stream.load().selectExpr("key", "value").writeStream.format("millrace")
    for key, value in options.items():
        writer = writer.option(key, value)
    query = (
        writer.option("topic", EOS_OUT)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", PREFIX)
        .option("commitOffsetsToGroup", GROUP)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    assert _consume(cluster, EOS_OUT) == sorted(secured["records"])
    assert _committed(cluster, GROUP, SOURCE) == _ends(cluster, SOURCE)


def _committed(cluster: Any, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(cluster.conf({"group.id": group, "enable.auto.commit": False}))
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in parts}


def _ends(cluster: Any, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(cluster.conf({"group.id": f"ends-{uuid.uuid4().hex}"}))
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


# --- errors --------------------------------------------------------------------------------


def _failure(action: Any) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_wrong_password_fails_at_once(spark: Any, secured: dict[str, Any]) -> None:
    """A refused login fails the read in seconds (not after the metadata timeout), naming the
    user and the option to check."""
    options = {**secured["java"], "kafka.sasl.jaas.config": _jaas("not-the-password")}
    started = time.monotonic()
    text = _failure(lambda: _reader(spark, options, SOURCE).count())
    assert time.monotonic() - started < 20
    assert f"authentication as {USER} failed" in text, text
    assert "kafka.sasl.jaas.config" in text
    assert "not-the-password" not in text


def test_bad_security_protocol_names_the_option(
    spark: Any, cluster: Any, secured: dict[str, Any]
) -> None:
    options = {**secured["java"], "kafka.security.protocol": "SASL_TLS"}
    text = _failure(lambda: _reader(spark, options, SOURCE).count())
    assert "option 'kafka.security.protocol'" in text, text
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = df.write.format("millrace").option("topic", OUT).mode("append")
    for key, value in options.items():
        writer = writer.option(key, value)
    text = _failure(writer.save)
    assert "option 'kafka.security.protocol'" in text, text
    missing = {**secured["java"], "kafka.ssl.truststore.location": "/nonexistent/ca.jks"}
    missing["kafka.ssl.truststore.type"] = "JKS"
    text = _failure(lambda: _reader(spark, missing, SOURCE).count())
    assert "kafka.ssl.truststore.location" in text, text


def test_topic_without_read_acl_is_refused(spark: Any, secured: dict[str, Any]) -> None:
    """Kafka's semantics: no ACL on the topic: the driver's planning gets
    TOPIC_AUTHORIZATION_FAILED (not an empty DataFrame); DESCRIBE without READ: the
    task's Fetch does."""
    options = secured["java"]
    text = _failure(lambda: _reader(spark, options, HIDDEN).count())
    assert "TOPIC_AUTHORIZATION_FAILED" in text, text
    text = _failure(lambda: _reader(spark, options, DESCRIBE_ONLY).count())
    assert "TOPIC_AUTHORIZATION_FAILED" in text, text
