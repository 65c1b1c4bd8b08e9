"""Kafka's ZooKeeper operations on topics: assignments, partition states, topic configs and
their change notifications, topic deletion, ISR-change notifications and log-dir event
notifications.

Semantics follow Kafka 3.9's ``KafkaZkClient`` / ``AdminZkClient``: a topic is created with
its config znode in one multi-op; assignment and partition-state updates are conditional on
the znode version, and a controller's partition-state writes are also conditional on the
controller epoch's znode version, which fences a zombie controller (a retried write whose
first attempt succeeded is recognised, as in Kafka's ``ReplicationUtils``). Topic names
are checked with the broker's one validator (``topic_names.validate_topic_name``) and an
existing topic raises the broker's one ``topic_names.TopicExistsError``.

Concurrency: as :class:`~broker.zk.session.ZkSession`; conditional writes make
concurrent writers from several brokers safe.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.topic_names import TopicExistsError, validate_topic_name
from broker.types import TopicPartition
from broker.zk.interface import (
    ControllerMovedError,
    UnknownTopicError,
    Versioned,
    VersionedAt,
    WatchHandle,
    ZkError,
)
from broker.zk.session import ZkSession
from broker.zk.znodes import (
    BROKER_TOPICS_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_TOPICS_PATH,
    CONTROLLER_EPOCH_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    LOG_DIR_EVENT_NOTIFICATION_PATH,
    ConfigChangeNotificationZNode,
    DeleteTopicZNode,
    IsrChangeNotificationZNode,
    LogDirEventNotificationZNode,
    PartitionState,
    TopicConfigZNode,
    TopicZNode,
    ZNodeDecodeError,
    random_kafka_uuid,
)

log = logging.getLogger(__name__)


class ZkTopicOps(ZkSession):
    """The topic half of :class:`~broker.zk.client.ZkClient` (which adds brokers,
    controller election, cluster id and producer ids); not used on its own.

    Format: the znodes' JSON is defined in :mod:`broker.zk.znodes` (Kafka 3.9's).
    """

    # ------------------------------------------------------------------ topics

    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        """Create ``/config/topics/<t>`` and ``/brokers/topics/<t>`` in one multi-op (as Kafka's
        AdminZkClient, config first). Returns the topic id (generated if not given).

        Raises :class:`TopicExistsError` if the topic exists or is marked for deletion.
        The controller creates the partition state znodes when it sees the new topic.
        """
        validate_topic_name(name)
        tid = topic_id if topic_id is not None else random_kafka_uuid()
        topic_node = TopicZNode.create(name, assignment, tid)
        config_node = TopicConfigZNode(name, dict(configs or {}))
        await self._run(self._create_topic_sync, topic_node, config_node)
        log.info(
            "created topic %s (id %s) with %d partitions",
            name,
            topic_node.topic_id_str,
            len(topic_node.partitions),
        )
        return tid

    def _create_topic_sync(self, topic: TopicZNode, config: TopicConfigZNode) -> None:
        name = topic.topic
        while True:
            if self._kz.exists(topic.path()) is not None:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            if self._kz.exists(DeleteTopicZNode.path_for(name)) is not None:
                raise TopicExistsError(f'Topic "{name}" is marked for deletion.')
            self._kz.ensure_path(BROKER_TOPICS_PATH)
            self._kz.ensure_path(CONFIG_TOPICS_PATH)
            config_stat = self._kz.exists(config.path())
            tx = self._kz.transaction()
            if config_stat is None:
                tx.create(config.path(), config.encode())
            else:  # left over from an earlier topic of that name: overwrite, as Kafka does
                tx.set_data(config.path(), config.encode(), version=config_stat.version)
            tx.create(topic.path(), topic.encode())
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return
            if isinstance(results[1], NodeExistsError):
                raise TopicExistsError(f"Topic '{name}' already exists.")
            if isinstance(results[0], NodeExistsError | BadVersionError | NoNodeError):
                continue  # the config znode changed under us; try again
            raise ZkError(f"creating topic {name} failed: {results!r}")

    async def get_topic(self, name: str) -> TopicZNode | None:
        """The topic's assignment znode (id, replicas), or None."""
        found = await self.get_topic_with_version(name)
        return found.value if found is not None else None

    async def get_topic_with_version(self, name: str) -> Versioned[TopicZNode] | None:
        """The topic's assignment znode and its znode version (for
        :meth:`set_topic_assignment`), or None."""

        def work() -> Versioned[TopicZNode] | None:
            try:
                data, stat = self._kz.get(TopicZNode.path_for(name))
            except NoNodeError:
                return None
            return Versioned(TopicZNode.decode(data, name), int(stat.version))

        return await self._run(work)

    async def get_all_topics(self) -> list[str]:
        """Every topic under ``/brokers/topics``, sorted."""

        def work() -> list[str]:
            try:
                return sorted(self._kz.get_children(BROKER_TOPICS_PATH))
            except NoNodeError:
                return []

        return await self._run(work)

    async def watch_topics(self, callback: Callable[[list[str]], None]) -> WatchHandle:
        """Call ``callback(sorted topic names)`` now and whenever topics come or go."""
        return await self.watch_children(BROKER_TOPICS_PATH, callback)

    async def set_topic_assignment(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        expected_version: int,
        *,
        adding_replicas: Mapping[int, Sequence[int]] | None = None,
        removing_replicas: Mapping[int, Sequence[int]] | None = None,
    ) -> int | None:
        """Rewrite the topic's assignment (keeping its topic id) if the znode is still at
        ``expected_version``; return the new version, or None (stale version / no topic)."""

        def work() -> int | None:
            path = TopicZNode.path_for(name)
            try:
                data, stat = self._kz.get(path)
            except NoNodeError:
                return None
            if int(stat.version) != expected_version:
                return None
            current = TopicZNode.decode(data, name)
            node = TopicZNode(
                topic=name,
                partitions={int(p): tuple(r) for p, r in assignment.items()},
                topic_id=current.topic_id,
                adding_replicas={int(p): tuple(r) for p, r in (adding_replicas or {}).items()},
                removing_replicas={int(p): tuple(r) for p, r in (removing_replicas or {}).items()},
            )
            try:
                new_stat = self._kz.set(path, node.encode(), version=expected_version)
            except (BadVersionError, NoNodeError):
                return None
            return int(new_stat.version)

        return await self._run(work)

    # ------------------------------------------------------------------ partition state

    async def create_partition_states(
        self,
        name: str,
        states: Mapping[int, PartitionState],
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> dict[int, int]:
        """Create ``/brokers/topics/<t>/partitions/<p>/state`` for each partition.

        Returns partition -> znode version (0) for the states created; partitions whose state
        already existed are left out. With ``controller_epoch_zk_version``, each create is
        fenced by the controller epoch (raises :class:`ControllerMovedError`).
        """

        def work() -> dict[int, int]:
            created: dict[int, int] = {}
            for partition, state in sorted(states.items()):
                self._kz.ensure_path(PartitionState.partition_path(name, partition))
                path = PartitionState.path(name, partition)
                if controller_epoch_zk_version is None:
                    try:
                        self._kz.create(path, state.encode())
                    except NodeExistsError:
                        continue
                else:
                    tx = self._kz.transaction()
                    tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
                    tx.create(path, state.encode())
                    results = tx.commit()
                    if isinstance(results[0], BadVersionError | NoNodeError):
                        raise ControllerMovedError(
                            f"controller epoch changed while creating {path}"
                        )
                    if isinstance(results[1], NodeExistsError):
                        continue
                    if any(isinstance(r, Exception) for r in results):
                        raise ZkError(f"creating {path} failed: {results!r}")
                created[partition] = 0
            return created

        return await self._run(work)

    async def create_partition_state(
        self,
        name: str,
        partition: int,
        state: PartitionState,
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> int | None:
        """Create one partition's state znode; its version (0), or None if it existed."""
        created = await self.create_partition_states(
            name, {partition: state}, controller_epoch_zk_version=controller_epoch_zk_version
        )
        return created.get(partition)

    async def get_partition_state(
        self, name: str, partition: int
    ) -> VersionedAt[PartitionState] | None:
        """The partition's leader/ISR state and its znode version, or None."""

        def work() -> VersionedAt[PartitionState] | None:
            try:
                data, stat = self._kz.get(PartitionState.path(name, partition))
            except NoNodeError:
                return None
            return VersionedAt(
                PartitionState.decode(data, name, partition), int(stat.version), int(stat.mzxid)
            )

        return await self._run(work)

    async def get_partition_states(self, name: str) -> dict[int, VersionedAt[PartitionState]]:
        """Every partition state of the topic that exists, by partition (the reads
        pipelined: one round trip for the children, about one for all the states)."""

        def work() -> dict[int, VersionedAt[PartitionState]]:
            try:
                children = self._kz.get_children(TopicZNode.partitions_path(name))
            except NoNodeError:
                return {}
            found = self._read_states(
                [TopicPartition(name, int(c)) for c in children if c.isdigit()]
            )
            return {tp.partition: v for tp, v in sorted(found.items())}

        return await self._run(work)

    async def get_partition_states_of(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, VersionedAt[PartitionState]]:
        """The states of ``partitions`` that exist (reads pipelined, as above)."""
        wanted = list(partitions)
        if not wanted:
            return {}
        return await self._run(self._read_states, wanted)

    def _read_states(
        self, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, VersionedAt[PartitionState]]:
        """ZooKeeper thread: ``get_async`` every state znode, then collect the answers."""
        pending = [
            (tp, self._kz.get_async(PartitionState.path(tp.topic, tp.partition)))
            for tp in partitions
        ]
        out: dict[TopicPartition, VersionedAt[PartitionState]] = {}
        for tp, result in pending:
            try:
                data, stat = result.get()
            except NoNodeError:
                continue
            out[tp] = VersionedAt(
                PartitionState.decode(data, tp.topic, tp.partition),
                int(stat.version),
                int(stat.mzxid),
            )
        return out

    async def update_partition_state(
        self,
        name: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> int | None:
        """Write the state if its znode is still at ``expected_version``; return the new
        version, or None if the version is stale (or the znode is gone).

        With ``controller_epoch_zk_version`` the write is also fenced by the controller epoch
        (raises :class:`ControllerMovedError`). A retried write whose first attempt succeeded
        is recognised (the znode holds exactly ``state``), as in Kafka's ReplicationUtils.
        """
        [version] = await self.update_partition_states(
            [(TopicPartition(name, partition), state, expected_version)],
            controller_epoch_zk_version=controller_epoch_zk_version,
        )
        return version

    async def update_partition_states(
        self,
        updates: Sequence[tuple[TopicPartition, PartitionState, int]],
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> list[int | None]:
        """Many partition-state writes at once: each ``(tp, state, expected_version)`` is
        written if its znode is still at ``expected_version``; per update, in order, the new
        version or None (stale version, or the znode is gone). The writes are pipelined on
        the one ZooKeeper connection (``set_async``; with ``controller_epoch_zk_version``,
        one check-and-set transaction per partition, as Kafka's controller sends a
        MultiRequest per partition), so a batch costs about one round trip, not one per
        partition. They are independent (not one transaction): each succeeds or fails on its
        own version; a fenced controller raises :class:`ControllerMovedError`. A write
        retried after a lost connection whose first attempt succeeded is recognised, as in
        :meth:`update_partition_state`."""
        paths = [PartitionState.path(tp.topic, tp.partition) for tp, _, _ in updates]
        datas = [state.encode() for _, state, _ in updates]

        def already_written(i: int) -> int | None:
            return self._written_version(*updates[i])

        def send(i: int) -> Any:
            expected = updates[i][2]
            if controller_epoch_zk_version is None:
                return self._kz.set_async(paths[i], datas[i], version=expected)
            tx = self._kz.transaction()
            tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
            tx.set_data(paths[i], datas[i], version=expected)
            return tx.commit_async()

        def answer(i: int, result: Any) -> int | None:
            if controller_epoch_zk_version is None:
                try:
                    return int(result.get().version)
                except BadVersionError:
                    return already_written(i)
                except NoNodeError:
                    return None
            results = result.get()
            if not any(isinstance(r, Exception) for r in results):
                return int(results[1].version)
            if isinstance(results[0], BadVersionError | NoNodeError):
                raise ControllerMovedError(
                    f"controller epoch znode version is no longer {controller_epoch_zk_version}"
                    f"; not writing {paths[i]}"
                )
            if isinstance(results[1], BadVersionError):
                return already_written(i)
            if isinstance(results[1], NoNodeError):
                return None
            raise ZkError(f"updating {paths[i]} failed: {results!r}")

        def work() -> list[int | None]:
            pending = [send(i) for i in range(len(updates))]
            return [answer(i, result) for i, result in enumerate(pending)]

        if not updates:
            return []
        return await self._run(work)

    def _written_version(
        self, tp: TopicPartition, state: PartitionState, expected_version: int
    ) -> int | None:
        """ZooKeeper thread, after a write at ``expected_version`` was refused: the znode's
        version if it holds exactly ``state`` one version later (a retried write whose first
        attempt succeeded, as Kafka's ReplicationUtils recognises), else None."""
        try:
            current, stat = self._kz.get(PartitionState.path(tp.topic, tp.partition))
        except NoNodeError:
            return None
        try:
            same = PartitionState.decode(current, tp.topic, tp.partition) == state
        except ZNodeDecodeError:
            same = False
        return int(stat.version) if same and stat.version == expected_version + 1 else None

    # ------------------------------------------------------------------ topic configs

    async def get_topic_config(self, name: str) -> dict[str, str]:
        """The topic's config overrides (empty when none)."""

        def work() -> dict[str, str]:
            try:
                data, _ = self._kz.get(TopicConfigZNode.path_for(name))
            except NoNodeError:
                return {}
            return dict(TopicConfigZNode.decode(data, name).config)

        return await self._run(work)

    async def set_topic_config(self, name: str, config: Mapping[str, str]) -> None:
        """Replace the topic's overrides and publish a ``/config/changes`` notification."""
        validate_topic_name(name)
        node = TopicConfigZNode(name, dict(config))
        notification = ConfigChangeNotificationZNode.for_topic(name)

        def work() -> None:
            try:
                self._kz.set(node.path(), node.encode())
            except NoNodeError:
                try:
                    self._kz.create(node.path(), node.encode(), makepath=True)
                except NodeExistsError:
                    self._kz.set(node.path(), node.encode())
            self._kz.create(
                ConfigChangeNotificationZNode.create_path(),
                notification.encode(),
                sequence=True,
                makepath=True,
            )

        await self._run(work)

    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> WatchHandle:
        """Call ``callback(sorted notification names)`` on every ``/config/changes`` change."""
        return await self.watch_children(CONFIG_CHANGES_PATH, callback)

    async def get_config_change(self, name: str) -> ConfigChangeNotificationZNode | None:
        """One ``/config/changes/<name>`` notification, or None if already purged."""

        def work() -> ConfigChangeNotificationZNode | None:
            try:
                data, _ = self._kz.get(f"{CONFIG_CHANGES_PATH}/{name}")
            except NoNodeError:
                return None
            return ConfigChangeNotificationZNode.decode(data)

        return await self._run(work)

    # ------------------------------------------------------------------ deletion

    async def mark_topic_for_deletion(self, name: str) -> bool:
        """Create ``/admin/delete_topics/<t>``. True if newly marked, False if it already was;
        raises :class:`UnknownTopicError` if the topic does not exist."""
        validate_topic_name(name)

        def work() -> bool:
            if self._kz.exists(TopicZNode.path_for(name)) is None:
                raise UnknownTopicError(f"Topic '{name}' does not exist.")
            try:
                self._kz.create(DeleteTopicZNode.path_for(name), b"", makepath=True)
            except NodeExistsError:
                return False
            return True

        return await self._run(work)

    async def get_topics_marked_for_deletion(self) -> list[str]:
        """Children of ``/admin/delete_topics``, sorted."""

        def work() -> list[str]:
            try:
                return sorted(self._kz.get_children(DELETE_TOPICS_PATH))
            except NoNodeError:
                return []

        return await self._run(work)

    async def watch_topics_marked_for_deletion(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle:
        return await self.watch_children(DELETE_TOPICS_PATH, callback)

    async def delete_topic_znodes(self, name: str) -> None:
        """Delete the topic (with its partitions subtree), its config and its deletion marker,
        in Kafka's order. Missing znodes are fine."""
        validate_topic_name(name)

        def work() -> None:
            for path, recursive in (
                (TopicZNode.path_for(name), True),
                (TopicConfigZNode.path_for(name), False),
                (DeleteTopicZNode.path_for(name), False),
            ):
                with contextlib.suppress(NoNodeError):
                    self._kz.delete(path, recursive=recursive)

        await self._run(work)
        log.info("deleted the znodes of topic %s", name)

    # ------------------------------------------------------------------ ISR notifications

    async def add_isr_change_notification(self, partitions: Iterable[TopicPartition]) -> str:
        """Create ``/isr_change_notification/isr_change_<seq>``; returns its name."""
        node = IsrChangeNotificationZNode(frozenset(partitions))

        def work() -> str:
            created = self._kz.create(
                IsrChangeNotificationZNode.create_path(),
                node.encode(),
                sequence=True,
                makepath=True,
            )
            return str(created).rsplit("/", 1)[-1]

        return await self._run(work)

    async def watch_isr_change_notifications(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle:
        return await self.watch_children(ISR_CHANGE_NOTIFICATION_PATH, callback)

    async def get_isr_change_notifications(self) -> dict[str, frozenset[TopicPartition]]:
        """Pending ISR change notifications: name -> partitions, in sequence order."""

        def work() -> dict[str, frozenset[TopicPartition]]:
            try:
                children = sorted(self._kz.get_children(ISR_CHANGE_NOTIFICATION_PATH))
            except NoNodeError:
                return {}
            out: dict[str, frozenset[TopicPartition]] = {}
            for child in children:
                try:
                    data, _ = self._kz.get(f"{ISR_CHANGE_NOTIFICATION_PATH}/{child}")
                except NoNodeError:
                    continue
                out[child] = IsrChangeNotificationZNode.decode(data).partitions
            return out

        return await self._run(work)

    async def delete_isr_change_notifications(self, names: Iterable[str]) -> None:
        todo = list(names)

        def work() -> None:
            for child in todo:
                with contextlib.suppress(NoNodeError):
                    self._kz.delete(f"{ISR_CHANGE_NOTIFICATION_PATH}/{child}")

        await self._run(work)

    # ------------------------------------------------------------------ log dir events

    async def propagate_log_dir_event(self, broker_id: int) -> str:
        """Create ``/log_dir_event_notification/log_dir_event_<seq>`` for ``broker_id`` (a
        log directory of it failed; Kafka's ``propagateLogDirEvent``); returns its name."""
        node = LogDirEventNotificationZNode(broker_id)

        def work() -> str:
            created = self._kz.create(
                LogDirEventNotificationZNode.create_path(),
                node.encode(),
                sequence=True,
                makepath=True,
            )
            return str(created).rsplit("/", 1)[-1]

        return await self._run(work)

    async def watch_log_dir_event_notifications(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle:
        return await self.watch_children(LOG_DIR_EVENT_NOTIFICATION_PATH, callback)

    async def get_log_dir_event_notifications(self) -> dict[str, int]:
        """Pending log-dir event notifications: name -> broker id, in sequence order
        (malformed ones are skipped with a warning, and left for deletion)."""

        def work() -> dict[str, int]:
            try:
                children = sorted(self._kz.get_children(LOG_DIR_EVENT_NOTIFICATION_PATH))
            except NoNodeError:
                return {}
            out: dict[str, int] = {}
            for child in children:
                try:
                    data, _ = self._kz.get(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}")
                except NoNodeError:
                    continue
                try:
                    out[child] = LogDirEventNotificationZNode.decode(data).broker
                except ZNodeDecodeError as exc:
                    log.warning("ignoring log dir event notification %s: %s", child, exc)
                    out[child] = -1
            return out

        return await self._run(work)

    async def delete_log_dir_event_notifications(self, names: Iterable[str]) -> None:
        todo = list(names)

        def work() -> None:
            for child in todo:
                with contextlib.suppress(NoNodeError):
                    self._kz.delete(f"{LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}")

        await self._run(work)
