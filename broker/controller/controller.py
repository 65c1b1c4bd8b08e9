"""The controller (ZooKeeper mode): one broker of the cluster decides partition leadership.

Theory of operation (checklist sections 10, 11, 13, 14; Kafka 3.9's ``KafkaController``)
---------------------------------------------------------------------------------------
Every broker runs a :class:`Controller`. The broker that creates the ephemeral
``/controller`` znode (bumping ``/controller_epoch`` in the same multi-op) is the *active*
controller; the others watch ``/controller`` and run the election again when it goes away.
On becoming active the controller reads the whole state from ZooKeeper (live brokers with
their epochs, topics, assignments and in-flight reassignments, partition states), elects a
leader for every partition that is new or whose leader is gone, removes dead brokers from
the ISRs, sends LeaderAndIsr for every partition to its live replicas and UpdateMetadata to
every live broker, then resumes reassignments and topic deletions. Every request carries the
controller epoch; brokers ignore older epochs, and every partition-state write is fenced by
the controller epoch's znode version, so a deposed controller can neither confuse brokers
nor overwrite ZooKeeper.

All controller work runs as typed *events* (:mod:`~broker.controller.events`) on one queue
processed by one task (:mod:`~broker.controller.event_manager`): ZooKeeper watches (broker
changes, new topics, deletion requests, ISR-change notifications), session changes, admin
requests (create/delete topics, create partitions, elect leaders, reassignments),
controlled shutdowns and the periodic leader-imbalance check. :meth:`Controller._process`
dispatches on the event's type. An event reads and changes the in-memory
:class:`~broker.controller.context.ControllerContext`, writes ZooKeeper, and queues requests
on the :class:`~broker.controller.channel.ControllerChannel`, which delivers them to each
broker in order.

The work is shared with helpers that operate on the same context: the state driver
(``state_driver.py``: partition and replica state machines, leader/ISR writes, elections of
new and offline partitions), topic deletion (``topic_deletion.py``), reassignment
(``reassignment_manager.py``) and leader changes on request (``leader_changes.py``:
ElectLeaders, leader rebalance, controlled shutdown); leader election rules are the pure
functions of ``election.py``. This module keeps the orchestration: lifecycle, election and
fail-over, broker and topic changes, topic and partition creation.

A broker failure (its ``/brokers/ids`` znode disappears) moves the partitions it led to
OfflinePartition, and each offline partition gets the first live in-sync replica in
assignment order as leader; dead brokers leave every ISR; leader epochs are bumped; a
partition with no eligible replica gets leader -1 and waits (``unclean.leader.election.enable``
lets any live replica take over instead). A broker start-up sends it the metadata and its
partitions, and elects the partitions still new or offline. A controlled shutdown
(ControlledShutdown request) moves leadership away first and stops the broker's follower
replicas, so producers see NOT_LEADER_OR_FOLLOWER at once.

A log directory failure (KIP-112, ``log_dir_failures.py``) reaches the controller as a
``/log_dir_event_notification`` znode; every LeaderAndIsr response is read for
KAFKA_STORAGE_ERROR, and the replicas in offline directories lose leadership and ISR
membership as replicas of a dead broker would.

Topic-config overrides are not the controller's: they belong to the broker's
:class:`~broker.metadata.topic_configs.TopicConfigManager`, which the controller asks for a
topic's ``unclean.leader.election.enable`` and tells about topics it creates and deletes.

Concurrency: event loop thread. Events run one at a time on the event task; public
coroutines that change state submit an event and await its result.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from broker.config import BrokerConfig
from broker.controller.alter_partition import (
    AlterPartition,
    AlterPartitionResult,
    AlterPartitions,
)
from broker.controller.broker_changes import BrokerChanges
from broker.controller.channel import ChannelFactory, ControllerChannel, LocalHandler
from broker.controller.context import ControllerContext
from broker.controller.event_manager import ControllerEventManager, NotControllerError
from broker.controller.events import (
    AlterReassignments,
    BrokerChange,
    BrokerReachable,
    BrokerUnreachable,
    ControlledShutdown,
    ControllerChange,
    ControllerEvent,
    ControllerUnreachable,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    ElectLeaders,
    IsrChangeNotification,
    LeaderAndIsrResponseReceived,
    LeaderImbalanceCheck,
    ListReassignments,
    LogDirEventNotification,
    OngoingReassignments,
    PartitionResults,
    Reelect,
    SessionLost,
    Startup,
    TopicChange,
    TopicDeletionRequest,
)
from broker.controller.leader_changes import LeaderChanges
from broker.controller.liveness import BrokerLivenessWatch, LivenessCallback
from broker.controller.log_dir_failures import LogDirFailures
from broker.controller.producer_id_blocks import (
    AllocateProducerIds,
    ProducerIdBlock,
    ProducerIdBlocks,
)
from broker.controller.reassignment_manager import ReassignmentManager
from broker.controller.requests import ControllerRequestSender
from broker.controller.state_driver import StateDriver
from broker.controller.topic_admin import (
    InvalidPartitionsError,
    assign_replicas,
    validate_assignment,
)
from broker.controller.topic_deletion import TopicDeletionManager
from broker.metadata.cache import MetadataCache, PartitionInfo, TopicInfo
from broker.metadata.topic_configs import TopicConfigManager, validate_configs
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.inter_broker_protocol import parse_ibp
from broker.security.listener_security import inter_broker_listener
from broker.topic_names import TopicExistsError, validate_topic_name
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.interface import ControllerMovedError, ZkOperations

log = logging.getLogger(__name__)

METADATA_WAIT_S = 10.0
"""How long an admin request waits for this broker's metadata cache to show its change."""

__all__ = ["Controller", "NotControllerError"]


LivenessFactory = Callable[[LivenessCallback, LivenessCallback], BrokerLivenessWatch]
"""(on_dead, on_back) -> the watch of broker processes (docs/failover.md)."""

EventHandler = Callable[[Any], Awaitable[object]]
"""Runs one controller event (of the type it is registered for); a request's result."""


class Controller:
    """The controller role of one broker (active or standing by)."""

    def __init__(
        self,
        zk: ZkOperations,
        metadata: MetadataCache,
        config: BrokerConfig,
        broker_id: int,
        topic_configs: TopicConfigManager,
        *,
        channel_factory: ChannelFactory = ControllerChannel,
        liveness_factory: LivenessFactory | None = None,
    ) -> None:
        """``liveness_factory``: builds the watch that finds dead broker processes before
        their sessions expire (docs/failover.md); None: session expiry only."""
        self.zk = zk
        self.metadata = metadata
        self.config = config
        self.broker_id = broker_id
        self.topic_configs = topic_configs
        self.epoch: int | None = None
        self.ctx = ControllerContext(inter_broker_listener=inter_broker_listener(config))
        self.requests = ControllerRequestSender(
            self.ctx, broker_id, parse_ibp(str(config["inter.broker.protocol.version"]))
        )
        self.driver = StateDriver(self.ctx, zk, topic_configs, broker_id)
        self.log_dir_failures = LogDirFailures(self.ctx, zk, self.driver, self.requests)
        self.requests.on_leader_and_isr_response = self._leader_and_isr_answered
        self.deletion = TopicDeletionManager(
            self.ctx, zk, self.driver, self.requests, topic_configs
        )
        self.reassignments = ReassignmentManager(self.ctx, self.driver, self.requests)
        # what Kafka brokers ask the controller (broker/controller/alter_partition.py, ...)
        self.alter_partitions = AlterPartitions(self.ctx, zk, self.requests, self.reassignments)
        self.producer_id_blocks = ProducerIdBlocks(self.ctx, zk)
        self.leaders = LeaderChanges(self.ctx, self.driver, self.requests, config)
        self.brokers = BrokerChanges(self.ctx, zk, self.driver, self.requests, self.deletion)
        self.events = ControllerEventManager(self._process, self._resign)
        self._channel_factory = channel_factory
        self._liveness_factory = liveness_factory
        # while another broker is the controller: the watch of its process (docs/failover.md)
        self._controller_watch: BrokerLivenessWatch | None = None
        self._local_handler: LocalHandler | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._handlers = self._event_handlers()

    # ======================================================================================
    # lifecycle
    # ======================================================================================

    @property
    def is_active(self) -> bool:
        return self.epoch is not None

    def set_local_handler(self, handler: LocalHandler) -> None:
        """How controller requests reach this broker itself (no socket)."""
        self._local_handler = handler

    async def startup(self) -> None:
        self.events.start()
        if self.config["auto.leader.rebalance.enable"]:
            self._tasks.append(
                asyncio.get_running_loop().create_task(
                    self._rebalance_timer(), name="leader-rebalance"
                )
            )
        self.zk.on_session_lost(self._on_session_lost)
        self.zk.on_reconnected(self._on_reconnected)
        put = self.events.put
        await self.zk.watch_controller(lambda _cid: put(ControllerChange()))
        await self.zk.watch_broker_ids(lambda _ids: put(BrokerChange()))
        await self.zk.watch_topics(lambda _names: put(TopicChange()))
        await self.zk.watch_topics_marked_for_deletion(lambda _names: put(TopicDeletionRequest()))
        await self.zk.watch_isr_change_notifications(lambda _names: put(IsrChangeNotification()))
        await self.zk.watch_log_dir_event_notifications(
            lambda _names: put(LogDirEventNotification())
        )
        await self.events.call(Startup())

    async def shutdown(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.events.stop()
        await self._resign()
        await self._unwatch_controller()

    def _on_session_lost(self) -> None:
        """A lost ZooKeeper session means another broker may be controller now: stop acting
        on stale leadership at once (before any queued event runs)."""
        if self.epoch is not None:
            log.warning("ZooKeeper session lost: resigning as controller (epoch %d)", self.epoch)
            self.epoch = None
        self.events.put(SessionLost())

    async def _on_reconnected(self) -> None:
        self.events.put(Reelect())

    async def _rebalance_timer(self) -> None:
        interval = self.config["leader.imbalance.check.interval.seconds"]
        while True:
            await asyncio.sleep(interval)
            if self.is_active:
                self.events.put(LeaderImbalanceCheck())

    # ======================================================================================
    # event dispatch
    # ======================================================================================

    async def _process(self, event: ControllerEvent) -> object:
        """Run one event (on the event task) by the handler of its type
        (:meth:`_event_handlers`); requests return their result."""
        for cls in type(event).__mro__:
            handler = self._handlers.get(cls)
            if handler is not None:
                return await handler(event)
        raise TypeError(f"unknown controller event {event!r}")

    def _event_handlers(self) -> dict[type, EventHandler]:
        """Event type -> its handler. Some events matter only to the active controller
        (``if_active``: ignored by the others); some requests only it answers
        (``active_only``: :class:`NotControllerError` on the others)."""
        if_active, active_only = self._if_active, self._active_only
        return {
            # elections, sessions, the controller's and the brokers' processes
            Startup: lambda _event: self._elect(),
            ControllerChange: lambda _event: self._elect(),
            Reelect: lambda _event: self._elect(),
            SessionLost: lambda _event: self._resign(),
            BrokerChange: lambda _event: self._on_broker_change(),
            ControllerUnreachable: lambda e: self._on_controller_unreachable(e.broker_id, e.czxid),
            BrokerUnreachable: if_active(
                lambda e: self.brokers.on_unreachable(e.broker_id, e.epoch)
            ),
            BrokerReachable: if_active(lambda e: self.brokers.on_reachable(e.broker_id, e.epoch)),
            # ZooKeeper notifications, broker responses, timers
            TopicChange: lambda _event: self._on_topic_change(),
            TopicDeletionRequest: if_active(lambda _event: self.deletion.on_deletion_requests()),
            IsrChangeNotification: lambda _event: self._on_isr_change_notifications(),
            LogDirEventNotification: if_active(
                lambda _event: self.log_dir_failures.on_notifications()
            ),
            LeaderAndIsrResponseReceived: if_active(
                self.log_dir_failures.on_leader_and_isr_response
            ),
            LeaderImbalanceCheck: if_active(lambda _event: self.leaders.rebalance()),
            # admin requests
            CreateTopic: self._create_topic,
            CreatePartitions: self._create_partitions,
            DeleteTopic: active_only(lambda e: self.deletion.delete(e.name)),
            ElectLeaders: active_only(lambda e: self.leaders.elect(e.election_type, e.partitions)),
            AlterReassignments: active_only(lambda e: self.reassignments.alter(e.targets)),
            ListReassignments: active_only(self._ongoing_reassignments),
            # what brokers ask the controller
            AlterPartition: lambda e: self.alter_partitions.process(e, active=self.is_active),
            AllocateProducerIds: lambda e: self.producer_id_blocks.allocate(
                e, active=self.is_active
            ),
            ControlledShutdown: active_only(
                lambda e: self.leaders.controlled_shutdown(e.broker_id, e.broker_epoch)
            ),
        }

    def _if_active(self, handle: EventHandler) -> EventHandler:
        """``handle``, run only while this broker is the active controller; result None."""

        async def run(event: Any) -> None:
            if self.is_active:
                await handle(event)

        return run

    def _active_only(self, handle: EventHandler) -> EventHandler:
        """``handle``, refused (:class:`NotControllerError`) unless this broker is active."""

        async def run(event: Any) -> object:
            self._require_active()
            return await handle(event)

        return run

    async def _ongoing_reassignments(self, event: ListReassignments) -> OngoingReassignments:
        return self.reassignments.ongoing(event.partitions)

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
            await self._watch_controller()
            return
        epoch = await self.zk.try_elect_controller(self.broker_id)
        if epoch is None:
            self.metadata.controller_id = await self.zk.get_controller() or -1
            await self._watch_controller()
            return
        await self._unwatch_controller()
        versioned = await self.zk.get_controller_epoch()
        self.ctx.reset(epoch, versioned.zk_version if versioned else 0)
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

    async def _watch_controller(self) -> None:
        """Watch the active controller's process, so that its death starts the election at
        once rather than at the expiry of its session (docs/failover.md)."""
        if self._liveness_factory is None:
            return
        registration = await self.zk.get_controller_registration()
        node = None if registration is None else await self.zk.get_broker(registration[0])
        if registration is None or node is None or registration[0] == self.broker_id:
            await self._unwatch_controller()
            return  # a ControllerChange follows
        controller_id, czxid = registration
        if self._controller_watch is None:
            put = self.events.put
            self._controller_watch = self._liveness_factory(
                lambda b, z: put(ControllerUnreachable(b, z)), lambda _b, _z: None
            )
        self._controller_watch.keep_only({controller_id})
        host, port = self.ctx.address(node)
        self._controller_watch.watch(controller_id, czxid, host, port)

    async def _unwatch_controller(self) -> None:
        if self._controller_watch is not None:
            watch, self._controller_watch = self._controller_watch, None
            await watch.close()

    async def _on_controller_unreachable(self, controller_id: int, czxid: int) -> None:
        """The active controller's process is gone: delete its ``/controller`` (only that
        znode); the ZooKeeper watch then runs the election."""
        if await self.zk.delete_dead_controller(controller_id, czxid):
            log.warning(
                "controller %d died (its port refuses connections): deleted its /controller "
                "so that the election runs now",
                controller_id,
            )

    async def _resign(self) -> None:
        if self.epoch is not None:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.epoch)
        self.epoch = None
        self.ctx.reset()
        if self.brokers.liveness is not None:
            liveness, self.brokers.liveness = self.brokers.liveness, None
            await liveness.close()
        if self.requests.channel is not None:
            channel, self.requests.channel = self.requests.channel, None
            await channel.close()

    async def _on_controller_failover(self) -> None:
        ctx = self.ctx
        assert self._local_handler is not None, "set_local_handler was not called"
        self.requests.channel = self._channel_factory(self.broker_id, self._local_handler)
        if self._liveness_factory is not None:
            put = self.events.put
            self.brokers.liveness = self._liveness_factory(
                lambda b, e: put(BrokerUnreachable(b, e)), lambda b, e: put(BrokerReachable(b, e))
            )
        await self.brokers.refresh_live_brokers(at_failover=True)
        for name in await self.zk.get_all_topics():
            await self.driver.load_topic(name)
        ctx.deleting = set(await self.zk.get_topics_marked_for_deletion()) & set(ctx.topic_ids)
        await self.log_dir_failures.drop_pending_notifications()
        await self.brokers.fail_over_unseen_bounces()
        # new partitions and partitions whose leader is gone get a leader; dead brokers
        # leave the ISR of the others
        await self.driver.trigger_online()
        await self.driver.remove_from_isr(sorted(ctx.states))
        self.requests.leader_and_isr(sorted(ctx.states))
        self.requests.update_metadata(None)
        await self.reassignments.resume()
        await self.deletion.resume()
        log.info(
            "controller %d ready: %d brokers, %d topics, %d partitions",
            self.broker_id,
            len(ctx.live_brokers),
            len(ctx.topic_ids),
            len(ctx.assignments),
        )

    # ======================================================================================
    # broker changes (broker/controller/broker_changes.py)
    # ======================================================================================

    async def _on_broker_change(self) -> None:
        if self.is_active:
            await self.brokers.on_change()

    # ======================================================================================
    # ISR changes written by leaders
    # ======================================================================================

    def _leader_and_isr_answered(self, broker_id: int, response: Any) -> None:
        """The channel's callback for each LeaderAndIsr response (on the event loop): queued
        as an event when it may tell about offline log directories."""
        if self.is_active:
            event = self.log_dir_failures.response_event(broker_id, response)
            if event is not None:
                self.events.put(event)

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
        for tp, current in (await self.zk.get_partition_states_of(changed)).items():
            ctx.states[tp] = current.value
            ctx.state_versions[tp] = current.zk_version
        await self.zk.delete_isr_change_notifications(notifications)
        self.requests.update_metadata(changed)
        await self.reassignments.on_isr_changes(changed)

    # ======================================================================================
    # topics and partitions
    # ======================================================================================

    async def _on_topic_change(self) -> None:
        """Topics created directly in ZooKeeper (by a broker's auto-creation or a tool)."""
        if not self.is_active:
            return
        ctx = self.ctx
        names = set(await self.zk.get_all_topics())
        for name in sorted(names - set(ctx.topic_ids)):
            await self.driver.load_topic(name)
            new = [tp for tp in ctx.partitions_of(name) if tp not in ctx.states]
            await self.driver.initialize(new)
            parts = ctx.partitions_of(name)
            self.requests.leader_and_isr(parts, new=new)
            self.requests.update_metadata(parts)

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
        info = await self.events.call(
            CreateTopic(name, num_partitions, replication_factor, assignment, clean, validate_only)
        )
        if not validate_only:
            await self._await_metadata(name, len(info.partitions))
        return self.metadata.topic(name) or info

    async def _create_topic(self, event: CreateTopic) -> TopicInfo:
        self._require_active()
        ctx = self.ctx
        name = event.name
        live = sorted(ctx.live_ids())
        if event.assignment:
            chosen = {p: list(r) for p, r in event.assignment.items()}
            validate_assignment(chosen, live)
        else:
            if event.num_partitions <= 0:
                raise InvalidPartitionsError("number of partitions must be larger than 0")
            chosen = assign_replicas(
                live, event.num_partitions, event.replication_factor, racks=self._racks(live)
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
        if event.validate_only:
            return info
        try:
            await self.zk.create_topic(name, chosen, event.configs, topic_id)
        except TopicExistsError as exc:  # created meanwhile, or still marked for deletion
            raise TopicExistsError(f"topic {name!r} already exists") from exc
        self.topic_configs.topic_created(name, event.configs)
        await self.driver.load_topic(name)
        parts = ctx.partitions_of(name)
        await self.driver.initialize(parts)
        self.requests.leader_and_isr(parts, new=parts)
        self.requests.update_metadata(parts)
        return info

    async def _await_metadata(self, name: str, partitions: int) -> None:
        """Until this broker's metadata cache shows the topic with leaders (the local
        UpdateMetadata is delivered through the channel after the event)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + METADATA_WAIT_S
        while loop.time() < deadline:
            t = self.metadata.topic(name)
            if t is not None and len(t.partitions) >= partitions:
                return
            await asyncio.sleep(0.005)

    def _metadata_racks(self) -> dict[int, str | None] | None:
        """The live brokers' racks as this broker's metadata knows them, for a topic created
        here rather than by the controller: rack-aware when every broker has a rack, else
        not (Kafka's ``RackAwareMode.Safe`` for auto-created topics)."""
        racks = {int(b.id): b.rack for b in self.metadata.brokers()}
        return racks if racks and all(racks.values()) else None

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
        await self.events.call(CreatePartitions(name, count, assignments, validate_only))
        await self._await_metadata(name, count)

    async def _create_partitions(self, event: CreatePartitions) -> None:
        self._require_active()
        ctx = self.ctx
        name, count = event.name, event.count
        if name not in ctx.topic_ids or name in ctx.deleting:
            raise KafkaError(f"topic {name!r} does not exist", ErrorCode.unknown_topic_or_partition)
        existing = ctx.partitions_of(name)
        current = len(existing)
        if count <= current:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions; the new count must be larger"
            )
        rf = len(ctx.assignments[existing[0]].replicas)
        live = sorted(ctx.live_ids())
        if event.assignments is not None:
            if len(event.assignments) != count - current:
                raise KafkaError(
                    f"assignment lists {len(event.assignments)} partitions, expected "
                    f"{count - current}",
                    ErrorCode.invalid_replica_assignment,
                )
            new = {current + i: list(r) for i, r in enumerate(event.assignments)}
            validate_assignment(new, live, start_partition=current)
        else:
            new = assign_replicas(
                live, count - current, rf, start_partition=current, racks=self._racks(live)
            )
        if event.validate_only:
            return
        full = {tp.partition: list(ctx.assignments[tp].replicas) for tp in existing} | new
        if not await self.driver.write_assignment(name, full):
            raise KafkaError(f"topic {name!r} changed concurrently", ErrorCode.not_controller)
        parts = [TopicPartition(name, p) for p in sorted(new)]
        self.driver.new_partitions(parts)
        await self.driver.initialize(parts)
        self.requests.leader_and_isr(parts, new=parts)
        self.requests.update_metadata(parts)

    async def delete_topic(self, name: str) -> None:
        self._require_active()
        if not self.config["delete.topic.enable"]:
            raise KafkaError(
                "topic deletion is disabled (delete.topic.enable=false)",
                ErrorCode.topic_deletion_disabled,
            )
        await self.events.call(DeleteTopic(name))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + METADATA_WAIT_S
        while self.metadata.topic(name) is not None and loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def auto_create_topic(
        self, name: str, num_partitions: int, replication_factor: int
    ) -> None:
        """Metadata auto-creation on a broker that is not the controller: write the topic's
        znodes; the controller's topic watch brings the partitions online."""
        live = [b.id for b in self.metadata.brokers()]
        chosen = assign_replicas(
            live,
            num_partitions,
            min(replication_factor, len(live)),
            racks=self._metadata_racks(),
        )
        with contextlib.suppress(TopicExistsError):
            await self.zk.create_topic(name, chosen, {})

    async def create_internal_topic(
        self, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        """Create an internal topic (``__consumer_offsets``, ``__transaction_state``) with its
        configs from any broker: the active controller creates it as CreateTopics does;
        another broker writes its znodes, configs included, and the controller's topic
        watch brings it online. A topic that exists already is not an error."""
        live = [b.id for b in self.metadata.brokers()]
        rf = max(1, min(replication_factor, len(live)))
        try:
            if self.is_active:
                await self.create_topic(
                    name,
                    num_partitions=partitions,
                    replication_factor=rf,
                    configs=dict(configs),
                )
            else:
                chosen = assign_replicas(live, partitions, rf, racks=self._metadata_racks())
                await self.zk.create_topic(name, chosen, dict(configs))
                self.topic_configs.topic_created(name, dict(configs))
        except TopicExistsError:
            return
        except KafkaError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                raise

    # ======================================================================================
    # leader changes (leader_changes.py) and reassignments (reassignment_manager.py)
    # ======================================================================================

    async def alter_partition(self, request: AlterPartition) -> AlterPartitionResult:
        """A Kafka broker's ISR changes (AlterPartition, broker/controller/alter_partition.py)."""
        self._require_active()
        return await self.events.call(request)

    async def allocate_producer_ids(self, broker_id: int, broker_epoch: int) -> ProducerIdBlock:
        """A block of producer ids for a Kafka broker (AllocateProducerIds)."""
        self._require_active()
        return await self.events.call(AllocateProducerIds(broker_id, broker_epoch))

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move leadership away from ``broker_id`` and stop its followers; returns the
        partitions it still leads (no other eligible replica)."""
        self._require_active()
        return await self.events.call(ControlledShutdown(broker_id, broker_epoch))

    async def elect_leaders(
        self, election_type: int, partitions: list[TopicPartition] | None
    ) -> PartitionResults:
        self._require_active()
        return await self.events.call(ElectLeaders(election_type, partitions))

    async def alter_partition_reassignments(
        self, targets: dict[TopicPartition, list[int] | None]
    ) -> PartitionResults:
        self._require_active()
        return await self.events.call(AlterReassignments(targets))

    async def list_partition_reassignments(
        self, partitions: list[TopicPartition] | None
    ) -> OngoingReassignments:
        self._require_active()
        return await self.events.call(ListReassignments(partitions))

    def _require_active(self) -> None:
        if self.epoch is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
