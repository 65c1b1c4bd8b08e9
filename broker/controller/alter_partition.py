"""The controller's side of AlterPartition (api key 56): leaders ask the controller to change
a partition's ISR (KIP-497, KIP-704 leader recovery, KIP-841 ineligible replicas, KIP-903).

Theory of operation (Kafka 3.9's ``KafkaController.processAlterPartition``, ZooKeeper mode)
-----------------------------------------------------------------------------------------
A Kafka 3.9 broker whose ``inter.broker.protocol.version`` is 2.7 or newer does not write its
ISR changes into ZooKeeper itself: its ``AlterPartitionManager`` sends them to the active
controller, which is then the only writer of the partition-state znodes. (A Millrace broker
writes them itself, as a Kafka broker below IBP 2.7 does, and notifies the controller through
``/isr_change_notification``; Kafka's controller and this one accept both, see
``docs/operations.md``.) The request runs as one event on the controller's queue:

1. not the active controller: NOT_CONTROLLER; the sender unknown to the controller, or with
   another broker epoch than its registration's: STALE_BROKER_EPOCH (top-level errors);
2. per partition, against the controller's cached state (its ``partition epoch`` is the
   state znode's version): a newer leader or partition epoch than the cache's means this
   controller is behind: NOT_CONTROLLER (the leader retries); an older leader epoch:
   FENCED_LEADER_EPOCH; the very state the cache holds (leader, leader epoch, ISR in order,
   recovery state; partition epoch not newer): answered with the cached state, nothing
   written (idempotent retries); an older partition epoch: INVALID_UPDATE_VERSION; a
   sender that does not lead the partition at that leader epoch: INVALID_REQUEST (Kafka
   does not check this: a leader epoch has one leader, so only a confused broker fails); a
   recovering leader (KIP-704) with more than itself in the ISR, or RECOVERED going back to
   RECOVERING: INVALID_REQUEST; an ISR naming a broker that is not live or is shutting down:
   INELIGIBLE_REPLICA (v2+; OPERATION_NOT_ATTEMPTED before, KIP-841); an unknown partition:
   UNKNOWN_TOPIC_OR_PARTITION, an unknown topic id (v2+): UNKNOWN_TOPIC_ID;
3. the accepted states are written conditionally on the request's partition epoch and
   fenced by the controller epoch's znode version (a write the version rejects:
   INVALID_UPDATE_VERSION; a newer controller: the event manager resigns and the sender
   gets NOT_CONTROLLER); the new states are cached and answered with their new partition
   epoch;
4. every live broker gets UpdateMetadata for the partitions of the request, and a
   reassignment waiting for an ISR that now holds its target completes.

Concurrency: the controller's event task only (:meth:`AlterPartitions.process` is called
from ``Controller._process``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from broker.controller.context import ControllerContext
from broker.controller.events import ControllerRequest
from broker.controller.reassignment_manager import ReassignmentManager
from broker.controller.requests import ControllerRequestSender
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.interface import ZkOperations

log = logging.getLogger(__name__)

__all__ = [
    "AlterPartition",
    "AlterPartitionResult",
    "AlterPartitions",
    "IsrProposal",
    "PartitionOutcome",
    "TopicOutcome",
    "TopicProposals",
]

RECOVERED = znodes.LEADER_RECOVERY_RECOVERED
RECOVERING = znodes.LEADER_RECOVERY_RECOVERING


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """One partition of an AlterPartition request."""

    partition: int
    leader_epoch: int
    isr: tuple[int, ...]
    leader_recovery_state: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class TopicProposals:
    """One topic of the request: by name (v0-v1) or by id (v2+)."""

    name: str | None
    topic_id: uuid.UUID | None
    partitions: Sequence[IsrProposal]


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """A partition's answer: an error, or the state now in force."""

    partition: int
    error: ErrorCode = ErrorCode.none
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TopicOutcome:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[PartitionOutcome] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """A top-level error (then no topics), or one outcome per partition asked about."""

    error: ErrorCode = ErrorCode.none
    topics: list[TopicOutcome] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AlterPartition(ControllerRequest[AlterPartitionResult]):
    """An AlterPartition request of broker ``broker_id`` at request version ``version``."""

    broker_id: int
    broker_epoch: int
    version: int
    topics: Sequence[TopicProposals]


@dataclass(frozen=True, slots=True)
class _Target:
    tp: TopicPartition
    proposal: IsrProposal


class AlterPartitions:
    """Processes AlterPartition requests on the active controller (see the module doc)."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkOperations,
        requests: ControllerRequestSender,
        reassignments: ReassignmentManager,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.requests = requests
        self.reassignments = reassignments

    async def process(self, request: AlterPartition, *, active: bool) -> AlterPartitionResult:
        refusal = self._refuse_sender(request, active=active)
        if refusal is not None:
            return AlterPartitionResult(refusal)
        outcomes, unknown_topics, targets = self._triage(request)
        written: list[TopicPartition] = []
        for target in targets:
            outcome = await self._write(request.broker_id, target)
            outcomes[target.tp] = outcome
            if outcome.error == ErrorCode.none:
                written.append(target.tp)
        asked = sorted({*outcomes, *(t.tp for t in targets)})
        if asked:
            self.requests.update_metadata(asked)
        await self.reassignments.on_isr_changes(written)
        return AlterPartitionResult(ErrorCode.none, [*self._by_topic(outcomes), *unknown_topics])

    def _triage(
        self, request: AlterPartition
    ) -> tuple[dict[TopicPartition, PartitionOutcome], list[TopicOutcome], list[_Target]]:
        """The request's proposals sorted: (the answers of the partitions refused or already
        in the proposed state, the topics not known, the proposals to write)."""
        outcomes: dict[TopicPartition, PartitionOutcome] = {}
        unknown_topics: list[TopicOutcome] = []
        targets: list[_Target] = []
        names_by_id = {v: k for k, v in self.ctx.topic_ids.items()}
        for topic in request.topics:
            name = self._topic_name(request, topic, names_by_id)
            if name is None:
                unknown_topics.append(self._unknown_topic(request, topic))
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition)
                refusal = self._check(request, tp, p)
                if isinstance(refusal, PartitionOutcome):
                    outcomes[tp] = refusal
                elif refusal is not None:
                    outcomes[tp] = PartitionOutcome(p.partition, refusal)
                else:
                    targets.append(_Target(tp, p))
        return outcomes, unknown_topics, targets

    def _refuse_sender(self, request: AlterPartition, *, active: bool) -> ErrorCode | None:
        """Why the whole request is refused (this controller is not active, the sender is not
        a live broker at the epoch it claims), or None."""
        if not active:
            return ErrorCode.not_controller
        known_epoch = self.ctx.broker_epochs.get(request.broker_id)
        if request.broker_id not in self.ctx.live_brokers or known_epoch is None:
            log.info("ignoring AlterPartition from unknown broker %d", request.broker_id)
            return ErrorCode.stale_broker_epoch
        if known_epoch != request.broker_epoch:
            log.info(
                "ignoring AlterPartition from broker %d: broker epoch %d, registered %d",
                request.broker_id,
                request.broker_epoch,
                known_epoch,
            )
            return ErrorCode.stale_broker_epoch
        return None

    @staticmethod
    def _topic_name(
        request: AlterPartition, topic: TopicProposals, names_by_id: dict[uuid.UUID, str]
    ) -> str | None:
        """The topic's name: as sent (version < 2), else found by its id (None: unknown)."""
        if request.version < 2:
            return topic.name
        return None if topic.topic_id is None else names_by_id.get(topic.topic_id)

    @staticmethod
    def _unknown_topic(request: AlterPartition, topic: TopicProposals) -> TopicOutcome:
        error = (
            ErrorCode.unknown_topic_id
            if request.version >= 2
            else ErrorCode.unknown_topic_or_partition
        )
        return TopicOutcome(
            topic.name,
            topic.topic_id,
            [PartitionOutcome(p.partition, error) for p in topic.partitions],
        )

    def _check(
        self, request: AlterPartition, tp: TopicPartition, p: IsrProposal
    ) -> ErrorCode | PartitionOutcome | None:
        """Why this proposal is not written (an error, or the unchanged state), or None."""
        ctx = self.ctx
        current = ctx.states.get(tp)
        if current is None or tp not in ctx.assignments:
            return ErrorCode.unknown_topic_or_partition
        current_epoch = ctx.state_versions.get(tp, 0)
        stale = self._check_epochs(request, tp, p, current, current_epoch)
        if stale is not None:
            return stale
        if (
            tuple(p.isr) == tuple(current.isr)
            and p.leader_recovery_state == current.leader_recovery_state
        ):  # already the state in force (a retry): answer it, write nothing
            return self._outcome(tp, current, current_epoch)
        return self._check_change(request, tp, p, current, current_epoch)

    @staticmethod
    def _check_epochs(
        request: AlterPartition,
        tp: TopicPartition,
        p: IsrProposal,
        current: znodes.PartitionState,
        current_epoch: int,
    ) -> ErrorCode | None:
        """Whether the proposal is from the partition's leader at its current leader epoch
        (and this controller not behind it): the error if not, else None."""
        if p.partition_epoch > current_epoch or p.leader_epoch > current.leader_epoch:
            return ErrorCode.not_controller  # this controller is behind: the leader retries
        if p.leader_epoch < current.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        if request.broker_id != current.leader:
            log.info(
                "rejecting AlterPartition for %s from broker %d: the leader is %d",
                tp,
                request.broker_id,
                current.leader,
            )
            return ErrorCode.invalid_request
        return None

    def _check_change(
        self,
        request: AlterPartition,
        tp: TopicPartition,
        p: IsrProposal,
        current: znodes.PartitionState,
        current_epoch: int,
    ) -> ErrorCode | None:
        """Whether the change is allowed (from the current partition epoch, a valid recovery
        state, only live replicas in the ISR): the error if not, else None."""
        if p.partition_epoch < current_epoch:
            return ErrorCode.invalid_update_version
        if p.leader_recovery_state == RECOVERING and len(p.isr) > 1:
            log.info("rejecting AlterPartition for %s: recovering with ISR %s", tp, p.isr)
            return ErrorCode.invalid_request
        if current.leader_recovery_state == RECOVERED and p.leader_recovery_state == RECOVERING:
            log.info("rejecting AlterPartition for %s: RECOVERED cannot become RECOVERING", tp)
            return ErrorCode.invalid_request
        ineligible = set(p.isr) - self.ctx.live_ids()
        if ineligible:
            log.info(
                "rejecting AlterPartition from broker %d for %s: ineligible replicas %s in %s",
                request.broker_id,
                tp,
                sorted(ineligible),
                list(p.isr),
            )
            if request.version > 1:
                return ErrorCode.ineligible_replica
            return ErrorCode.operation_not_attempted
        return None

    async def _write(self, leader: int, target: _Target) -> PartitionOutcome:
        ctx = self.ctx
        tp, p = target.tp, target.proposal
        new = znodes.PartitionState(
            leader=leader,
            leader_epoch=p.leader_epoch,
            isr=tuple(p.isr),
            controller_epoch=ctx.epoch,
            leader_recovery_state=p.leader_recovery_state,
        )
        version = await self.zk.update_partition_state(
            tp.topic,
            tp.partition,
            new,
            p.partition_epoch,
            controller_epoch_zk_version=ctx.epoch_zk_version,
        )
        if version is None:
            log.info("AlterPartition for %s: ISR %s not written (stale version)", tp, list(p.isr))
            current = await self.zk.get_partition_state(tp.topic, tp.partition)
            if current is not None:  # what the leader will learn from the next LeaderAndIsr
                ctx.states[tp] = current.value
                ctx.state_versions[tp] = current.zk_version
            return PartitionOutcome(tp.partition, ErrorCode.invalid_update_version)
        log.info("%s: ISR %s (AlterPartition from broker %d)", tp, list(p.isr), leader)
        ctx.states[tp] = new
        ctx.state_versions[tp] = version
        return self._outcome(tp, new, version)

    @staticmethod
    def _outcome(
        tp: TopicPartition, state: znodes.PartitionState, version: int
    ) -> PartitionOutcome:
        return PartitionOutcome(
            tp.partition,
            ErrorCode.none,
            state.leader,
            state.leader_epoch,
            tuple(state.isr),
            state.leader_recovery_state,
            version,
        )

    def _by_topic(self, outcomes: dict[TopicPartition, PartitionOutcome]) -> list[TopicOutcome]:
        topics: dict[str, TopicOutcome] = {}
        for tp, outcome in sorted(outcomes.items()):
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = TopicOutcome(tp.topic, self.ctx.topic_ids.get(tp.topic))
            topic.partitions.append(outcome)
        return list(topics.values())
