"""Topic-level requests of the connector's wire client: a topic's end offsets, and creating a
topic.

:func:`end_offsets` asks each partition leader (ListOffsets v4, one request per leader, all its
partitions of the topic) for the latest offset: the last stable offset with
``read_committed``, the high watermark without. :func:`create_topic` sends CreateTopics v5 to
the controller (as Kafka's admin client does; a ZooKeeper-mode Kafka broker that is not the
controller answers NOT_CONTROLLER) and waits until every partition has a leader; a topic that
already exists is not an error.

Both retry leader and controller moves until the cluster's request timeout (see
:meth:`~spark_connector.kafka.cluster.Cluster.retrying`). Concurrency: as the
:class:`~spark_connector.kafka.cluster.Cluster` passed in (one thread).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from spark_connector.kafka.cluster import Cluster
from spark_connector.kafka.errors import (
    AUTHORIZATION_FAILED,
    LEADER_MOVED,
    NONE,
    KafkaRequestError,
    Retriable,
    acl_hint,
    error_name,
)

__all__ = ["create_topic", "end_offsets"]

LATEST = -1
TOPIC_ALREADY_EXISTS = 36
NOT_CONTROLLER = 41
_CREATE_RETRIABLE = frozenset({NOT_CONTROLLER, 7, 13})  # ... REQUEST_TIMED_OUT, NETWORK_EXCEPTION


def end_offsets(cluster: Cluster, topic: str, *, read_committed: bool) -> dict[int, int]:
    """Every partition of ``topic``'s latest offset (see the module docstring); an empty dict
    when the topic does not exist."""
    from kio.schema.list_offsets.v4.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    what = f"ListOffsets({topic})"
    found: dict[int, int] = {}

    def attempt() -> dict[int, int]:
        cluster.refresh([topic])
        info = cluster.topics.get(topic)
        if info is not None and info.error in AUTHORIZATION_FAILED:
            raise KafkaRequestError(
                f"Metadata({topic}): {error_name(info.error)}{acl_hint(info.error)}", info.error
            )
        count = cluster.partition_count(topic)
        by_leader: dict[int, list[int]] = {}
        for p in range(count):
            if p in found:
                continue
            leader = cluster.leader(topic, p)
            if leader < 0:
                raise Retriable(f"{what}: {topic}[{p}] has no leader", 5)
            by_leader.setdefault(leader, []).append(p)
        for leader, parts in sorted(by_leader.items()):
            address = cluster.broker_address(leader)
            assert address is not None
            response = cluster.send(
                address,
                ListOffsetsRequest(
                    replica_id=BrokerId(-1),
                    isolation_level=i8(1 if read_committed else 0),
                    topics=(
                        ListOffsetsTopic(
                            name=TopicName(topic),
                            partitions=tuple(
                                ListOffsetsPartition(partition_index=i32(p), timestamp=i64(LATEST))
                                for p in parts
                            ),
                        ),
                    ),
                ),
            )
            for t in response.topics:
                for part in t.partitions:
                    code = int(part.error_code)
                    if code in LEADER_MOVED:
                        raise Retriable(what, code)
                    if code != NONE:
                        raise KafkaRequestError(
                            f"{what}: {topic}[{int(part.partition_index)}]: {error_name(code)}"
                            f"{acl_hint(code)}",
                            code,
                        )
                    found[int(part.partition_index)] = int(part.offset)
        missing = [p for p in range(count) if p not in found]
        if missing:
            raise Retriable(f"{what}: no answer for partitions {missing}", 5)
        return dict(found)

    return cluster.retrying(what, attempt)


def create_topic(
    cluster: Cluster,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
) -> None:
    """Create ``name`` (see the module docstring); returns when every partition has a leader."""
    from kio.schema.create_topics.v5.request import (
        CreatableTopic,
        CreatableTopicConfig,
        CreateTopicsRequest,
    )
    from kio.schema.types import TopicName
    from kio.static.primitive import i16, i32, i32Timedelta

    what = f"CreateTopics({name})"
    request = CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=TopicName(name),
                num_partitions=i32(partitions),
                replication_factor=i16(replication_factor),
                assignments=(),
                configs=tuple(
                    CreatableTopicConfig(name=k, value=v) for k, v in sorted(configs.items())
                ),
            ),
        ),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        validate_only=False,
    )

    def create() -> None:
        cluster.refresh([])
        address = cluster.broker_address(cluster.controller)
        if address is None:
            raise Retriable(f"{what}: no controller", NOT_CONTROLLER)
        response = cluster.send(address, request)
        for t in response.topics:
            code = int(t.error_code)
            if code in (NONE, TOPIC_ALREADY_EXISTS):
                continue
            if code in _CREATE_RETRIABLE:
                raise Retriable(what, code)
            message = f": {t.error_message}" if t.error_message else ""
            raise KafkaRequestError(f"{what}: {error_name(code)}{message}{acl_hint(code)}", code)

    def ready() -> None:
        cluster.refresh([name])
        count = cluster.partition_count(name)
        if count <= 0 or any(cluster.leader(name, p) < 0 for p in range(count)):
            raise Retriable(f"{what}: waiting for leaders", 5)

    cluster.retrying(what, create)
    cluster.retrying(what, ready)
