"""The spark-submit jobs in ``jobs/`` run end to end against a real broker: their ``main``
functions are called with command-line arguments in the test's SparkSession (``getOrCreate``
returns it), input produced and output read with confluent-kafka."""

from __future__ import annotations

import importlib.util
import json
import sys
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


def test_stream_counts_job_counts_per_key_per_window(
    spark: Any, cluster: Any, topic_name: str, tmp_path: Path
) -> None:
    source = cluster.create_topic(f"{topic_name}-in", 2)
    sink = cluster.create_topic(f"{topic_name}-out", 1)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    events = []
    expected: Counter[tuple[str, str]] = Counter()
    for i in range(120):
        key = f"user-{i % 4}"
        ts = base + timedelta(seconds=i)  # two one-minute windows
        events.append({"key": key, "ts": ts.strftime("%Y-%m-%dT%H:%M:%SZ"), "n": i})
        window = (base + timedelta(minutes=i // 60)).strftime("%Y-%m-%dT%H:%M:%SZ")
        expected[(key, window)] += 1
    _produce(
        cluster.bootstrap,
        source,
        [(e["key"].encode(), json.dumps(e).encode()) for e in events],
    )
    job = _load_job("stream_counts")
    job.main(
        [
            "--bootstrap",
            cluster.bootstrap,
            "--input",
            source,
            "--output",
            sink,
            "--checkpoint",
            str(tmp_path / "ckpt"),
            "--available-now",
            "--max-offsets-per-trigger",
            "50",
        ]
    )
    latest: dict[bytes, dict[str, Any]] = {}
    for msg in cluster.consume(sink, [0])[0]:
        latest[msg.key()] = json.loads(msg.value())  # last update per (key, window) wins
    got = {(v["key"], v["window_start"]): v["count"] for v in latest.values()}
    assert got == dict(expected)
    for key, value in latest.items():
        assert key.decode() == f"{value['key']}@{value['window_start']}"


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
