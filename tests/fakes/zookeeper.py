"""An in-memory ZooKeeper for unit tests: :class:`FakeZooKeeper` (the ensemble's znode tree)
and :class:`FakeZkClient` (one session on it, implementing
:class:`broker.zk.interface.ZkOperations`).

What is modelled, because the controller depends on it:

* znodes with data, a data version bumped by every write, the zxid of their creation
  (``czxid``, the broker epoch of a registration) and their ephemeral owner;
* conditional writes (``expected_version``) and the controller-epoch fence: a fenced write
  whose ``/controller_epoch`` version moved on raises ``ControllerMovedError``;
* ephemeral znodes per session: they vanish when the session closes or expires
  (:meth:`FakeZkClient.expire_session`), and a new session re-registers the broker;
* sequential znodes (``config_change_``, ``isr_change_``) numbered per parent;
* watches: children and data watches fire on the event loop (``loop.call_soon``, like the
  real client's hop from kazoo's thread) with the current value, once when registered and
  after every change, until the session closes.

The znodes hold the real JSON of ``broker.zk.znodes``, so what the controller writes
is what Kafka would read. Time does not exist here: sessions expire only when a test says so.
Single-threaded, event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.topic_names import TopicExistsError, validate_topic_name
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.interface import (
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    SessionCallback,
    UnknownTopicError,
    Versioned,
    VersionedAt,
    WatchHandle,
    ZkConnectionError,
    ZkError,
)

LONG_MAX = 9_223_372_036_854_775_807


class NoNode(ZkError):
    pass


class NodeExists(ZkError):
    pass


class BadVersion(ZkError):
    pass


@dataclass(slots=True)
class ZNode:
    data: bytes
    czxid: int
    version: int = 0
    mzxid: int = -1  # the zxid of the last write (the creation's until a set)
    ephemeral_owner: int = 0
    next_sequence: int = 0


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class FakeZooKeeper:
    """The znode tree shared by every :class:`FakeZkClient` of a test (one ensemble)."""

    def __init__(self) -> None:
        self.nodes: dict[str, ZNode] = {"/": ZNode(b"", 0)}
        self._zxid = itertools.count(1)
        self._sessions = itertools.count(0x1000)
        self.clients: list[FakeZkClient] = []

    def client(self) -> FakeZkClient:
        """A new (not yet started) session on this ensemble."""
        return FakeZkClient(self)

    def new_session_id(self) -> int:
        return next(self._sessions)

    # ------------------------------------------------------------------ tree primitives

    def get(self, path: str) -> tuple[bytes, ZNode]:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(path)
        return node.data, node

    def exists(self, path: str) -> ZNode | None:
        return self.nodes.get(path)

    def children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise NoNode(path)
        prefix = path.rstrip("/") + "/"
        return sorted(
            p[len(prefix) :]
            for p in self.nodes
            if p.startswith(prefix) and "/" not in p[len(prefix) :]
        )

    def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral_owner: int = 0,
        sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        parent = _parent(path)
        if parent not in self.nodes:
            if not makepath:
                raise NoNode(parent)
            self.ensure_path(parent)
        if sequence:
            pnode = self.nodes[parent]
            path = f"{path}{pnode.next_sequence:010d}"
            pnode.next_sequence += 1
        if path in self.nodes:
            raise NodeExists(path)
        self.nodes[path] = ZNode(data, next(self._zxid), ephemeral_owner=ephemeral_owner)
        self._changed(path, created=True)
        return path

    def ensure_path(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if sub not in self.nodes:
                self.create(sub)

    def set(self, path: str, data: bytes, version: int = -1) -> int:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(path)
        if version not in (-1, node.version):
            raise BadVersion(f"{path}: version {node.version}, expected {version}")
        node.data = data
        node.version += 1
        node.mzxid = next(self._zxid)
        self._changed(path)
        return node.version

    def delete(self, path: str, *, recursive: bool = False) -> None:
        if path not in self.nodes:
            raise NoNode(path)
        kids = self.children(path)
        if kids and not recursive:
            raise ZkError(f"{path} is not empty")
        for kid in kids:
            self.delete(f"{path}/{kid}", recursive=True)
        del self.nodes[path]
        self._changed(path, deleted=True)

    def expire(self, session_id: int) -> None:
        """The session's ephemeral znodes vanish."""
        for path in sorted(
            (p for p, n in self.nodes.items() if n.ephemeral_owner == session_id), reverse=True
        ):
            if path in self.nodes:
                self.delete(path)

    def _changed(self, path: str, *, created: bool = False, deleted: bool = False) -> None:
        for client in list(self.clients):
            client._fire_data(path)
            if created or deleted:
                client._fire_children(_parent(path))


class FakeZkClient:
    """One session on a :class:`FakeZooKeeper`; implements ``ZkOperations``.

    Extra test helpers: :meth:`expire_session` (the session expires and a new one starts),
    :attr:`session_id`.
    """

    def __init__(self, zk: FakeZooKeeper) -> None:
        self.zk = zk
        self.session_id: int | None = None
        self.started = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._child_watches: list[tuple[str, WatchHandle, Callable[[list[str]], None]]] = []
        self._data_watches: list[
            tuple[str, WatchHandle, Callable[[bytes | None, int | None], None]]
        ] = []
        self._lost_callbacks: list[SessionCallback] = []
        self._reconnected_callbacks: list[SessionCallback] = []
        self._registered_broker: znodes.BrokerIdZNode | None = None
        self.controller_epoch: int | None = None
        self.controller_epoch_zk_version: int | None = None

    # ------------------------------------------------------------------ session

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.session_id = self.zk.new_session_id()
        self.started = True
        self.zk.clients.append(self)

    async def close(self) -> None:
        if not self.started:
            return
        self.started = False
        self.zk.clients.remove(self)
        self._child_watches.clear()
        self._data_watches.clear()
        if self.session_id is not None:
            self.zk.expire(self.session_id)

    def on_session_lost(self, callback: SessionCallback) -> None:
        self._lost_callbacks.append(callback)

    def on_reconnected(self, callback: SessionCallback) -> None:
        self._reconnected_callbacks.append(callback)

    async def expire_session(self) -> None:
        """The session expires (ephemeral znodes vanish, session-lost callbacks run), then a
        new session starts (the broker is re-registered, reconnected callbacks run)."""
        assert self.session_id is not None
        self.zk.expire(self.session_id)
        await self._run_callbacks(self._lost_callbacks)
        self.session_id = self.zk.new_session_id()
        self.controller_epoch = None
        if self._registered_broker is not None:
            self._register(dataclasses.replace(self._registered_broker))
        await self._run_callbacks(self._reconnected_callbacks)

    async def _run_callbacks(
        self, callbacks: Sequence[Callable[[], Awaitable[None] | None]]
    ) -> None:
        for cb in list(callbacks):
            result = cb()
            if inspect.isawaitable(result):
                await result

    def _check(self) -> None:
        if not self.started:
            raise ZkConnectionError("fake ZooKeeper client is not started")

    # ------------------------------------------------------------------ watches

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon(fn, *args)

    def _deliver(self, handle: WatchHandle, fn: Callable[..., None], *args: Any) -> None:
        if not handle.cancelled and self.started:
            fn(*args)

    def _fire_children(self, path: str) -> None:
        for watched, handle, cb in list(self._child_watches):
            if watched == path:
                kids = self.zk.children(path) if path in self.zk.nodes else []
                self._post(self._deliver, handle, cb, kids)

    def _fire_data(self, path: str) -> None:
        for watched, handle, cb in list(self._data_watches):
            if watched == path:
                node = self.zk.exists(path)
                self._post(
                    self._deliver,
                    handle,
                    cb,
                    node.data if node else None,
                    node.version if node else None,
                )

    async def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> WatchHandle:
        self._check()
        self.zk.ensure_path(path)
        handle = WatchHandle(path)
        self._child_watches.append((path, handle, callback))
        self._fire_children(path)
        return handle

    async def watch_data(
        self, path: str, callback: Callable[[bytes | None, int | None], None]
    ) -> WatchHandle:
        self._check()
        handle = WatchHandle(path)
        self._data_watches.append((path, handle, callback))
        self._fire_data(path)
        return handle

    # ------------------------------------------------------------------ bootstrap, brokers

    async def ensure_persistent_paths(self) -> None:
        self._check()
        for path in znodes.PERSISTENT_PATHS:
            self.zk.ensure_path(path)

    async def get_or_create_cluster_id(self) -> str:
        self._check()
        node = self.zk.exists(znodes.CLUSTER_ID_PATH)
        if node is None:
            self.zk.create(
                znodes.CLUSTER_ID_PATH,
                znodes.ClusterIdZNode(znodes.random_cluster_id()).encode(),
                makepath=True,
            )
            node = self.zk.exists(znodes.CLUSTER_ID_PATH)
        assert node is not None
        return znodes.ClusterIdZNode.decode(node.data).id

    async def generate_broker_id(self, reserved_max: int = 1000) -> int:
        self._check()
        self.zk.ensure_path(znodes.BROKER_SEQID_PATH)
        return self.zk.set(znodes.BROKER_SEQID_PATH, b"") + reserved_max

    def _register(self, znode: znodes.BrokerIdZNode) -> int:
        path = znode.path()
        existing = self.zk.exists(path)
        if existing is not None:
            if existing.ephemeral_owner != self.session_id:
                raise BrokerIdAlreadyRegisteredError(
                    f"broker id {znode.broker_id} is already registered"
                )
            return existing.czxid
        self.zk.create(path, znode.encode(), ephemeral_owner=self.session_id or 0, makepath=True)
        return self.zk.nodes[path].czxid

    async def register_broker(self, znode: znodes.BrokerIdZNode, wait_s: float = 0.0) -> int:
        self._check()
        epoch = self._register(znode)
        self._registered_broker = znode
        return epoch

    async def deregister_broker(self) -> None:
        znode, self._registered_broker = self._registered_broker, None
        if znode is not None and znode.path() in self.zk.nodes:
            self.zk.delete(znode.path())

    async def get_broker_ids(self) -> list[int]:
        self._check()
        try:
            return sorted(int(c) for c in self.zk.children(znodes.BROKER_IDS_PATH) if c.isdigit())
        except NoNode:
            return []

    async def get_broker(self, broker_id: int) -> znodes.BrokerIdZNode | None:
        self._check()
        node = self.zk.exists(znodes.BrokerIdZNode.path_for(broker_id))
        return None if node is None else znodes.BrokerIdZNode.decode(node.data, broker_id)

    async def get_broker_epoch(self, broker_id: int) -> int | None:
        self._check()
        node = self.zk.exists(znodes.BrokerIdZNode.path_for(broker_id))
        return None if node is None else node.czxid

    async def watch_broker_ids(self, callback: Callable[[list[int]], None]) -> WatchHandle:
        return await self.watch_children(
            znodes.BROKER_IDS_PATH,
            lambda kids: callback(sorted(int(c) for c in kids if c.isdigit())),
        )

    async def allocate_producer_id_block(
        self, broker_id: int, block_size: int = 1000
    ) -> tuple[int, int]:
        self._check()
        self.zk.ensure_path(znodes.PRODUCER_ID_BLOCK_PATH)
        data, _ = self.zk.get(znodes.PRODUCER_ID_BLOCK_PATH)
        start = znodes.ProducerIdBlockZNode.decode(data).next_block_start if data else 0
        if start > LONG_MAX - block_size:
            raise ZkError("all producer ids are exhausted")
        block = znodes.ProducerIdBlockZNode(broker_id, start, start + block_size - 1)
        self.zk.set(znodes.PRODUCER_ID_BLOCK_PATH, block.encode())
        return block.block_start, block.block_end

    # ------------------------------------------------------------------ controller

    def _controller_holder(self) -> tuple[int, int] | None:
        node = self.zk.exists(znodes.CONTROLLER_PATH)
        if node is None:
            return None
        return znodes.ControllerZNode.decode(node.data).broker_id, node.ephemeral_owner

    async def try_elect_controller(self, broker_id: int) -> int | None:
        self._check()
        holder = self._controller_holder()
        epoch_node = self.zk.exists(znodes.CONTROLLER_EPOCH_PATH)
        if holder is not None:
            if holder == (broker_id, self.session_id) and epoch_node is not None:
                return znodes.ControllerEpochZNode.decode(epoch_node.data).epoch
            return None
        if epoch_node is None:
            self.zk.create(znodes.CONTROLLER_EPOCH_PATH, znodes.ControllerEpochZNode(0).encode())
            epoch_node = self.zk.nodes[znodes.CONTROLLER_EPOCH_PATH]
        epoch = znodes.ControllerEpochZNode.decode(epoch_node.data).epoch + 1
        self.zk.create(
            znodes.CONTROLLER_PATH,
            znodes.ControllerZNode(broker_id).encode(),
            ephemeral_owner=self.session_id or 0,
        )
        version = self.zk.set(
            znodes.CONTROLLER_EPOCH_PATH, znodes.ControllerEpochZNode(epoch).encode()
        )
        self.controller_epoch, self.controller_epoch_zk_version = epoch, version
        return epoch

    async def get_controller(self) -> int | None:
        self._check()
        holder = self._controller_holder()
        return None if holder is None else holder[0]

    async def get_controller_epoch(self) -> Versioned[int] | None:
        self._check()
        node = self.zk.exists(znodes.CONTROLLER_EPOCH_PATH)
        if node is None:
            return None
        return Versioned(znodes.ControllerEpochZNode.decode(node.data).epoch, node.version)

    async def watch_controller(self, callback: Callable[[int | None], None]) -> WatchHandle:
        def on_data(data: bytes | None, _version: int | None) -> None:
            callback(znodes.ControllerZNode.decode(data).broker_id if data else None)

        return await self.watch_data(znodes.CONTROLLER_PATH, on_data)

    async def get_controller_registration(self) -> tuple[int, int] | None:
        self._check()
        node = self.zk.exists(znodes.CONTROLLER_PATH)
        if node is None:
            return None
        return znodes.ControllerZNode.decode(node.data).broker_id, node.czxid

    async def delete_dead_controller(self, broker_id: int, czxid: int) -> bool:
        self._check()
        node = self.zk.exists(znodes.CONTROLLER_PATH)
        if node is None or node.czxid != czxid:
            return False
        if znodes.ControllerZNode.decode(node.data).broker_id != broker_id:
            return False
        self.zk.delete(znodes.CONTROLLER_PATH)
        return True

    async def resign_controller(self, broker_id: int) -> None:
        self._check()
        if self._controller_holder() == (broker_id, self.session_id):
            self.zk.delete(znodes.CONTROLLER_PATH)
        self.controller_epoch = self.controller_epoch_zk_version = None

    def _fence(self, controller_epoch_zk_version: int | None, what: str) -> None:
        if controller_epoch_zk_version is None:
            return
        node = self.zk.exists(znodes.CONTROLLER_EPOCH_PATH)
        if node is None or node.version != controller_epoch_zk_version:
            raise ControllerMovedError(f"controller epoch changed; not writing {what}")

    # ------------------------------------------------------------------ topics

    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> uuid.UUID:
        self._check()
        validate_topic_name(name)
        if self.zk.exists(znodes.TopicZNode.path_for(name)) is not None:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if self.zk.exists(znodes.DeleteTopicZNode.path_for(name)) is not None:
            raise TopicExistsError(f'Topic "{name}" is marked for deletion.')
        tid = topic_id if topic_id is not None else znodes.random_kafka_uuid()
        config = znodes.TopicConfigZNode(name, dict(configs or {}))
        if self.zk.exists(config.path()) is None:
            self.zk.create(config.path(), config.encode(), makepath=True)
        else:
            self.zk.set(config.path(), config.encode())
        topic = znodes.TopicZNode.create(name, assignment, tid)
        self.zk.create(topic.path(), topic.encode(), makepath=True)
        return tid

    async def get_topic(self, name: str) -> znodes.TopicZNode | None:
        found = await self.get_topic_with_version(name)
        return None if found is None else found.value

    async def get_topic_with_version(self, name: str) -> Versioned[znodes.TopicZNode] | None:
        self._check()
        node = self.zk.exists(znodes.TopicZNode.path_for(name))
        if node is None:
            return None
        return Versioned(znodes.TopicZNode.decode(node.data, name), node.version)

    async def get_all_topics(self) -> list[str]:
        self._check()
        try:
            return self.zk.children(znodes.BROKER_TOPICS_PATH)
        except NoNode:
            return []

    async def watch_topics(self, callback: Callable[[list[str]], None]) -> WatchHandle:
        return await self.watch_children(znodes.BROKER_TOPICS_PATH, callback)

    async def set_topic_assignment(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        expected_version: int,
        *,
        adding_replicas: Mapping[int, Sequence[int]] | None = None,
        removing_replicas: Mapping[int, Sequence[int]] | None = None,
    ) -> int | None:
        self._check()
        path = znodes.TopicZNode.path_for(name)
        node = self.zk.exists(path)
        if node is None or node.version != expected_version:
            return None
        current = znodes.TopicZNode.decode(node.data, name)
        new = znodes.TopicZNode(
            name,
            assignment,
            current.topic_id,
            adding_replicas=adding_replicas or {},
            removing_replicas=removing_replicas or {},
        )
        return self.zk.set(path, new.encode(), expected_version)

    # ------------------------------------------------------------------ partition states

    async def create_partition_states(
        self,
        name: str,
        states: Mapping[int, znodes.PartitionState],
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> dict[int, int]:
        self._check()
        created: dict[int, int] = {}
        for p, state in sorted(states.items()):
            path = znodes.PartitionState.path(name, p)
            self._fence(controller_epoch_zk_version, path)
            self.zk.ensure_path(znodes.PartitionState.partition_path(name, p))
            try:
                self.zk.create(path, state.encode())
            except NodeExists:
                continue
            created[p] = 0
        return created

    async def get_partition_state(
        self, name: str, partition: int
    ) -> VersionedAt[znodes.PartitionState] | None:
        self._check()
        node = self.zk.exists(znodes.PartitionState.path(name, partition))
        if node is None:
            return None
        return VersionedAt(
            znodes.PartitionState.decode(node.data, name, partition),
            node.version,
            node.mzxid if node.mzxid >= 0 else node.czxid,
        )

    async def get_partition_states(
        self, name: str
    ) -> dict[int, VersionedAt[znodes.PartitionState]]:
        out: dict[int, VersionedAt[znodes.PartitionState]] = {}
        try:
            kids = self.zk.children(znodes.TopicZNode.partitions_path(name))
        except NoNode:
            return out
        for child in kids:
            if child.isdigit():
                found = await self.get_partition_state(name, int(child))
                if found is not None:
                    out[int(child)] = found
        return dict(sorted(out.items()))

    async def get_partition_states_of(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, VersionedAt[znodes.PartitionState]]:
        out = {}
        for tp in partitions:
            found = await self.get_partition_state(tp.topic, tp.partition)
            if found is not None:
                out[tp] = found
        return out

    async def update_partition_state(
        self,
        name: str,
        partition: int,
        state: znodes.PartitionState,
        expected_version: int,
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> int | None:
        self._check()
        path = znodes.PartitionState.path(name, partition)
        self._fence(controller_epoch_zk_version, path)
        try:
            return self.zk.set(path, state.encode(), expected_version)
        except (BadVersion, NoNode):
            return None

    async def update_partition_states(
        self,
        updates: Sequence[tuple[TopicPartition, znodes.PartitionState, int]],
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> list[int | None]:
        return [
            await self.update_partition_state(
                tp.topic,
                tp.partition,
                state,
                expected,
                controller_epoch_zk_version=controller_epoch_zk_version,
            )
            for tp, state, expected in updates
        ]

    # ------------------------------------------------------------------ topic configs

    async def get_topic_config(self, name: str) -> dict[str, str]:
        self._check()
        node = self.zk.exists(znodes.TopicConfigZNode.path_for(name))
        if node is None:
            return {}
        return dict(znodes.TopicConfigZNode.decode(node.data, name).config)

    async def set_topic_config(self, name: str, config: Mapping[str, str]) -> None:
        self._check()
        validate_topic_name(name)
        node = znodes.TopicConfigZNode(name, dict(config))
        if self.zk.exists(node.path()) is None:
            self.zk.create(node.path(), node.encode(), makepath=True)
        else:
            self.zk.set(node.path(), node.encode())
        self.zk.create(
            znodes.ConfigChangeNotificationZNode.create_path(),
            znodes.ConfigChangeNotificationZNode.for_topic(name).encode(),
            sequence=True,
            makepath=True,
        )

    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> WatchHandle:
        return await self.watch_children(znodes.CONFIG_CHANGES_PATH, callback)

    async def get_config_change(self, name: str) -> znodes.ConfigChangeNotificationZNode | None:
        self._check()
        node = self.zk.exists(f"{znodes.CONFIG_CHANGES_PATH}/{name}")
        return None if node is None else znodes.ConfigChangeNotificationZNode.decode(node.data)

    # ------------------------------------------------------------------ deletion

    async def mark_topic_for_deletion(self, name: str) -> bool:
        self._check()
        validate_topic_name(name)
        if self.zk.exists(znodes.TopicZNode.path_for(name)) is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        try:
            self.zk.create(znodes.DeleteTopicZNode.path_for(name), b"", makepath=True)
        except NodeExists:
            return False
        return True

    async def get_topics_marked_for_deletion(self) -> list[str]:
        self._check()
        try:
            return self.zk.children(znodes.DELETE_TOPICS_PATH)
        except NoNode:
            return []

    async def watch_topics_marked_for_deletion(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle:
        return await self.watch_children(znodes.DELETE_TOPICS_PATH, callback)

    async def delete_topic_znodes(self, name: str) -> None:
        self._check()
        validate_topic_name(name)
        for path, recursive in (
            (znodes.TopicZNode.path_for(name), True),
            (znodes.TopicConfigZNode.path_for(name), False),
            (znodes.DeleteTopicZNode.path_for(name), False),
        ):
            if path in self.zk.nodes:
                self.zk.delete(path, recursive=recursive)

    # ------------------------------------------------------------------ ISR notifications

    async def add_isr_change_notification(self, partitions: Iterable[TopicPartition]) -> str:
        self._check()
        node = znodes.IsrChangeNotificationZNode(frozenset(partitions))
        created = self.zk.create(
            znodes.IsrChangeNotificationZNode.create_path(),
            node.encode(),
            sequence=True,
            makepath=True,
        )
        return created.rsplit("/", 1)[-1]

    async def watch_isr_change_notifications(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle:
        return await self.watch_children(znodes.ISR_CHANGE_NOTIFICATION_PATH, callback)

    async def get_isr_change_notifications(self) -> dict[str, frozenset[TopicPartition]]:
        self._check()
        out: dict[str, frozenset[TopicPartition]] = {}
        try:
            kids = self.zk.children(znodes.ISR_CHANGE_NOTIFICATION_PATH)
        except NoNode:
            return out
        for child in kids:
            data, _ = self.zk.get(f"{znodes.ISR_CHANGE_NOTIFICATION_PATH}/{child}")
            out[child] = znodes.IsrChangeNotificationZNode.decode(data).partitions
        return out

    async def delete_isr_change_notifications(self, names: Iterable[str]) -> None:
        self._check()
        for child in names:
            path = f"{znodes.ISR_CHANGE_NOTIFICATION_PATH}/{child}"
            if path in self.zk.nodes:
                self.zk.delete(path)

    # ------------------------------------------------------------------ log dir events

    async def propagate_log_dir_event(self, broker_id: int) -> str:
        self._check()
        node = znodes.LogDirEventNotificationZNode(broker_id)
        created = self.zk.create(
            znodes.LogDirEventNotificationZNode.create_path(),
            node.encode(),
            sequence=True,
            makepath=True,
        )
        return created.rsplit("/", 1)[-1]

    async def watch_log_dir_event_notifications(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle:
        return await self.watch_children(znodes.LOG_DIR_EVENT_NOTIFICATION_PATH, callback)

    async def get_log_dir_event_notifications(self) -> dict[str, int]:
        self._check()
        out: dict[str, int] = {}
        try:
            kids = self.zk.children(znodes.LOG_DIR_EVENT_NOTIFICATION_PATH)
        except NoNode:
            return out
        for child in sorted(kids):
            data, _ = self.zk.get(f"{znodes.LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}")
            out[child] = znodes.LogDirEventNotificationZNode.decode(data).broker
        return out

    async def delete_log_dir_event_notifications(self, names: Iterable[str]) -> None:
        self._check()
        for child in names:
            path = f"{znodes.LOG_DIR_EVENT_NOTIFICATION_PATH}/{child}"
            if path in self.zk.nodes:
                self.zk.delete(path)
