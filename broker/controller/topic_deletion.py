"""Topic deletion (Kafka's ``TopicDeletionManager``, simplified: deletion completes at once).

Theory of operation: a topic is marked for deletion by a znode ``/admin/delete_topics/<t>``,
written by the controller for DeleteTopics or by a tool (the controller then sees it through
its watch). Deleting a topic stops and deletes every replica on the live brokers
(StopReplica with ``delete_partition``), removes the topic's znodes (assignment with the
partition states, config, deletion mark), forgets the topic in the controller context and
the state machines, and tells every broker with an UpdateMetadata whose partitions carry
leader -2 (``LeaderDuringDelete``). Replicas on brokers that are down are deleted as stray
logs when those brokers start again, so deletion never waits for them. A topic stays marked
until this is done: a new controller resumes the deletions it finds marked
(:meth:`TopicDeletionManager.resume`), and a topic cannot be re-created while marked.

Concurrency: the controller's event task only.
"""

from __future__ import annotations

import logging

from broker.controller.context import ControllerContext
from broker.controller.requests import ControllerRequestSender
from broker.controller.state_driver import StateDriver
from broker.metadata.topic_configs import TopicConfigManager
from broker.protocol.errors import ErrorCode, KafkaError
from broker.types import TopicPartition
from broker.zk.interface import ZkOperations

log = logging.getLogger(__name__)


class TopicDeletionManager:
    """Deletes the topics marked for deletion, on behalf of the active controller."""

    def __init__(
        self,
        ctx: ControllerContext,
        zk: ZkOperations,
        driver: StateDriver,
        requests: ControllerRequestSender,
        topic_configs: TopicConfigManager,
    ) -> None:
        self.ctx = ctx
        self.zk = zk
        self.driver = driver
        self.requests = requests
        self.topic_configs = topic_configs

    async def delete(self, name: str) -> None:
        """DeleteTopics: mark the topic and delete it now."""
        if name not in self.ctx.topic_ids or name in self.ctx.deleting:
            raise KafkaError(f"topic {name!r} does not exist", ErrorCode.unknown_topic_or_partition)
        await self.zk.mark_topic_for_deletion(name)
        self.ctx.deleting.add(name)
        await self._delete_now(name)

    async def on_deletion_requests(self) -> None:
        """The ``/admin/delete_topics`` watch fired: delete every marked topic (a mark for a
        topic that no longer exists is just removed)."""
        for name in await self.zk.get_topics_marked_for_deletion():
            if name in self.ctx.topic_ids:
                self.ctx.deleting.add(name)
                await self._delete_now(name)
            else:
                await self.zk.delete_topic_znodes(name)

    async def resume(self) -> None:
        """Finish the deletions of the topics marked (controller fail-over, broker start-up)."""
        for name in sorted(self.ctx.deleting):
            await self._delete_now(name)

    async def _delete_now(self, name: str) -> None:
        ctx = self.ctx
        parts = ctx.partitions_of(name)
        per_broker: dict[int, list[TopicPartition]] = {}
        for tp in parts:
            for r in ctx.assignments[tp].replicas:
                per_broker.setdefault(r, []).append(tp)
        for broker_id, tps in per_broker.items():
            self.requests.stop_replica(broker_id, tps, delete=True)
        await self.zk.delete_topic_znodes(name)
        self.driver.remove_partitions(parts)
        for tp in parts:
            ctx.assignments.pop(tp, None)
            ctx.states.pop(tp, None)
            ctx.state_versions.pop(tp, None)
        ctx.topic_ids.pop(name, None)
        ctx.topic_versions.pop(name, None)
        ctx.deleting.discard(name)
        self.topic_configs.topic_deleted(name)
        self.requests.update_metadata([], deleted=parts)
        log.info("controller: deleted topic %s", name)
