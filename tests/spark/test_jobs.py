"""The spark-submit jobs in ``jobs/`` run end to end against a real broker: their ``main``
functions are called with command-line arguments in the test's SparkSession (``getOrCreate``
returns it), input produced and output read with confluent-kafka."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.spark

JOBS = Path(__file__).resolve().parents[2] / "jobs"


def _load_job(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"millrace_job_{name}", JOBS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value in records:
        producer.produce(topic, value, key)
    assert producer.flush(30) == 0


def _iso(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _run_counts(
    job: ModuleType, cluster: Any, source: str, sink: str, ckpt: Path, *extra: str
) -> None:
    job.main(
        [
            "--bootstrap",
            cluster.bootstrap,
            "--input",
            source,
            "--output",
            sink,
            "--checkpoint",
            str(ckpt),
            "--group",
            "counter",
            "--available-now",
            "--max-offsets-per-trigger",
            "50",
            *extra,
        ]
    )


def _table(cluster: Any, sink: str) -> dict[bytes, Any]:
    """The compacted output read as a table (read_committed): key -> value JSON or None."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        cluster.conf(
            {
                "group.id": "stream-counts-reader",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
    )
    latest: dict[bytes, Any] = {}
    try:
        consumer.assign([TopicPartition(sink, 0, 0)])
        while True:
            msg = consumer.poll(30)
            assert msg is not None, "no end of partition within 30 s"
            if msg.error() is not None:
                break  # end of the partition (markers and aborted data are not records)
            value = msg.value()
            latest[msg.key()] = None if value is None else json.loads(value)
    finally:
        consumer.close()
    return latest


def test_stream_counts_job_upserts_counts_per_key_per_window(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    """Counts per (user, minute) upserted into a compacted topic exactly once: the record
    key is the JSON of the group key, the latest value of each key is its count, the
    consumed offsets are committed to the group; a second run adds a later window and, with
    --expire-after, deletes (tombstones) the windows it closed."""
    from confluent_kafka import Consumer, TopicPartition

    source = cluster.create_topic(f"{topic_name}-in", 2)
    sink = cluster.create_topic(f"{topic_name}-out", 1, {"cleanup.policy": "compact"})
    base = datetime(2026, 1, 1, tzinfo=UTC)
    events = []
    expected: Counter[tuple[str, str]] = Counter()
    for i in range(120):
        key = f"user-{i % 4}"
        ts = base + timedelta(seconds=i)  # two one-minute windows
        events.append({"key": key, "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"), "n": i})
        expected[(key, _iso(base + timedelta(minutes=i // 60)))] += 1
    _produce(
        cluster.bootstrap,
        source,
        [(e["key"].encode(), json.dumps(e).encode()) for e in events],
    )
    job = _load_job("stream_counts")
    ckpt = tmp_path / "ckpt"
    _run_counts(job, cluster, source, sink, ckpt, "--expire-after", "10 minutes")
    latest = _table(cluster, sink)
    got = {(v["key"], v["window"]["start"]): v["count"] for v in latest.values() if v}
    assert got == dict(expected)
    for key, value in latest.items():
        assert json.loads(key) == {"key": value["key"], "window": value["window"]}
    consumer = Consumer(cluster.conf({"group.id": "counter"}))
    try:
        committed = consumer.committed([TopicPartition(source, p) for p in (0, 1)], timeout=30)
    finally:
        consumer.close()
    assert sum(tp.offset for tp in committed) == 120

    # an hour later: windows more than 10 minutes older than the newest are deleted
    late = base + timedelta(hours=1)
    _produce(
        cluster.bootstrap,
        source,
        [
            (
                b"user-0",
                json.dumps({"key": "user-0", "ts": late.strftime("%Y-%m-%dT%H:%M:%SZ")}).encode(),
            )
        ],
    )
    _run_counts(job, cluster, source, sink, ckpt, "--expire-after", "10 minutes")
    latest = _table(cluster, sink)
    live = {(v["key"], v["window"]["start"]): v["count"] for v in latest.values() if v}
    assert live == {("user-0", _iso(late)): 1}
    assert sum(1 for v in latest.values() if v is None) == len(expected)


def test_topic_to_parquet_job_copies_the_range(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    topic = cluster.create_topic(topic_name, 2)
    records = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(80)]
    _produce(cluster.bootstrap, topic, records)
    job = _load_job("topic_to_parquet")
    out = tmp_path / "copy.parquet"
    written = job.main(
        [
            "--bootstrap",
            cluster.bootstrap,
            "--topic",
            topic,
            "--output",
            str(out),
            "--decode",
        ]
    )
    assert written == 80
    rows = spark.read.parquet(str(out)).collect()
    assert sorted((r["key"], r["value"]) for r in rows) == sorted(
        (k.decode(), v.decode()) for k, v in records
    )
    by_partition: dict[int, list[int]] = {}
    for r in rows:
        by_partition.setdefault(r["partition"], []).append(r["offset"])
    assert sum(len(v) for v in by_partition.values()) == 80
    for offsets in by_partition.values():
        assert sorted(offsets) == list(range(len(offsets)))

    # an explicit offset range: the first 5 records of partition 0, none of partition 1
    partial = tmp_path / "partial.parquet"
    written = job.main(
        [
            "--bootstrap",
            cluster.bootstrap,
            "--topic",
            topic,
            "--output",
            str(partial),
            "--starting-offsets",
            json.dumps({topic: {"0": 0, "1": 0}}),
            "--ending-offsets",
            json.dumps({topic: {"0": 5, "1": 0}}),
        ]
    )
    assert written == 5
    part_rows = spark.read.parquet(str(partial)).collect()
    assert sorted(r["offset"] for r in part_rows) == [0, 1, 2, 3, 4]
    assert {r["partition"] for r in part_rows} == {0}


def test_jobs_read_only_committed_transactions_by_default(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    """Downstream of an exactly-once sink a job must not read aborted output: the jobs read
    ``read_committed`` unless ``--isolation-level read_uncommitted`` is asked for."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = cluster.create_topic(topic_name, 1)
    txn = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"{topic}-t"})
    txn.init_transactions(30)
    for outcome, n in (("committed", 4), ("aborted", 6), ("committed-2", 3)):
        txn.begin_transaction()
        for i in range(n):
            txn.produce(topic, f"{outcome}-{i}".encode(), f"k{i}".encode())
        assert txn.flush(30) == 0  # in the log before the abort (abort drops unsent records)
        if outcome == "aborted":
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
    # the aborted records are in the log: a read_uncommitted consumer sees them
    raw = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"{topic}-raw",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        raw.assign([TopicPartition(topic, 0, 0)])
        values = set()
        deadline = time.monotonic() + 30
        while len(values) < 13 and time.monotonic() < deadline:
            msg = raw.poll(0.5)
            if msg is not None and msg.error() is None:
                values.add(msg.value().decode())
    finally:
        raw.close()
    assert {f"aborted-{i}" for i in range(6)} <= values
    job = _load_job("topic_to_parquet")
    out = tmp_path / "committed.parquet"
    job.main(["--bootstrap", cluster.bootstrap, "--topic", topic, "--output", str(out), "--decode"])
    seen = {r["value"] for r in spark.read.parquet(str(out)).collect()}
    assert seen == {f"committed-{i}" for i in range(4)} | {f"committed-2-{i}" for i in range(3)}
    for name in ("stream_counts", "topic_to_delta", "topic_to_parquet"):
        required = {
            "stream_counts": ["--checkpoint", "c", "--input", "i", "--output", "o"],
            "topic_to_delta": ["--checkpoint", "c", "--topic", "t", "--table", "d"],
            "topic_to_parquet": ["--topic", "t", "--output", "o"],
        }[name]
        args = _load_job(name).parse_args(["--bootstrap", "b:1", *required])
        assert args.isolation_level == "read_committed", name
