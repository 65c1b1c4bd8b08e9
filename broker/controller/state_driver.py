"""Every partition- and replica-state change of the controller, driven by the state machines.

Theory of operation (Kafka 3.9's ``ZkPartitionStateMachine`` / ``ZkReplicaStateMachine``)
------------------------------------------------------------------------------------------
The :class:`~broker.controller.state_machines.PartitionStateMachine` and
:class:`~broker.controller.state_machines.ReplicaStateMachine` of the controller context are
the controller's record of each partition's and replica's state, and they drive its
decisions:

* which partitions need a leader: :meth:`StateDriver.trigger_online` (Kafka's
  ``triggerOnlinePartitionStateChange``) moves every ``NewPartition`` and ``OfflinePartition``
  (of a topic not being deleted) to ``OnlinePartition``. A new partition gets its first live
  replica as leader and the live replicas as ISR (state znodes created); an offline one gets
  the offline-partition election of ``election.py`` (first live in-sync replica; unclean
  election if the topic allows it; leader -1 with the ISR kept when nobody is eligible, and
  the partition stays offline). A broker failure, or a log directory failure (KIP-112),
  first moves the partitions whose leader replica went offline to ``OfflinePartition``
  (:meth:`StateDriver.mark_offline`), then triggers the election. Only *online* replicas
  (live broker, not in an offline log directory: ``ControllerContext.online_ids``) are
  elected and kept in the ISR;
* every leader/ISR write (:meth:`StateDriver.update`) is checked against the machine
  *before* ZooKeeper is touched, and records the new state (``OnlinePartition`` with a
  leader, ``OfflinePartition`` without) after the conditional write succeeded.

An illegal transition is a controller bug: it is logged at ERROR with the partition (or
replica), its current state and the target state, and that partition is skipped, so the
others of the same event still make progress (Kafka's ``logInvalidTransition``). Nothing is
written for a skipped partition.

Why this design and not a full port of Kafka's machines: the side effects stay where they
are simplest (the election rules are pure functions, requests are batched by the caller),
while the machines alone decide which partitions are elected and which transitions are legal.
Replica states are recorded with the same checks (new replicas, brokers starting and failing,
reassignment, deletion); the controller does not act on replica states beyond that.

Topic znodes are read into the context here too (:meth:`StateDriver.load_topic`, which seeds
the machines for partitions they do not know yet: ``NewPartition`` without a state znode,
``OnlinePartition`` when the leader is live, ``OfflinePartition`` otherwise), and assignments
are written back (:meth:`StateDriver.write_assignment`).

Concurrency: the controller's event task only.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable

from broker.controller import election
from broker.controller.context import ControllerContext
from broker.controller.reassignment import ReplicaAssignment
from broker.controller.requests import NO_LEADER
from broker.controller.state_machines import PartitionState, ReplicaState
from broker.metadata.topic_configs import TopicConfigManager
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.interface import ZkOperations

log = logging.getLogger(__name__)

ReplicaKey = tuple[TopicPartition, int]
StateUpdate = Callable[[znodes.PartitionState], znodes.PartitionState | None]
"""Computes a partition's new leader/ISR state from its current one (None: no change)."""

MAX_UPDATE_ATTEMPTS = 5

_DELETION_PATH = (
    ReplicaState.OfflineReplica,
    ReplicaState.ReplicaDeletionStarted,
    ReplicaState.ReplicaDeletionSuccessful,
    ReplicaState.NonExistentReplica,
)


class StateDriver:
    """Partition and replica state changes of the active controller (see the module doc)."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkOperations,
        topic_configs: TopicConfigManager,
        controller_id: int,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.topic_configs = topic_configs
        self.controller_id = controller_id
        self.unclean_elections = 0
        """Leaders chosen from outside the ISR, by this broker as controller (Kafka's
        ControllerStats UncleanLeaderElectionsPerSec count)."""

    # ------------------------------------------------------------------ topic znodes

    async def load_topic(self, name: str) -> None:
        """Read the topic's assignment and partition states into the context; seed the
        machines for partitions and replicas they do not know yet."""
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
            ctx.state_zxids[tp] = st.modified_zxid
        live = ctx.live_ids()
        for tp in ctx.partitions_of(name):
            if tp not in ctx.partition_states:
                ctx.partition_states.initialize(tp, self._state_of(tp))
            for r in ctx.assignments[tp].replicas:
                if (tp, r) not in ctx.replica_states:
                    ctx.replica_states.initialize(
                        (tp, r),
                        ReplicaState.OnlineReplica if r in live else ReplicaState.OfflineReplica,
                    )
        await self.topic_configs.ensure_loaded([name])

    async def write_assignment(self, name: str, full: dict[int, list[int]] | None = None) -> bool:
        """Write ``/brokers/topics/<name>`` from the context (or ``full``) with adding and
        removing replicas; updates the context. False if the znode changed meanwhile."""
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

    # ------------------------------------------------------------------ leader/ISR writes

    def new_state(
        self, leader: int, leader_epoch: int, isr: Iterable[int]
    ) -> znodes.PartitionState:
        return znodes.PartitionState(
            leader=leader,
            leader_epoch=leader_epoch,
            isr=tuple(isr),
            controller_epoch=self.ctx.epoch,
        )

    async def update(self, tp: TopicPartition, compute: StateUpdate) -> bool:
        """Apply ``compute`` to the partition's current state and write the result
        (conditional on the state znode's version, fenced by the controller epoch); retried
        on version races. True if a new state was written."""
        for _ in range(MAX_UPDATE_ATTEMPTS):
            current = self.ctx.states.get(tp)
            if current is None:
                return False
            new = compute(current)
            if new is None:
                return False
            target = (
                PartitionState.OnlinePartition
                if new.leader >= 0
                else PartitionState.OfflinePartition
            )
            if not self._legal(tp, target):
                return False
            if await self._write_state(tp, new):
                self.ctx.partition_states.transition(tp, target)
                return True
        log.warning("%s: gave up updating the partition state after repeated races", tp)
        return False

    async def update_many(
        self, partitions: Iterable[TopicPartition], compute: Callable[[TopicPartition], StateUpdate]
    ) -> set[TopicPartition]:
        """:meth:`update` for many partitions at once: ``compute(tp)`` gives each one's
        update; the new states are written together (pipelined conditional writes fenced by
        the controller epoch, as Kafka's ``updateLeaderAndIsr``), the ones that lost a
        version race are re-read and tried again. Returns the partitions written. A broker
        failure at 10,000 partitions elects thousands of leaders and shrinks thousands of
        ISRs: one write at a time took minutes."""
        ctx = self.ctx
        written: set[TopicPartition] = set()
        pending = list(partitions)
        for _ in range(MAX_UPDATE_ATTEMPTS):
            batch: list[tuple[TopicPartition, znodes.PartitionState, PartitionState]] = []
            for tp in pending:
                current = ctx.states.get(tp)
                new = None if current is None else compute(tp)(current)
                if new is None:
                    continue
                target = (
                    PartitionState.OnlinePartition
                    if new.leader >= 0
                    else PartitionState.OfflinePartition
                )
                if self._legal(tp, target):
                    batch.append((tp, new, target))
            if not batch:
                return written
            versions = await self.zk.update_partition_states(
                [(tp, new, ctx.state_versions.get(tp, 0)) for tp, new, _ in batch],
                controller_epoch_zk_version=ctx.epoch_zk_version,
            )
            pending = []
            for (tp, new, target), version in zip(batch, versions, strict=True):
                if version is None:
                    pending.append(tp)
                    continue
                ctx.states[tp] = new
                ctx.state_versions[tp] = version
                ctx.partition_states.transition(tp, target)
                written.add(tp)
            if not pending:
                return written
            for tp, found in (await self.zk.get_partition_states_of(pending)).items():
                ctx.states[tp] = found.value
                ctx.state_versions[tp] = found.zk_version
        log.warning(
            "gave up updating the state of %d partitions after repeated races: %s",
            len(pending),
            ", ".join(str(tp) for tp in pending[:10]),
        )
        return written

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
        return True

    # ------------------------------------------------------------------ partition states

    def new_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """NonExistentPartition -> NewPartition for partitions just added to the context."""
        machine = self.ctx.partition_states
        for tp in sorted(partitions):
            if machine.state(tp) is PartitionState.NonExistentPartition:
                machine.transition(tp, PartitionState.NewPartition)
            else:
                self._illegal(tp, machine.state(tp), PartitionState.NewPartition)

    def mark_offline(self, partitions: Iterable[TopicPartition]) -> None:
        """-> OfflinePartition (their leader failed); no side effect, as in Kafka."""
        for tp in sorted(partitions):
            if self._legal(tp, PartitionState.OfflinePartition):
                self.ctx.partition_states.transition(tp, PartitionState.OfflinePartition)

    async def trigger_online(self) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """Every NewPartition and OfflinePartition (of a topic not being deleted) to
        OnlinePartition. Returns (partitions initialized, partitions with a new state)."""
        ctx = self.ctx
        new = ctx.partition_states.partitions_in(PartitionState.NewPartition)
        offline = ctx.partition_states.partitions_in(PartitionState.OfflinePartition)
        initialized = await self.initialize([tp for tp in new if tp.topic not in ctx.deleting])
        elected = await self.elect_offline(offline)
        return initialized, elected

    async def initialize(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """NewPartition -> OnlinePartition: leader = first live replica, ISR = the live
        replicas (state znodes created, fenced). A partition without a live replica stays new.
        Returns the partitions that got a state."""
        ctx = self.ctx
        by_topic: dict[str, dict[int, znodes.PartitionState]] = {}
        for tp in sorted(partitions):
            if not self._legal(tp, PartitionState.OnlinePartition):
                continue
            online = ctx.online_ids(tp)
            live = [r for r in ctx.assignments[tp].replicas if r in online]
            if not live:
                log.warning("%s: no live replica; the partition stays offline for now", tp)
                continue
            by_topic.setdefault(tp.topic, {})[tp.partition] = self.new_state(live[0], 0, live)
        done: list[TopicPartition] = []
        for topic, states in by_topic.items():
            created = await self.zk.create_partition_states(
                topic, states, controller_epoch_zk_version=ctx.epoch_zk_version
            )
            for p, state in states.items():
                tp = TopicPartition(topic, p)
                if p in created:
                    ctx.states[tp] = state
                    ctx.state_versions[tp] = created[p]
                else:  # written meanwhile (by an earlier controller): take it as it is
                    current = await self.zk.get_partition_state(topic, p)
                    if current is None:
                        continue
                    ctx.states[tp] = current.value
                    ctx.state_versions[tp] = current.zk_version
                ctx.partition_states.transition(tp, self._state_of(tp))
                self.replicas_started(
                    [(tp, r) for r in ctx.assignments[tp].replicas], ctx.live_brokers
                )
                done.append(tp)
        return done

    async def elect_offline(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """OfflinePartition -> OnlinePartition by the offline-partition election (see the
        module doc); a partition whose leader turns out to be live just loses its dead ISR
        members. Topics being deleted are skipped. Returns the partitions written."""
        eligible = sorted(tp for tp in partitions if tp.topic not in self.ctx.deleting)
        written = await self.update_many(
            eligible, lambda tp: functools.partial(self._elect_or_shrink, tp)
        )
        for tp in eligible:
            if tp not in written:
                self._settle(tp)
        return [tp for tp in eligible if tp in written]

    async def remove_from_isr(self, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Drop the replicas that are not online (broker dead or shutting down, or replica in
        an offline log directory) from the ISR of the partitions whose leader's broker is
        live (a leader whose replica is offline is replaced); topics being deleted are
        skipped. Returns the partitions written."""
        ctx = self.ctx
        live = ctx.live_ids()
        eligible = [
            tp
            for tp in partitions
            if tp in ctx.states and ctx.states[tp].leader in live and tp.topic not in ctx.deleting
        ]
        return await self.elect_offline(eligible)

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        """The topic is deleted: its partitions -> OfflinePartition -> NonExistentPartition,
        and their replicas through the deletion states; all forgotten."""
        ctx = self.ctx
        machine = ctx.partition_states
        for tp in partitions:
            self.delete_replicas([(tp, r) for r in ctx.replica_states.replicas_of(tp)])
            ctx.replica_states.remove_partition(tp)
            if machine.state(tp) is PartitionState.NonExistentPartition:
                continue
            if machine.state(tp) is not PartitionState.OfflinePartition:
                if not self._legal(tp, PartitionState.OfflinePartition):
                    machine.remove(tp)
                    continue
                machine.transition(tp, PartitionState.OfflinePartition)
            machine.transition(tp, PartitionState.NonExistentPartition)
            machine.remove(tp)

    def _elect_or_shrink(
        self, tp: TopicPartition, st: znodes.PartitionState
    ) -> znodes.PartitionState | None:
        """Leader not online: offline-partition election among the online replicas (leader
        -1 when nobody is eligible). Leader online: the ISR without the replicas that are not
        online. None: nothing changes."""
        ctx = self.ctx
        live = ctx.online_ids(tp)
        assignment = ctx.assignments[tp].replicas
        if st.leader not in live:
            res = election.offline_partition_leader(
                assignment, st.isr, live, unclean_enabled=self._unclean_allowed(tp.topic)
            )
            if res.leader is None:
                if st.leader == NO_LEADER:
                    return None
                # no eligible replica: leader -1, the ISR keeps the last member(s)
                return self.new_state(NO_LEADER, st.leader_epoch + 1, st.isr)
            if res.unclean:
                log.warning("%s: unclean leader election of %d", tp, res.leader)
                self.unclean_elections += 1
            return self.new_state(res.leader, st.leader_epoch + 1, res.isr)
        isr = [r for r in st.isr if r in live]
        if len(isr) == len(st.isr):
            return None
        return self.new_state(st.leader, st.leader_epoch + 1, isr)

    def _unclean_allowed(self, topic: str) -> bool:
        return self.topic_configs.log_config_for(topic).unclean_leader_election_enable

    def _state_of(self, tp: TopicPartition) -> PartitionState:
        """The partition's state as the context shows it (online while its leader's broker
        is registered, even if it is shutting down, and its replica is not in an offline log
        directory)."""
        st = self.ctx.states.get(tp)
        if st is None:
            return PartitionState.NewPartition
        if self.ctx.is_replica_online(st.leader, tp, include_shutting_down=True):
            return PartitionState.OnlinePartition
        return PartitionState.OfflinePartition

    def _settle(self, tp: TopicPartition) -> None:
        """Nothing was written: record the state the partition's znode shows."""
        machine = self.ctx.partition_states
        actual = self._state_of(tp)
        if machine.state(tp) is not actual and machine.is_valid_transition(tp, actual):
            machine.transition(tp, actual)

    def _legal(self, tp: TopicPartition, target: PartitionState) -> bool:
        machine = self.ctx.partition_states
        if machine.is_valid_transition(tp, target):
            return True
        self._illegal(tp, machine.state(tp), target)
        return False

    def _illegal(
        self,
        key: TopicPartition | ReplicaKey,
        current: PartitionState | ReplicaState,
        target: PartitionState | ReplicaState,
    ) -> None:
        kind = "partition" if isinstance(key, TopicPartition) else "replica"
        allowed = ",".join(sorted(s.name for s in target.valid_previous_states))
        log.error(
            "controller %d epoch %d: illegal state change of %s %s from %s to %s "
            "(allowed only from %s); skipped",
            self.controller_id,
            self.ctx.epoch,
            kind,
            key if isinstance(key, TopicPartition) else f"{key[0]} replica {key[1]}",
            current.name,
            target.name,
            allowed,
        )

    # ------------------------------------------------------------------ replica states

    def replicas_to(self, keys: Iterable[ReplicaKey], target: ReplicaState) -> None:
        """Record ``target`` for each replica; illegal transitions are logged and skipped."""
        machine = self.ctx.replica_states
        for key in keys:
            if machine.is_valid_transition(key, target):
                machine.transition(key, target)
            else:
                self._illegal(key, machine.state(key), target)

    def replicas_started(self, keys: Iterable[ReplicaKey], live: Iterable[int]) -> None:
        """New replicas, or replicas on brokers that started: (NonExistentReplica ->)
        NewReplica -> OnlineReplica, or OfflineReplica when their broker is not live."""
        machine = self.ctx.replica_states
        live_set = set(live)
        for key in keys:
            if machine.state(key) is ReplicaState.NonExistentReplica:
                machine.transition(key, ReplicaState.NewReplica)
            target = (
                ReplicaState.OnlineReplica if key[1] in live_set else ReplicaState.OfflineReplica
            )
            self.replicas_to([key], target)

    def delete_replicas(self, keys: Iterable[ReplicaKey]) -> None:
        """Replicas being deleted (StopReplica with deletion sent): through OfflineReplica,
        ReplicaDeletionStarted and ReplicaDeletionSuccessful to NonExistentReplica, then
        forgotten. Replicas the machine does not know are left alone."""
        machine = self.ctx.replica_states
        for key in keys:
            if machine.state(key) is ReplicaState.NonExistentReplica:
                continue
            for target in _DELETION_PATH:
                if machine.state(key) in target.valid_previous_states:
                    machine.transition(key, target)
            if machine.state(key) is not ReplicaState.NonExistentReplica:
                self._illegal(key, machine.state(key), ReplicaState.NonExistentReplica)
            machine.remove(key)
