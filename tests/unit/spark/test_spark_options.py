"""Read-option parsing and validation of the Spark connector (Spark's Kafka source rules)."""

from __future__ import annotations

import pytest

from spark_connector.read.offsets import TopicPartition
from spark_connector.read.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    OffsetKind,
    parse_duration_ms,
    parse_read_options,
    validate_common,
)

pytestmark = pytest.mark.unit

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a, b"}


def test_defaults_batch_and_streaming() -> None:
    batch = parse_read_options(BASE, streaming=False)
    assert batch.subscribe == ("a", "b")
    assert batch.starting.kind is OffsetKind.EARLIEST
    assert batch.ending is not None and batch.ending.kind is OffsetKind.LATEST
    assert batch.fail_on_data_loss is True
    assert batch.include_headers is False
    assert batch.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    stream = parse_read_options(BASE, streaming=True)
    assert stream.starting.kind is OffsetKind.LATEST
    assert stream.ending is None


def test_case_insensitive_names_and_kafka_pass_through() -> None:
    opts = parse_read_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "SubscribePattern": "t.*",
            "kafka.isolation.level": "read_committed",
            "kafka.client.id": "me",
            "includeheaders": "TRUE",
            "maxOffsetsPerTrigger": "100",
            "minPartitions": "4",
            "maxRecordsPerPartition": "1000",
            "failOnDataLoss": "false",
            "maxTriggerDelay": "30s",
            "minOffsetsPerTrigger": "10",
        },
        streaming=True,
    )
    assert opts.subscribe_pattern == "t.*"
    assert opts.kafka_params == {"isolation.level": "read_committed", "client.id": "me"}
    conf = opts.client_config()
    assert conf["bootstrap.servers"] == "h:1"
    assert conf["isolation.level"] == "read_committed"
    assert conf["enable.auto.commit"] is False
    assert opts.include_headers and not opts.fail_on_data_loss
    assert (opts.max_offsets_per_trigger, opts.min_offsets_per_trigger) == (100, 10)
    assert (opts.min_partitions, opts.max_records_per_partition) == (4, 1000)
    assert opts.max_trigger_delay_ms == 30_000


def test_default_isolation_level_is_read_uncommitted_like_spark() -> None:
    conf = parse_read_options(BASE, streaming=False).client_config()
    assert conf["isolation.level"] == "read_uncommitted"


def test_positions_priority_timestamp_first() -> None:
    opts = parse_read_options(
        {
            **BASE,
            "startingOffsets": "earliest",
            "startingOffsetsByTimestamp": '{"a": {"0": 5}}',
            "startingTimestamp": "1000",
            "endingOffsetsByTimestamp": '{"a": {"0": 9}}',
            "endingOffsets": "latest",
        },
        streaming=False,
    )
    assert opts.starting.kind is OffsetKind.TIMESTAMP and opts.starting.timestamp == 1000
    assert opts.ending is not None and opts.ending.kind is OffsetKind.TIMESTAMPS
    assert opts.ending.offsets == {TopicPartition("a", 0): 9}


def test_json_offsets_and_assign() -> None:
    opts = parse_read_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "assign": '{"a": [0, 1]}',
            "startingOffsets": '{"a": {"0": 3, "1": -2}}',
            "endingOffsets": '{"a": {"0": 9, "1": -1}}',
        },
        streaming=False,
    )
    assert opts.assign == (TopicPartition("a", 0), TopicPartition("a", 1))
    assert opts.starting.offsets == {TopicPartition("a", 0): 3, TopicPartition("a", 1): -2}


@pytest.mark.parametrize(
    ("options", "streaming", "named"),
    [
        ({"subscribe": "a"}, False, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, False, "subscribe"),
        ({**BASE, "assign": '{"a":[0]}'}, False, "subscribe"),
        ({**BASE, "subscribe": " , "}, False, "subscribe"),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, True, "subscribePattern"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "[0]"}, True, "assign"),
        ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"a":{"0":-1}}'}, False, "startingOffsets"),
        ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets"),
        ({**BASE, "endingOffsets": '{"a":{"0":-2}}'}, False, "endingOffsets"),
        ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets"),
        ({**BASE, "endingTimestamp": "5"}, True, "endingTimestamp"),
        ({**BASE, "endingOffsetsByTimestamp": '{"a":{"0":5}}'}, True, "endingOffsetsByTimestamp"),
        ({**BASE, "startingOffsets": "sometime"}, True, "startingOffsets"),
        ({**BASE, "startingOffsets": '{"a":{"0":-3}}'}, True, "startingOffsets"),
        ({**BASE, "startingTimestamp": "yesterday"}, True, "startingTimestamp"),
        ({**BASE, "startingOffsetsByTimestamp": '{"a":{"0":-5}}'}, True, "startingOffsetsBy"),
        ({**BASE, "startingOffsetsByTimestampStrategy": "x"}, True, "Strategy"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
        ({**BASE, "maxOffsetsPerTrigger": "lots"}, True, "maxOffsetsPerTrigger"),
        ({**BASE, "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"}, True, "minOffsets"),
        ({**BASE, "maxTriggerDelay": "soon"}, True, "maxTriggerDelay"),
        ({**BASE, "minPartitions": "-1"}, False, "minPartitions"),
        ({**BASE, "maxRecordsPerPartition": "x"}, False, "maxRecordsPerPartition"),
        ({**BASE, "failOnDataLoss": "yes"}, False, "failOnDataLoss"),
        ({**BASE, "includeHeaders": "1"}, False, "includeHeaders"),
        ({**BASE, "localReads": "sometimes"}, False, "localReads"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, False, "kafka.auto.offset.reset"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, False, "kafka.enable.auto.commit"),
        (
            {
                "kafka.bootstrap.servers": "h:1",
                "assign": '{"a":[0]}',
                "startingOffsets": '{"a":{"0":1},"b":{"0":1}}',
            },
            False,
            "startingOffsets",
        ),
    ],
)
def test_errors_name_the_option(options: dict[str, str], streaming: bool, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        parse_read_options(options, streaming=streaming)


def test_validate_common_accepts_both_kinds_and_rejects_common_errors() -> None:
    validate_common({**BASE, "startingOffsets": "latest"})  # fine for streaming
    validate_common({**BASE, "endingOffsets": "latest"})  # fine for batch
    with pytest.raises(ValueError, match="kafka.bootstrap.servers"):
        validate_common({"subscribe": "a"})


@pytest.mark.parametrize(
    ("raw", "ms"),
    [("100", 100), ("250ms", 250), ("10s", 10_000), ("15m", 900_000), ("2h", 7_200_000)],
)
def test_durations(raw: str, ms: int) -> None:
    assert parse_duration_ms(raw, "maxTriggerDelay") == ms


# --- startingOffsets=group --------------------------------------------------------------------


def test_starting_from_a_consumer_groups_offsets() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.group.id": "enricher"}
    for streaming in (True, False):
        opts = parse_read_options({**base, "startingOffsets": "group"}, streaming=streaming)
        assert opts.starting.kind is OffsetKind.GROUP
        assert opts.group_id == "enricher" and opts.group_fallback is OffsetKind.EARLIEST
    latest = parse_read_options(
        {**base, "startingOffsets": "GROUP", "startingOffsetsGroupFallback": "latest"},
        streaming=True,
    )
    assert latest.group_fallback is OffsetKind.LATEST
    with pytest.raises(ValueError, match="which is not set"):
        parse_read_options(
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "group"},
            streaming=True,
        )
    with pytest.raises(ValueError, match="'startingOffsetsGroupFallback' must be 'earliest'"):
        parse_read_options(
            {**base, "startingOffsets": "group", "startingOffsetsGroupFallback": "middle"},
            streaming=True,
        )
    with pytest.raises(ValueError, match="needs startingOffsets=group"):
        parse_read_options({**base, "startingOffsetsGroupFallback": "latest"}, streaming=True)
    with pytest.raises(ValueError, match="option 'endingOffsets' must be 'earliest', 'latest'"):
        parse_read_options({**base, "endingOffsets": "group"}, streaming=False)


def test_the_metadata_timeout_is_the_connectors_not_librdkafkas() -> None:
    opts = parse_read_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "t",
            "kafka.default.api.timeout.ms": "2500",
        },
        streaming=False,
    )
    assert opts.metadata_timeout_ms == 2500
    assert "default.api.timeout.ms" not in opts.client_config()


# --- misspelled options -------------------------------------------------------------------------


def test_an_unknown_option_is_named_once_with_the_closest_known_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from spark_connector.option_names import READ_OPTIONS, WRITE_OPTIONS, warn_unknown_options

    options = {
        "kafka.bootstrap.servers": "h:1",
        "kafka.whatever.librdkafka.knows": "1",
        "subscribe": "t",
        "startingOffset": "earliest",
        "zzqx": "1",
    }
    with caplog.at_level("WARNING", logger="spark_connector.read.options"):
        assert warn_unknown_options(options, READ_OPTIONS, "for reads") == [
            "startingOffset",
            "zzqx",
        ]
        warn_unknown_options(options, READ_OPTIONS, "for reads")  # logged once per process
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "option 'startingOffset' is not an option of format('millrace') for reads and is "
        "ignored; did you mean 'startingOffsets'?",
        "option 'zzqx' is not an option of format('millrace') for reads and is ignored",
    ]
    assert warn_unknown_options({"deliveryGuarantee": "exactly-once"}, WRITE_OPTIONS, "w") == []
    assert warn_unknown_options({"checkpointLocation": "/c"}, READ_OPTIONS, "r") == []


def test_local_reads_default_on_and_can_be_turned_off() -> None:
    assert parse_read_options(BASE, streaming=False).local_reads is True
    off = parse_read_options({**BASE, "localReads": "FALSE"}, streaming=True)
    assert off.local_reads is False


def test_the_lookup_client_shortens_librdkafkas_first_reconnect_pause_unless_told() -> None:
    from confluent_kafka import Consumer

    from spark_connector.read.offset_reader import FIRST_RECONNECT_BACKOFF_MS, lookup_config

    def config(**kafka: str) -> dict[str, object]:
        options = {**BASE, **{f"kafka.{k.replace('_', '.')}": v for k, v in kafka.items()}}
        return lookup_config(parse_read_options(options, streaming=True))

    assert config()["reconnect.backoff.ms"] == FIRST_RECONNECT_BACKOFF_MS
    assert config()["log.connection.close"] is False
    assert config(reconnect_backoff_ms="250")["reconnect.backoff.ms"] == "250"
    # never above the user's ceiling, which librdkafka would refuse ("must be >=")
    capped = config(reconnect_backoff_max_ms="5")
    assert capped["reconnect.backoff.ms"] == 5
    for conf in (config(), capped):
        Consumer(conf).close()  # librdkafka accepts it (no broker needed to create one)
