"""Leader changes on request: ElectLeaders (preferred and unclean elections), the automatic
leader rebalance, and controlled shutdown (Kafka 3.9's ``KafkaController`` ``onReplicaElection``,
``checkAndTriggerAutoLeaderRebalance`` and ``doControlledShutdown``).

Theory of operation: each change computes the new leader with a pure rule of ``election.py``
(preferred replica; offline partition with unclean election allowed; controlled shutdown: the
first live in-sync replica not on a broker shutting down) and writes it through the state
driver (conditional, fenced, checked against the partition state machine) with a bumped
leader epoch, then tells the brokers (LeaderAndIsr to the replicas, UpdateMetadata to all).
The rebalance elects the preferred leader of the partitions of every broker whose share of
preferred leaderships it does not hold exceeds ``leader.imbalance.per.broker.percentage``.
A controlled shutdown marks the broker as shutting down (it is no longer eligible as a
leader), moves away the leadership of its partitions that have another eligible replica,
removes it from the other ISRs and stops its follower replicas (StopReplica without
deletion), and answers the partitions it still leads.

Concurrency: the controller's event task only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from broker.config import BrokerConfig
from broker.controller import election
from broker.controller.context import ControllerContext
from broker.controller.events import PartitionResults
from broker.controller.reassignment import partitions_to_rebalance
from broker.controller.requests import ControllerRequestSender
from broker.controller.state_driver import StateDriver
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition
from broker.zk import znodes

log = logging.getLogger(__name__)


class LeaderChanges:
    """Leader elections on request, leader rebalance and controlled shutdown."""

    def __init__(
        self,
        ctx: ControllerContext,
        driver: StateDriver,
        requests: ControllerRequestSender,
        config: BrokerConfig,
    ) -> None:
        self.ctx = ctx
        self.driver = driver
        self.requests = requests
        self.config = config

    async def elect(
        self, election_type: int, partitions: Iterable[TopicPartition] | None
    ) -> PartitionResults:
        """ElectLeaders: ``election_type`` 0 preferred (the first replica, if in sync), 1
        unclean (any live replica of a partition without a live leader)."""
        ctx = self.ctx
        driver = self.driver
        wanted = sorted(ctx.assignments) if partitions is None else list(partitions)
        results: PartitionResults = {}
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
            live = ctx.online_ids(tp)
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
            if res.unclean:
                driver.unclean_elections += 1

            def elected(
                st: znodes.PartitionState, leader: int = leader, isr: tuple[int, ...] = isr
            ) -> znodes.PartitionState:
                return driver.new_state(leader, st.leader_epoch + 1, isr)

            if await driver.update(tp, elected):
                changed.append(tp)
                results[tp] = (ErrorCode.none, None)
            else:
                results[tp] = (ErrorCode.not_controller, f"could not update {tp}")
        self.requests.leader_and_isr(changed)
        self.requests.update_metadata(changed)
        return results

    async def rebalance(self) -> None:
        """The leader-imbalance check: preferred elections for the brokers leading too few
        of their preferred partitions (``leader.imbalance.per.broker.percentage``)."""
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
            await self.elect(0, todo)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Move leadership away from ``broker_id`` and stop its followers; returns the
        partitions it still leads (no other eligible replica)."""
        ctx = self.ctx
        driver = self.driver
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

        def leave_isr(st: znodes.PartitionState) -> znodes.PartitionState | None:
            if broker_id not in st.isr or st.leader == broker_id:
                return None
            isr = [r for r in st.isr if r != broker_id]
            return driver.new_state(st.leader, st.leader_epoch + 1, isr)

        for tp, a in sorted(ctx.assignments.items()):
            if broker_id not in a.replicas or len(a.replicas) <= 1 or tp.topic in ctx.deleting:
                continue
            st = ctx.states.get(tp)
            if st is None:
                continue
            if st.leader == broker_id:

                def move_leader(
                    st: znodes.PartitionState,
                    replicas: tuple[int, ...] = a.replicas,
                    tp: TopicPartition = tp,
                ) -> znodes.PartitionState | None:
                    res = election.controlled_shutdown_leader(
                        replicas, st.isr, ctx.online_ids(tp), ctx.shutting_down
                    )
                    if res.leader is None:
                        return None
                    return driver.new_state(res.leader, st.leader_epoch + 1, res.isr)

                if await driver.update(tp, move_leader):
                    moved.append(tp)
            elif broker_id in st.isr:
                if await driver.update(tp, leave_isr):
                    moved.append(tp)
                    stopped.append(tp)
            else:
                stopped.append(tp)
        self.requests.leader_and_isr(moved, exclude=[broker_id])
        self.requests.stop_replica(broker_id, sorted(set(moved) | set(stopped)), delete=False)
        self.requests.update_metadata(moved)
        return sorted(
            tp
            for tp, st in ctx.states.items()
            if st.leader == broker_id and len(ctx.assignments[tp].replicas) > 1
        )
