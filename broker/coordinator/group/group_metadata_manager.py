"""The group coordinator's ``__consumer_offsets`` (the storage side of Kafka's
``GroupMetadataManager``): creating the topic and appending offset commits and group
metadata to it. Record formats are ``offsets_topic.py``'s and batches ``persistence.py``'s.

Creating: the first FindCoordinator creates the topic through the controller (so its configs
hold whichever broker creates it): ``cleanup.policy=compact``, ``compression.type=producer``,
``segment.bytes`` from ``offsets.topic.segment.bytes``, replication factor
min(``offsets.topic.replication.factor``, live brokers).

Loading is the shared ``broker/coordinator/partition_loader.py``'s: when this broker becomes
leader of a partition, it waits (up to 30 s, while it stays leader) until the high watermark
covers the log end, so that what earlier leaders committed is included, then replays the
partition from its log start to the high watermark (``LoadEnd.HIGH_WATERMARK``).

Writing: every append is acks=all with ``offsets.commit.timeout.ms``; a transactional commit
is the coordinator's own write (Kafka's ``AppendOrigin.COORDINATOR``), so the producer's
sequence numbers are not checked. Append errors become the coordinator's:
NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION become NOT_COORDINATOR;
NOT_ENOUGH_REPLICAS(_AFTER_APPEND) and REQUEST_TIMED_OUT become COORDINATOR_NOT_AVAILABLE;
MESSAGE_TOO_LARGE and RECORD_LIST_TOO_LARGE become UNKNOWN_SERVER_ERROR.

The in-memory state of a partition this broker leads (:class:`OffsetsPartition`: its groups,
committed offsets and pending transactional commits) is kept by the coordinator, which checks
after every await that the partition is still the one it was working on.

Concurrency: event loop thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.coordinator.group import persistence
from broker.coordinator.group.group import Group
from broker.coordinator.group.group_metadata import GroupState
from broker.coordinator.group.offsets_topic import GroupMetadataValue, MemberRecord, OffsetValue
from broker.log.log import AppendOrigin
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.config import BrokerConfig
    from broker.coordinator.transaction.transaction_state_manager import TopicCreator
    from broker.metadata.cache import MetadataCache
    from broker.replication.replica_manager import ReplicaManager

__all__ = ["OFFSETS_TOPIC", "GroupMetadataManager", "OffsetsPartition"]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(slots=True)
class OffsetsPartition:
    """One ``__consumer_offsets`` partition this broker leads, at ``coordinator_epoch`` (the
    partition's leader epoch, as Kafka's ``GroupCoordinator.onElection`` calls it)."""

    partition: int
    coordinator_epoch: int
    loaded: bool = False
    groups: dict[str, Group] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, OffsetValue]] = field(default_factory=dict)
    # producer id -> group -> partition -> offset of a transaction not ended yet
    pending: persistence.PendingOffsets = field(default_factory=dict)


class GroupMetadataManager:
    """Creates ``__consumer_offsets`` and appends to it (see the module docstring for the
    format and the error mapping).

    Concurrency: event loop thread only; its only state is whether a topic creation is in
    flight.
    """

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        metadata: MetadataCache,
        replica_manager: ReplicaManager,
        controller: TopicCreator,
    ) -> None:
        self.config = config
        self.clock = clock
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.controller = controller
        self.num_partitions = int(config["offsets.topic.num.partitions"])
        self._creating = False

    async def create_topic(self) -> None:
        """Create ``__consumer_offsets`` (once at a time; a failure is logged, the client
        retries FindCoordinator)."""
        if self._creating:
            return
        self._creating = True
        try:
            live = max(len(self.metadata.brokers()), 1)
            rf = min(int(self.config["offsets.topic.replication.factor"]), live)
            configs = {
                "cleanup.policy": "compact",
                "compression.type": "producer",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
            }
            await self.controller.create_internal_topic(
                OFFSETS_TOPIC, self.num_partitions, rf, configs
            )
        except KafkaError as exc:
            log.warning("creating %s failed: %s", OFFSETS_TOPIC, exc)
        finally:
            self._creating = False

    async def append(
        self, state: OffsetsPartition, blob: bytes, *, transactional: bool = False
    ) -> ErrorCode:
        """Append ``blob`` (acks=all); a transactional commit is appended as the coordinator's
        own write, so its producer's sequence numbers are not checked (Kafka's
        AppendOrigin.COORDINATOR)."""
        tp = TopicPartition(OFFSETS_TOPIC, state.partition)
        results = await self.replica_manager.append_records(
            {tp: blob},
            required_acks=-1,
            timeout_ms=int(self.config["offsets.commit.timeout.ms"]),
            origin=AppendOrigin.COORDINATOR if transactional else AppendOrigin.CLIENT,
        )
        code = results[tp].error
        if code in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
            return ErrorCode.not_coordinator
        if code in (
            ErrorCode.not_enough_replicas,
            ErrorCode.not_enough_replicas_after_append,
            ErrorCode.request_timed_out,
        ):
            return ErrorCode.coordinator_not_available
        if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
            return ErrorCode.unknown_server_error
        return code

    async def store_group(
        self, state: OffsetsPartition, group: Group, assignments: Mapping[str, bytes] | None = None
    ) -> ErrorCode:
        """Append the group's metadata record (a tombstone once the group is Dead); the
        leader's ``assignments``, not yet given to the members, replace theirs."""
        now = self.clock.time_ms()
        if group.state is GroupState.DEAD:
            value = None
        else:
            chosen = group.protocol_name
            members = []
            for m in group.members:
                protocols = dict(m.protocols)
                members.append(
                    MemberRecord(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        rebalance_timeout_ms=m.rebalance_timeout_ms,
                        session_timeout_ms=m.session_timeout_ms,
                        subscription=protocols.get(chosen or "", b""),
                        assignment=(assignments or {}).get(m.member_id, m.assignment),
                    )
                )
            value = GroupMetadataValue(
                protocol_type=group.protocol_type or "",
                generation=group.generation_id,
                protocol=chosen,
                leader=group.leader_id,
                current_state_timestamp=now,
                members=tuple(members),
            )
        return await self.append(
            state, persistence.group_metadata_batch(group.group_id, value, now)
        )
