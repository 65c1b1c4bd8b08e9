"""The group coordinator: consumer groups and committed offsets on this broker.

Theory of operation (checklist sections 16-17; Kafka's classic GroupCoordinator)
-------------------------------------------------------------------------------
A group belongs to partition ``partition_for(group_id, offsets.topic.num.partitions)`` of the
internal, compacted topic ``__consumer_offsets``; the leader of that partition is the group's
coordinator. The topic is created on the first FindCoordinator (replication factor
min(``offsets.topic.replication.factor``, live brokers)).

When this broker becomes leader of an offsets partition it replays the partition's log into
memory (committed offsets and each group's last metadata; the shared
``broker/coordinator/partition_loader.py`` reads it and tracks elections and resignations);
until that is done requests for its groups get COORDINATOR_LOAD_IN_PROGRESS. When it stops
leading, the partition's groups are dropped and their parked requests answered with
NOT_COORDINATOR, so clients look the coordinator up again. Requests for groups of partitions
this broker does not lead get NOT_COORDINATOR.

Membership is the pure state machine of ``group.py``. JoinGroup and SyncGroup requests that
must wait (for the other members, for the leader's assignment) park on futures keyed by
(group, member); after every change the coordinator drains the group's completions and
answers them. A timer task wakes every 100 ms to expire members whose session ran out,
complete joins whose rebalance timeout passed, and end delayed initial rebalances.

Commits and completed rebalances are appended to the offsets partition with acks=all through
the replica manager, and acknowledged (and applied to the in-memory cache) only once the ISR
has them, so a committed offset survives the loss of the coordinator. Creating the topic,
reading a partition back and appending to it are ``group_metadata_manager.py``'s.

Transactional commits (TxnOffsetCommit, KIP-98) are appended as a transactional batch of the
committing producer and kept *pending*; when the transaction's marker is written to the
offsets partition (WriteTxnMarkers calls :meth:`GroupCoordinator.complete_transaction`) they
become the group's offsets on commit and vanish on abort. OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with a pending commit.

Concurrency: event loop thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from broker.coordinator.group import persistence
from broker.coordinator.group.group import Group
from broker.coordinator.group.group_metadata import (
    GroupConfig,
    GroupDescription,
    GroupOverview,
    GroupState,
)
from broker.coordinator.group.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    OffsetsPartition,
)
from broker.coordinator.group.offsets_topic import OffsetValue, partition_for
from broker.coordinator.group.results import (
    Completions,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    MemberIdentity,
    Pending,
    SyncResult,
)
from broker.coordinator.partition_loader import LoadEnd, PartitionLoader
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.config import BrokerConfig
    from broker.coordinator.transaction.transaction_state_manager import TopicCreator
    from broker.metadata.cache import MetadataCache
    from broker.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

TIMER_INTERVAL_S = 0.1


class GroupCoordinator:
    """Consumer groups and their offsets, for the offsets partitions this broker leads."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        broker_id: int,
        metadata: MetadataCache,
        replica_manager: ReplicaManager,
        controller: TopicCreator,
    ) -> None:
        self.config = config
        self.clock = clock
        self.broker_id = broker_id
        self.metadata = metadata
        self.group_manager = GroupMetadataManager(
            config, clock, metadata, replica_manager, controller
        )
        self.num_partitions = int(config["offsets.topic.num.partitions"])
        self.group_config = GroupConfig(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
        )
        self.metadata_max_bytes = int(config["offset.metadata.max.bytes"])
        self.retention_ms = int(config["offsets.retention.minutes"]) * 60_000
        self.retention_check_ms = int(config["offsets.retention.check.interval.ms"])
        self._loader: PartitionLoader[OffsetsPartition, persistence.LoadedPartition] = (
            PartitionLoader(
                OFFSETS_TOPIC,
                replica_manager,
                new_state=OffsetsPartition,
                new_loaded=persistence.LoadedPartition,
                apply=persistence.apply_records,
                on_loaded=self._on_loaded,
                on_unloaded=self._on_unloaded,
                spawn=self._spawn,
                load_end=LoadEnd.HIGH_WATERMARK,
                task_name="load-offsets",
            )
        )
        self._partitions = self._loader.partitions  # the loader's: partition -> state
        self._joins: dict[tuple[str, str], asyncio.Future[JoinResult]] = {}
        self._syncs: dict[tuple[str, str], asyncio.Future[SyncResult]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._spawn(self._timer(), "group-coordinator-timer")

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        self._loader.unload_all()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- leadership of offsets partitions (called by the replica manager) ------------------

    def on_role_change(self, tp: TopicPartition, is_leader: bool, leader_epoch: int) -> None:
        """Elections and resignations of ``__consumer_offsets`` partitions: loading and
        unloading are the loader's (``partition_loader.py``)."""
        self._loader.on_role_change(tp, is_leader, leader_epoch)

    def _on_loaded(self, state: OffsetsPartition, loaded: persistence.LoadedPartition) -> None:
        """Install a replayed partition: its committed and pending offsets, and its groups
        (the loader then marks it loaded)."""
        now = self.clock.time_ms()
        state.offsets = loaded.offsets
        state.pending = loaded.pending
        for group_id, value in loaded.groups.items():
            try:
                state.groups[group_id] = Group.load(
                    group_id,
                    self.group_config,
                    protocol_type=value.protocol_type,
                    generation_id=value.generation,
                    protocol_name=value.protocol,
                    leader_id=value.leader,
                    state_timestamp_ms=value.current_state_timestamp,
                    members=value.members,
                    now_ms=now,
                )
            except Exception:
                log.exception("cannot load group %s", group_id)
        log.info(
            "loaded %s-%d: %d groups, offsets of %d groups, from %d records",
            OFFSETS_TOPIC,
            state.partition,
            len(state.groups),
            len(state.offsets),
            loaded.records,
        )

    def _on_unloaded(self, state: OffsetsPartition) -> None:
        """``state``'s partition is no longer this broker's: its groups' parked requests are
        answered with NOT_COORDINATOR."""
        partition = state.partition
        now = self.clock.time_ms()
        for group in state.groups.values():
            self._deliver(group.group_id, group.unload(now))
        for key, fut in list(self._joins.items()):
            if partition_for(key[0], self.num_partitions) == partition and not fut.done():
                fut.set_result(JoinResult(ErrorCode.not_coordinator, key[1]))
        for key, sfut in list(self._syncs.items()):
            if partition_for(key[0], self.num_partitions) == partition and not sfut.done():
                sfut.set_result(SyncResult(ErrorCode.not_coordinator))

    # --- FindCoordinator ----------------------------------------------------------------

    async def find_coordinator(self, key: str) -> tuple[ErrorCode, int, str, int]:
        topic = self.metadata.topic(OFFSETS_TOPIC)
        if topic is None:
            await self.group_manager.create_topic()
            return ErrorCode.coordinator_not_available, -1, "", -1
        info = topic.partitions.get(partition_for(key, self.num_partitions))
        if info is None or info.leader < 0:
            return ErrorCode.coordinator_not_available, -1, "", -1
        broker = self.metadata.broker(info.leader)
        if broker is None:
            return ErrorCode.coordinator_not_available, -1, "", -1
        return ErrorCode.none, broker.id, broker.host, broker.port

    # --- routing ------------------------------------------------------------------------

    def _partition_of(self, group_id: str) -> tuple[ErrorCode, OffsetsPartition | None]:
        if not group_id:
            return ErrorCode.invalid_group_id, None
        return self._loader.route(partition_for(group_id, self.num_partitions))

    def _deliver(self, group_id: str, completions: Completions) -> None:
        for member_id, join in completions.joins.items():
            fut = self._joins.pop((group_id, member_id), None)
            if fut is not None and not fut.done():
                fut.set_result(join)
        for member_id, sync in completions.syncs.items():
            sfut = self._syncs.pop((group_id, member_id), None)
            if sfut is not None and not sfut.done():
                sfut.set_result(sync)

    async def _settle(self, state: OffsetsPartition, group: Group) -> None:
        """Answer what the group completed; finish the join phase if it can."""
        now = self.clock.time_ms()
        completions = group.drain_completions()
        self._deliver(group.group_id, completions)
        if completions.persist:
            await self.group_manager.store_group(state, group)
        if group.join_can_complete(now):
            done = group.complete_join(now)
            self._deliver(group.group_id, done)
            if done.persist:
                await self.group_manager.store_group(state, group)
        if group.state is GroupState.DEAD:
            state.groups.pop(group.group_id, None)

    # --- membership -----------------------------------------------------------------------

    async def join_group(
        self,
        group_id: str,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool,
    ) -> JoinResult:
        error, state = self._partition_of(group_id)
        if state is None:
            return JoinResult(error, member_id)
        now = self.clock.time_ms()
        group = state.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = state.groups[group_id] = Group(group_id, self.group_config, now)
        result = group.join(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            now_ms=now,
            require_known_member_id=require_known_member_id,
            supports_skip_assignment=supports_skip_assignment,
        )
        if isinstance(result, Pending):
            key = (group_id, result.member_id)
            old = self._joins.pop(key, None)
            if old is not None and not old.done():
                old.set_result(JoinResult(ErrorCode.rebalance_in_progress, result.member_id))
            fut: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
            self._joins[key] = fut
            await self._settle(state, group)
            return await fut
        await self._settle(state, group)
        return result

    async def sync_group(
        self,
        group_id: str,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes] | None,
    ) -> SyncResult:
        error, state = self._partition_of(group_id)
        if state is None:
            return SyncResult(error)
        group = state.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        now = self.clock.time_ms()
        result = group.sync(
            member_id=member_id,
            generation_id=generation_id,
            group_instance_id=group_instance_id,
            now_ms=now,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=assignments,
        )
        if not isinstance(result, Pending):
            await self._settle(state, group)
            return result
        fut: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self._syncs[(group_id, result.member_id)] = fut
        if result.store is not None:
            store = result.store
            code = await self.group_manager.store_group(state, group, store.assignments)
            done = group.complete_sync(
                store.generation_id, store.assignments, self.clock.time_ms(), code
            )
            self._deliver(group_id, done)
        await self._settle(state, group)
        return await fut

    async def heartbeat(
        self, group_id: str, *, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode:
        error, state = self._partition_of(group_id)
        if state is None:
            return error
        group = state.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        code = group.heartbeat(
            member_id=member_id,
            generation_id=generation_id,
            group_instance_id=group_instance_id,
            now_ms=self.clock.time_ms(),
        )
        await self._settle(state, group)
        return code

    async def leave_group(self, group_id: str, members: list[MemberIdentity]) -> LeaveResult:
        error, state = self._partition_of(group_id)
        if state is None:
            return LeaveResult(error)
        group = state.groups.get(group_id)
        if group is None:
            return LeaveResult(
                ErrorCode.none,
                tuple(
                    LeaveMemberResult(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id)
                    for m in members
                ),
            )
        result = group.leave(members, self.clock.time_ms())
        await self._settle(state, group)
        return result

    async def _timer(self) -> None:
        next_expiry = self.clock.time_ms() + self.retention_check_ms
        while True:
            await asyncio.sleep(TIMER_INTERVAL_S)
            now = self.clock.time_ms()
            if now >= next_expiry:
                next_expiry = now + self.retention_check_ms
                try:
                    await self.expire_offsets(now)
                except Exception:
                    log.exception("offset expiry failed")
            for state in list(self._partitions.values()):
                if not state.loaded:
                    continue
                for group in list(state.groups.values()):
                    try:
                        for member_id in group.expired_members(now):
                            log.info("group %s: member %s expired", group.group_id, member_id)
                            group.remove_member(member_id, now)
                        group.expire_pending_sync(now)
                        await self._settle(state, group)
                    except Exception:
                        log.exception("group %s: timer work failed", group.group_id)

    # --- offsets ----------------------------------------------------------------------------

    async def commit_offsets(
        self,
        group_id: str,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, ErrorCode]:
        error, state = self._partition_of(group_id)
        if state is None:
            return dict.fromkeys(offsets, error)
        now = self.clock.time_ms()
        group = state.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return dict.fromkeys(offsets, ErrorCode.illegal_generation)
            group = state.groups[group_id] = Group(group_id, self.group_config, now)
        else:
            code = group.validate_offset_commit(
                member_id, generation_id, group_instance_id, now_ms=now
            )
            if code != ErrorCode.none:
                return dict.fromkeys(offsets, code)
        results: dict[TopicPartition, ErrorCode] = {}
        values: dict[TopicPartition, OffsetValue | None] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            if metadata is not None and len(metadata.encode()) > self.metadata_max_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            values[tp] = OffsetValue(
                offset=offset, leader_epoch=epoch, metadata=metadata or "", commit_timestamp=now
            )
        if values:
            code = await self.group_manager.append(
                state, persistence.offset_commit_batch(group_id, values, now)
            )
            if code == ErrorCode.none and self._loader.is_current(state):
                cache = state.offsets.setdefault(group_id, {})
                for tp, value in values.items():
                    if value is not None:
                        cache[tp] = value
            for tp in values:
                results[tp] = code
        return results

    async def txn_commit_offsets(
        self,
        group_id: str,
        *,
        producer_id: int,
        producer_epoch: int,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        offsets: dict[TopicPartition, tuple[int, int, str | None]],
    ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: the offsets are written in the producer's transaction and stay
        pending until its marker."""
        error, state = self._partition_of(group_id)
        if state is None:
            return dict.fromkeys(offsets, error)
        now = self.clock.time_ms()
        group = state.groups.get(group_id)
        if group is None:
            group = state.groups[group_id] = Group(group_id, self.group_config, now)
        code = group.validate_offset_commit(member_id, generation_id, group_instance_id, now_ms=now)
        if code != ErrorCode.none:
            return dict.fromkeys(offsets, code)
        results: dict[TopicPartition, ErrorCode] = {}
        values: dict[TopicPartition, OffsetValue] = {}
        for tp, (offset, epoch, metadata) in offsets.items():
            if metadata is not None and len(metadata.encode()) > self.metadata_max_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            values[tp] = OffsetValue(
                offset=offset, leader_epoch=epoch, metadata=metadata or "", commit_timestamp=now
            )
        if values:
            blob = persistence.offset_commit_batch(
                group_id,
                dict(values),
                now,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
            code = await self.group_manager.append(state, blob, transactional=True)
            if code == ErrorCode.none and self._loader.is_current(state):
                state.pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(values)
            for tp in values:
                results[tp] = code
        return results

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of ``producer_id`` was written to ``__consumer_offsets-<partition>``:
        its pending commits there become offsets (commit) or vanish (abort)."""
        state = self._partitions.get(partition)
        if state is None:
            return
        changed = persistence.complete_pending(state.offsets, state.pending, producer_id, commit)
        if changed:
            log.debug("transaction of producer %d committed offsets of %s", producer_id, changed)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        state = self._partitions.get(partition_for(group_id, self.num_partitions))
        if state is None:
            return False
        return any(tp in groups.get(group_id, {}) for groups in state.pending.values())

    async def fetch_offsets(
        self,
        group_id: str,
        partitions: list[TopicPartition] | None,
        require_stable: bool = False,
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[int, int, str, ErrorCode]]]:
        error, state = self._partition_of(group_id)
        if state is None:
            return error, {}
        committed = state.offsets.get(group_id, {})
        wanted = sorted(committed) if partitions is None else partitions
        out: dict[TopicPartition, tuple[int, int, str, ErrorCode]] = {}
        for tp in wanted:
            value = committed.get(tp)
            if require_stable and self.has_pending(group_id, tp):
                out[tp] = (-1, -1, "", ErrorCode.unstable_offset_commit)
            elif value is None:
                out[tp] = (-1, -1, "", ErrorCode.none)
            else:
                out[tp] = (value.offset, value.leader_epoch, value.metadata, ErrorCode.none)
        return ErrorCode.none, out

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        error, state = self._partition_of(group_id)
        if state is None:
            return error, {}
        group = state.groups.get(group_id)
        committed = state.offsets.get(group_id)
        if group is None and committed is None:
            return ErrorCode.group_id_not_found, {}
        if group is not None and group.state is not GroupState.EMPTY and group.members:
            return ErrorCode.none, dict.fromkeys(partitions, ErrorCode.group_subscribed_to_topic)
        now = self.clock.time_ms()
        tombstones: dict[TopicPartition, OffsetValue | None] = dict.fromkeys(partitions)
        code = await self.group_manager.append(
            state, persistence.offset_commit_batch(group_id, tombstones, now)
        )
        if code != ErrorCode.none:
            return code, {}
        for tp in partitions:
            (committed or {}).pop(tp, None)
        return ErrorCode.none, dict.fromkeys(partitions, ErrorCode.none)

    async def expire_offsets(self, now_ms: int) -> int:
        """KIP-211: the offsets of a group expire ``offsets.retention.minutes`` after it became
        Empty (after the commit, for groups that never had members); tombstones are written
        and the group is forgotten once it has no offsets left. Returns how many expired."""
        expired_total = 0
        for state in list(self._partitions.values()):
            if not state.loaded:
                continue
            for group_id, committed in list(state.offsets.items()):
                group = state.groups.get(group_id)
                if group is not None and group.state is not GroupState.EMPTY:
                    continue
                base = group.state_timestamp_ms if group is not None else None
                expired = {
                    tp: None
                    for tp, value in committed.items()
                    if (base if base is not None else value.commit_timestamp) + self.retention_ms
                    <= now_ms
                }
                if not expired:
                    continue
                blob = persistence.offset_commit_batch(group_id, expired, now_ms)
                if await self.group_manager.append(state, blob) != ErrorCode.none:
                    continue
                for tp in expired:
                    committed.pop(tp, None)
                expired_total += len(expired)
                if not committed:
                    state.offsets.pop(group_id, None)
                    if group is not None and not group.members:
                        group.delete(now_ms)
                        state.groups.pop(group_id, None)
                        await self.group_manager.append(
                            state, persistence.group_metadata_batch(group_id, None, now_ms)
                        )
                log.info("group %s: %d offsets expired", group_id, len(expired))
        return expired_total

    # --- administration -------------------------------------------------------------------

    def loaded_partitions(self) -> list[OffsetsPartition]:
        """The ``__consumer_offsets`` partitions this broker leads and has loaded (their groups
        and committed offsets; read-only, for the metrics)."""
        return self._loader.loaded_states()

    def list_groups(self, states: list[str] | None) -> tuple[ErrorCode, list[GroupOverview]]:
        out: list[GroupOverview] = []
        error = ErrorCode.none
        for state in self._partitions.values():
            if not state.loaded:
                error = ErrorCode.coordinator_load_in_progress
                continue
            for group in state.groups.values():
                if not states or group.in_states(states):
                    out.append(group.overview())
            for group_id in state.offsets:
                if group_id not in state.groups and (not states or "Empty" in states):
                    # a "simple" group (only committed offsets): no protocol type, as Kafka
                    out.append(GroupOverview(group_id, "", GroupState.EMPTY.value))
        return error, sorted(out, key=lambda g: g.group_id)

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        error, state = self._partition_of(group_id)
        if state is None:
            return error, GroupDescription.dead(group_id)
        group = state.groups.get(group_id)
        if group is None:
            if group_id in state.offsets:
                return ErrorCode.none, GroupDescription(group_id, GroupState.EMPTY.value, "", "")
            return ErrorCode.none, GroupDescription.dead(group_id)
        return ErrorCode.none, group.describe()

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        out: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            error, state = self._partition_of(group_id)
            if state is None:
                out[group_id] = error
                continue
            group = state.groups.get(group_id)
            committed = state.offsets.get(group_id)
            if group is None and committed is None:
                out[group_id] = ErrorCode.group_id_not_found
                continue
            now = self.clock.time_ms()
            if group is not None:
                code = group.delete(now)
                if code != ErrorCode.none:
                    out[group_id] = code
                    continue
            tombstones: dict[TopicPartition, OffsetValue | None] = dict.fromkeys(committed or {})
            code = ErrorCode.none
            if tombstones:
                code = await self.group_manager.append(
                    state, persistence.offset_commit_batch(group_id, tombstones, now)
                )
            if code == ErrorCode.none:
                code = await self.group_manager.append(
                    state, persistence.group_metadata_batch(group_id, None, now)
                )
            if code == ErrorCode.none:
                state.groups.pop(group_id, None)
                state.offsets.pop(group_id, None)
            out[group_id] = code
        return out
