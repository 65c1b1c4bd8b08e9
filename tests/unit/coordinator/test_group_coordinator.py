"""The group coordinator's own rules, with a recording stand-in for the replica manager (what
it appends to ``__consumer_offsets``) and a manual clock: routing (NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS), commits acknowledged only once appended, simple commits,
offsets replayed from the records it wrote, a whole join/sync round, and offset expiry
(KIP-211) with tombstones."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.coordinator.group import persistence
from broker.coordinator.group.coordinator import GroupCoordinator
from broker.coordinator.group.group_metadata_manager import OFFSETS_TOPIC, OffsetsPartition
from broker.coordinator.group.offsets_topic import (
    OffsetKey,
    decode_key,
    decode_value,
    partition_for,
)
from broker.protocol import records
from broker.protocol.errors import ErrorCode
from broker.replication.replica_manager import ProduceResult
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

PARTITIONS = 3
TP = TopicPartition("events", 0)


class RecordingReplicaManager:
    """Appends succeed (or fail with ``error``) and are kept, per offsets partition."""

    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, Any] = {}
        self.appended: dict[int, list[bytes]] = {}
        self.error = ErrorCode.none

    async def append_records(
        self,
        entries: dict[TopicPartition, bytes],
        *,
        required_acks: int,
        timeout_ms: int,
        origin: object = None,
    ) -> dict[TopicPartition, ProduceResult]:
        assert required_acks == -1, "commits must wait for the ISR"
        out = {}
        for tp, blob in entries.items():
            if self.error == ErrorCode.none:
                self.appended.setdefault(tp.partition, []).append(blob)
            out[tp] = ProduceResult(self.error)
        return out

    def keys_and_values(self, partition: int) -> list[tuple[Any, Any]]:
        out = []
        for blob in self.appended.get(partition, []):
            for header in records.iter_batches(blob):
                for rec in records.decode_records(blob, header):
                    assert rec.key is not None
                    key = decode_key(rec.key)
                    out.append((key, decode_value(key, rec.value)))
        return out


def _coordinator(
    clock: ManualClock, **props: str
) -> tuple[GroupCoordinator, RecordingReplicaManager]:
    config = BrokerConfig({"offsets.topic.num.partitions": str(PARTITIONS), **props})
    rm = RecordingReplicaManager()
    coordinator = GroupCoordinator(config, clock, 1, None, rm, None)  # type: ignore[arg-type]
    return coordinator, rm


def _own(coordinator: GroupCoordinator, group: str, *, loaded: bool = True) -> int:
    p = partition_for(group, PARTITIONS)
    coordinator._partitions[p] = OffsetsPartition(p, 0, loaded=loaded)
    return p


def test_groups_of_partitions_led_elsewhere_get_not_coordinator() -> None:
    coordinator, _rm = _coordinator(ManualClock())
    error, offsets = asyncio.run(coordinator.fetch_offsets("g", [TP]))
    assert error == ErrorCode.not_coordinator and offsets == {}


def test_a_partition_still_loading_answers_load_in_progress() -> None:
    coordinator, _rm = _coordinator(ManualClock())
    _own(coordinator, "g", loaded=False)
    error, _ = asyncio.run(coordinator.fetch_offsets("g", [TP]))
    assert error == ErrorCode.coordinator_load_in_progress
    assert coordinator.describe_group("")[0] == ErrorCode.invalid_group_id


def test_simple_commit_is_written_then_fetched_and_replays_from_the_log() -> None:
    clock = ManualClock()
    coordinator, rm = _coordinator(clock)
    p = _own(coordinator, "g")
    codes = asyncio.run(
        coordinator.commit_offsets(
            "g", member_id="", generation_id=-1, group_instance_id=None,
            offsets={TP: (42, 3, "meta")},
        )
    )  # fmt: skip
    assert codes == {TP: ErrorCode.none}
    error, fetched = asyncio.run(coordinator.fetch_offsets("g", [TP, TopicPartition("x", 1)]))
    assert error == ErrorCode.none
    assert fetched[TP] == (42, 3, "meta", ErrorCode.none)
    assert fetched[TopicPartition("x", 1)] == (-1, -1, "", ErrorCode.none)
    [(key, value)] = rm.keys_and_values(p)
    assert key == OffsetKey("g", "events", 0)
    assert value.offset == 42 and value.metadata == "meta" and value.leader_epoch == 3
    loaded = persistence.LoadedPartition()
    persistence.apply_records(loaded, rm.appended[p])
    assert loaded.offsets["g"][TP].offset == 42
    assert loaded.records == 1  # what the coordinator's "loaded ..." line reports


def test_a_commit_that_is_not_replicated_is_not_acknowledged_nor_cached() -> None:
    coordinator, rm = _coordinator(ManualClock())
    _own(coordinator, "g")
    rm.error = ErrorCode.not_enough_replicas
    codes = asyncio.run(
        coordinator.commit_offsets(
            "g", member_id="", generation_id=-1, group_instance_id=None, offsets={TP: (7, -1, None)}
        )
    )
    assert codes == {TP: ErrorCode.coordinator_not_available}
    assert asyncio.run(coordinator.fetch_offsets("g", [TP]))[1][TP][0] == -1


def test_a_commit_with_a_generation_for_an_unknown_group_is_refused() -> None:
    coordinator, _rm = _coordinator(ManualClock())
    _own(coordinator, "g")
    codes = asyncio.run(
        coordinator.commit_offsets(
            "g", member_id="m", generation_id=3, group_instance_id=None, offsets={TP: (1, -1, "")}
        )
    )
    assert codes == {TP: ErrorCode.illegal_generation}


def test_join_sync_round_with_one_member_then_fenced_commits() -> None:
    clock = ManualClock()
    coordinator, rm = _coordinator(clock, **{"group.initial.rebalance.delay.ms": "0"})
    p = _own(coordinator, "g")

    async def scenario() -> None:
        common: dict[str, Any] = {
            "group_instance_id": None, "client_id": "c", "client_host": "/127.0.0.1",
            "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "protocol_type": "consumer", "protocols": [("range", b"sub")],
            "supports_skip_assignment": False,
        }  # fmt: skip
        first = await coordinator.join_group(
            "g", member_id="", require_known_member_id=True, **common
        )
        assert first.error == ErrorCode.member_id_required
        joined = await coordinator.join_group(
            "g", member_id=first.member_id, require_known_member_id=True, **common
        )
        assert joined.error == ErrorCode.none and joined.leader_id == first.member_id
        assert joined.protocol_name == "range" and joined.generation_id == 1
        synced = await coordinator.sync_group(
            "g", member_id=first.member_id, generation_id=1, group_instance_id=None,
            protocol_type="consumer", protocol_name="range",
            assignments={first.member_id: b"assignment"},
        )  # fmt: skip
        assert synced.error == ErrorCode.none and synced.assignment == b"assignment"
        stale = await coordinator.commit_offsets(
            "g", member_id=first.member_id, generation_id=0, group_instance_id=None,
            offsets={TP: (1, -1, "")},
        )  # fmt: skip
        assert stale == {TP: ErrorCode.illegal_generation}
        ok = await coordinator.commit_offsets(
            "g", member_id=first.member_id, generation_id=1, group_instance_id=None,
            offsets={TP: (5, -1, "")},
        )  # fmt: skip
        assert ok == {TP: ErrorCode.none}
        error, description = coordinator.describe_group("g")
        assert error == ErrorCode.none and description.state == "Stable"
        assert [m.assignment for m in description.members] == [b"assignment"]

    asyncio.run(scenario())
    stored = [v for k, v in rm.keys_and_values(p) if not isinstance(k, OffsetKey)]
    assert stored and stored[-1].generation == 1 and stored[-1].protocol == "range"
    assert stored[-1].members[0].assignment == b"assignment"


def test_offsets_of_an_empty_group_expire_after_the_retention_with_tombstones() -> None:
    clock = ManualClock()
    coordinator, rm = _coordinator(clock, **{"offsets.retention.minutes": "1"})
    p = _own(coordinator, "g")
    asyncio.run(
        coordinator.commit_offsets(
            "g", member_id="", generation_id=-1, group_instance_id=None, offsets={TP: (9, -1, "")}
        )
    )
    clock.advance(59_000)
    assert asyncio.run(coordinator.expire_offsets(clock.time_ms())) == 0
    clock.advance(1_000)
    assert asyncio.run(coordinator.expire_offsets(clock.time_ms())) == 1
    assert asyncio.run(coordinator.fetch_offsets("g", [TP]))[1][TP][0] == -1
    tombstones = [(k, v) for k, v in rm.keys_and_values(p) if v is None]
    assert (OffsetKey("g", "events", 0), None) in tombstones
    assert coordinator.list_groups(None)[1] == []
    assert OFFSETS_TOPIC == "__consumer_offsets"
