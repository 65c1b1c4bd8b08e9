"""A topic whose retention deleted the start offset of a read: ``failOnDataLoss=true`` fails
the query naming the option, ``false`` continues from the new log start (broker retention
runs every 500 ms in this module's cluster)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytestmark = [
    pytest.mark.spark,
    pytest.mark.cluster_config({"log.retention.check.interval.ms": 500}),
]


@pytest.mark.timeout(300)
def test_retention_deleted_start_offset(spark: Any, cluster: Any) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    name = cluster.create_topic(
        "spark-read-retention",
        1,
        {"segment.bytes": "2000", "retention.bytes": "4000", "file.delete.delay.ms": "0"},
    )
    producer = Producer(cluster.conf({"linger.ms": 0, "batch.num.messages": 1}))
    for i in range(200):
        producer.produce(name, key=b"k", value=b"%03d" % i + b"x" * 60, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0

    consumer = Consumer(cluster.conf({"group.id": "retention-probe"}))
    deadline = time.monotonic() + 60
    low = 0
    while time.monotonic() < deadline:
        low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
        if low > 0:
            break
        time.sleep(0.5)
    consumer.close()
    assert low > 0, "retention never deleted a segment"
    assert high == 200

    starting = json.dumps({name: {"0": 0}})

    def read(**extra: str) -> Any:
        r = (
            spark.read.format("millrace")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", name)
            .option("startingOffsets", starting)
        )
        for k, v in extra.items():
            r = r.option(k, v)
        return r.load()

    with pytest.raises(Exception, match="failOnDataLoss"):
        read().count()
    rows = read(failOnDataLoss="false").select("offset").collect()
    offsets = sorted(r.offset for r in rows)
    assert offsets[0] >= low and offsets[-1] == 199
    assert offsets == list(range(offsets[0], 200))
