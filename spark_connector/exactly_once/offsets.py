"""A micro-batch's source offsets, from Spark's own offset log, and their commit to a
consumer group for sinks that cannot share a Kafka transaction.

Spark writes ``<checkpoint>/offsets/<N>`` before it runs batch ``N``: a ``v1`` line, the
batch's metadata (watermark, timestamp, conf) and one JSON line per source; a Kafka-like
source's line is ``{"topic": {"partition": next offset}}``, the shape of both the ``kafka``
and the ``millrace`` source.

Concurrency: pure functions but for the file read and the OffsetCommit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from spark_connector.exactly_once.settings import checkpoint_dir

__all__ = ["commit_batch_offsets", "source_offsets"]


def source_offsets(checkpoint: str, batch: int) -> dict[str, dict[int, int]]:
    """The end offsets of batch ``batch`` of every Kafka-like source of the query
    checkpointed in directory ``checkpoint`` (``{}`` when there is none)."""
    path = Path(checkpoint) / "offsets" / str(batch)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    out: dict[str, dict[int, int]] = {}
    for line in lines[2:]:  # "v1", the batch metadata, then one line per source
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        for topic, parts in data.items():
            if not isinstance(parts, dict):
                continue
            try:
                converted = {int(p): int(o) for p, o in parts.items()}
            except (TypeError, ValueError):
                continue
            out.setdefault(str(topic), {}).update(converted)
    return out


def commit_batch_offsets(
    bootstrap: str,
    checkpoint_location: str,
    batch_id: int,
    group: str,
    options: Mapping[str, str] | None = None,
) -> dict[str, dict[int, int]]:
    """Commit batch ``batch_id``'s source end offsets (Spark's ``offsets/<batch_id>`` of the
    query checkpointed at ``checkpoint_location``) to ``group`` with a plain OffsetCommit.

    For sinks that cannot share a Kafka transaction (Delta Lake): call it *after* the sink's
    own idempotent commit of the batch, so the group's offsets may lag the sink (until the
    replay of the batch, which the sink skips, commits them again) but never run ahead of it.
    Returns the offsets committed (``{}`` when the batch has no Kafka source offsets).
    ``options``: the source's ``kafka.*`` options (``kafka.security.protocol``,
    ``kafka.sasl.jaas.config``, ...), passed to librdkafka under its names."""
    from confluent_kafka import Consumer, TopicPartition

    from spark_connector.kafka.security import librdkafka_settings

    offsets = source_offsets(str(checkpoint_dir(checkpoint_location)), batch_id)
    if not offsets:
        return {}
    params = {
        str(k).lower()[len("kafka.") :]: str(v)
        for k, v in (options or {}).items()
        if str(k).lower().startswith("kafka.")
    }
    consumer = Consumer(
        {
            **librdkafka_settings(params),
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.commit(
            offsets=[
                TopicPartition(topic, p, o)
                for topic, parts in sorted(offsets.items())
                for p, o in sorted(parts.items())
            ],
            asynchronous=False,
        )
    finally:
        consumer.close()
    return offsets
