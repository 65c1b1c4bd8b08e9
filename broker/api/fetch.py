"""Fetch (key 1), versions 4-17: consumers' and followers' reads, answered with the zero-copy
encoder of :mod:`broker.protocol.fetch_response`.

Versions 13-17 are served for Kafka brokers following a Millrace leader: a Kafka 3.9
replica fetcher sends the version its ``inter.broker.protocol.version`` names (17 at 3.9)
without asking ApiVersions. They name topics by id (v13+, KIP-516: an id this broker does not
know answers UNKNOWN_TOPIC_ID), and carry the follower's id in the tagged ``ReplicaState``
(v15+). ApiVersions still advertises v4-v12 to clients (registry.py). Truncation on fetch
(v12+, KIP-595): a fetch naming the epoch of its last record is checked against the leader's
epoch cache and may be answered with a ``diverging_epoch`` instead of records
(``ReplicaManager``), which Kafka followers rely on from IBP 2.7.

Semantics: long poll (``max_wait_ms``/``min_bytes``), per-partition and per-response byte
limits (the first partition with data always returns at least one whole batch so a consumer
can make progress past a large batch), the whole batch that contains the fetch offset,
OFFSET_OUT_OF_RANGE with the log start offset and high watermark. Consumers read up to the
high watermark (read_uncommitted) or the last stable offset (``isolation_level`` 1,
read_committed, v4+), in which case the response lists the aborted transactions of the
returned range; followers (``replica_id`` >= 0) read up to the log end. Incremental fetch
sessions (KIP-227, v7+): :mod:`broker.replication.fetch_sessions` decides which partitions a
request reads (its own, or its session's) and which results the response carries.

Authorization (Kafka's ``KafkaApis.handleFetchRequest``): a follower's fetch needs
CLUSTER_ACTION on the cluster, a consumer's READ on each topic; a partition refused answers
TOPIC_AUTHORIZATION_FAILED (whether its topic exists or not) and is not read. Without an
authorizer this costs one attribute test.

Quotas (``consumer_byte_rate``, :mod:`broker.quota`): a consumer under a quota reads at most
one quota window's worth per fetch and records the bytes it was sent; one that exceeds its
quota is answered at once with no data and ``throttle_time_ms``, as Kafka does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from broker.api.authorization import denied
from broker.api.context import RequestContext
from broker.protocol.errors import ErrorCode
from broker.protocol.fetch_response import FetchPartitionData, encode_fetch_response
from broker.protocol.response import FileRegion, Response
from broker.replication.fetch_sessions import FetchContext
from broker.replication.replica_manager import FetchRequestPartition
from broker.replication.results import FetchResult
from broker.security.acl import Operation, ResourceType
from broker.types import TopicPartition

READ_COMMITTED = 1

if TYPE_CHECKING:
    from broker.protocol import messages


async def handle(ctx: RequestContext, request: messages.FetchRequest) -> Response:
    return await serve(ctx, request, ctx.version)


def _records(result: FetchResult) -> FileRegion | None:
    return result.slice


async def serve(
    ctx: RequestContext,
    request: messages.FetchRequest,
    version: int,
    records_of: Callable[[FetchResult], FileRegion | None] = _records,
) -> Response:
    """The Fetch of ``request`` answered as Fetch ``version``; ``records_of`` gives what each
    partition's ``records`` carries for its result (the slice of the log read, sent with
    ``sendfile``; :mod:`broker.api.local_fetch` sends where the slice lies instead)."""
    ids = _TopicIds(ctx) if version >= TOPIC_ID_VERSION else None
    wanted, unknown = _wanted_partitions(request.topics, ids)
    replica_id = replica_id_of(request, version)
    if version >= 7:
        context = _session_context(ctx, request, ids, wanted, replica_id)
        if context.error != ErrorCode.none:
            return encode_fetch_response(version, [], error=context.error)
    else:
        context = FetchContext(wanted)
    max_bytes = _max_bytes(ctx, request)
    read_committed = (
        replica_id < 0 and int(getattr(request, "isolation_level", 0)) == READ_COMMITTED
    )
    partitions = context.partitions
    refused: list[FetchResult] = []
    if ctx.services.authorizer is not None:  # all an unsecured broker pays for authorization
        partitions, refused = _authorize(ctx, partitions, replica_id)
    results: list[FetchResult] = []
    if partitions or not refused:  # all refused: answered at once, as Kafka does
        results = await ctx.services.replica_manager.fetch(
            partitions,
            max_wait_ms=int(request.max_wait.total_seconds() * 1000),
            min_bytes=int(request.min_bytes),
            max_bytes=max_bytes,
            committed_only=replica_id < 0,
            replica_id=replica_id,
            read_committed=read_committed,
        )
    throttle_ms = 0
    if ctx.quota is not None:  # record the bytes; a throttled consumer gets no data (Kafka)
        throttle_ms = ctx.quota.record_fetch(sum(r.size for r in results))
    metrics = ctx.services.metrics
    if metrics.enabled:  # what is sent: nothing of a throttled answer
        metrics.fetched(
            _without_data(results) if throttle_ms else results, follower=replica_id >= 0
        )
    if refused:
        results = [*results, *refused]
    if throttle_ms:
        return encode_fetch_response(
            version, [], session_id=context.session_id, throttle_time_ms=throttle_ms
        )
    return encode_fetch_response(
        version,
        [
            *(
                FetchPartitionData(
                    r.tp.topic,
                    r.tp.partition,
                    r.error,
                    r.high_watermark,
                    r.last_stable_offset,
                    r.log_start_offset,
                    r.aborted_transactions,
                    records_of(r),
                    topic_id=None if ids is None else ids.id_of(r.tp.topic),
                    diverging_epoch=r.diverging_epoch,
                )
                for r in context.response(results)
            ),
            *unknown,
        ],
        session_id=context.session_id,
    )


def _wanted_partitions(
    topics: tuple[Any, ...], ids: _TopicIds | None
) -> tuple[list[FetchRequestPartition], list[FetchPartitionData]]:
    """The partitions asked for (v4-v12 by topic name, v13+ by id), and the answers to those
    of a topic id this broker does not know (UNKNOWN_TOPIC_ID, echoing the id)."""
    wanted: list[FetchRequestPartition] = []
    unknown: list[FetchPartitionData] = []
    for topic in topics:
        name = str(topic.topic) if ids is None else ids.name_of(topic.topic_id)
        if name is None:
            unknown += [
                FetchPartitionData(
                    "", int(p.partition), ErrorCode.unknown_topic_id, topic_id=topic.topic_id
                )
                for p in topic.partitions
            ]
            continue
        for p in topic.partitions:
            wanted.append(
                FetchRequestPartition(
                    TopicPartition(name, int(p.partition)),
                    int(p.fetch_offset),
                    int(p.partition_max_bytes),
                    int(getattr(p, "current_leader_epoch", -1)),
                    int(getattr(p, "last_fetched_epoch", -1)),
                )
            )
    return wanted, unknown


def _session_context(
    ctx: RequestContext,
    request: Any,
    ids: _TopicIds | None,
    wanted: list[FetchRequestPartition],
    replica_id: int,
) -> FetchContext:
    """The v7+ request's fetch-session context (its ``error`` set when the session is
    refused)."""
    forgotten: list[TopicPartition] = []
    for t in getattr(request, "forgotten_topics_data", ()):
        forgotten_name = str(t.topic) if ids is None else ids.name_of(t.topic_id)
        if forgotten_name is not None:
            forgotten += [TopicPartition(forgotten_name, int(p)) for p in t.partitions]
    return ctx.services.replica_manager.fetch_sessions.new_context(
        int(getattr(request, "session_id", 0)),
        int(getattr(request, "session_epoch", -1)),
        wanted,
        forgotten,
        privileged=replica_id >= 0,
        now_ms=ctx.services.clock.time_ms(),
    )


def _max_bytes(ctx: RequestContext, request: Any) -> int:
    """The response's byte limit: the request's, capped by ``fetch.max.bytes`` and, for a
    consumer under a quota, by one quota window's worth."""
    max_bytes = int(getattr(request, "max_bytes", 2**31 - 1))
    max_bytes = min(max_bytes, ctx.services.config["fetch.max.bytes"]) if max_bytes > 0 else 0
    if ctx.quota is not None:
        window_bytes = ctx.quota.fetch_window_bytes()
        if window_bytes is not None:
            max_bytes = min(max_bytes, window_bytes)
    return max_bytes


TOPIC_ID_VERSION = 13
"""Fetch v13+ names topics by id (KIP-516)."""
REPLICA_STATE_VERSION = 15
"""Fetch v15+ carries the follower's id in the tagged ``ReplicaState`` (KIP-903)."""


def replica_id_of(request: Any, version: int) -> int:
    """The fetching replica's id (-1 or less: a consumer)."""
    if version >= REPLICA_STATE_VERSION:
        return int(request.replica_state.replica_id)
    return int(request.replica_id)


def _without_data(results: list[FetchResult]) -> list[FetchResult]:
    """The partitions of a throttled answer as sent: read, but no records."""
    return [FetchResult(r.tp, r.error) for r in results]


class _TopicIds:
    """Topic ids <-> names for one v13+ request: those LeaderAndIsr gave the replica manager
    (a just-started leader has them before its metadata cache), then the metadata cache's."""

    def __init__(self, ctx: RequestContext) -> None:
        self.metadata = ctx.services.metadata
        self.known = ctx.services.replica_manager.topic_ids
        self._ids: dict[str, uuid.UUID | None] = {}

    def name_of(self, topic_id: uuid.UUID | None) -> str | None:
        if topic_id is None:
            return None
        for name, known in self.known.items():
            if known == topic_id:
                self._ids[name] = topic_id
                return name
        info = self.metadata.topic_by_id(topic_id)
        if info is None:
            return None
        self._ids[info.name] = topic_id
        return info.name

    def id_of(self, name: str) -> uuid.UUID | None:
        if name not in self._ids:
            info = self.metadata.topic(name)
            self._ids[name] = self.known.get(name) or (None if info is None else info.topic_id)
        return self._ids[name]


def _authorize(
    ctx: RequestContext, partitions: list[FetchRequestPartition], replica_id: int
) -> tuple[list[FetchRequestPartition], list[FetchResult]]:
    """(the partitions to read, the results of those refused): a follower (``replica_id``
    >= 0) needs CLUSTER_ACTION on the cluster, a consumer READ on each topic."""
    if replica_id >= 0:
        if ctx.authorize_cluster(Operation.CLUSTER_ACTION):
            return partitions, []
        refused_topics: frozenset[str] | None = None
    else:
        refused_topics = denied(
            ctx, Operation.READ, ResourceType.TOPIC, (p.tp.topic for p in partitions)
        )
        if not refused_topics:
            return partitions, []
    allowed: list[FetchRequestPartition] = []
    refused: list[FetchResult] = []
    for p in partitions:
        if refused_topics is None or p.tp.topic in refused_topics:
            refused.append(FetchResult(p.tp, ErrorCode.topic_authorization_failed))
        else:
            allowed.append(p)
    return allowed, refused
