"""``deliveryGuarantee=exactly-once`` (``docs/exactly-once.md``) with real Spark, real broker
processes and clients nobody here wrote (confluent-kafka, Kafka's own tools, Kafka 3.9.1):

* a streaming topic -> topic query (``jobs/enrich_exactly_once.py``) over several
  micro-batches: a read_committed consumer sees every input record exactly once, the
  consumer group's offsets equal the input's end offsets, the sink log says committed; runs
  from the same checkpoint add only the new records, also when Spark replays a batch the
  sink had committed or had left prepared (a driver that died after or inside the commit);
* ``df.write`` exactly-once is all or nothing: a failing task leaves nothing visible to
  read_committed (at-least-once leaves partial output) and no transaction open;
* ``spark_connector.write_batch`` in ``foreachBatch``: a replayed batch id writes once, the
  source offsets go to the group;
* the reader honours ``kafka.isolation.level=read_committed`` (aborted records and control
  records skipped, the LSO respected) in batch and streaming reads;
* bad settings fail at start with a message naming what to set;
* the same streaming pipeline against Apache Kafka 3.9.1 (one broker on the module
  cluster's ZooKeeper, under a chroot)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.errors import PySparkException

import spark_connector
from spark_connector.kafka.transactions import TxnClient
from tests.harness.kafka_tools import TOOLS, kafka_tool_runner, ok

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(
        {
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
        }
    ),
]

JOBS = Path(__file__).resolve().parents[2] / "jobs"
PARTITIONS = 3


# --- clients ---------------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, records: list[tuple[str, str]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value in records:
        producer.produce(topic, value.encode(), key.encode())
    assert producer.flush(30) == 0


def _read(
    bootstrap: str,
    topic: str,
    partitions: int = PARTITIONS,
    isolation: str = "read_committed",
    timeout_s: float = 60.0,
) -> list[Any]:
    """Every record of ``topic`` a confluent-kafka consumer with ``isolation`` sees, up to
    the end (the LSO for read_committed): reads until every partition reported EOF."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out: list[Any] = []
        eof: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(eof) < partitions and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == -191:  # _PARTITION_EOF
                    eof.add(msg.partition())
                    continue
                raise AssertionError(f"consumer error on {topic}: {err}")
            eof.discard(msg.partition())
            out.append(msg)
        assert len(eof) == partitions, f"{topic}: not read to its end within {timeout_s}s"
        return out
    finally:
        consumer.close()


def _pairs(messages: list[Any]) -> list[tuple[str, str]]:
    return [(m.key().decode(), m.value().decode()) for m in messages]


def _end_offsets(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def _committed(
    bootstrap: str, group: str, topic: str, partitions: int = PARTITIONS
) -> dict[int, int]:
    """The group's committed offsets as confluent-kafka's ``committed()`` reports them
    (require_stable: a pending transactional commit is waited for, not skipped)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in parts}


def _ongoing(bootstrap: str, prefix: str) -> list[str]:
    with TxnClient(bootstrap, timeout_s=30) as client:
        return client.list_ongoing(prefix)


def _lag_table(described: str, topic: str) -> dict[int, tuple[int, int, int]]:
    """The rows of ``topic`` in a ``kafka-consumer-groups --describe`` table: partition ->
    (current offset, log end offset, lag)."""
    rows = [line.split() for line in described.splitlines() if line.strip()]
    header = next(r for r in rows if r[0] == "GROUP")
    assert header[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    return {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows if r[1] == topic}


def _load_job(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"millrace_job_{name}", JOBS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _sink_log(checkpoint: Path, sink: str | None = None) -> dict[int, dict[str, Any]]:
    """The batch records of the query's sink (or of ``write_batch`` sink ``sink``)."""
    directory = checkpoint / "millrace-sink"
    if sink is not None:
        directory = directory / "sinks" / sink
    assert directory.is_dir(), f"no sink log in {checkpoint}: {sorted(checkpoint.iterdir())}"
    return {
        int(p.stem): json.loads(p.read_text()) for p in directory.glob("*.json") if p.stem.isdigit()
    }


def _spark_batches(checkpoint: Path, log: str) -> list[int]:
    """Batch ids with a file in Spark's ``offsets`` or ``commits`` log."""
    return sorted(int(p.name) for p in (checkpoint / log).iterdir() if p.name.isdigit())


# --- 1. streaming topic -> topic -------------------------------------------------------------


def _run_enrich_job(
    spark: Any, bootstrap: str, source: str, sink: str, group: str, checkpoint: Path
) -> list[dict[str, Any]]:
    """The exactly-once job's query, Trigger.AvailableNow, 100 records per micro-batch;
    returns the progress of the batches that read records."""
    job = _load_job("enrich_exactly_once")
    args = job.parse_args(
        [
            "--bootstrap",
            bootstrap,
            "--input",
            source,
            "--output",
            sink,
            "--group",
            group,
            "--checkpoint",
            str(checkpoint),
            "--available-now",
            "--max-offsets-per-trigger",
            "100",
        ]
    )
    query = job.build_query(spark, args)
    try:
        assert query.awaitTermination(120), "the exactly-once query did not finish in 120 s"
        assert query.exception() is None, query.exception()
        return [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()


def _forget_spark_commit(checkpoint: Path, batch: int) -> None:
    """Remove ``commits/<batch>`` (and Hadoop's checksum file) from Spark's checkpoint, as
    if the driver had died before writing it: the next run runs the batch again."""
    for name in (str(batch), f".{batch}.crc"):
        (checkpoint / "commits" / name).unlink()


def _unfinish_last_batch(checkpoint: Path, progress: list[dict[str, Any]]) -> int:
    """Put the checkpoint in the state a driver leaves when it dies inside the sink's commit
    of the last batch, after ending its transactions but before logging it committed: the
    sink log says prepared, Spark has no commit. Returns the batch id."""
    last = max(p["batchId"] for p in progress)
    path = checkpoint / "millrace-sink" / f"{last}.json"
    record = json.loads(path.read_text())
    assert record["state"] == "committed", record
    tasks = [dict(t, state="open") if t["state"] == "committed" else t for t in record["tasks"]]
    path.write_text(json.dumps(dict(record, state="prepared", tasks=tasks)))
    _forget_spark_commit(checkpoint, last)
    return last


def _enriched(records: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(k, v.upper() + "|enriched") for k, v in records]


def _check_pipeline(
    bootstrap: str,
    source: str,
    sink: str,
    group: str,
    checkpoint: Path,
    produced: list[tuple[str, str]],
) -> dict[int, dict[str, Any]]:
    """Exactly once: every input record once in the read_committed output, the group at the
    input's end, every batch of Spark's commit log committed in the sink log and no
    transaction of the sink left open. Returns the sink log."""
    out = _pairs(_read(bootstrap, sink))
    assert len(out) == len(set(out)), "duplicates in the read_committed output"
    assert set(out) == set(_enriched(produced))
    ends = _end_offsets(bootstrap, source)
    assert _committed(bootstrap, group, source) == ends
    sink_log = _sink_log(checkpoint)
    assert set(_spark_batches(checkpoint, "commits")) <= set(sink_log)
    prefixes = set()
    for batch, record in sink_log.items():
        assert record["batch"] == batch
        assert record["state"] == "committed", record
        assert record["group"] == group
        for task in record["tasks"]:
            if task["txn"] is not None:
                prefixes.add(task["txn"][0].rsplit("-", 2)[0])  # <prefix>-<sink id>
    for batch, record in sink_log.items():  # each batch's offsets: Spark's offsets/<N>
        spark_offsets = json.loads(
            (checkpoint / "offsets" / str(batch)).read_text().splitlines()[2]
        )
        assert record["offsets"] == spark_offsets, batch
    last = sink_log[max(sink_log)]
    assert {int(p): o for p, o in last["offsets"][source].items()} == ends
    assert len(prefixes) == 1, prefixes
    assert _ongoing(bootstrap, prefixes.pop() + "-") == []
    return sink_log


def test_streaming_exactly_once_with_group_offsets_and_a_restart(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap
    source = cluster.create_topic(f"{topic_name}-in", PARTITIONS)
    sink = cluster.create_topic(f"{topic_name}-out", PARTITIONS)
    group = f"{topic_name}-enricher"
    checkpoint = tmp_path / "ckpt"
    first = [(f"k{i}", f"v{i}") for i in range(300)]
    _produce(bs, source, first)

    progress = _run_enrich_job(spark, bs, source, sink, group, checkpoint)
    assert len(progress) >= 3, progress  # 300 records, at most 100 per micro-batch
    sink_log = _check_pipeline(bs, source, sink, group, checkpoint, first)
    batches_before = set(sink_log)
    # the group as `millrace groups describe` (Kafka's kafka-consumer-groups) shows it: no lag
    described = cluster.cli("groups", "describe", "--group", group, "--bootstrap-server", bs)
    ends = _end_offsets(bs, source)
    assert _lag_table(described, source) == {p: (o, o, 0) for p, o in ends.items()}

    # the second run from the same checkpoint reads and writes only the new records. Spark's
    # commits/<last> is removed first, as if the driver had died after the sink committed the
    # batch but before Spark recorded it: Spark runs that batch again, the sink writes nothing
    last = max(p["batchId"] for p in progress)
    replayed_rows = next(p["numInputRows"] for p in progress if p["batchId"] == last)
    _forget_spark_commit(checkpoint, last)
    second = [(f"k{i}", f"v{i}") for i in range(300, 450)]
    _produce(bs, source, second)
    progress = _run_enrich_job(spark, bs, source, sink, group, checkpoint)
    assert progress[0]["batchId"] == last, progress  # the replay
    assert sum(p["numInputRows"] for p in progress) == replayed_rows + 150, progress
    sink_log = _check_pipeline(bs, source, sink, group, checkpoint, first + second)
    assert set(sink_log) > batches_before

    # the driver died inside the sink's commit of the last batch, after ending its
    # transactions but before logging it committed: the log says prepared, Spark has no
    # commit. The replay writes nothing and finishes the commit again (EndTxn retries of
    # committed transactions succeed, the same offsets are committed again)
    last = _unfinish_last_batch(checkpoint, progress)
    progress = _run_enrich_job(spark, bs, source, sink, group, checkpoint)
    assert [p["batchId"] for p in progress] == [last], progress
    _check_pipeline(bs, source, sink, group, checkpoint, first + second)


def test_two_queries_with_neighbouring_prefixes_run_at_once(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    """Two exactly-once queries at the same time, transactional id prefixes ``orders`` and
    ``orders-eu``: each commit fences only its own sink's leftovers (the old sink fenced every
    open transaction whose id started with ``orders-``, the other query's included, failing
    its commit), so both finish with every record exactly once."""
    bs = cluster.bootstrap
    job = _load_job("enrich_exactly_once")
    queries = []
    pipelines = []
    for prefix in ("orders", "orders-eu"):
        source = cluster.create_topic(f"{topic_name}-{prefix}-in", PARTITIONS)
        sink = cluster.create_topic(f"{topic_name}-{prefix}-out", PARTITIONS)
        records = [(f"{prefix}-k{i}", f"{prefix}-v{i}") for i in range(240)]
        _produce(bs, source, records)
        checkpoint = tmp_path / prefix
        group = f"{topic_name}-{prefix}"
        args = job.parse_args(
            [
                "--bootstrap",
                bs,
                "--input",
                source,
                "--output",
                sink,
                "--group",
                group,
                "--checkpoint",
                str(checkpoint),
                "--available-now",
                "--max-offsets-per-trigger",
                "40",
                "--option",
                f"transactionalIdPrefix={prefix}",
            ]
        )
        pipelines.append((source, sink, group, checkpoint, records))
        queries.append(job.build_query(spark, args))
    try:
        for query in queries:
            assert query.awaitTermination(180), "a query did not finish in 180 s"
            assert query.exception() is None, query.exception()
        batches = [len([p for p in q.recentProgress if p["numInputRows"] > 0]) for q in queries]
    finally:
        for query in queries:
            query.stop()
    assert min(batches) >= 5, batches  # many commits of each while the other had tasks open
    for source, sink, group, checkpoint, records in pipelines:
        _check_pipeline(bs, source, sink, group, checkpoint, records)


# --- 2. batch df.write -----------------------------------------------------------------------


def _write(df: Any, bootstrap: str, topic: str, prefix: str | None) -> None:
    """``df.write``: exactly-once with transactional id prefix ``prefix``, or at-least-once
    (the default) when it is None."""
    writer = (
        df.write.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("kafka.message.timeout.ms", "10000")
    )
    if prefix is not None:
        writer = writer.option("deliveryGuarantee", "exactly-once").option(
            "transactionalIdPrefix", prefix
        )
    writer.mode("append").save()


def _transactions_listed(cluster: Any, prefix: str) -> list[list[str]]:
    """``millrace transactions list`` rows whose transactional id starts with ``prefix``."""
    out = cluster.cli("transactions", "--bootstrap-server", cluster.bootstrap, "list")
    return [r.split() for r in out.splitlines() if r.startswith(prefix)]


def test_batch_write_exactly_once_is_all_or_nothing(
    spark: Any, cluster: Any, topic_name: str
) -> None:
    bs = cluster.bootstrap
    ok_topic = cluster.create_topic(f"{topic_name}-ok", PARTITIONS)
    eos_topic = cluster.create_topic(f"{topic_name}-eos", PARTITIONS)
    alo_topic = cluster.create_topic(f"{topic_name}-alo", PARTITIONS)
    prefix = f"eos-batch-{uuid.uuid4().hex[:8]}"

    # success: every row of 4 tasks visible to read_committed after save()
    rows = [(f"k{i}", f"v{i}") for i in range(200)]
    df = spark.sparkContext.parallelize(rows, 4).toDF("key string, value string")
    _write(df, bs, ok_topic, prefix)
    out = _pairs(_read(bs, ok_topic))
    assert sorted(out) == sorted(rows)
    assert _ongoing(bs, prefix + "-") == []

    # failure: the last of 4 tasks (2 run at a time) meets a row for partition 7 of a
    # 3-partition topic after its good rows, once the other tasks wrote theirs
    bad = [(f"k{i}", f"v{i}", i % PARTITIONS) for i in range(200)] + [("bad", "bad", 7)]
    bad_df = spark.sparkContext.parallelize(bad, 4).toDF("key string, value string, partition int")
    for topic, eos_prefix in ((eos_topic, prefix), (alo_topic, None)):
        with pytest.raises(PySparkException) as info:
            _write(bad_df, bs, topic, eos_prefix)
        assert "partition" in str(info.value).lower(), info.value
    # exactly-once: nothing visible, though the successful tasks' rows are in the log
    # (read_uncommitted sees them, aborted)
    assert _read(bs, eos_topic) == []
    written = _pairs(_read(bs, eos_topic, isolation="read_uncommitted"))
    assert written and set(written) <= {(k, v) for k, v, _ in bad}
    # at-least-once (the default): the successful tasks' rows stay
    partial = _pairs(_read(bs, alo_topic))
    assert 0 < len(partial) < len(bad), len(partial)
    assert set(partial) <= {(k, v) for k, v, _ in bad}
    # and no transaction of the write stays open
    assert _ongoing(bs, prefix + "-") == []
    listed = _transactions_listed(cluster, prefix)
    assert listed and all(r[-1] != "Ongoing" for r in listed), listed


# --- 3. write_batch in foreachBatch ----------------------------------------------------------


def test_write_batch_in_foreach_batch_writes_a_replayed_batch_once(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap
    source = cluster.create_topic(f"{topic_name}-in", PARTITIONS)
    sink = cluster.create_topic(f"{topic_name}-out", PARTITIONS)
    group = f"{topic_name}-group"
    checkpoint = tmp_path / "ckpt"
    records = [(f"k{i}", f"v{i}") for i in range(240)]
    _produce(bs, source, records)
    calls: list[int] = []

    def upsert(batch_df: Any, batch_id: int) -> None:
        out = batch_df.selectExpr("key", "concat(CAST(value AS STRING), '!') AS value")
        for _ in range(2):  # the second call is a replay of the same batch id: skipped
            spark_connector.write_batch(
                out,
                batch_id,
                bootstrap_servers=bs,
                topic=sink,
                checkpoint_location=str(checkpoint),
                commit_offsets_to_group=group,
            )
        calls.append(batch_id)

    query = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .writeStream.foreachBatch(upsert)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the foreachBatch query did not finish in 120 s"
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert len(calls) >= 3, calls
    out = _pairs(_read(bs, sink))
    assert len(out) == len(set(out)), "duplicates in the read_committed output"
    assert set(out) == {(k, v + "!") for k, v in records}
    ends = _end_offsets(bs, source)
    assert _committed(bs, group, source) == ends
    sink_log = _sink_log(checkpoint, sink)
    assert set(calls) <= set(sink_log)
    assert all(r["state"] == "committed" for r in sink_log.values()), sink_log
    assert {int(p): o for p, o in sink_log[max(calls)]["offsets"][source].items()} == ends


# --- 4. reading transactional input ----------------------------------------------------------


def _transactional_input(bootstrap: str, topic: str, partitions: int) -> dict[str, set[str]]:
    """Fill ``topic`` with plain records and committed and aborted transactions,
    interleaved (a plain record is written while a transaction is open); returns the values
    by kind: plain, committed, aborted."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    txn = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 0}
    )
    txn.init_transactions(30)
    kinds: dict[str, set[str]] = {"plain": set(), "committed": set(), "aborted": set()}

    def put(producer: Producer, kind: str, name: str, n: int) -> None:
        for p in range(partitions):
            for i in range(n):
                value = f"{name}-{p}-{i}"
                producer.produce(topic, value.encode(), partition=p)
                kinds[kind].add(value)
        producer.flush(30)

    def transaction(kind: str, name: str, n: int, plain_inside: str | None = None) -> None:
        txn.begin_transaction()
        put(txn, kind, name, n)
        if plain_inside is not None:
            put(plain, "plain", plain_inside, 1)
        if kind == "committed":
            txn.commit_transaction(30)
        else:
            txn.abort_transaction(30)

    put(plain, "plain", "plain-a", 3)
    transaction("committed", "committed-1", 3)
    transaction("aborted", "aborted-1", 4, plain_inside="plain-mid-1")
    put(plain, "plain", "plain-b", 2)
    transaction("aborted", "aborted-2", 5)
    transaction("committed", "committed-2", 2, plain_inside="plain-mid-2")
    transaction("aborted", "aborted-3", 3)
    put(plain, "plain", "plain-c", 1)
    return kinds


def _batch_read(spark: Any, bootstrap: str, topic: str, isolation: str) -> list[Any]:
    return (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .option("minPartitions", "8")  # ranges that start and end inside aborted runs
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
        .collect()
    )


def test_reader_honours_read_committed(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap
    topic = cluster.create_topic(topic_name, 2)
    kinds = _transactional_input(bs, topic, 2)
    visible = kinds["plain"] | kinds["committed"]
    ends = _end_offsets(bs, topic, 2)
    # the log holds markers and aborted records: more offsets than visible records
    assert sum(ends.values()) > len(visible) + len(kinds["aborted"])

    rows = _batch_read(spark, bs, topic, "read_committed")
    values = [r.value for r in rows]
    assert len(values) == len(set(values))
    assert set(values) == visible
    for p in range(2):
        offsets = sorted(r.offset for r in rows if r.partition == p)
        assert offsets[-1] - offsets[0] + 1 > len(offsets), "no gap at the aborted records?"

    uncommitted = [r.value for r in _batch_read(spark, bs, topic, "read_uncommitted")]
    assert sorted(uncommitted) == sorted(visible | kinds["aborted"])  # no control records

    # streaming, 4 offsets per micro-batch: batch ends fall inside aborted runs and on markers
    query = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", bs)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("maxOffsetsPerTrigger", "4")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName("read_committed_stream")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the streaming read did not finish in 120 s"
        assert query.exception() is None, query.exception()
        assert len(query.recentProgress) >= 5, query.recentProgress
    finally:
        query.stop()
    streamed = [r.value for r in spark.sql("SELECT value FROM read_committed_stream").collect()]
    spark.catalog.dropTempView("read_committed_stream")
    assert len(streamed) == len(set(streamed))
    assert set(streamed) == visible

    # an open transaction at the end: read_committed stops at the LSO, without waiting
    opener = Producer({"bootstrap.servers": bs, "transactional.id": f"{topic}-open"})
    opener.init_transactions(30)
    opener.begin_transaction()
    for p in range(2):
        opener.produce(topic, f"open-{p}".encode(), partition=p)
    assert opener.flush(30) == 0
    try:
        started = time.monotonic()
        values = [r.value for r in _batch_read(spark, bs, topic, "read_committed")]
        assert time.monotonic() - started < 30
        assert sorted(values) == sorted(visible)
        values = [r.value for r in _batch_read(spark, bs, topic, "read_uncommitted")]
        assert {"open-0", "open-1"} <= set(values)
    finally:
        opener.commit_transaction(30)
    values = [r.value for r in _batch_read(spark, bs, topic, "read_committed")]
    assert sorted(values) == sorted(visible | {"open-0", "open-1"})


# --- 5. settings that cannot work ------------------------------------------------------------


def _stream_error(writer: Any) -> str:
    """The error of a streaming write: raised by ``start()`` or failing the query before
    its first batch is written."""
    try:
        query = writer.trigger(availableNow=True).start()
    except Exception as exc:  # noqa: BLE001 - the text is what is checked
        return f"{type(exc).__name__}: {exc}"
    try:
        query.awaitTermination(60)
    except Exception as exc:  # noqa: BLE001 - StreamingQueryException
        return f"{type(exc).__name__}: {exc}"
    finally:
        query.stop()
    raise AssertionError("the streaming query did not fail")


def test_bad_settings_fail_at_start_naming_what_to_set(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    bs = cluster.bootstrap
    topic = cluster.create_topic(topic_name, 1)
    _produce(bs, topic, [("k", "v")])
    df = spark.createDataFrame([("k", "v")], "key string, value string")

    def batch_error(**options: str) -> str:
        writer = df.write.format("millrace").option("kafka.bootstrap.servers", bs)
        for key, value in {"topic": topic, **options}.items():
            writer = writer.option(key, value)
        with pytest.raises(PySparkException) as info:
            writer.mode("append").save()
        return str(info.value)

    text = batch_error(deliveryGuarantee="exactly_once")
    assert "option 'deliveryGuarantee' is 'exactly_once'" in text
    assert "'at-least-once' (the default) or 'exactly-once'" in text
    text = batch_error(commitOffsetsToGroup="g")
    assert "option 'commitOffsetsToGroup'" in text
    assert "needs 'deliveryGuarantee=exactly-once'" in text
    text = batch_error(deliveryGuarantee="exactly-once", commitOffsetsToGroup="g")
    assert "use it on a streaming write or with write_batch(...)" in text
    text = batch_error(**{"deliveryGuarantee": "exactly-once", "kafka.transactional.id": "mine"})
    assert "option 'kafka.transactional.id' is not supported with exactly-once" in text
    assert "set 'transactionalIdPrefix'" in text
    with pytest.raises(PySparkException) as info:
        spark_connector.write_batch(
            df,
            0,
            bootstrap_servers=bs,
            topic=topic,
            checkpoint_location="hdfs://namenode:8020/checkpoints/q",
        )
    text = str(info.value)
    assert "option 'checkpointLocation' is 'hdfs://namenode:8020/checkpoints/q'" in text
    assert "needs a local or mounted file system path" in text
    assert len(_read(bs, topic, 1)) == 1  # nothing but the input record was written

    # streaming without option checkpointLocation: Spark's own check when there is no
    # checkpoint at all; with the session's spark.sql.streaming.checkpointLocation, the
    # sink's (its log must be where the option says)
    def stream_writer(session: Any) -> Any:
        return (
            session.readStream.format("millrace")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .select("key", "value")
            .writeStream.format("millrace")
            .option("kafka.bootstrap.servers", bs)
            .option("topic", topic)
            .option("deliveryGuarantee", "exactly-once")
        )

    text = _stream_error(stream_writer(spark))
    assert 'checkpointLocation must be specified either through option("checkpointLocation"' in text
    session = spark.newSession()
    session.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "session-ckpt"))
    spark_connector.register(session)
    text = _stream_error(stream_writer(session))
    assert "'deliveryGuarantee=exactly-once' needs option 'checkpointLocation'" in text, text
    assert len(_read(bs, topic, 1)) == 1


# --- 6. against Apache Kafka 3.9.1 -----------------------------------------------------------


@pytest.fixture
def kafka(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One Apache Kafka 3.9.1 broker (``bench.systems.KafkaSystem``: the JVM started from
    the jars of ``make setup`` as ``kafka-server-start.sh`` would) on the module cluster's
    ZooKeeper under a chroot; stopped by its own pid afterwards."""
    from bench.systems import KafkaSystem, kafka_available

    if not kafka_available():
        pytest.fail("Apache Kafka 3.9.1 is not in .cache/jvm/kafka-dist: run `make setup`")
    system = KafkaSystem(tmp_path_factory.mktemp("kafka"), 1, str(cluster.json["zookeeper"]))
    try:
        yield system
    finally:
        system.stop()


def test_streaming_exactly_once_against_apache_kafka(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path
) -> None:
    bs = kafka.bootstrap
    source, sink = f"{topic_name}-in", f"{topic_name}-out"
    kafka.create_topic(source, PARTITIONS)
    kafka.create_topic(sink, PARTITIONS)
    group = f"{topic_name}-enricher"
    checkpoint = tmp_path / "ckpt"
    records = [(f"k{i}", f"v{i}") for i in range(300)]
    _produce(bs, source, records)
    progress = _run_enrich_job(spark, bs, source, sink, group, checkpoint)
    assert len(progress) >= 3, progress
    _check_pipeline(bs, source, sink, group, checkpoint, records)
    # Kafka's own kafka-consumer-groups shows the group at the input's end: no lag
    run = kafka_tool_runner(tmp_path)
    described = ok(
        run(
            TOOLS + "consumer.group.ConsumerGroupCommand",
            "--bootstrap-server",
            bs,
            "--describe",
            "--group",
            group,
        )
    )
    ends = _end_offsets(bs, source)
    assert _lag_table(described, source) == {p: (o, o, 0) for p, o in ends.items()}

    # a restart after the driver died inside the sink's commit of the last batch, with new
    # input: Kafka's coordinator accepts the repeated EndTxn and offsets, nothing is doubled
    last = _unfinish_last_batch(checkpoint, progress)
    more = [(f"k{i}", f"v{i}") for i in range(300, 360)]
    _produce(bs, source, more)
    progress = _run_enrich_job(spark, bs, source, sink, group, checkpoint)
    assert progress[0]["batchId"] == last, progress
    _check_pipeline(bs, source, sink, group, checkpoint, records + more)
