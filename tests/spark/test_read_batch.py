"""Batch reads with ``spark.read.format("millrace")`` against a real single-broker cluster.

One 3-partition topic is filled once per module with known keys, values, timestamps and
headers; each test reads it with different options and compares with the expected rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from typing import Any

import pytest
from chispa import assert_df_equality

pytestmark = pytest.mark.spark

PARTITIONS = 3
PER_PARTITION = 40
BASE_TS = 1_700_000_000_000  # epoch ms of record 0 in every partition; record i is +10*i ms


def _expected(p: int, i: int) -> dict[str, Any]:
    return {
        "key": f"k{p}-{i}".encode(),
        "value": f"v{p}-{i}".encode(),
        "partition": p,
        "offset": i,
        "timestamp_ms": BASE_TS + 10 * i,
        "headers": [("h", f"{p}:{i}".encode()), ("n", None)] if i % 2 == 0 else None,
    }


@pytest.fixture(scope="module")
def topic(cluster: Any) -> str:
    from confluent_kafka import Producer

    name = cluster.create_topic("spark-read-batch", PARTITIONS)
    producer = Producer(cluster.conf({"linger.ms": 5}))
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            e = _expected(p, i)
            producer.produce(
                name,
                key=e["key"],
                value=e["value"],
                partition=p,
                timestamp=e["timestamp_ms"],
                headers=e["headers"],
            )
    assert producer.flush(30) == 0
    return name


def _reader(spark: Any, cluster: Any, **options: str) -> Any:
    r = spark.read.format("millrace").option("kafka.bootstrap.servers", cluster.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).replace(tzinfo=None)


def _expected_df(spark: Any, topic: str, rows: list[tuple[int, int]], headers: bool) -> Any:
    from pyspark.sql.types import StructType

    from spark_connector.datasource import HEADERS_DDL, KAFKA_SCHEMA_DDL

    ddl = KAFKA_SCHEMA_DDL + (f", {HEADERS_DDL}" if headers else "")
    schema = StructType.fromDDL(ddl)
    data = []
    for p, i in rows:
        e = _expected(p, i)
        row: list[Any] = [
            bytearray(e["key"]),
            bytearray(e["value"]),
            topic,
            p,
            i,
            _ts(e["timestamp_ms"]),
            0,
        ]
        if headers:
            row.append(
                None
                if e["headers"] is None
                else [(k, None if v is None else bytearray(v)) for k, v in e["headers"]]
            )
        data.append(tuple(row))
    return spark.createDataFrame(data, schema)


def _offsets(df: Any) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for row in df.select("partition", "offset").collect():
        out.setdefault(row.partition, []).append(row.offset)
    return {p: sorted(v) for p, v in sorted(out.items())}


def test_reads_whole_topic_with_kafka_schema(spark: Any, cluster: Any, topic: str) -> None:
    df = _reader(spark, cluster, subscribe=topic).load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>"
    )
    assert df.count() == PARTITIONS * PER_PARTITION
    rows = [(p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION)]
    expected = _expected_df(spark, topic, rows, headers=False)
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)


def test_tasks_read_the_leaders_files_on_its_machine_unless_told_not_to(
    spark: Any, cluster: Any, topic: str
) -> None:
    """Spark's tasks read the records from the broker's segment files (MillraceLocalFetch,
    counted by the broker's request metrics); ``localReads=false`` fetches them over TCP:
    the same rows either way."""
    from tests.integration.test_metrics_endpoint import scrape

    url = str(cluster.broker(1)["metrics_url"])

    def requests(name: str) -> float:
        counts = scrape(url).get("kafka_network_requestmetrics_requests_total", {})
        return sum(n for labels, n in counts.items() if dict(labels)["request"] == name)

    rows = [(p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION)]
    expected = _expected_df(spark, topic, rows, headers=True)
    located = requests("MillraceLocalFetch")
    df = _reader(spark, cluster, subscribe=topic, includeHeaders="true").load()
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)
    assert requests("MillraceLocalFetch") >= located + PARTITIONS
    located, fetched = requests("MillraceLocalFetch"), requests("Fetch")
    df = _reader(spark, cluster, subscribe=topic, includeHeaders="true", localReads="false")
    assert_df_equality(df.load(), expected, ignore_row_order=True, ignore_nullable=True)
    assert requests("MillraceLocalFetch") == located
    assert requests("Fetch") >= fetched + PARTITIONS


def test_include_headers(spark: Any, cluster: Any, topic: str) -> None:
    df = _reader(spark, cluster, subscribe=topic, includeHeaders="true").load()
    assert df.schema.simpleString().endswith(
        "timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    rows = [(p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION)]
    expected = _expected_df(spark, topic, rows, headers=True)
    assert_df_equality(df, expected, ignore_row_order=True, ignore_nullable=True)


def test_json_starting_and_ending_offsets(spark: Any, cluster: Any, topic: str) -> None:
    df = _reader(
        spark,
        cluster,
        assign=json.dumps({topic: [0, 1, 2]}),
        startingOffsets=json.dumps({topic: {"0": 10, "1": -2, "2": 25}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": 5, "2": -1}}),
    ).load()
    assert _offsets(df) == {
        0: list(range(10, 20)),
        1: list(range(5)),
        2: list(range(25, PER_PARTITION)),
    }


def test_subscribe_pattern_and_assign_subset(spark: Any, cluster: Any, topic: str) -> None:
    df = _reader(spark, cluster, subscribePattern="spark-read-b.*").load()
    assert df.count() == PARTITIONS * PER_PARTITION
    df = _reader(spark, cluster, assign=json.dumps({topic: [1]})).load()
    assert _offsets(df) == {1: list(range(PER_PARTITION))}


def test_timestamp_based_positions(spark: Any, cluster: Any, topic: str) -> None:
    # Global starting timestamp: first record with ts >= BASE+105 is i=11 in every partition.
    df = _reader(spark, cluster, subscribe=topic, startingTimestamp=str(BASE_TS + 105)).load()
    assert _offsets(df) == {p: list(range(11, PER_PARTITION)) for p in range(PARTITIONS)}

    df = _reader(
        spark,
        cluster,
        subscribe=topic,
        startingOffsetsByTimestamp=json.dumps(
            {topic: {"0": BASE_TS, "1": BASE_TS + 300, "2": BASE_TS + 10_000}}
        ),
        endingOffsetsByTimestamp=json.dumps(
            {topic: {"0": BASE_TS + 50, "1": BASE_TS + 10_000, "2": BASE_TS + 10_000}}
        ),
        startingOffsetsByTimestampStrategy="latest",
    ).load()
    # p0: [0, 5); p1: [30, end); p2: no record that late -> starts (and ends) at latest.
    assert _offsets(df) == {0: list(range(5)), 1: list(range(30, PER_PARTITION))}


def test_timestamp_without_records_fails_by_default(spark: Any, cluster: Any, topic: str) -> None:
    df = _reader(spark, cluster, subscribe=topic, startingTimestamp=str(BASE_TS + 10**9)).load()
    with pytest.raises(Exception, match="startingTimestamp"):
        df.count()


def test_split_ranges_read_the_same_rows(spark: Any, cluster: Any, topic: str) -> None:
    plain = _reader(spark, cluster, subscribe=topic).load()
    assert plain.rdd.getNumPartitions() == PARTITIONS
    split = _reader(spark, cluster, subscribe=topic, minPartitions="8").load()
    assert split.rdd.getNumPartitions() >= 8
    capped = _reader(spark, cluster, subscribe=topic, maxRecordsPerPartition="7").load()
    assert capped.rdd.getNumPartitions() == PARTITIONS * 6  # ceil(40 / 7) per partition
    assert_df_equality(split, plain, ignore_row_order=True)
    assert_df_equality(capped, plain, ignore_row_order=True)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"subscribe": "x", "assign": '{"x":[0]}'}, "subscribe"),
        ({"subscribe": "x", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "x", "minPartitions": "0"}, "minPartitions"),
        ({"subscribe": "x", "startingOffsets": "{not json"}, "startingOffsets"),
        ({"subscribe": "x", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ],
)
def test_bad_option_fails_at_load(
    spark: Any, cluster: Any, options: dict[str, str], named: str
) -> None:
    with pytest.raises(Exception, match=named):
        _reader(spark, cluster, **options).load()


def test_missing_bootstrap_fails_at_load(spark: Any) -> None:
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers"):
        spark.read.format("millrace").option("subscribe", "x").load()


def test_batch_only_rules(spark: Any, cluster: Any, topic: str) -> None:
    with pytest.raises(Exception, match="startingOffsets"):
        _reader(spark, cluster, subscribe=topic, startingOffsets="latest").load().count()
    with pytest.raises(Exception, match="endingOffsets"):
        _reader(spark, cluster, subscribe=topic, endingOffsets="earliest").load().count()


def test_deleted_records_and_fail_on_data_loss(spark: Any, cluster: Any) -> None:
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition as CKTopicPartition
    from confluent_kafka.admin import AdminClient

    name = cluster.create_topic("spark-read-data-loss", 1)
    producer = Producer(cluster.conf())
    for i in range(30):
        producer.produce(name, value=str(i).encode(), partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient(cluster.conf())
    futures = admin.delete_records([CKTopicPartition(name, 0, 10)], request_timeout=30)
    for f in futures.values():
        f.result(timeout=30)

    starting = json.dumps({name: {"0": 0}})
    df = _reader(spark, cluster, subscribe=name, startingOffsets=starting).load()
    with pytest.raises(Exception, match="failOnDataLoss"):
        df.count()
    df = _reader(
        spark, cluster, subscribe=name, startingOffsets=starting, failOnDataLoss="false"
    ).load()
    assert _offsets(df) == {0: list(range(10, 30))}


def test_format_found_without_register(cluster: Any, topic: str) -> None:
    """A fresh Spark session that never calls ``spark_connector.register`` finds the format
    through Spark's ``pyspark_*`` module discovery."""
    script = textwrap.dedent(
        f"""
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[1]")
                 .config("spark.ui.enabled", "false")
                 .config("spark.driver.bindAddress", "127.0.0.1")
                 .config("spark.driver.host", "127.0.0.1").getOrCreate())
        n = (spark.read.format("millrace")
             .option("kafka.bootstrap.servers", "{cluster.bootstrap}")
             .option("subscribe", "{topic}").load().count())
        print("COUNT", n)
        spark.stop()
        """
    )
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert f"COUNT {PARTITIONS * PER_PARTITION}" in out.stdout, out.stderr[-3000:]


# --- read_range (fetcher=librdkafka) against a scripted consumer: offset gaps and data loss ---


class _FakeMsg:
    def __init__(self, offset: int, eof: bool = False) -> None:
        self._offset = offset
        self._eof = eof

    def error(self) -> Any:
        if not self._eof:
            return None
        from confluent_kafka import KafkaError

        return KafkaError(KafkaError._PARTITION_EOF)

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v"

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)

    def headers(self) -> None:
        return None


class _ScriptedConsumer:
    """Delivers records at ``offsets`` (others are gaps: compacted or control records) of a
    log spanning ``[low, high)``, then a partition-EOF event, like librdkafka."""

    offsets: list[int] = []
    low = 0
    high = 0

    def __init__(self, conf: dict[str, Any]) -> None:
        self.pos = 0
        self.eof_sent = False

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        return self.low, self.high

    def assign(self, tps: list[Any]) -> None:
        self.pos = tps[0].offset

    def consume(self, n: int, timeout: float) -> list[_FakeMsg]:
        out = []
        for off in self.offsets:
            if off >= self.pos and len(out) < n:
                out.append(_FakeMsg(off))
        if out:
            self.pos = out[-1].offset() + 1
        if len(out) < n and not self.eof_sent:
            self.pos = self.high
            self.eof_sent = True
            out.append(_FakeMsg(self.high, eof=True))
        return out

    def position(self, tps: list[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition as CKTopicPartition

        return [CKTopicPartition(tps[0].topic, tps[0].partition, self.pos)]

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("low", "from_", "until", "fail", "expected"),
    [
        (0, 0, 11, True, [0, 1, 2, 5, 6, 9]),  # gaps inside, control record at 10
        (0, 3, 6, True, [5]),  # range starts and ends in gaps
        (0, 7, 9, True, []),  # range entirely in a gap
        (4, 0, 11, False, [5, 6, 9]),  # log start moved past the range start: skipped
        (4, 0, 11, True, "failOnDataLoss"),  # ... or fails
    ],
)
def test_read_range_gaps_and_data_loss(
    monkeypatch: pytest.MonkeyPatch,
    low: int,
    from_: int,
    until: int,
    fail: bool,
    expected: Any,
) -> None:
    import confluent_kafka
    import pyarrow as pa

    from spark_connector.read.consumer import read_range
    from spark_connector.read.options import parse_read_options
    from spark_connector.read.planner import OffsetRange

    monkeypatch.setattr(_ScriptedConsumer, "offsets", [o for o in [0, 1, 2, 5, 6, 9] if o >= low])
    monkeypatch.setattr(_ScriptedConsumer, "low", low)
    monkeypatch.setattr(_ScriptedConsumer, "high", 11)
    monkeypatch.setattr(confluent_kafka, "Consumer", _ScriptedConsumer)
    options = parse_read_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "t",
            "failOnDataLoss": str(fail).lower(),
            "fetcher": "librdkafka",
        },
        streaming=False,
    )
    schema = pa.schema(
        [
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("timestampType", pa.int32()),
        ]
    )
    r = OffsetRange("t", 0, from_, until)
    if isinstance(expected, str):
        with pytest.raises(RuntimeError, match=expected):
            list(read_range(options, r, schema))
        return
    batches = list(read_range(options, r, schema))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == expected
    for b in batches:
        assert b.schema.equals(schema)
        assert b.column("timestampType").to_pylist() == [0] * b.num_rows


def test_a_topic_or_pattern_that_matches_nothing_reads_as_an_empty_dataframe(
    spark: Any, cluster: Any
) -> None:
    """As Spark's own Kafka source: an empty DataFrame (the old reader failed with a bare
    AssertionError), with a warning naming the topic or pattern."""
    for options in ({"subscribe": "no-such-topic"}, {"subscribePattern": "no-such-.*"}):
        df = _reader(spark, cluster, **options).load()
        assert df.count() == 0, options
        assert df.columns[:3] == ["key", "value", "topic"]


def test_unreachable_bootstrap_servers_say_what_was_tried_and_which_option_waits(
    spark: Any,
) -> None:
    from tests.harness.ports import free_port

    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception) as info:
        (
            spark.read.format("millrace")
            .option("kafka.bootstrap.servers", dead)
            .option("subscribe", "t")
            .option("kafka.default.api.timeout.ms", "2000")
            .load()
            .count()
        )
    text = str(info.value)
    assert f"no broker of kafka.bootstrap.servers='{dead}' answered" in text, text
    assert "option 'kafka.default.api.timeout.ms' sets how long to wait (now 2000 ms)" in text


def test_starting_from_a_consumer_groups_committed_offsets(
    spark: Any, cluster: Any, topic: str
) -> None:
    """startingOffsets=group: where the group ``kafka.group.id`` is (partition 0 at 3, 1 at
    5), and the fallback where it has no offset (partition 2: earliest, or latest)."""
    from confluent_kafka import Consumer, TopicPartition

    group = "reader-starting-group"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 5)], asynchronous=False
        )
    finally:
        consumer.close()
    options = {"subscribe": topic, "startingOffsets": "group", "kafka.group.id": group}
    earliest = _offsets(_reader(spark, cluster, **options).load())
    assert min(earliest[0]) == 3 and min(earliest[1]) == 5 and min(earliest[2]) == 0
    latest = _offsets(
        _reader(spark, cluster, **options, startingOffsetsGroupFallback="latest").load()
    )
    assert min(latest[0]) == 3 and min(latest[1]) == 5 and 2 not in latest
