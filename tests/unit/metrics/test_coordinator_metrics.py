"""broker/metrics/coordinator_metrics.py: groups by state and committed offsets of a real group
coordinator (appends recorded, a manual clock), transactional ids by state, and consumer lag
with end offsets read locally or asked of the leaders: one ListOffsets per leader, encoded as
the client sends it and answered by the broker's own ListOffsets codec; answers cached for the
TTL and per leader; a leader that is down, slow or answers an error costs only its partitions'
lag, never the scrape."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from kio.serial import entity_reader

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.group.coordinator import GroupCoordinator
from broker.coordinator.group.group_metadata_manager import OffsetsPartition
from broker.coordinator.group.offsets_topic import partition_for
from broker.coordinator.transaction.state import TransactionMetadata, TxnState
from broker.coordinator.transaction.transaction_state_manager import TxnPartition
from broker.metadata.cache import MetadataCache, PartitionInfo
from broker.metrics.coordinator_metrics import (
    EndOffsets,
    group_families,
    lag_families,
    transaction_families,
)
from broker.protocol import list_offsets_codec, registry
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode
from broker.replication.replica_manager import ProduceResult
from broker.types import TopicPartition
from tests.unit.metrics.exposition import scrape, value

pytestmark = pytest.mark.unit

OFFSETS_PARTITIONS = 3
ME = 1
GROUP_PREFIX = "kafka_coordinator_group_groupmetadatamanager_"
TXN_PREFIX = "kafka_coordinator_transaction_transactionstatemanager_"


# --- stand-ins -----------------------------------------------------------------------------


class AcceptingReplicaManager:
    """Offsets appends succeed; ``partitions`` are the replicas hosted here (for end offsets)."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, Any] = {}

    async def append_records(
        self, entries: dict[TopicPartition, bytes], **_kwargs: Any
    ) -> dict[TopicPartition, ProduceResult]:
        return {tp: ProduceResult(ErrorCode.none) for tp in entries}


class LeaderPool:
    """Other brokers answering ListOffsets: the request goes through the client's encoding and
    the broker's decoding, the answer through the broker's encoding and the client's decoding.
    ``down`` refuse connections, ``hung`` never answer, ``errors`` answer an error code."""

    def __init__(self, end_offsets: dict[TopicPartition, int]) -> None:
        self.end_offsets = end_offsets
        self.requests: list[tuple[int, list[TopicPartition]]] = []
        self.down: set[int] = set()
        self.hung: set[int] = set()
        self.errors: dict[int, ErrorCode] = {}

    async def request(self, target: int, api_key: int, api_version: int, body: Any) -> Any:
        assert api_key == ApiKey.LIST_OFFSETS
        query = list_offsets_codec.decode_request(api_version, registry.encode(body), 0)
        assert query.replica_id == -1 and query.isolation_level == 0
        asked = [
            TopicPartition(t.name, p.partition_index) for t in query.topics for p in t.partitions
        ]
        assert all(p.timestamp == -1 for t in query.topics for p in t.partitions)
        self.requests.append((target, asked))
        if target in self.down:
            raise ConnectionError(f"broker {target} refused the connection")
        if target in self.hung:
            await asyncio.Event().wait()
        error = self.errors.get(target, ErrorCode.none)
        answer = [
            (
                t.name,
                [
                    list_offsets_codec.PartitionOffset(
                        p.partition_index,
                        int(error),
                        -1,
                        -1
                        if error
                        else self.end_offsets[TopicPartition(t.name, p.partition_index)],
                        0,
                    )
                    for p in t.partitions
                ],
            )
            for t in query.topics
        ]
        blob = list_offsets_codec.encode_response(api_version, answer)
        response, _size = entity_reader(registry.response_class(api_key, api_version))(blob, 0)
        return response


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _metadata(leaders: dict[TopicPartition, int]) -> MetadataCache:
    metadata = MetadataCache("cluster")
    by_topic: dict[str, list[PartitionInfo]] = {}
    for tp, leader in leaders.items():
        by_topic.setdefault(tp.topic, []).append(
            PartitionInfo(tp.partition, leader, 0, (1, 2, 3), (1, 2, 3))
        )
    for topic, parts in by_topic.items():
        metadata.update_partitions(topic, uuid.uuid4(), parts)
    return metadata


def _coordinator(clock: ManualClock) -> GroupCoordinator:
    config = BrokerConfig(
        {
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "group.initial.rebalance.delay.ms": "0",
        }
    )
    return GroupCoordinator(config, clock, ME, None, AcceptingReplicaManager(), None)  # type: ignore[arg-type]


def _own(coordinator: GroupCoordinator, *groups: str) -> None:
    for group in groups:
        p = partition_for(group, OFFSETS_PARTITIONS)
        coordinator._partitions.setdefault(p, OffsetsPartition(p, 0, loaded=True))


async def _commit(
    coordinator: GroupCoordinator, group: str, offsets: dict[TopicPartition, int], **member: Any
) -> None:
    codes = await coordinator.commit_offsets(
        group,
        member_id=member.get("member_id", ""),
        generation_id=member.get("generation_id", -1),
        group_instance_id=None,
        offsets={tp: (o, -1, "") for tp, o in offsets.items()},
    )
    assert set(codes.values()) == {ErrorCode.none}


async def _join(coordinator: GroupCoordinator, group: str, *, sync: bool) -> str:
    common: dict[str, Any] = {
        "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
        "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
        "protocol_type": "consumer", "protocols": [("range", b"sub")],
        "supports_skip_assignment": False,
    }  # fmt: skip
    first = await coordinator.join_group(
        group, member_id="", require_known_member_id=True, **common
    )
    joined = await coordinator.join_group(
        group, member_id=first.member_id, require_known_member_id=True, **common
    )
    assert joined.error == ErrorCode.none
    if sync:
        synced = await coordinator.sync_group(
            group, member_id=first.member_id, generation_id=joined.generation_id,
            group_instance_id=None, protocol_type="consumer", protocol_name="range",
            assignments={first.member_id: b""},
        )  # fmt: skip
        assert synced.error == ErrorCode.none
    return first.member_id


# --- groups --------------------------------------------------------------------------------


def test_groups_by_state_and_offsets_of_the_loaded_partitions() -> None:
    clock = ManualClock()
    coordinator = _coordinator(clock)
    _own(coordinator, "stable", "rebalancing", "simple")
    t0, t1 = TopicPartition("events", 0), TopicPartition("events", 1)

    async def scenario() -> None:
        member = await _join(coordinator, "stable", sync=True)
        await _commit(coordinator, "stable", {t0: 5, t1: 7}, member_id=member, generation_id=1)
        await _join(coordinator, "rebalancing", sync=False)
        await _commit(coordinator, "simple", {t0: 3})

    asyncio.run(scenario())
    samples = scrape(group_families(coordinator.loaded_partitions()))
    assert value(samples, GROUP_PREFIX + "numgroups") == 3
    assert value(samples, GROUP_PREFIX + "numgroupsstable") == 1
    assert value(samples, GROUP_PREFIX + "numgroupscompletingrebalance") == 1
    assert value(samples, GROUP_PREFIX + "numgroupsempty") == 1  # the simple group
    assert value(samples, GROUP_PREFIX + "numgroupspreparingrebalance") == 0
    assert value(samples, GROUP_PREFIX + "numgroupsdead") == 0
    assert value(samples, GROUP_PREFIX + "numoffsets") == 3


def test_a_partition_still_loading_or_led_elsewhere_counts_nothing() -> None:
    coordinator = _coordinator(ManualClock())
    p = partition_for("g", OFFSETS_PARTITIONS)
    coordinator._partitions[p] = OffsetsPartition(p, 0, loaded=False)
    samples = scrape(group_families(coordinator.loaded_partitions()))
    assert value(samples, GROUP_PREFIX + "numgroups") == 0
    assert value(samples, GROUP_PREFIX + "numoffsets") == 0


# --- transactions --------------------------------------------------------------------------


def test_transactional_ids_by_state() -> None:
    states = [TxnState.ONGOING, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_ABORT]
    partition = TxnPartition(0, 0, loaded=True)
    for i, state in enumerate(states):
        partition.transactions[f"tx{i}"] = TransactionMetadata(
            f"tx{i}", producer_id=i, timeout_ms=60_000, update_ms=0, state=state
        )
    samples = scrape(transaction_families([partition, TxnPartition(1, 0, loaded=True)]))
    assert value(samples, TXN_PREFIX + "ongoingtransactions") == 2
    assert value(samples, TXN_PREFIX + "transactionalids") == 4
    assert value(samples, TXN_PREFIX + "numtransactions", state="Ongoing") == 2
    assert value(samples, TXN_PREFIX + "numtransactions", state="PrepareCommit") == 1
    assert value(samples, TXN_PREFIX + "numtransactions", state="CompleteAbort") == 1
    assert value(samples, TXN_PREFIX + "numtransactions", state="Empty") == 0


# --- end offsets and lag -------------------------------------------------------------------

LOCAL = TopicPartition("events", 0)  # led here
ON_2 = TopicPartition("events", 1)  # led by broker 2
ON_2B = TopicPartition("other", 0)  # led by broker 2 as well
ON_3 = TopicPartition("events", 2)  # led by broker 3
OFFLINE = TopicPartition("events", 3)  # no leader
GONE = TopicPartition("deleted", 0)  # not in the metadata any more


def _end_offsets(
    *, timeout_s: float = 1.0
) -> tuple[EndOffsets, LeaderPool, MetadataCache, Monotonic]:
    metadata = _metadata({LOCAL: ME, ON_2: 2, ON_2B: 2, ON_3: 3, OFFLINE: -1})
    replicas = AcceptingReplicaManager()
    replicas.partitions[LOCAL] = SimpleNamespace(is_leader=True, high_watermark=50)
    pool = LeaderPool({ON_2: 20, ON_2B: 8, ON_3: 30, LOCAL: 999})
    clock = Monotonic()
    end_offsets = EndOffsets(
        ME, metadata, replicas, pool, monotonic=clock, ttl_s=3.0, timeout_s=timeout_s
    )
    return end_offsets, pool, metadata, clock


def test_end_offsets_local_and_one_batched_request_per_leader() -> None:
    end_offsets, pool, _metadata_cache, _clock = _end_offsets()
    got = asyncio.run(end_offsets.get([LOCAL, ON_2, ON_2B, ON_3, OFFLINE, GONE]))
    assert got == {LOCAL: 50, ON_2: 20, ON_2B: 8, ON_3: 30}
    assert sorted((t, sorted(tps)) for t, tps in pool.requests) == [
        (2, sorted([ON_2, ON_2B])),
        (3, [ON_3]),
    ]


def test_end_offsets_are_cached_for_the_ttl_and_per_leader() -> None:
    end_offsets, pool, metadata, clock = _end_offsets()

    async def scenario() -> None:
        await end_offsets.get([ON_2, ON_3])
        pool.end_offsets[ON_2] = 25
        clock.now += 2.0
        assert await end_offsets.get([ON_2, ON_3]) == {ON_2: 20, ON_3: 30}
        assert len(pool.requests) == 2
        clock.now += 1.5
        assert await end_offsets.get([ON_2, ON_3]) == {ON_2: 25, ON_3: 30}
        assert len(pool.requests) == 4
        # leadership moved: the cached answer of the old leader is not used
        metadata.update_partitions("events", None, [PartitionInfo(1, 3, 1, (1, 2, 3), (3,))])
        pool.end_offsets[ON_2] = 26
        assert await end_offsets.get([ON_2]) == {ON_2: 26}
        assert pool.requests[-1] == (3, [ON_2])

    asyncio.run(scenario())


def test_a_leader_down_slow_or_erroring_costs_only_its_partitions() -> None:
    end_offsets, pool, _metadata_cache, clock = _end_offsets(timeout_s=0.05)
    pool.down.add(2)
    pool.hung.add(3)

    async def scenario() -> None:
        assert await end_offsets.get([LOCAL, ON_2, ON_3]) == {LOCAL: 50}
        # failures are cached too: a dead leader costs one attempt per TTL, not per scrape
        assert await end_offsets.get([LOCAL, ON_2, ON_3]) == {LOCAL: 50}
        assert len(pool.requests) == 2
        pool.down.clear()
        pool.hung.clear()
        pool.errors[3] = ErrorCode.not_leader_or_follower
        clock.now += 3.0
        assert await end_offsets.get([ON_2, ON_3]) == {ON_2: 20}

    asyncio.run(scenario())


def test_lag_per_partition_and_sums_per_topic() -> None:
    clock = ManualClock()
    coordinator = _coordinator(clock)
    _own(coordinator, "app", "idle")
    end_offsets, _pool, _metadata_cache, _clock = _end_offsets()

    async def scenario() -> dict[str, Any]:
        await _commit(coordinator, "app", {LOCAL: 45, ON_2: 20, ON_2B: 2, OFFLINE: 4, GONE: 9})
        await _join(coordinator, "idle", sync=True)
        return scrape(await lag_families(coordinator.loaded_partitions(), end_offsets))

    samples = asyncio.run(scenario())

    def sample(name: str, tp: TopicPartition) -> float | None:
        return value(
            samples, name, consumergroup="app", topic=tp.topic, partition=str(tp.partition)
        )

    def lag(tp: TopicPartition) -> float | None:
        return sample("kafka_consumergroup_lag", tp)

    assert lag(LOCAL) == 5 and lag(ON_2) == 0 and lag(ON_2B) == 6
    assert lag(OFFLINE) is None and lag(GONE) is None  # end offset unknown: left out
    for tp, committed in ((LOCAL, 45), (OFFLINE, 4), (GONE, 9)):
        assert sample("kafka_consumergroup_current_offset", tp) == committed
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup="app", topic="events") == 5
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup="app", topic="other") == 6
    assert "deleted" not in {dict(k)["topic"] for k in samples["kafka_consumergroup_lag_sum"]}
    assert (
        value(
            samples, "kafka_consumergroup_current_offset_sum", consumergroup="app", topic="events"
        )
        == 45 + 20 + 4
    )
    assert value(samples, "kafka_consumergroup_members", consumergroup="app") == 0
    assert value(samples, "kafka_consumergroup_members", consumergroup="idle") == 1
