"""Readers of a topic the exactly-once sink writes, at its micro-batch boundaries
(``docs/exactly-once.md``, "Whole micro-batches for readers"), through Spark and the CLI:
``endingBatch`` on a batch read (the newest batch by default, a given batch id, an error
naming the batches held), ``millrace table --batch N``, and a stream with
``wholeBatches=true`` whose micro-batches are the upstream's, one per trigger.

Three upstream batches of different sizes are written with ``spark_connector.write_batch``
(batch ids 0, 1, 2 of one sink), each rewriting some keys of the one before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

PARTITIONS = 3
# upstream batch -> its rows (key, value): sizes 10, 25 and 7, keys rewritten across batches
BATCHES = [
    [(f"k{i}", f"b0-{i}") for i in range(10)],
    [(f"k{i}", f"b1-{i}") for i in range(5, 30)],
    [(f"k{i}", f"b2-{i}") for i in range(25, 32)],
]


@pytest.fixture(scope="module")
def written(spark: Any, cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    from spark_connector import write_batch

    topic = "boundary-reads"
    cluster.create_topic(topic, PARTITIONS, {"cleanup.policy": "compact"})
    checkpoint = tmp_path_factory.mktemp("sink")
    for batch_id, rows in enumerate(BATCHES):
        write_batch(
            spark.createDataFrame(rows, "key string, value string"),
            batch_id,
            bootstrap_servers=cluster.bootstrap,
            checkpoint_location=str(checkpoint),
            topic=topic,
        )
    return topic


def _read(spark: Any, cluster: Any, topic: str, **options: str) -> Any:
    reader = (
        spark.read.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _table_after(batch: int) -> dict[str, str]:
    state: dict[str, str] = {}
    for rows in BATCHES[: batch + 1]:
        state.update(rows)
    return state


def _as_dict(df: Any) -> dict[str, str]:
    return {
        r["key"].decode(): r["value"].decode()
        for r in df.select("key", "value").collect()
        if r["key"] is not None
    }


def test_a_batch_read_ends_at_the_newest_batch_or_the_one_asked_for(
    spark: Any, cluster: Any, written: str
) -> None:
    records = [sum(len(b) for b in BATCHES[: n + 1]) for n in range(len(BATCHES))]
    assert _read(spark, cluster, written).count() == records[-1]
    for n in range(len(BATCHES)):
        assert _read(spark, cluster, written, endingBatch=str(n)).count() == records[n]
        table = _read(spark, cluster, written, readAs="table", endingBatch=str(n))
        assert _as_dict(table) == _table_after(n)
    assert _as_dict(_read(spark, cluster, written, readAs="table")) == _table_after(2)


def test_a_batch_id_not_held_fails_naming_the_batches_held(
    spark: Any, cluster: Any, written: str
) -> None:
    with pytest.raises(Exception, match="endingBatch") as info:
        _read(spark, cluster, written, endingBatch="7").count()
    text = str(info.value)
    assert "batch 7 of topic 'boundary-reads' is not available" in text, text
    assert "to 2 (the newest)" in text, text
    with pytest.raises(Exception, match="option 'endingBatch' must be"):
        _read(spark, cluster, written, endingBatch="yesterday").count()


def test_millrace_table_reads_a_given_batch(cluster: Any, written: str) -> None:
    root = Path(__file__).resolve().parents[2]

    def table(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "broker.cli.main",
                "table",
                "--bootstrap-server",
                cluster.bootstrap,
                "--topic",
                written,
                "--format",
                "json",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
            env=dict(os.environ, PYTHONPATH=str(root)),
            check=False,
        )

    for n in range(len(BATCHES)):
        out = table("--batch", str(n))
        assert out.returncode == 0, out.stderr
        rows = {
            json.loads(line)["key"]: json.loads(line)["value"] for line in out.stdout.splitlines()
        }
        assert rows == _table_after(n)
    missing = table("--batch", "9")
    assert missing.returncode != 0
    assert "--batch: batch 9 of topic 'boundary-reads' is not available" in missing.stderr
    assert "to 2 (the newest)" in missing.stderr


def test_a_whole_batches_stream_advances_one_upstream_batch_per_trigger(
    spark: Any, cluster: Any, written: str, tmp_path: Path
) -> None:
    sizes: list[int] = []

    def collect(df: Any, _batch_id: int) -> None:
        n = df.count()
        if n:
            sizes.append(n)

    query = (
        spark.readStream.format("millrace")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", written)
        .option("startingOffsets", "earliest")
        .option("wholeBatches", "true")
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    # batch 0 of the upstream is its first boundary's successor: sizes 10, 25, 7
    assert sizes == [len(b) for b in BATCHES], sizes
