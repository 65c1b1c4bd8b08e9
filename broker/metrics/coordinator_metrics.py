"""Scrape-time metrics of the coordinators on this broker: groups by state and committed
offsets (as the JMX exporter renders Kafka's ``kafka.coordinator.group`` MBeans), transactional
ids by state (Millrace additions: Kafka has no such MBean), and consumer lag per group and
partition (as the widely used kafka_exporter, danielqsj/kafka_exporter, names it). Names and
meanings are listed in ``docs/metrics.md``.

Group coordinator, over the groups of the ``__consumer_offsets`` partitions this broker leads
and has loaded (every broker reports them; a broker coordinating nothing reports zeros):

- ``kafka_coordinator_group_groupmetadatamanager_numgroups`` and ``..._numgroupsstable``,
  ``..._numgroupspreparingrebalance``, ``..._numgroupscompletingrebalance``,
  ``..._numgroupsempty``, ``..._numgroupsdead``
  (``kafka.coordinator.group:type=GroupMetadataManager,name=NumGroups...``). A group known
  only by its committed offsets (a "simple" group, with no members ever) counts as Empty, as
  Kafka keeps it in its group cache in that state;
- ``..._numoffsets`` (``NumOffsets``): committed offsets (group, partition) held; pending
  transactional commits are not counted until their transaction commits.

Transaction coordinator, over the transactional ids of the ``__transaction_state`` partitions
this broker leads and has loaded:

- ``kafka_coordinator_transaction_transactionstatemanager_ongoingtransactions``: ids in state
  Ongoing (a transaction begun and not yet ending);
- ``..._transactionalids``: all ids held (every state);
- ``..._numtransactions{state}``: ids per state, by Kafka's state names (``Empty``,
  ``Ongoing``, ``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``,
  ``Dead``, ``PrepareEpochFence``).

Consumer lag, reported by the group's coordinator only (so each group appears once in the
cluster), labels ``consumergroup``, ``topic``, ``partition``:

- ``kafka_consumergroup_current_offset``: the committed offset;
- ``kafka_consumergroup_lag``: the partition's end offset minus the committed offset, where
  the end offset is the high watermark, as kafka_exporter and Burrow take it (ListOffsets
  latest, read_uncommitted). Not clamped at 0, as kafka_exporter;
- ``kafka_consumergroup_lag_sum`` and ``kafka_consumergroup_current_offset_sum`` per group
  and topic (over the partitions whose lag is known, resp. every committed partition);
- ``kafka_consumergroup_members``: members of the group (0 for a simple group).

Where the end offset comes from: a partition led here is read directly (its high watermark);
one led elsewhere is asked of its leader with ListOffsets (timestamp -1, replica id -1) over
the broker's inter-broker connections (``Broker.broker_pool``), one request per leader, sent
concurrently, each bounded by :data:`LIST_OFFSETS_TIMEOUT_S`. Answers (and failures) are
cached per partition and leader for :data:`END_OFFSET_TTL_S`, so frequent scrapes cost no
round trips, and a leader that is down costs one timeout per TTL rather than one per scrape.
A partition whose lag cannot be known is left out of ``kafka_consumergroup_lag`` (its
``current_offset`` is still reported): a topic that no longer exists, a partition without a
leader (offline), a leader that cannot be reached or answers with an error (for instance
NOT_LEADER_OR_FOLLOWER while leadership moves). The scrape never fails for it.

Concurrency: :func:`collect` runs on the broker's event loop (the registry awaits it at scrape
time) and reads the coordinators' state between awaits; the only awaits are the ListOffsets
requests, after the committed offsets were copied. The per-broker end-offset cache is owned by
that loop.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from broker.coordinator.group.group_metadata import GroupState
from broker.coordinator.group.group_metadata_manager import OffsetsPartition
from broker.coordinator.transaction.state import TxnState
from broker.coordinator.transaction.transaction_state_manager import TxnPartition
from broker.metadata.cache import MetadataCache
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.metrics.broker_view import BrokerView
    from broker.replication.partition import Partition

__all__ = [
    "END_OFFSET_TTL_S",
    "LIST_OFFSETS_TIMEOUT_S",
    "EndOffsets",
    "collect",
    "group_families",
    "lag_families",
    "transaction_families",
]

log = logging.getLogger(__name__)

END_OFFSET_TTL_S = 3.0
"""How long an end offset asked of another broker is reused."""
LIST_OFFSETS_TIMEOUT_S = 1.5
"""How long a scrape waits for a leader's ListOffsets answer."""
LIST_OFFSETS_VERSION = 5
LATEST_TIMESTAMP = -1
CONSUMER_REPLICA_ID = -1

_GROUP_PREFIX = "kafka_coordinator_group_groupmetadatamanager_"
_TXN_PREFIX = "kafka_coordinator_transaction_transactionstatemanager_"
_GROUP_STATE_METRICS = {
    GroupState.STABLE: "numgroupsstable",
    GroupState.PREPARING_REBALANCE: "numgroupspreparingrebalance",
    GroupState.COMPLETING_REBALANCE: "numgroupscompletingrebalance",
    GroupState.EMPTY: "numgroupsempty",
    GroupState.DEAD: "numgroupsdead",
}


class Requester(Protocol):
    """What :class:`EndOffsets` needs of :class:`~broker.network.broker_pool.BrokerPool`."""

    async def request(self, target: int, api_key: int, api_version: int, body: Any) -> Any: ...


class PartitionsHere(Protocol):
    """What :class:`EndOffsets` needs of the replica manager."""

    @property
    def partitions(self) -> dict[TopicPartition, Partition]: ...


@dataclass(frozen=True, slots=True)
class _Cached:
    at: float
    leader: int
    offset: int | None


class EndOffsets:
    """End offsets (high watermarks) of partitions, for the lag: local leaders read directly,
    the others asked of their leaders and cached (see the module docstring).

    Concurrency: event loop only; one refresh at a time (a concurrent scrape waits for it and
    then uses its answers).
    """

    def __init__(
        self,
        broker_id: int,
        metadata: MetadataCache,
        replicas: PartitionsHere,
        pool: Requester | None,
        *,
        monotonic: Callable[[], float],
        ttl_s: float = END_OFFSET_TTL_S,
        timeout_s: float = LIST_OFFSETS_TIMEOUT_S,
    ) -> None:
        self._broker_id = broker_id
        self._metadata = metadata
        self._replicas = replicas
        self._pool = pool
        self._monotonic = monotonic
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._cache: dict[TopicPartition, _Cached] = {}
        self._lock = asyncio.Lock()

    async def get(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offsets known of ``tps`` (partitions whose end offset cannot be known are
        absent)."""
        out: dict[TopicPartition, int] = {}
        remote: dict[TopicPartition, int] = {}
        for tp in tps:
            info = self._metadata.partition(tp.topic, tp.partition)
            if info is None or info.leader < 0:
                continue  # no such partition any more, or offline
            if info.leader == self._broker_id:
                partition = self._replicas.partitions.get(tp)
                if partition is not None and partition.is_leader:
                    out[tp] = partition.high_watermark
                continue
            remote[tp] = info.leader
        if remote:
            async with self._lock:
                out.update(await self._remote(remote))
        return out

    async def _remote(self, leaders: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        now = self._monotonic()
        self._cache = {tp: c for tp, c in self._cache.items() if now - c.at < self._ttl_s}
        out: dict[TopicPartition, int] = {}
        ask: dict[int, list[TopicPartition]] = {}
        for tp, leader in leaders.items():
            cached = self._cache.get(tp)
            if cached is not None and cached.leader == leader:
                if cached.offset is not None:
                    out[tp] = cached.offset
            else:
                ask.setdefault(leader, []).append(tp)
        if not ask:
            return out
        async with asyncio.TaskGroup() as tasks:
            asked = {
                leader: tasks.create_task(self._ask(leader, tps)) for leader, tps in ask.items()
            }
        answered_at = self._monotonic()
        for leader, task in asked.items():
            answers = task.result()
            for tp in ask[leader]:
                offset = answers.get(tp)
                self._cache[tp] = _Cached(answered_at, leader, offset)
                if offset is not None:
                    out[tp] = offset
        return out

    async def _ask(self, leader: int, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """ListOffsets (latest) of ``tps`` from ``leader``; an empty answer when it cannot be
        had."""
        if self._pool is None:
            return {}
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._pool.request(
                    leader, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, list_offsets_request(tps)
                )
        except (ConnectionError, TimeoutError, LookupError, OSError) as exc:
            log.debug("end offsets from broker %d unavailable: %s", leader, exc)
            return {}
        out: dict[TopicPartition, int] = {}
        for topic in response.topics:
            for part in topic.partitions:
                if int(part.error_code) == ErrorCode.none and int(part.offset) >= 0:
                    out[TopicPartition(str(topic.name), int(part.partition_index))] = int(
                        part.offset
                    )
        return out


def list_offsets_request(tps: Sequence[TopicPartition]) -> Any:
    """A ListOffsets v5 request for the latest offset (read_uncommitted: the high watermark)
    of ``tps``, as a consumer asks it."""
    from kio.schema.list_offsets.v5.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )

    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    k: Any = ListOffsetsRequest
    t: Any = ListOffsetsTopic
    p: Any = ListOffsetsPartition
    return k(
        replica_id=CONSUMER_REPLICA_ID,
        isolation_level=0,
        topics=tuple(
            t(
                name=name,
                partitions=tuple(
                    p(partition_index=i, current_leader_epoch=-1, timestamp=LATEST_TIMESTAMP)
                    for i in sorted(parts)
                ),
            )
            for name, parts in sorted(by_topic.items())
        ),
    )


# one cache per broker (a process runs one broker; tests may run several)
_END_OFFSETS: weakref.WeakKeyDictionary[BrokerView, EndOffsets] = weakref.WeakKeyDictionary()


def _end_offsets_of(broker: BrokerView) -> EndOffsets | None:
    found = _END_OFFSETS.get(broker)
    if found is not None:
        return found
    gc = broker.group_coordinator
    rm = broker.replica_manager
    if gc is None or rm is None or broker.broker_pool is None:
        return None  # still starting (the endpoint serves from the very start)
    found = EndOffsets(
        broker.broker_id,
        gc.metadata,
        rm,
        broker.broker_pool,
        monotonic=broker.clock.monotonic,
    )
    _END_OFFSETS[broker] = found
    return found


async def collect(broker: BrokerView) -> list[Metric]:
    """Every family of this module for ``broker`` (see the module docstring)."""
    families: list[Metric] = []
    gc = broker.group_coordinator
    if gc is not None:
        partitions = gc.loaded_partitions()
        families.extend(group_families(partitions))
        end_offsets = _end_offsets_of(broker)
        if end_offsets is not None:
            families.extend(await lag_families(partitions, end_offsets))
    tc = broker.txn_coordinator
    if tc is not None:
        families.extend(transaction_families(tc.loaded_partitions()))
    return families


def group_families(partitions: Iterable[OffsetsPartition]) -> list[Metric]:
    """Groups by state and committed offsets of the loaded offsets partitions."""
    by_state = dict.fromkeys(GroupState, 0)
    offsets = 0
    for state in partitions:
        for group in state.groups.values():
            by_state[group.state] += 1
        for group_id, committed in state.offsets.items():
            offsets += len(committed)
            if group_id not in state.groups:
                by_state[GroupState.EMPTY] += 1
    families: list[Metric] = [
        GaugeMetricFamily(
            _GROUP_PREFIX + "numgroups",
            "Consumer groups this broker coordinates",
            value=sum(by_state.values()),
        )
    ]
    families.extend(
        GaugeMetricFamily(
            _GROUP_PREFIX + name,
            f"Consumer groups this broker coordinates in state {state.value}",
            value=by_state[state],
        )
        for state, name in _GROUP_STATE_METRICS.items()
    )
    families.append(
        GaugeMetricFamily(
            _GROUP_PREFIX + "numoffsets",
            "Committed offsets (group and partition) held by this broker's group coordinator",
            value=offsets,
        )
    )
    return families


def transaction_families(partitions: Iterable[TxnPartition]) -> list[Metric]:
    """Transactional ids by state of the loaded transaction state partitions."""
    by_state = dict.fromkeys(TxnState, 0)
    for txn_partition in partitions:
        for meta in txn_partition.transactions.values():
            by_state[meta.state] += 1
    per_state = GaugeMetricFamily(
        _TXN_PREFIX + "numtransactions",
        "Transactional ids this broker coordinates, per state (Millrace addition)",
        labels=["state"],
    )
    for state, count in by_state.items():
        per_state.add_metric([state.display_name], count)
    return [
        GaugeMetricFamily(
            _TXN_PREFIX + "ongoingtransactions",
            "Transactions in state Ongoing this broker coordinates (Millrace addition)",
            value=by_state[TxnState.ONGOING],
        ),
        GaugeMetricFamily(
            _TXN_PREFIX + "transactionalids",
            "Transactional ids this broker coordinates (Millrace addition)",
            value=sum(by_state.values()),
        ),
        per_state,
    ]


async def lag_families(
    partitions: Iterable[OffsetsPartition], end_offsets: EndOffsets
) -> list[Metric]:
    """Committed offsets and lag of the groups of the loaded offsets partitions."""
    committed: dict[str, dict[TopicPartition, int]] = {}
    members: dict[str, int] = {}
    for state in partitions:
        for group_id, values in state.offsets.items():
            committed[group_id] = {tp: value.offset for tp, value in values.items()}
            members[group_id] = 0
        for group_id, group in state.groups.items():
            members[group_id] = group.size
    wanted = {tp for offsets in committed.values() for tp in offsets}
    ends = await end_offsets.get(sorted(wanted, key=lambda t: (t.topic, t.partition)))
    group_labels = ["consumergroup"]
    topic_labels = ["consumergroup", "topic"]
    partition_labels = ["consumergroup", "topic", "partition"]
    current = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "Committed offset of the group in the partition",
        labels=partition_labels,
    )
    current_sum = GaugeMetricFamily(
        "kafka_consumergroup_current_offset_sum",
        "Sum of the group's committed offsets in the topic",
        labels=topic_labels,
    )
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "End offset (high watermark) of the partition minus the group's committed offset",
        labels=partition_labels,
    )
    lag_sum = GaugeMetricFamily(
        "kafka_consumergroup_lag_sum",
        "Sum of the group's lag over the topic's partitions whose end offset is known",
        labels=topic_labels,
    )
    member_count = GaugeMetricFamily(
        "kafka_consumergroup_members", "Members of the group", labels=group_labels
    )
    for group_id in sorted(members):
        member_count.add_metric([group_id], members[group_id])
        offsets = committed.get(group_id, {})
        sums: dict[str, int] = {}
        lags: dict[str, int] = {}
        for tp in sorted(offsets, key=lambda t: (t.topic, t.partition)):
            offset = offsets[tp]
            labels = [group_id, tp.topic, str(tp.partition)]
            current.add_metric(labels, offset)
            sums[tp.topic] = sums.get(tp.topic, 0) + offset
            end = ends.get(tp)
            if end is not None:
                lag.add_metric(labels, end - offset)
                lags[tp.topic] = lags.get(tp.topic, 0) + end - offset
        for topic, total in sums.items():
            current_sum.add_metric([group_id, topic], total)
        for topic, total in lags.items():
            lag_sum.add_metric([group_id, topic], total)
    return [current, current_sum, lag, lag_sum, member_count]
