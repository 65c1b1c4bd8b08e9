"""Partition reassignment as the controller runs it (KIP-455, Kafka 3.9's
``KafkaController.onPartitionReassignment``).

Theory of operation: AlterPartitionReassignments gives a partition a target replica list (or
cancels its reassignment). The assignment becomes target + original replicas with
``adding`` / ``removing`` lists (``reassignment.build_reassignment``), written to the topic
znode; the adding replicas become new replicas (NewReplica -> OnlineReplica), and a
LeaderAndIsr with a bumped leader epoch makes them start following. Each ISR change of the
partition (``/isr_change_notification``) re-checks it: once every target replica is in the
ISR, the leader moves into the target if it is not there (``election.reassign_partition_leader``),
the ISR and the assignment become the target, the removed replicas are stopped and deleted
(through the replica deletion states), and every broker is told. A partition whose target
has no eligible leader yet keeps waiting. A new controller resumes the reassignments it
finds in the topic znodes (:meth:`ReassignmentManager.resume`).

Concurrency: the controller's event task only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from broker.controller import election
from broker.controller.context import ControllerContext
from broker.controller.events import OngoingReassignments, PartitionResults
from broker.controller.reassignment import (
    ReplicaAssignment,
    build_reassignment,
    validate_target_replicas,
)
from broker.controller.requests import ControllerRequestSender
from broker.controller.state_driver import StateDriver
from broker.controller.state_machines import ReplicaState
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition
from broker.zk import znodes

log = logging.getLogger(__name__)


class ReassignmentManager:
    """Starts, tracks and completes partition reassignments for the active controller."""

    def __init__(
        self, ctx: ControllerContext, driver: StateDriver, requests: ControllerRequestSender
    ) -> None:
        self.ctx = ctx
        self.driver = driver
        self.requests = requests

    async def alter(
        self, targets: Mapping[TopicPartition, Sequence[int] | None]
    ) -> PartitionResults:
        """AlterPartitionReassignments: start (target) or cancel (None) per partition."""
        ctx = self.ctx
        results: PartitionResults = {}
        started: dict[str, list[TopicPartition]] = {}
        for tp, target in targets.items():
            current = ctx.assignments.get(tp)
            if current is None or tp.topic in ctx.deleting:
                results[tp] = (
                    ErrorCode.unknown_topic_or_partition,
                    f"The partition {tp} does not exist.",
                )
                continue
            wanted = list(target) if target is not None else None
            if wanted is not None:
                problem = validate_target_replicas(current, wanted, ctx.live_ids())
                if problem is not None:
                    results[tp] = (ErrorCode.invalid_replica_assignment, problem)
                    continue
            new = build_reassignment(current, wanted)
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
            if not await self.driver.write_assignment(topic):
                await self.driver.load_topic(topic)
                for tp in tps:
                    results[tp] = (ErrorCode.not_controller, "topic changed concurrently")
                continue
            for tp in tps:
                await self._start(tp)
        return results

    def ongoing(self, partitions: Iterable[TopicPartition] | None) -> OngoingReassignments:
        """ListPartitionReassignments: (replicas, adding, removing) of the partitions being
        reassigned among ``partitions`` (None: all)."""
        ctx = self.ctx
        wanted = sorted(ctx.assignments) if partitions is None else partitions
        out: OngoingReassignments = {}
        for tp in wanted:
            a = ctx.assignments.get(tp)
            if a is not None and a.is_being_reassigned:
                out[tp] = (list(a.replicas), list(a.adding), list(a.removing))
        return out

    async def resume(self) -> None:
        """Complete the reassignments whose target is already in sync (controller fail-over)."""
        for tp, assignment in sorted(self.ctx.assignments.items()):
            if assignment.is_being_reassigned:
                await self.maybe_complete(tp)

    async def on_isr_changes(self, partitions: Iterable[TopicPartition]) -> None:
        """ISRs changed: complete the reassignments whose target is now in sync."""
        for tp in sorted(partitions):
            a = self.ctx.assignments.get(tp)
            if a is not None and a.is_being_reassigned:
                await self.maybe_complete(tp)

    async def _start(self, tp: TopicPartition) -> None:
        ctx = self.ctx
        driver = self.driver
        for r in ctx.assignments[tp].adding:
            key = (tp, r)
            if ctx.replica_states.state(key) is ReplicaState.NonExistentReplica:
                driver.replicas_to([key], ReplicaState.NewReplica)
            if r in ctx.live_brokers:
                driver.replicas_to([key], ReplicaState.OnlineReplica)

        def bump(st: znodes.PartitionState) -> znodes.PartitionState:
            return driver.new_state(st.leader, st.leader_epoch + 1, st.isr)

        if await driver.update(tp, bump):
            # the adding replicas are new (as Kafka's NewReplica: a broker may create their
            # log even while one of its log dirs is offline); the others are not
            adding = ctx.assignments[tp].adding
            self.requests.leader_and_isr([tp], exclude=adding)
            self.requests.leader_and_isr([tp], only=adding, new=[tp])
            self.requests.update_metadata([tp])
        await self.maybe_complete(tp)

    async def maybe_complete(self, tp: TopicPartition) -> None:
        """Once every target replica is in the ISR: move the leader into the target if
        needed, drop the removed replicas, and make the target the assignment."""
        ctx = self.ctx
        driver = self.driver
        a = ctx.assignments.get(tp)
        st = ctx.states.get(tp)
        if a is None or st is None:
            return
        target = a.target_replicas
        if a.is_being_reassigned and not all(r in st.isr for r in target):
            return
        removed = [r for r in a.replicas if r not in target]
        live = ctx.online_ids(tp)

        def finish(st: znodes.PartitionState) -> znodes.PartitionState | None:
            isr = [r for r in st.isr if r in target]
            if st.leader in target and st.leader in live:
                return driver.new_state(st.leader, st.leader_epoch + 1, isr)
            res = election.reassign_partition_leader(target, st.isr, live)
            if res.leader is None:
                return None
            return driver.new_state(res.leader, st.leader_epoch + 1, isr)

        ctx.assignments[tp] = ReplicaAssignment(target)
        if not await driver.update(tp, finish):
            ctx.assignments[tp] = a
            log.info("%s: reassignment waits for an eligible leader in %s", tp, list(target))
            return
        if not await driver.write_assignment(tp.topic):
            await driver.load_topic(tp.topic)
        driver.delete_replicas([(tp, r) for r in removed])
        for r in removed:
            self.requests.stop_replica(r, [tp], delete=True)
        self.requests.leader_and_isr([tp])
        self.requests.update_metadata([tp])
        log.info("%s: reassignment to %s completed", tp, list(target))
