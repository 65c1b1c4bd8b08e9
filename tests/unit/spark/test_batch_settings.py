"""Which writes the batch producer takes, and how the ``kafka.*`` options set it up: a user
relies on getting librdkafka's meaning of each option, on the per-row producer for anything
the batch producer cannot do, and on a message naming a bad option."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    StringType,
    StructField,
    StructType,
)

from spark_connector.write.plan import (
    BatchSettings,
    WriteOptionError,
    batch_settings,
    plan_write,
)

pytestmark = pytest.mark.unit

KV = StructType([StructField("key", StringType()), StructField("value", StringType())])


def settings(schema: StructType = KV, **options: str) -> BatchSettings | str:
    opts = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
    opts.update({k.replace("_", "."): v for k, v in options.items()})
    return batch_settings(plan_write(opts, schema))


def test_defaults_are_librdkafkas() -> None:
    s = settings()
    assert s == BatchSettings(
        acks=-1,
        idempotent=True,
        codec=0,
        batch_bytes=1_000_000,
        request_timeout_ms=30_000,
        delivery_timeout_ms=300_000,
        retry_backoff_ms=100,
        buffer_bytes=32 << 20,
        client_id="millrace-spark-writer",
    )


def test_options_map_to_settings() -> None:
    s = batch_settings(
        plan_write(
            {
                "kafka.bootstrap.servers": "h:1",
                "topic": "t",
                "kafka.compression.type": "ZSTD",
                "kafka.batch.size": "65536",
                "kafka.request.timeout.ms": "5000",
                "kafka.message.timeout.ms": "7000",
                "kafka.retry.backoff.ms": "20",
                "kafka.queue.buffering.max.kbytes": "1024",
                "kafka.client.id": "job-7",
                "kafka.linger.ms": "50",  # librdkafka batching: nothing left to tune
                "kafka.batch.num.messages": "10",
            },
            KV,
        )
    )
    assert isinstance(s, BatchSettings)
    assert (s.codec, s.batch_bytes, s.request_timeout_ms, s.delivery_timeout_ms) == (
        4,
        65536,
        5000,
        7000,
    )
    assert (s.retry_backoff_ms, s.buffer_bytes, s.client_id) == (20, 1 << 20, "job-7")


@pytest.mark.parametrize(("name", "codec"), [("none", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3)])
def test_compression_codecs(name: str, codec: int) -> None:
    s = settings(**{"kafka.compression.type": name})
    assert isinstance(s, BatchSettings) and s.codec == codec


def test_acks_one_is_not_idempotent_and_acks_zero_goes_to_librdkafka() -> None:
    s = settings(**{"kafka.acks": "1"})
    assert isinstance(s, BatchSettings) and (s.acks, s.idempotent) == (1, False)
    s = settings(**{"kafka.acks": "all", "kafka.enable.idempotence": "false"})
    assert isinstance(s, BatchSettings) and (s.acks, s.idempotent) == (-1, False)
    reason = settings(**{"kafka.acks": "0"})
    assert isinstance(reason, str) and "kafka.acks" in reason


def test_delivery_timeout_zero_is_infinite() -> None:
    s = settings(**{"kafka.delivery.timeout.ms": "0"})
    assert isinstance(s, BatchSettings) and s.delivery_timeout_ms == 2**31 - 1


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"kafka.batch.size": "big"}, "kafka.batch.size"),
        ({"kafka.batch.size": "0"}, "kafka.batch.size"),
        ({"kafka.request.timeout.ms": "-5"}, "kafka.request.timeout.ms"),
        ({"kafka.enable.idempotence": "perhaps"}, "kafka.enable.idempotence"),
        ({"kafka.acks": "1", "kafka.enable.idempotence": "true"}, "kafka.enable.idempotence"),
    ],
)
def test_a_bad_value_names_its_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(WriteOptionError, match=named.replace(".", r"\.")):
        settings(**options)


def test_what_the_batch_producer_cannot_do_goes_to_librdkafka() -> None:
    kerberos = {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "GSSAPI"}
    unknown = settings(**kerberos)
    assert isinstance(unknown, str) and "kafka.sasl.mechanism" in unknown
    other = settings(**{"kafka.socket.keepalive.enable": "true"})
    assert isinstance(other, str) and "kafka.socket.keepalive.enable" in other
    codec = settings(**{"kafka.compression.type": "brotli"})
    assert isinstance(codec, str) and "compression.type" in codec
    no_acks = settings(**{"kafka.acks": "0"})
    assert isinstance(no_acks, str) and "kafka.acks" in no_acks
    forced = settings(producer="librdkafka")
    assert isinstance(forced, str) and "librdkafka" in forced


def test_security_settings_keep_the_batch_producer() -> None:
    """SASL (PLAIN, SCRAM) and TLS are the batch producer's own: no row-by-row fallback."""
    scram = settings(
        **{
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
            'required username="u" password="p";',
        }
    )
    assert isinstance(scram, BatchSettings)
    plain = settings(
        **{
            "kafka.security.protocol": "sasl_plaintext",
            "kafka.sasl.mechanisms": "PLAIN",
            "kafka.sasl.username": "u",
            "kafka.sasl.password": "p",
        }
    )
    assert isinstance(plain, BatchSettings)


def test_a_bad_security_option_is_named_when_the_writer_is_made() -> None:
    with pytest.raises(WriteOptionError, match="option 'kafka.security.protocol'"):
        settings(**{"kafka.security.protocol": "TLS"})
    with pytest.raises(WriteOptionError, match="option 'kafka.sasl.jaas.config'"):
        settings(**{"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"})


def test_the_batch_producer_writes_headers_and_topic_columns() -> None:
    headers = StructType(
        [
            *KV.fields,
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            ),
        ]
    )
    assert isinstance(settings(headers), BatchSettings)
    topic_column = StructType([*KV.fields, StructField("topic", StringType())])
    chosen = batch_settings(plan_write({"kafka.bootstrap.servers": "h:1"}, topic_column))
    assert isinstance(chosen, BatchSettings)


def test_the_producer_option_is_checked() -> None:
    for value in ("auto", "batch", "librdkafka", " Batch "):
        plan = plan_write({"kafka.bootstrap.servers": "h:1", "topic": "t", "producer": value}, KV)
        assert plan.producer == value.strip().lower()
    with pytest.raises(WriteOptionError, match="option 'producer' is 'fast'"):
        plan_write({"kafka.bootstrap.servers": "h:1", "topic": "t", "producer": "fast"}, KV)


def test_max_in_flight_is_kafkas_limit_with_idempotence() -> None:
    """``max.in.flight.requests.per.connection`` (or librdkafka's ``max.in.flight``): 1..5
    with idempotence (the broker remembers a producer's last 5 batches); without it the
    batch producer keeps at most 5."""
    s = settings(**{"kafka.max_in_flight_requests_per_connection": "3"})
    assert isinstance(s, BatchSettings) and s.max_in_flight == 3
    s = settings(**{"kafka.max_in_flight": "1"})
    assert isinstance(s, BatchSettings) and s.max_in_flight == 1
    with pytest.raises(WriteOptionError, match=r"max.in.flight.*1\.\.5"):
        settings(**{"kafka.max_in_flight_requests_per_connection": "6"})
    s = settings(**{"kafka.acks": "1", "kafka.max_in_flight": "1000"})
    assert isinstance(s, BatchSettings) and s.max_in_flight == 5
    s = settings()
    assert isinstance(s, BatchSettings) and s.max_in_flight is None  # 5, or 1 without idempotence
