"""The controller's handling of log directory failures (KIP-112, ZooKeeper mode; Kafka 3.9's
``processLogDirEventNotification``, ``processLeaderAndIsrResponseReceived`` and
``onReplicasBecomeOffline``).

Theory of operation. A broker whose log directory fails takes that directory's partitions
offline itself and writes ``/log_dir_event_notification/log_dir_event_<seq>``
(``{"version":1,"broker":<id>,"event":1}``). The controller's watch turns it into an event:
the notifications are deleted and each named live broker gets LeaderAndIsr for every
partition it has a replica of (offline ones included). The broker answers
KAFKA_STORAGE_ERROR for the replicas in its offline directories; in fact every LeaderAndIsr
response is read (after a broker start or a controller fail-over too), so a replica answered
KAFKA_STORAGE_ERROR joins ``ControllerContext.replicas_on_offline_dirs`` and one answered
NONE leaves it. Newly offline replicas are handled as the replicas of a dead broker: the
partitions they led go ``OfflinePartition`` and elect a leader among the *online* in-sync
replicas (unclean election only where the topic allows it; leader -1 otherwise), they move
to ``OfflineReplica`` and leave every ISR, the broker gets StopReplica (without deletion)
for them, the other replicas get LeaderAndIsr, and every broker gets UpdateMetadata listing
them as offline replicas. The set of a broker is forgotten when it stops or restarts (a
restarted broker answers again, from whatever its directories hold then).

Concurrency: the controller's event task only; ``response_event`` runs on the event loop in
the channel's callback and only reads the context.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.controller.context import ControllerContext
from broker.controller.events import LeaderAndIsrResponseReceived
from broker.controller.requests import ControllerRequestSender
from broker.controller.state_driver import StateDriver
from broker.controller.state_machines import ReplicaState
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition
from broker.zk.interface import ZkOperations

log = logging.getLogger(__name__)


class LogDirFailures:
    """Offline log directories of live brokers, as the active controller learns them."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkOperations,
        driver: StateDriver,
        requests: ControllerRequestSender,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.driver = driver
        self.requests = requests

    async def on_notifications(self) -> None:
        """Ask each broker that reported a failed log directory about every replica it has;
        delete the notifications."""
        notifications = await self.zk.get_log_dir_event_notifications()
        if not notifications:
            return
        ctx = self.ctx
        try:
            brokers = sorted({b for b in notifications.values() if b >= 0})
            log.info("controller: handling log directory failure for brokers %s", brokers)
            for broker_id in brokers:
                if broker_id not in ctx.live_brokers:
                    continue
                hosted = sorted(tp for tp, a in ctx.assignments.items() if broker_id in a.replicas)
                self.requests.leader_and_isr(hosted, only=[broker_id], include_offline_dirs=True)
        finally:
            await self.zk.delete_log_dir_event_notifications(notifications)

    async def drop_pending_notifications(self) -> None:
        """On becoming controller (as Kafka): pending notifications are dropped; the
        LeaderAndIsr sent to every broker at fail-over finds the offline replicas again."""
        pending = await self.zk.get_log_dir_event_notifications()
        if pending:
            await self.zk.delete_log_dir_event_notifications(pending)

    def response_event(self, broker_id: int, response: Any) -> LeaderAndIsrResponseReceived | None:
        """The event for one LeaderAndIsr response, or None when it cannot change what is
        known (no storage error, and no replica of the broker known offline)."""
        if response is None:
            return None
        ctx = self.ctx
        top = ErrorCode(int(response.error_code))
        errors = self._partition_errors(response)
        storage_errors = any(e == ErrorCode.kafka_storage_error for e in errors.values())
        if (
            top == ErrorCode.none
            and not storage_errors
            and broker_id not in ctx.replicas_on_offline_dirs
        ):
            return None
        return LeaderAndIsrResponseReceived(broker_id, top, errors)

    def _partition_errors(self, response: Any) -> dict[TopicPartition, ErrorCode]:
        """Per partition, the error a LeaderAndIsr response gives: by topic id from v5, by
        topic name before (``inter.broker.protocol.version`` below 2.8)."""
        errors: dict[TopicPartition, ErrorCode] = {}
        if not hasattr(response, "topics"):  # v0-v4
            for p in response.partition_errors:
                tp = TopicPartition(str(p.topic_name), int(p.partition_index))
                errors[tp] = ErrorCode(int(p.error_code))
            return errors
        names = {topic_id: name for name, topic_id in self.ctx.topic_ids.items()}
        for topic in response.topics:
            name = names.get(topic.topic_id)
            if name is None:
                continue
            for p in topic.partition_errors:
                errors[TopicPartition(name, int(p.partition_index))] = ErrorCode(int(p.error_code))
        return errors

    async def on_leader_and_isr_response(self, event: LeaderAndIsrResponseReceived) -> None:
        """Replicas answered KAFKA_STORAGE_ERROR are in offline log directories, those
        answered NONE are not; the newly offline ones go offline."""
        broker_id = event.broker_id
        if event.error != ErrorCode.none:
            log.error(
                "controller: error %s in a LeaderAndIsr response from broker %d",
                event.error.name,
                broker_id,
            )
            return
        ctx = self.ctx
        if broker_id not in ctx.live_brokers:
            return
        offline = {
            tp
            for tp, code in event.errors.items()
            if code == ErrorCode.kafka_storage_error and tp in ctx.assignments
        }
        online = {tp for tp, code in event.errors.items() if code == ErrorCode.none}
        previous = ctx.replicas_on_offline_dirs.get(broker_id, set())
        current = (previous - online) | offline
        if current:
            ctx.replicas_on_offline_dirs[broker_id] = current
        else:
            ctx.replicas_on_offline_dirs.pop(broker_id, None)
        newly = current - previous
        if newly:
            log.info(
                "controller: marking replicas %s on broker %d offline (offline log directory)",
                ", ".join(str(tp) for tp in sorted(newly)),
                broker_id,
            )
            await self.on_replicas_offline(broker_id, newly)

    async def on_replicas_offline(self, broker_id: int, partitions: set[TopicPartition]) -> None:
        """New leaders for the partitions the replicas led, the replicas out of every ISR,
        StopReplica to their broker, and the changes to everyone."""
        ctx = self.ctx
        driver = self.driver
        tps = sorted(
            tp for tp in partitions if tp in ctx.assignments and tp.topic not in ctx.deleting
        )
        driver.mark_offline(
            tp for tp in tps if tp in ctx.states and ctx.states[tp].leader == broker_id
        )
        initialized, elected = await driver.trigger_online()
        driver.replicas_to(
            [
                (tp, broker_id)
                for tp in tps
                if ctx.replica_states.state((tp, broker_id)) is not ReplicaState.NonExistentReplica
            ],
            ReplicaState.OfflineReplica,
        )
        just_elected = set(elected)
        shrunk = await driver.remove_from_isr(
            tp
            for tp in tps
            if tp not in just_elected and tp in ctx.states and broker_id in ctx.states[tp].isr
        )
        changed = sorted({*elected, *shrunk})
        self.requests.stop_replica(broker_id, tps, delete=False)
        self.requests.leader_and_isr(changed + initialized, new=initialized)
        self.requests.update_metadata(sorted({*changed, *initialized, *tps}))
