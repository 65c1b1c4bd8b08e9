"""The controller (ZooKeeper mode): one broker of the cluster decides partition leadership.

Theory of operation (checklist sections 10, 11, 13, 14; Kafka 3.9's ``KafkaController``)
---------------------------------------------------------------------------------------
Every broker runs a :class:`Controller`. The broker that creates the ephemeral
``/controller`` znode (bumping ``/controller_epoch`` in the same multi-op) is the *active*
controller; the others watch ``/controller`` and run the election again when it goes away.
On becoming active the controller reads the whole state from ZooKeeper (live brokers with
their epochs, topics, assignments and in-flight reassignments, partition states), elects a
leader for every partition whose leader is gone, sends LeaderAndIsr for every partition to
its live replicas and UpdateMetadata to every live broker, then resumes reassignments and
topic deletions. Every request carries the controller epoch; brokers ignore older epochs,
and every partition-state write is fenced by the controller epoch's znode version, so a
deposed controller can neither confuse brokers nor overwrite ZooKeeper.

All controller work runs as *events* on one queue processed by one task (Kafka's
ControllerEventManager): ZooKeeper watches (broker changes, new topics, deletion requests,
ISR-change notifications), admin requests (create/delete topics, create partitions, elect
leaders, reassignments), controlled shutdowns and the periodic leader-imbalance check. An
event reads and changes the in-memory :class:`ControllerContext`, writes ZooKeeper, and
queues requests on the :class:`~broker.controller.channel.ControllerChannel`, which delivers
them to each broker in order.

Leader election rules are the pure functions of ``election.py``; partition and replica
states are tracked by the state machines of ``state_machines.py``, which refuse illegal
transitions. A broker failure (its ``/brokers/ids`` znode disappears) moves leadership of
its partitions to the first live in-sync replica in assignment order and removes it from
every ISR, bumping leader epochs; a partition with no eligible replica gets leader -1 and
waits (``unclean.leader.election.enable`` lets any live replica take over instead). A
controlled shutdown (ControlledShutdown request) moves leadership away first and stops the
broker's follower replicas, so producers see NOT_LEADER_OR_FOLLOWER at once. Reassignment
follows KIP-455: the assignment becomes target + original with adding/removing replicas,
new replicas catch up as followers, and once the whole target is in the ISR the leader is
moved if needed, the removed replicas are stopped and deleted, and the assignment becomes
the target.

The broker-side duties live here too: the topic-config overrides of every topic (read at
start-up and on ``/config/changes`` notifications), used for the logs this broker hosts.

Concurrency: event loop thread. Events run one at a time on the event task; public
coroutines that change state submit an event and await its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from broker.config import BrokerConfig, ConfigError, LogConfig
from broker.controller import election, znodes
from broker.controller.channel import ControllerChannel, LocalHandler
from broker.controller.context import ControllerContext
from broker.controller.reassignment import (
    ReplicaAssignment,
    build_reassignment,
    partitions_to_rebalance,
    validate_target_replicas,
)
from broker.controller.requests import (
    NO_LEADER,
    Outgoing,
    leader_and_isr_requests,
    stop_replica_requests,
    update_metadata_requests,
)
from broker.controller.state_machines import (
    PartitionState as PState,
)
from broker.controller.state_machines import (
    PartitionStateMachine,
    ReplicaState,
    ReplicaStateMachine,
)
from broker.controller.topic_admin import (
    InvalidPartitionsError,
    TopicExistsError,
    assign_replicas,
    validate_assignment,
    validate_configs,
    validate_topic_name,
)
from broker.controller.zk_client import ControllerMovedError, ZkClient
from broker.controller.zk_client import TopicExistsError as ZkTopicExistsError
from broker.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from broker.protocol import interbroker as _interbroker
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import ReplicaManager
from broker.types import TopicPartition

log = logging.getLogger(__name__)
# kio-style message classes take kio's NewTypes (i32, BrokerId, ...); built from plain ints
ib: Any = _interbroker

T = TypeVar("T")


class NotControllerError(KafkaError):
    code = ErrorCode.not_controller


class Controller:
    """The controller role of one broker, plus its view of topic configurations."""

    def __init__(
        self,
        zk: ZkClient,
        metadata: MetadataCache,
        replica_manager: ReplicaManager,
        config: BrokerConfig,
        broker_id: int,
    ) -> None:
        self.zk = zk
        self.metadata = metadata
        self.replica_manager = replica_manager
        self.config = config
        self.broker_id = broker_id
        self.epoch: int | None = None
        self.ctx = ControllerContext()
        self.partition_states = PartitionStateMachine()
        self.replica_states = ReplicaStateMachine()
        self._overrides: dict[str, dict[str, str]] = {}
        self._events: asyncio.Queue[tuple[Callable[[], Awaitable[Any]], asyncio.Future[Any] | None]]
        self._events = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._channel: ControllerChannel | None = None
        self._local_handler: LocalHandler | None = None
        self._seen_config_changes: set[str] = set()

    # ======================================================================================
    # lifecycle
    # ======================================================================================

    @property
    def is_active(self) -> bool:
        return self.epoch is not None

    def set_local_handler(self, handler: LocalHandler) -> None:
        """How controller requests reach this broker itself (no socket)."""
        self._local_handler = handler

    async def load_topic_configs(self) -> None:
        """Read every topic's overrides (broker start-up, before logs are opened)."""
        for name in await self.zk.get_all_topics():
            self._overrides[name] = dict(await self.zk.get_topic_config(name))

    async def startup(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._process_events(), name="controller-events"))
        if self.config["auto.leader.rebalance.enable"]:
            self._tasks.append(loop.create_task(self._rebalance_timer(), name="leader-rebalance"))
        self.zk.on_session_lost(self._on_session_lost)
        self.zk.on_reconnected(self._on_reconnected)
        await self.zk.watch_controller(lambda _cid: self._submit(self._elect))
        await self.zk.watch_broker_ids(lambda _ids: self._submit(self._on_broker_change))
        await self.zk.watch_topics(lambda _names: self._submit(self._on_topic_change))
        await self.zk.watch_topics_marked_for_deletion(
            lambda _names: self._submit(self._on_delete_topics_request)
        )
        await self.zk.watch_isr_change_notifications(
            lambda _names: self._submit(self._on_isr_change_notifications)
        )
        await self.zk.watch_config_changes(
            lambda names: self._submit(lambda: self._on_config_changes(names))
        )
        await self._call(self._elect)

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self._resign()

    def _on_session_lost(self) -> None:
        """A lost ZooKeeper session means another broker may be controller now: stop acting
        on stale leadership at once (before any queued event runs)."""
        if self.epoch is not None:
            log.warning("ZooKeeper session lost: resigning as controller (epoch %d)", self.epoch)
            self.epoch = None
        self._submit(self._resign)

    async def _on_reconnected(self) -> None:
        self._submit(self._elect)

    # ======================================================================================
    # the event queue
    # ======================================================================================

    def _submit(self, fn: Callable[[], Awaitable[Any]]) -> None:
        self._events.put_nowait((fn, None))

    async def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._events.put_nowait((fn, fut))
        return await fut

    async def _process_events(self) -> None:
        while True:
            fn, fut = await self._events.get()
            if fut is not None and fut.cancelled():
                continue
            try:
                result = await fn()
            except ControllerMovedError as exc:
                log.warning("controller moved: %s", exc)
                await self._resign()
                if fut is not None and not fut.done():
                    fut.set_exception(NotControllerError(str(exc)))
                self._submit(self._elect)
            except Exception as exc:
                if fut is not None and not fut.done():
                    fut.set_exception(exc)
                else:
                    log.exception("controller event failed")
            else:
                if fut is not None and not fut.done():
                    fut.set_result(result)

    async def _rebalance_timer(self) -> None:
        interval = self.config["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval)
            if self.is_active:
                self._submit(self._check_leader_imbalance)

    # ======================================================================================
    # election, failover, resignation
    # ======================================================================================

    async def _elect(self) -> None:
        current = await self.zk.get_controller()
        if self.is_active:
            if current == self.broker_id:
                return
            await self._resign()
        if current is not None and current != self.broker_id:
            self.metadata.controller_id = current
            return
        epoch = await self.zk.try_elect_controller(self.broker_id)
        if epoch is None:
            self.metadata.controller_id = await self.zk.get_controller() or -1
            return
        versioned = await self.zk.get_controller_epoch()
        self.ctx = ControllerContext(
            epoch=epoch, epoch_zk_version=versioned.zk_version if versioned else 0
        )
        self.epoch = epoch
        self.metadata.controller_id = self.broker_id
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        try:
            await self._on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("controller fail-over failed; resigning")
            await self._resign()
            await self.zk.resign_controller(self.broker_id)

    async def _resign(self) -> None:
        if self.epoch is not None:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.epoch = None
        self.partition_states = PartitionStateMachine()
        self.replica_states = ReplicaStateMachine()
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    async def _on_controller_failover(self) -> None:
        ctx = self.ctx
        assert self._local_handler is not None, "set_local_handler was not called"
        self._channel = ControllerChannel(self.broker_id, self._local_handler)
        await self._refresh_live_brokers()
        for name in await self.zk.get_all_topics():
            await self._load_topic(name)
        ctx.deleting = set(await self.zk.get_topics_marked_for_deletion()) & set(ctx.topic_ids)
        # partitions without state, or whose leader is gone: elect
        new_parts = [tp for tp in ctx.assignments if tp not in ctx.states]
        for tp in ctx.assignments:
            self.partition_states.initialize(
                tp,
                PState.NewPartition
                if tp not in ctx.states
                else PState.OnlinePartition
                if ctx.states[tp].leader in ctx.live_ids()
                else PState.OfflinePartition,
            )
            live = ctx.live_ids()
            for r in ctx.assignments[tp].replicas:
                self.replica_states.initialize(
                    (tp, r),
                    ReplicaState.OnlineReplica if r in live else ReplicaState.OfflineReplica,
                )
        await self._initialize_new_partitions(new_parts)
        changed = await self._elect_offline_and_shrink(
            [tp for tp in ctx.assignments if tp not in new_parts]
        )
        del changed  # every partition is sent below anyway
        self._send_leader_and_isr(sorted(ctx.states))
        self._send_update_metadata(None)
        for tp, assignment in sorted(ctx.assignments.items()):
            if assignment.is_being_reassigned:
                await self._maybe_complete_reassignment(tp)
        for topic in sorted(ctx.deleting):
            await self._delete_topic_now(topic)
        log.info(
            "controller %d ready: %d brokers, %d topics, %d partitions",
            self.broker_id,
            len(ctx.live_brokers),
            len(ctx.topic_ids),
            len(ctx.assignments),
        )

    async def _refresh_live_brokers(self) -> tuple[set[int], set[int]]:
        """Re-read ``/brokers/ids``; returns (new or bounced brokers, dead or bounced)."""
        ctx = self.ctx
        ids = set(await self.zk.get_broker_ids())
        new: set[int] = set()
        dead = set(ctx.live_brokers) - ids
        for broker_id in sorted(ids):
            epoch = await self.zk.get_broker_epoch(broker_id)
            node = await self.zk.get_broker(broker_id)
            if node is None or epoch is None:
                dead.add(broker_id) if broker_id in ctx.live_brokers else None
                continue
            if broker_id in ctx.live_brokers and ctx.broker_epochs.get(broker_id) != epoch:
                dead.add(broker_id)  # bounced: treat as a failure then a start-up
                new.add(broker_id)
            elif broker_id not in ctx.live_brokers:
                new.add(broker_id)
            ctx.live_brokers[broker_id] = node
            ctx.broker_epochs[broker_id] = epoch
        for broker_id in dead - new:
            ctx.live_brokers.pop(broker_id, None)
            ctx.broker_epochs.pop(broker_id, None)
        for broker_id in dead:
            ctx.shutting_down.discard(broker_id)
        if self._channel is not None:
            for broker_id in dead:
                self._channel.remove_broker(broker_id)
            for broker_id in sorted(new):
                host, port = ControllerContext.address(ctx.live_brokers[broker_id])
                self._channel.add_broker(broker_id, host, port)
        return new, dead

    async def _load_topic(self, name: str) -> None:
        ctx = self.ctx
        versioned = await self.zk.get_topic_with_version(name)
        if versioned is None:
            return
        topic = versioned.value
        ctx.topic_ids[name] = topic.topic_id or uuid.uuid4()
        ctx.topic_versions[name] = versioned.zk_version
        for p, replicas in topic.partitions.items():
            ctx.assignments[TopicPartition(name, p)] = ReplicaAssignment(
                tuple(replicas),
                tuple(topic.adding_replicas.get(p, ())),
                tuple(topic.removing_replicas.get(p, ())),
            )
        for p, st in (await self.zk.get_partition_states(name)).items():
            tp = TopicPartition(name, p)
            ctx.states[tp] = st.value
            ctx.state_versions[tp] = st.zk_version
        if name not in self._overrides:
            self._overrides[name] = dict(await self.zk.get_topic_config(name))

    # ======================================================================================
    # requests to brokers (built in requests.py, delivered in order by the channel)
    # ======================================================================================

    def _deliver(self, outgoing: list[Outgoing]) -> None:
        if self._channel is not None:
            for broker_id, (api_key, version), request in outgoing:
                self._channel.send(broker_id, api_key, version, request)

    def _send_leader_and_isr(
        self,
        partitions: Iterable[TopicPartition],
        *,
        only: Iterable[int] | None = None,
        exclude: Iterable[int] = (),
        new: Iterable[TopicPartition] = (),
    ) -> None:
        self._deliver(
            leader_and_isr_requests(
                self.ctx, self.broker_id, partitions, only=only, exclude=exclude, new=new
            )
        )

    def _send_stop_replica(
        self, broker_id: int, partitions: Iterable[TopicPartition], *, delete: bool
    ) -> None:
        self._deliver(
            stop_replica_requests(self.ctx, self.broker_id, broker_id, partitions, delete=delete)
        )

    def _send_update_metadata(
        self,
        partitions: Iterable[TopicPartition] | None,
        *,
        deleted: Iterable[TopicPartition] = (),
        brokers: Iterable[int] | None = None,
    ) -> None:
        self._deliver(
            update_metadata_requests(
                self.ctx, self.broker_id, partitions, deleted=deleted, brokers=brokers
            )
        )

    # ======================================================================================
    # partition state writes and elections
    # ======================================================================================

    async def _write_state(self, tp: TopicPartition, new: znodes.PartitionState) -> bool:
        """Conditionally write ``new``; on a stale version re-read the state and return False."""
        ctx = self.ctx
        version = await self.zk.update_partition_state(
            tp.topic,
            tp.partition,
            new,
            ctx.state_versions.get(tp, 0),
            controller_epoch_zk_version=ctx.epoch_zk_version,
        )
        if version is None:
            current = await self.zk.get_partition_state(tp.topic, tp.partition)
            if current is not None:
                ctx.states[tp] = current.value
                ctx.state_versions[tp] = current.zk_version
            return False
        ctx.states[tp] = new
        ctx.state_versions[tp] = version
        self.partition_states.transition(
            tp, PState.OnlinePartition if new.leader >= 0 else PState.OfflinePartition
        )
        return True

    async def _update_state(
        self,
        tp: TopicPartition,
        compute: Callable[[znodes.PartitionState], znodes.PartitionState | None],
    ) -> bool:
        """Apply ``compute`` to the current state and write it; retried on version races."""
        for _ in range(5):
            current = self.ctx.states.get(tp)
            if current is None:
                return False
            new = compute(current)
            if new is None:
                return False
            if await self._write_state(tp, new):
                return True
        log.warning("%s: gave up updating the partition state after repeated races", tp)
        return False

    def _new_state(
        self, leader: int, leader_epoch: int, isr: Iterable[int]
    ) -> znodes.PartitionState:
        return znodes.PartitionState(
            leader=leader,
            leader_epoch=leader_epoch,
            isr=tuple(isr),
            controller_epoch=self.ctx.epoch,
        )

    def _unclean_allowed(self, topic: str) -> bool:
        return self.log_config_for(topic).unclean_leader_election_enable

    async def _initialize_new_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """NewPartition -> OnlinePartition: leader = first live replica, ISR = live replicas."""
        ctx = self.ctx
        by_topic: dict[str, dict[int, znodes.PartitionState]] = {}
        for tp in sorted(partitions):
            if tp not in self.partition_states:
                self.partition_states.initialize(tp, PState.NewPartition)
            live = [r for r in ctx.assignments[tp].replicas if r in ctx.live_ids()]
            if not live:
                log.warning("%s: no live replica; the partition stays offline for now", tp)
                continue
            by_topic.setdefault(tp.topic, {})[tp.partition] = self._new_state(live[0], 0, live)
        for topic, states in by_topic.items():
            created = await self.zk.create_partition_states(
                topic, states, controller_epoch_zk_version=ctx.epoch_zk_version
            )
            for p, state in states.items():
                tp = TopicPartition(topic, p)
                if p in created:
                    ctx.states[tp] = state
                    ctx.state_versions[tp] = created[p]
                else:
                    current = await self.zk.get_partition_state(topic, p)
                    if current is None:
                        continue
                    ctx.states[tp] = current.value
                    ctx.state_versions[tp] = current.zk_version
                self.partition_states.transition(tp, PState.OnlinePartition)
                for r in ctx.assignments[tp].replicas:
                    key = (tp, r)
                    if self.replica_states.state(key) == ReplicaState.NonExistentReplica:
                        self.replica_states.transition(key, ReplicaState.NewReplica)
                    self.replica_states.transition(
                        key,
                        ReplicaState.OnlineReplica
                        if r in ctx.live_brokers
                        else ReplicaState.OfflineReplica,
                    )

    async def _elect_offline_and_shrink(
        self, partitions: Iterable[TopicPartition]
    ) -> list[TopicPartition]:
        """Elect leaders for partitions whose leader is not live; drop dead replicas from the
        ISR of the others. Returns the partitions whose state changed."""
        ctx = self.ctx
        changed = []
        for tp in sorted(partitions):
            if tp.topic in ctx.deleting:
                continue

            def compute(
                st: znodes.PartitionState, tp: TopicPartition = tp
            ) -> znodes.PartitionState | None:
                live = ctx.live_ids()
                assignment = ctx.assignments[tp].replicas
                if st.leader not in live:
                    res = election.offline_partition_leader(
                        assignment, st.isr, live, unclean_enabled=self._unclean_allowed(tp.topic)
                    )
                    if res.leader is None:
                        if st.leader == NO_LEADER:
                            return None
                        # no eligible replica: leader -1, the ISR keeps the last member(s)
                        return self._new_state(NO_LEADER, st.leader_epoch + 1, st.isr)
                    if res.unclean:
                        log.warning("%s: unclean leader election of %d", tp, res.leader)
                    return self._new_state(res.leader, st.leader_epoch + 1, res.isr)
                isr = [r for r in st.isr if r in live]
                if len(isr) == len(st.isr):
                    return None
                return self._new_state(st.leader, st.leader_epoch + 1, isr)

            if await self._update_state(tp, compute):
                changed.append(tp)
        return changed

    # ======================================================================================
    # broker changes
    # ======================================================================================

    async def _on_broker_change(self) -> None:
        if not self.is_active:
            return
        new, dead = await self._refresh_live_brokers()
        if dead:
            log.info("controller: brokers %s failed", sorted(dead))
            await self._on_brokers_failure(dead)
        if new:
            log.info("controller: brokers %s started", sorted(new))
            await self._on_brokers_startup(new)

    async def _on_brokers_failure(self, dead: set[int]) -> None:
        ctx = self.ctx
        for tp, a in ctx.assignments.items():
            for r in a.replicas:
                if (
                    r in dead
                    and self.replica_states.state((tp, r)) != ReplicaState.NonExistentReplica
                ):
                    with contextlib.suppress(Exception):
                        self.replica_states.transition((tp, r), ReplicaState.OfflineReplica)
        affected = [
            tp
            for tp, st in ctx.states.items()
            if st.leader in dead or any(r in dead for r in st.isr) or st.leader == NO_LEADER
        ]
        changed = await self._elect_offline_and_shrink(affected)
        self._send_leader_and_isr(changed)
        self._send_update_metadata(changed)

    async def _on_brokers_startup(self, new: set[int]) -> None:
        ctx = self.ctx
        self._send_update_metadata(None, brokers=sorted(new))
        self._send_update_metadata([], brokers=sorted(set(ctx.live_brokers) - new))
        hosted = [tp for tp, a in ctx.assignments.items() if any(r in new for r in a.replicas)]
        for tp in hosted:
            for r in ctx.assignments[tp].replicas:
                if r in new:
                    key = (tp, r)
                    if self.replica_states.state(key) == ReplicaState.NonExistentReplica:
                        self.replica_states.transition(key, ReplicaState.NewReplica)
                    self.replica_states.transition(key, ReplicaState.OnlineReplica)
        missing = [tp for tp in hosted if tp not in ctx.states]
        await self._initialize_new_partitions(missing)
        offline = [
            tp for tp in hosted if tp in ctx.states and ctx.states[tp].leader not in ctx.live_ids()
        ]
        changed = await self._elect_offline_and_shrink(offline)
        self._send_leader_and_isr(changed)
        self._send_leader_and_isr([tp for tp in hosted if tp not in changed], only=new, new=missing)
        self._send_update_metadata(changed + missing)
        for topic in sorted(ctx.deleting):
            await self._delete_topic_now(topic)

    # ======================================================================================
    # ISR changes written by leaders
    # ======================================================================================

    async def _on_isr_change_notifications(self) -> None:
        if not self.is_active:
            return
        notifications = await self.zk.get_isr_change_notifications()
        if not notifications:
            return
        ctx = self.ctx
        changed: set[TopicPartition] = set()
        for parts in notifications.values():
            changed.update(p for p in parts if p in ctx.assignments)
        for tp in sorted(changed):
            current = await self.zk.get_partition_state(tp.topic, tp.partition)
            if current is not None:
                ctx.states[tp] = current.value
                ctx.state_versions[tp] = current.zk_version
        await self.zk.delete_isr_change_notifications(notifications)
        self._send_update_metadata(changed)
        for tp in sorted(changed):
            if ctx.assignments[tp].is_being_reassigned:
                await self._maybe_complete_reassignment(tp)

    # ======================================================================================
    # topic creation, partitions, deletion
    # ======================================================================================

    async def _on_topic_change(self) -> None:
        """Topics created directly in ZooKeeper (by a broker's auto-creation or a tool)."""
        if not self.is_active:
            return
        ctx = self.ctx
        names = set(await self.zk.get_all_topics())
        for name in sorted(names - set(ctx.topic_ids)):
            await self._load_topic(name)
            new = [tp for tp in ctx.partitions_of(name) if tp not in ctx.states]
            await self._initialize_new_partitions(new)
            parts = ctx.partitions_of(name)
            self._send_leader_and_isr(parts, new=new)
            self._send_update_metadata(parts)

    async def create_topic(
        self,
        name: str,
        *,
        num_partitions: int,
        replication_factor: int,
        assignment: dict[int, list[int]] | None = None,
        configs: dict[str, str | None] | None = None,
        validate_only: bool = False,
    ) -> TopicInfo:
        self._require_active()
        validate_topic_name(name)
        clean = validate_configs(dict(configs or {}))

        async def work() -> TopicInfo:
            self._require_active()
            ctx = self.ctx
            live = sorted(ctx.live_ids())
            chosen = assignment
            if chosen:
                validate_assignment(chosen, live)
            else:
                if num_partitions <= 0:
                    raise InvalidPartitionsError("number of partitions must be larger than 0")
                chosen = assign_replicas(
                    live,
                    num_partitions,
                    replication_factor,
                    racks=self._racks(live),
                )
            if name in ctx.topic_ids or self.metadata.topic(name) is not None:
                raise TopicExistsError(f"topic {name!r} already exists")
            topic_id = znodes.random_kafka_uuid()
            info = TopicInfo(
                name,
                topic_id,
                {
                    p: PartitionInfo(p, replicas[0], 0, tuple(replicas), tuple(replicas))
                    for p, replicas in chosen.items()
                },
            )
            if validate_only:
                return info
            try:
                await self.zk.create_topic(name, chosen, clean, topic_id)
            except ZkTopicExistsError as exc:
                raise TopicExistsError(f"topic {name!r} already exists") from exc
            self._overrides[name] = clean
            await self._load_topic(name)
            parts = ctx.partitions_of(name)
            await self._initialize_new_partitions(parts)
            self._send_leader_and_isr(parts, new=parts)
            self._send_update_metadata(parts)
            return info

        info = await self._call(work)
        if not validate_only:
            await self._await_metadata(name, len(info.partitions))
        return self.metadata.topic(name) or info

    async def _await_metadata(self, name: str, partitions: int, timeout_s: float = 10.0) -> None:
        """Until this broker's metadata cache shows the topic with leaders (the local
        UpdateMetadata is delivered through the channel after the event)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            t = self.metadata.topic(name)
            if t is not None and len(t.partitions) >= partitions:
                return
            await asyncio.sleep(0.005)

    def _racks(self, brokers: Iterable[int]) -> dict[int, str | None] | None:
        racks = {b: self.ctx.live_brokers[b].rack for b in brokers if b in self.ctx.live_brokers}
        return racks if any(r for r in racks.values()) else None

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        *,
        validate_only: bool = False,
    ) -> None:
        self._require_active()

        async def work() -> None:
            self._require_active()
            ctx = self.ctx
            if name not in ctx.topic_ids or name in ctx.deleting:
                raise KafkaError(
                    f"topic {name!r} does not exist", ErrorCode.unknown_topic_or_partition
                )
            existing = ctx.partitions_of(name)
            current = len(existing)
            if count <= current:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {current} partitions; the new count must be larger"
                )
            rf = len(ctx.assignments[existing[0]].replicas)
            live = sorted(ctx.live_ids())
            if assignments is not None:
                if len(assignments) != count - current:
                    raise KafkaError(
                        f"assignment lists {len(assignments)} partitions, expected "
                        f"{count - current}",
                        ErrorCode.invalid_replica_assignment,
                    )
                new = {current + i: r for i, r in enumerate(assignments)}
                validate_assignment(new, live, start_partition=current)
            else:
                new = assign_replicas(
                    live, count - current, rf, start_partition=current, racks=self._racks(live)
                )
            if validate_only:
                return
            full = {tp.partition: list(ctx.assignments[tp].replicas) for tp in existing} | new
            if not await self._write_assignment(name, full):
                raise KafkaError(f"topic {name!r} changed concurrently", ErrorCode.not_controller)
            parts = [TopicPartition(name, p) for p in sorted(new)]
            await self._initialize_new_partitions(parts)
            self._send_leader_and_isr(parts, new=parts)
            self._send_update_metadata(parts)

        await self._call(work)
        await self._await_metadata(name, count)

    async def _write_assignment(self, name: str, full: dict[int, list[int]] | None = None) -> bool:
        """Write ``/brokers/topics/<name>`` from the context (or ``full``) with adding and
        removing replicas; updates the context."""
        ctx = self.ctx
        if full is not None:
            for p, replicas in full.items():
                tp = TopicPartition(name, p)
                if tp not in ctx.assignments:
                    ctx.assignments[tp] = ReplicaAssignment(tuple(replicas))
        parts = ctx.partitions_of(name)
        version = await self.zk.set_topic_assignment(
            name,
            {tp.partition: list(ctx.assignments[tp].replicas) for tp in parts},
            ctx.topic_versions.get(name, 0),
            adding_replicas={
                tp.partition: list(ctx.assignments[tp].adding)
                for tp in parts
                if ctx.assignments[tp].adding
            },
            removing_replicas={
                tp.partition: list(ctx.assignments[tp].removing)
                for tp in parts
                if ctx.assignments[tp].removing
            },
        )
        if version is None:
            return False
        ctx.topic_versions[name] = version
        return True

    async def delete_topic(self, name: str) -> None:
        self._require_active()
        if not self.config["delete.topic.enable"]:
            raise KafkaError(
                "topic deletion is disabled (delete.topic.enable=false)",
                ErrorCode.topic_deletion_disabled,
            )

        async def work() -> None:
            self._require_active()
            if name not in self.ctx.topic_ids or name in self.ctx.deleting:
                raise KafkaError(
                    f"topic {name!r} does not exist", ErrorCode.unknown_topic_or_partition
                )
            await self.zk.mark_topic_for_deletion(name)
            self.ctx.deleting.add(name)
            await self._delete_topic_now(name)

        await self._call(work)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        while self.metadata.topic(name) is not None and loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def _on_delete_topics_request(self) -> None:
        if not self.is_active:
            return
        for name in await self.zk.get_topics_marked_for_deletion():
            if name in self.ctx.topic_ids:
                self.ctx.deleting.add(name)
                await self._delete_topic_now(name)
            else:
                await self.zk.delete_topic_znodes(name)

    async def _delete_topic_now(self, name: str) -> None:
        """Stop and delete every live replica, remove the znodes, tell every broker.
        Replicas on brokers that are down are deleted as stray logs when they restart."""
        ctx = self.ctx
        parts = ctx.partitions_of(name)
        per_broker: dict[int, list[TopicPartition]] = {}
        for tp in parts:
            for r in ctx.assignments[tp].replicas:
                per_broker.setdefault(r, []).append(tp)
                key = (tp, r)
                for target in (
                    ReplicaState.OfflineReplica,
                    ReplicaState.ReplicaDeletionStarted,
                    ReplicaState.ReplicaDeletionSuccessful,
                    ReplicaState.NonExistentReplica,
                ):
                    if self.replica_states.is_valid_transition(key, target):
                        self.replica_states.transition(key, target)
                self.replica_states.remove(key)
        for broker_id, tps in per_broker.items():
            self._send_stop_replica(broker_id, tps, delete=True)
        await self.zk.delete_topic_znodes(name)
        for tp in parts:
            if self.partition_states.is_valid_transition(tp, PState.OfflinePartition):
                self.partition_states.transition(tp, PState.OfflinePartition)
            self.partition_states.transition(tp, PState.NonExistentPartition)
            self.partition_states.remove(tp)
            ctx.assignments.pop(tp, None)
            ctx.states.pop(tp, None)
            ctx.state_versions.pop(tp, None)
        ctx.topic_ids.pop(name, None)
        ctx.topic_versions.pop(name, None)
        ctx.deleting.discard(name)
        self._overrides.pop(name, None)
        self._send_update_metadata([], deleted=parts)
        log.info("controller: deleted topic %s", name)

    # ======================================================================================
    # controlled shutdown
    # ======================================================================================

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move leadership away from ``broker_id`` and stop its followers; returns the
        partitions it still leads (no other eligible replica)."""
        self._require_active()

        async def work() -> list[TopicPartition]:
            self._require_active()
            ctx = self.ctx
            if broker_id not in ctx.live_brokers:
                raise KafkaError(f"broker {broker_id} is not live", ErrorCode.broker_not_available)
            if broker_epoch >= 0 and ctx.broker_epochs.get(broker_id) != broker_epoch:
                raise KafkaError(
                    f"broker epoch {broker_epoch} of broker {broker_id} is stale",
                    ErrorCode.stale_broker_epoch,
                )
            ctx.shutting_down.add(broker_id)
            log.info("controller: controlled shutdown of broker %d", broker_id)
            moved: list[TopicPartition] = []
            stopped: list[TopicPartition] = []
            for tp, a in sorted(ctx.assignments.items()):
                if broker_id not in a.replicas or len(a.replicas) <= 1 or tp.topic in ctx.deleting:
                    continue
                st = ctx.states.get(tp)
                if st is None:
                    continue
                if st.leader == broker_id:

                    def compute(
                        st: znodes.PartitionState, a: ReplicaAssignment = a
                    ) -> znodes.PartitionState | None:
                        res = election.controlled_shutdown_leader(
                            a.replicas, st.isr, ctx.live_ids(), ctx.shutting_down
                        )
                        if res.leader is None:
                            return None
                        return self._new_state(res.leader, st.leader_epoch + 1, res.isr)

                    if await self._update_state(tp, compute):
                        moved.append(tp)
                elif broker_id in st.isr:

                    def shrink(st: znodes.PartitionState) -> znodes.PartitionState | None:
                        if broker_id not in st.isr or st.leader == broker_id:
                            return None
                        isr = [r for r in st.isr if r != broker_id]
                        return self._new_state(st.leader, st.leader_epoch + 1, isr)

                    if await self._update_state(tp, shrink):
                        moved.append(tp)
                        stopped.append(tp)
                else:
                    stopped.append(tp)
            self._send_leader_and_isr(moved, exclude=[broker_id])
            self._send_stop_replica(broker_id, sorted(set(moved) | set(stopped)), delete=False)
            self._send_update_metadata(moved)
            return sorted(
                tp
                for tp, st in ctx.states.items()
                if st.leader == broker_id and len(ctx.assignments[tp].replicas) > 1
            )

        return await self._call(work)

    # ======================================================================================
    # leader elections on request, and the automatic leader rebalance
    # ======================================================================================

    async def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        self._require_active()

        async def work() -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
            self._require_active()
            return await self._elect_leaders(election_type, partitions)

        return await self._call(work)

    async def _elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        ctx = self.ctx
        wanted = sorted(ctx.assignments) if partitions is None else list(partitions)
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        changed: list[TopicPartition] = []
        for tp in wanted:
            st = ctx.states.get(tp)
            if tp not in ctx.assignments or st is None or tp.topic in ctx.deleting:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    f"The partition {tp} does not exist.",
                )
                continue
            a = ctx.assignments[tp]
            live = ctx.live_ids()
            if election_type == 0:
                if st.leader == a.replicas[0]:
                    results[tp] = (ErrorCode.election_not_needed, None)
                    continue
                res = election.preferred_replica_leader(a.replicas, st.isr, live)
                if res.leader is None:
                    results[tp] = (
                        ErrorCode.preferred_leader_not_available,
                        f"Failed to elect leader for partition {tp} under strategy "
                        f"PreferredReplicaPartitionLeaderElectionStrategy",
                    )
                    continue
            else:
                if st.leader in live:
                    results[tp] = (ErrorCode.election_not_needed, None)
                    continue
                res = election.offline_partition_leader(
                    a.replicas, st.isr, live, unclean_enabled=True
                )
                if res.leader is None:
                    results[tp] = (
                        ErrorCode.eligible_leaders_not_available,
                        f"Failed to elect leader for partition {tp}: no live replica",
                    )
                    continue
            leader, isr = res.leader, res.isr

            def compute(
                st: znodes.PartitionState, leader: int = leader, isr: tuple[int, ...] = isr
            ) -> znodes.PartitionState:
                return self._new_state(leader, st.leader_epoch + 1, isr)

            if await self._update_state(tp, compute):
                changed.append(tp)
                results[tp] = (ErrorCode.none, None)
            else:
                results[tp] = (ErrorCode.not_controller, f"could not update {tp}")
        self._send_leader_and_isr(changed)
        self._send_update_metadata(changed)
        return results

    async def _check_leader_imbalance(self) -> None:
        if not self.is_active:
            return
        ctx = self.ctx
        eligible = {
            tp: a.replicas
            for tp, a in ctx.assignments.items()
            if not a.is_being_reassigned and tp.topic not in ctx.deleting and tp in ctx.states
        }
        todo = partitions_to_rebalance(
            eligible,
            {tp: ctx.states[tp].leader for tp in eligible},
            ctx.live_ids(),
            self.config["leader.imbalance.per.broker.percentage"],
            isrs={tp: ctx.states[tp].isr for tp in eligible},
        )
        if todo:
            log.info("controller: rebalancing leaders of %d partitions", len(todo))
            await self._elect_leaders(0, todo)

    # ======================================================================================
    # partition reassignment (KIP-455)
    # ======================================================================================

    async def alter_partition_reassignments(
        self, targets: dict[TopicPartition, list[int] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        self._require_active()

        async def work() -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
            self._require_active()
            ctx = self.ctx
            results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
            started: dict[str, list[TopicPartition]] = {}
            for tp, target in targets.items():
                current = ctx.assignments.get(tp)
                if current is None or tp.topic in ctx.deleting:
                    results[tp] = (
                        ErrorCode.unknown_topic_or_partition,
                        f"The partition {tp} does not exist.",
                    )
                    continue
                if target is not None:
                    problem = validate_target_replicas(current, target, ctx.live_ids())
                    if problem is not None:
                        results[tp] = (ErrorCode.invalid_replica_assignment, problem)
                        continue
                new = build_reassignment(current, target)
                if new is None:
                    results[tp] = (
                        ErrorCode.no_reassignment_in_progress,
                        f"No reassignment in progress for {tp}",
                    )
                    continue
                ctx.assignments[tp] = new
                started.setdefault(tp.topic, []).append(tp)
                results[tp] = (ErrorCode.none, None)
            for topic, tps in started.items():
                if not await self._write_assignment(topic):
                    await self._load_topic(topic)
                    for tp in tps:
                        results[tp] = (ErrorCode.not_controller, "topic changed concurrently")
                    continue
                for tp in tps:
                    await self._start_reassignment(tp)
            return results

        return await self._call(work)

    async def _start_reassignment(self, tp: TopicPartition) -> None:
        ctx = self.ctx
        a = ctx.assignments[tp]
        for r in a.adding:
            key = (tp, r)
            if self.replica_states.state(key) == ReplicaState.NonExistentReplica:
                self.replica_states.transition(key, ReplicaState.NewReplica)
            if r in ctx.live_brokers:
                self.replica_states.transition(key, ReplicaState.OnlineReplica)

        def bump(st: znodes.PartitionState) -> znodes.PartitionState:
            return self._new_state(st.leader, st.leader_epoch + 1, st.isr)

        if await self._update_state(tp, bump):
            self._send_leader_and_isr([tp], new=[])
            self._send_update_metadata([tp])
        await self._maybe_complete_reassignment(tp)

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        """Once every target replica is in the ISR: move the leader into the target if
        needed, drop the removed replicas, and make the target the assignment."""
        ctx = self.ctx
        a = ctx.assignments.get(tp)
        st = ctx.states.get(tp)
        if a is None or st is None:
            return
        target = a.target_replicas
        if a.is_being_reassigned and not all(r in st.isr for r in target):
            return
        removed = [r for r in a.replicas if r not in target]
        live = ctx.live_ids()

        def finish(st: znodes.PartitionState) -> znodes.PartitionState | None:
            isr = [r for r in st.isr if r in target]
            if st.leader in target and st.leader in live:
                return self._new_state(st.leader, st.leader_epoch + 1, isr)
            res = election.reassign_partition_leader(target, st.isr, live)
            if res.leader is None:
                return None
            return self._new_state(res.leader, st.leader_epoch + 1, isr)

        ctx.assignments[tp] = ReplicaAssignment(target)
        if not await self._update_state(tp, finish):
            ctx.assignments[tp] = a
            log.info("%s: reassignment waits for an eligible leader in %s", tp, list(target))
            return
        if not await self._write_assignment(tp.topic):
            await self._load_topic(tp.topic)
        for r in removed:
            key = (tp, r)
            for state in (
                ReplicaState.OfflineReplica,
                ReplicaState.ReplicaDeletionStarted,
                ReplicaState.ReplicaDeletionSuccessful,
                ReplicaState.NonExistentReplica,
            ):
                if self.replica_states.is_valid_transition(key, state):
                    self.replica_states.transition(key, state)
            self.replica_states.remove(key)
            self._send_stop_replica(r, [tp], delete=True)
        self._send_leader_and_isr([tp])
        self._send_update_metadata([tp])
        log.info("%s: reassignment to %s completed", tp, list(target))

    async def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        self._require_active()
        ctx = self.ctx
        wanted = sorted(ctx.assignments) if partitions is None else partitions
        out = {}
        for tp in wanted:
            a = ctx.assignments.get(tp)
            if a is not None and a.is_being_reassigned:
                out[tp] = (list(a.replicas), list(a.adding), list(a.removing))
        return out

    # ======================================================================================
    # topic configuration (every broker)
    # ======================================================================================

    def topic_overrides(self, name: str) -> dict[str, str]:
        return dict(self._overrides.get(name, {}))

    def log_config_for(self, name: str, overrides: dict[str, Any] | None = None) -> LogConfig:
        if overrides is None:
            overrides = self._overrides.get(name, {})
        try:
            return self.config.default_log_config().with_overrides(overrides)
        except ConfigError:
            log.warning("ignoring invalid stored config of topic %s", name)
            return self.config.default_log_config()

    async def ensure_topic_configs(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self._overrides:
                self._overrides[name] = dict(await self.zk.get_topic_config(name))

    async def set_topic_overrides(
        self, name: str, overrides: dict[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace a topic's overrides. Any broker may do this (as ZooKeeper-mode Kafka): the
        znode write publishes a ``/config/changes`` notification every broker follows."""
        clean = validate_configs(dict(overrides))
        if validate_only:
            return
        await self.zk.set_topic_config(name, clean)
        self._overrides[name] = clean
        self.replica_manager.update_log_config(name, self.log_config_for(name))

    async def _on_config_changes(self, names: list[str]) -> None:
        fresh = [n for n in names if n not in self._seen_config_changes]
        self._seen_config_changes = set(names)
        for n in fresh:
            node = await self.zk.get_config_change(n)
            if node is None or not node.entity_path.startswith("topics/"):
                continue
            topic = node.entity_path.removeprefix("topics/")
            self._overrides[topic] = dict(await self.zk.get_topic_config(topic))
            self.replica_manager.update_log_config(topic, self.log_config_for(topic))

    # ======================================================================================
    # helpers for other brokers' requests
    # ======================================================================================

    async def auto_create_topic(
        self, name: str, num_partitions: int, replication_factor: int
    ) -> None:
        """Metadata auto-creation on a broker that is not the controller: write the topic's
        znodes; the controller's topic watch brings the partitions online."""
        live = [b.id for b in self.metadata.brokers()]
        chosen = assign_replicas(live, num_partitions, min(replication_factor, len(live)))
        try:
            await self.zk.create_topic(name, chosen, {})
        except ZkTopicExistsError:
            pass

    def _require_active(self) -> None:
        if self.epoch is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
