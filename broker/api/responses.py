"""The response shape most partition-level APIs share: per topic, per partition, an error code
and a few values, in the order the request named them.

:func:`per_partition` walks the request's (topic, partitions) pairs, asks ``answer(tp)`` for
each partition's fields, turns a :class:`~broker.protocol.errors.KafkaError` raised there
into ``on_error(tp, code)``'s fields, answers UNKNOWN_TOPIC_OR_PARTITION for a topic that
``known`` says does not exist, and builds the version's nested topic and partition
messages. :func:`group_by_topic` groups partitions by topic in first-seen order.

Concurrency: pure functions; called by handlers on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.protocol import registry
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition, group_by_topic

__all__ = ["group_by_topic", "per_partition"]

Fields = Mapping[str, Any]


def per_partition(
    topics: Iterable[tuple[str, Iterable[int]]],
    answer: Callable[[TopicPartition], Fields],
    on_error: Callable[[TopicPartition, ErrorCode], Fields],
    *,
    topic_cls: type[Any],
    part_cls: type[Any],
    known: Callable[[str], bool] | None = None,
    topic_key: str = "name",
    partition_key: str = "partition_index",
    partitions_key: str = "partitions",
) -> tuple[Any, ...]:
    """The nested topic messages of a response (see the module docstring)."""
    out = []
    for name, partitions in topics:
        exists = known is None or known(name)
        parts = []
        for index in partitions:
            tp = TopicPartition(name, int(index))
            if not exists:
                fields = on_error(tp, ErrorCode.unknown_topic_or_partition)
            else:
                try:
                    fields = answer(tp)
                except KafkaError as exc:
                    fields = on_error(tp, exc.code)
            parts.append(registry.build(part_cls, **{partition_key: index}, **fields))
        out.append(registry.build(topic_cls, **{topic_key: name, partitions_key: tuple(parts)}))
    return tuple(out)
