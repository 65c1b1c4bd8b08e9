"""The controller: topic lifecycle and partition leadership, stored in ZooKeeper.

Scope today (single broker). The broker that wins the ephemeral ``/controller`` znode
(incrementing ``/controller_epoch``) is the controller. It applies admin requests by
writing the znodes of ZooKeeper-mode Kafka (``/brokers/topics/<t>`` with the replica
assignment and topic id, ``/brokers/topics/<t>/partitions/<p>/state`` with leader, leader
epoch, ISR and controller epoch, ``/config/topics/<t>`` with overrides,
``/admin/delete_topics/<t>`` while a deletion is in progress) and brings the partitions it
leads online through the replica manager. At start-up it reloads every topic from ZooKeeper
and re-elects itself leader of its partitions with a bumped leader epoch (written with a
conditional update), as a restarted Kafka controller does for partitions whose leader went
offline. Propagating leadership to other brokers (LeaderAndIsr, UpdateMetadata), the event
queue and the state machines arrive with the cluster issue; until then an admin request
sent to a broker that is not the controller gets NOT_CONTROLLER.

Concurrency: event loop thread; ZooKeeper calls are awaited through the kazoo bridge, and a
lock serialises topic changes so two admin requests never interleave their znode writes.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from broker.config import BrokerConfig, ConfigError, LogConfig
from broker.controller import znodes
from broker.controller.topic_admin import (
    InvalidPartitionsError,
    TopicExistsError,
    assign_replicas,
    validate_assignment,
    validate_configs,
    validate_topic_name,
)
from broker.controller.zk_client import TopicExistsError as ZkTopicExistsError
from broker.controller.zk_client import ZkClient
from broker.metadata.cache import BrokerInfo, MetadataCache, PartitionInfo, TopicInfo
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.replica_manager import ReplicaManager
from broker.types import BrokerId, TopicPartition

log = logging.getLogger(__name__)


class NotControllerError(KafkaError):
    code = ErrorCode.not_controller


class Controller:
    """Topic administration and partition leadership through ZooKeeper."""

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
        self._overrides: dict[str, dict[str, str]] = {}
        self._lock = asyncio.Lock()

    @property
    def is_active(self) -> bool:
        return self.epoch is not None

    async def startup(self) -> None:
        self.zk.on_session_lost(self._on_session_lost)
        self.zk.on_reconnected(self._on_reconnected)
        await self._elect()
        async with self._lock:
            for name in sorted(await self.zk.get_all_topics()):
                await self._load_topic(name)

    def _on_session_lost(self) -> None:
        """A lost ZooKeeper session means another broker may be controller now: stop acting
        on stale leadership until a new session re-runs the election."""
        if self.epoch is not None:
            log.warning("ZooKeeper session lost: resigning as controller (epoch %d)", self.epoch)
        self.epoch = None

    async def _on_reconnected(self) -> None:
        await self._elect()

    async def _elect(self) -> None:
        self.epoch = await self.zk.try_elect_controller(self.broker_id)
        self.metadata.controller_id = (
            self.broker_id if self.epoch is not None else (await self.zk.get_controller() or -1)
        )
        await self.refresh_brokers()

    async def refresh_brokers(self) -> None:
        brokers = []
        for broker_id in await self.zk.get_broker_ids():
            node = await self.zk.get_broker(broker_id)
            if node is not None:
                brokers.append(
                    BrokerInfo(BrokerId(broker_id), node.host or "", node.port, node.rack)
                )
        self.metadata.set_brokers(brokers)

    def live_broker_ids(self) -> list[int]:
        return [b.id for b in self.metadata.brokers()]

    # --- configuration --------------------------------------------------------------------

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

    async def set_topic_overrides(
        self, name: str, overrides: dict[str, str], *, validate_only: bool = False
    ) -> None:
        self._require_active()
        clean = validate_configs(dict(overrides))
        if validate_only:
            return
        async with self._lock:
            await self.zk.set_topic_config(name, clean)
            self._overrides[name] = clean
            self.replica_manager.update_log_config(name, self.log_config_for(name))

    # --- topics ---------------------------------------------------------------------------

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
        live = self.live_broker_ids()
        if assignment:
            validate_assignment(assignment, live)
        else:
            if num_partitions <= 0:
                raise InvalidPartitionsError("number of partitions must be larger than 0")
            assignment = assign_replicas(live, num_partitions, replication_factor)
        async with self._lock:
            if self.metadata.topic(name) is not None:
                raise TopicExistsError(f"topic {name!r} already exists")
            topic_id = uuid.uuid4()
            info = TopicInfo(
                name,
                topic_id,
                {
                    p: PartitionInfo(p, replicas[0], 0, tuple(replicas), tuple(replicas))
                    for p, replicas in assignment.items()
                },
            )
            if validate_only:
                return info
            try:
                await self.zk.create_topic(name, assignment, clean, topic_id)
            except ZkTopicExistsError as exc:
                raise TopicExistsError(f"topic {name!r} already exists") from exc
            self._overrides[name] = clean
            await self._elect_leaders(name, topic_id, assignment, {})
            return self.metadata.topic(name) or info

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        *,
        validate_only: bool = False,
    ) -> None:
        self._require_active()
        async with self._lock:
            info = self.metadata.topic(name)
            if info is None:
                raise KafkaError(
                    f"topic {name!r} does not exist", ErrorCode.unknown_topic_or_partition
                )
            current = len(info.partitions)
            if count <= current:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {current} partitions; the new count must be larger"
                )
            rf = len(info.partitions[0].replicas)
            live = self.live_broker_ids()
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
                new = assign_replicas(live, count - current, rf, start_partition=current)
            if validate_only:
                return
            full = {p: list(pi.replicas) for p, pi in info.partitions.items()} | new
            current_znode = await self.zk.get_topic_with_version(name)
            if (
                current_znode is None
                or await self.zk.set_topic_assignment(name, full, current_znode.zk_version) is None
            ):
                raise KafkaError(f"topic {name!r} changed concurrently", ErrorCode.not_controller)
            await self._elect_leaders(name, info.topic_id, new, dict(info.partitions))

    async def delete_topic(self, name: str) -> None:
        self._require_active()
        if not self.config["delete.topic.enable"]:
            raise KafkaError(
                "topic deletion is disabled (delete.topic.enable=false)",
                ErrorCode.topic_deletion_disabled,
            )
        async with self._lock:
            info = self.metadata.topic(name)
            if info is None:
                raise KafkaError(
                    f"topic {name!r} does not exist", ErrorCode.unknown_topic_or_partition
                )
            await self.zk.mark_topic_for_deletion(name)
            for p in info.partitions:
                self.replica_manager.stop_replica(TopicPartition(name, p), delete=True)
            await self.zk.delete_topic_znodes(name)
            self.metadata.remove_topic(name)
            self._overrides.pop(name, None)

    # --- leadership -----------------------------------------------------------------------

    async def _load_topic(self, name: str) -> None:
        topic = await self.zk.get_topic(name)
        if topic is None:
            return
        if name in await self.zk.get_topics_marked_for_deletion():
            # a deletion that was interrupted: finish it
            for p in topic.partitions:
                self.replica_manager.stop_replica(TopicPartition(name, p), delete=True)
            await self.zk.delete_topic_znodes(name)
            return
        self._overrides[name] = dict(await self.zk.get_topic_config(name))
        topic_id = topic.topic_id if topic.topic_id is not None else uuid.uuid4()
        existing: dict[int, PartitionInfo] = {}
        await self._elect_leaders(name, topic_id, topic.assignment, existing, reload=True)

    async def _elect_leaders(
        self,
        name: str,
        topic_id: uuid.UUID,
        assignment: dict[int, list[int]],
        existing: dict[int, PartitionInfo],
        *,
        reload: bool = False,
    ) -> None:
        """Write each partition's state (leader = first live replica) and bring the ones this
        broker leads online."""
        live = set(self.live_broker_ids()) | {self.broker_id}
        partitions = dict(existing)
        log_config = self.log_config_for(name)
        for p, replicas in sorted(assignment.items()):
            replicas_t = tuple(replicas)
            current = await self.zk.get_partition_state(name, p) if reload else None
            if current is None:
                alive = [r for r in replicas_t if r in live]
                leader = alive[0] if alive else -1
                state = znodes.PartitionState(
                    leader=leader,
                    leader_epoch=0,
                    isr=alive or list(replicas_t[:1]),
                    controller_epoch=self.epoch or 0,
                )
                await self.zk.create_partition_state(name, p, state)
            else:
                old, version = current
                isr = [r for r in old.isr if r in live]
                if not isr and log_config.unclean_leader_election_enable:
                    isr = [r for r in replicas_t if r in live][:1]
                leader = isr[0] if isr else -1
                if self.broker_id in isr:
                    leader = self.broker_id if old.leader not in isr else old.leader
                state = znodes.PartitionState(
                    leader=leader,
                    leader_epoch=old.leader_epoch + 1,
                    isr=isr or old.isr,
                    controller_epoch=self.epoch or 0,
                )
                if await self.zk.update_partition_state(name, p, state, version) is None:
                    raise KafkaError(
                        f"partition state of {name}-{p} changed concurrently",
                        ErrorCode.not_controller,
                    )
            partitions[p] = PartitionInfo(
                p, state.leader, state.leader_epoch, replicas_t, tuple(state.isr)
            )
            if state.leader == self.broker_id:
                self.replica_manager.become_leader(
                    TopicPartition(name, p),
                    leader_epoch=state.leader_epoch,
                    replicas=replicas_t,
                    isr=tuple(state.isr),
                    log_config=log_config,
                )
        self.metadata.put_topic(TopicInfo(name, topic_id, partitions, name.startswith("__")))

    def _require_active(self) -> None:
        if self.epoch is None:
            raise NotControllerError(f"broker {self.broker_id} is not the controller")
