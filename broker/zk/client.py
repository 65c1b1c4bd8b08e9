"""Kafka's ZooKeeper client: every ZooKeeper read and write the broker and controller do.

:class:`ZkClient` is one kazoo session (:class:`~broker.zk.session.ZkSession`, the
kazoo <-> asyncio bridge) with Kafka's ZooKeeper operations on it: the topic operations of
:class:`~broker.zk.topics.ZkTopicOps` and, in this module, the cluster id and
persistent paths, broker registration (re-registered on every new session) and broker ids,
controller election, and producer-id blocks. It implements
:class:`~broker.zk.interface.ZkOperations`, the protocol the rest of the broker
depends on; the errors and values of that module are re-exported here.

Semantics follow Kafka 3.9's ``KafkaZkClient``: controller election creates the ephemeral
``/controller`` and bumps ``/controller_epoch`` in one multi-op conditioned on the epoch's znode
version; partition-state updates are conditional on the state znode's version (optionally
also on the controller epoch's znode version, which fences a zombie controller); producer-id
blocks are allocated by a conditional-update loop; the broker id generator is the version of
``/brokers/seqid`` plus ``reserved.broker.max.id``.

Concurrency: create and use on one event loop (see :class:`ZkSession`). Conditional writes
(znode versions, the controller-epoch fence) make concurrent writers from several brokers safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.topic_names import TopicExistsError
from broker.zk.interface import (
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    UnknownTopicError,
    Versioned,
    WatchHandle,
    ZkConnectionError,
    ZkError,
    ZkOperations,
    ZkState,
)
from broker.zk.security import ZkSecurityOps
from broker.zk.session import DEFAULT_SESSION_TIMEOUT_MS
from broker.zk.topics import ZkTopicOps
from broker.zk.znodes import (
    BROKER_IDS_PATH,
    BROKER_SEQID_PATH,
    CLUSTER_ID_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK_PATH,
    BrokerIdZNode,
    ClusterIdZNode,
    ControllerEpochZNode,
    ControllerZNode,
    Endpoint,
    ProducerIdBlockZNode,
    ZNodeDecodeError,
    now_ms_str,
    random_cluster_id,
)

log = logging.getLogger(__name__)

LONG_MAX = 9_223_372_036_854_775_807
DEFAULT_RESERVED_BROKER_MAX_ID = 1000  # Kafka's reserved.broker.max.id
DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class ZkClient(ZkTopicOps, ZkSecurityOps):
    """Kafka's ZooKeeper data model (:mod:`broker.zk.znodes`) over one kazoo session.

    Responsibility: typed, async access to every znode the broker and controller use;
    connection-state tracking with session-loss / new-session callbacks (inherited from the
    session); re-registration of the broker's ephemeral znode on a new session.

    Format: the znodes' JSON is defined in :mod:`broker.zk.znodes` (Kafka 3.9's).

    Concurrency: create and use on one event loop. Public methods are coroutines that run
    blocking kazoo calls in worker threads; several may run at once. Watch and state callbacks
    run on the event loop, never on kazoo's threads. Conditional writes (znode versions, the
    controller-epoch fence) make concurrent writers from several brokers safe.
    """

    def __init__(
        self,
        connect: str,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(connect, session_timeout_ms, connection_timeout_ms, loop)
        self._registered_broker: BrokerIdZNode | None = None
        self.broker_epoch: int | None = None
        """This broker's epoch (its registration's czxid) once :meth:`register_broker` returned;
        updated when the znode is re-registered on a new session."""
        self._broker_epoch_known = asyncio.Event()
        self.controller_epoch: int | None = None
        """The epoch this client won in its last successful election."""
        self.controller_epoch_zk_version: int | None = None
        """``/controller_epoch``'s znode version after that election (the fence)."""

    async def _on_new_session(self) -> None:
        """Re-register the broker's ephemeral znode (if :meth:`register_broker` was called)."""
        znode = self._registered_broker
        if znode is None:
            return
        fresh = dataclasses.replace(znode, timestamp=now_ms_str())
        try:
            epoch = await self._run(self._register_broker_sync, fresh, 0.0)
        except ZkError:
            log.exception("could not re-register broker %d on the new session", znode.broker_id)
            return
        self._registered_broker = fresh
        self.broker_epoch = epoch
        log.info("re-registered broker %d (broker epoch %d)", znode.broker_id, epoch)

    # ------------------------------------------------------------------ bootstrap

    async def ensure_persistent_paths(self) -> None:
        """Create Kafka's persistent paths (``ZkData.PersistentZkPaths``) if missing."""

        def work() -> None:
            for path in PERSISTENT_PATHS:
                self._kz.ensure_path(path)

        await self._run(work)

    async def get_or_create_cluster_id(self) -> str:
        """``/cluster/id``'s id, creating it (22-char base64url UUID) if absent."""

        def work() -> str:
            try:
                data, _ = self._kz.get(CLUSTER_ID_PATH)
                return ClusterIdZNode.decode(data).id
            except NoNodeError:
                pass
            node = ClusterIdZNode(random_cluster_id())
            try:
                self._kz.create(CLUSTER_ID_PATH, node.encode(), makepath=True)
                log.info("created cluster id %s", node.id)
                return node.id
            except NodeExistsError:  # another broker won the race
                data, _ = self._kz.get(CLUSTER_ID_PATH)
                return ClusterIdZNode.decode(data).id

        return await self._run(work)

    async def get_cluster_id(self) -> str | None:
        """``/cluster/id``'s id, or None if no broker created it yet."""

        def work() -> str | None:
            try:
                data, _ = self._kz.get(CLUSTER_ID_PATH)
            except NoNodeError:
                return None
            return ClusterIdZNode.decode(data).id

        return await self._run(work)

    # ------------------------------------------------------------------ brokers

    async def register_broker(self, znode: BrokerIdZNode, wait_s: float = 0.0) -> int:
        """Create the ephemeral ``/brokers/ids/<id>``; return the broker epoch (its czxid).
        Call it once this broker's listeners are bound.

        A znode that advertises exactly this broker's endpoints was left by a previous process
        of this broker (which no longer listens on them: this one does) and is replaced at
        once (docs/failover.md). If another running broker holds the id (one of its endpoints
        accepts connections), raise :class:`BrokerIdAlreadyRegisteredError` at once. If
        another live session holds the id, wait up to ``wait_s`` seconds for it to go
        away (a hard-killed previous instance's session expires after the session timeout),
        then raise :class:`BrokerIdAlreadyRegisteredError`. A znode left by one of this
        client's own expired sessions is replaced (Kafka's KAFKA-7165 workaround). The znode
        is re-registered automatically whenever a new session starts.
        """
        epoch = await self._run(self._register_broker_sync, znode, wait_s)
        self._registered_broker = znode
        self.broker_epoch = epoch
        self._broker_epoch_known.set()
        log.info(
            "registered broker %d at %s (broker epoch %d)", znode.broker_id, znode.path(), epoch
        )
        return epoch

    def _register_broker_sync(self, znode: BrokerIdZNode, wait_s: float) -> int:
        path = znode.path()
        data = znode.encode()
        deadline = time.monotonic() + wait_s
        self._kz.ensure_path(BROKER_IDS_PATH)
        while True:
            try:
                _, stat = self._kz.create(path, data, ephemeral=True, include_data=True)
                return int(stat.czxid)
            except NodeExistsError:
                pass
            try:
                existing, stat = self._kz.get(path)
            except NoNodeError:
                continue
            owner = int(stat.ephemeralOwner)
            session = self._current_session_sync()
            if owner == session:
                if existing != data:
                    self._kz.set(path, data)
                return int(stat.czxid)
            if owner in self._old_session_ids:
                log.info("replacing %s left by our expired session 0x%x", path, owner)
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._kz.delete(path, version=stat.version)
                continue
            previous = _registered_endpoints(existing, znode.broker_id)
            if previous == set(znode.endpoints):
                # a previous process of this broker: it advertised the endpoints this process
                # has bound, so it no longer listens (docs/failover.md)
                log.warning(
                    "replacing %s left by a previous process of this broker (session 0x%x)",
                    path,
                    owner,
                )
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._kz.delete(path, version=stat.version)
                continue
            answering = _answering_endpoint(previous)
            if answering is not None:
                raise BrokerIdAlreadyRegisteredError(
                    f"broker id {znode.broker_id} is already registered in ZooKeeper by a "
                    f"running broker that answers at {answering} ({path}, session "
                    f"0x{owner:x}): give this broker another broker.id"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerIdAlreadyRegisteredError(
                    f"broker id {znode.broker_id} is already registered in ZooKeeper "
                    f"({path}, session 0x{owner:x}): another broker with broker.id="
                    f"{znode.broker_id} is running, or a killed one's session has not expired "
                    f"yet. Registered as: {existing.decode('utf-8', 'replace')}"
                )
            gone = threading.Event()
            if self._kz.exists(path, watch=lambda _event, g=gone: g.set()) is not None:
                gone.wait(min(remaining, 1.0))

    async def registered_broker_epoch(self) -> int:
        """This broker's epoch, waiting until :meth:`register_broker` has returned it."""
        await self._broker_epoch_known.wait()
        assert self.broker_epoch is not None
        return self.broker_epoch

    async def deregister_broker(self) -> None:
        """Delete our ``/brokers/ids/<id>`` (controlled shutdown) and stop re-registering."""
        znode, self._registered_broker = self._registered_broker, None
        if znode is None:
            return
        path = znode.path()

        def work() -> None:
            try:
                _, stat = self._kz.get(path)
            except NoNodeError:
                return
            if int(stat.ephemeralOwner) == self._current_session_sync():
                with contextlib.suppress(NoNodeError, BadVersionError):
                    self._kz.delete(path, version=stat.version)

        await self._run(work)

    async def generate_broker_id(self, reserved_max: int = DEFAULT_RESERVED_BROKER_MAX_ID) -> int:
        """A new cluster-unique broker id, as Kafka generates it when ``broker.id`` is unset:
        the version of ``/brokers/seqid`` after an unconditional write, plus
        ``reserved.broker.max.id`` (so the first is ``reserved_max + 1``)."""

        def work() -> int:
            try:
                stat = self._kz.set(BROKER_SEQID_PATH, b"")
            except NoNodeError:
                self._kz.ensure_path(BROKER_SEQID_PATH)
                stat = self._kz.set(BROKER_SEQID_PATH, b"")
            return int(stat.version) + reserved_max

        return await self._run(work)

    async def get_broker_ids(self) -> list[int]:
        """The ids of the registered (live) brokers, sorted."""

        def work() -> list[int]:
            try:
                children = self._kz.get_children(BROKER_IDS_PATH)
            except NoNodeError:
                return []
            return sorted(int(c) for c in children if c.isdigit())

        return await self._run(work)

    async def get_broker(self, broker_id: int) -> BrokerIdZNode | None:
        """A live broker's registration, or None."""

        def work() -> BrokerIdZNode | None:
            try:
                data, _ = self._kz.get(BrokerIdZNode.path_for(broker_id))
            except NoNodeError:
                return None
            return BrokerIdZNode.decode(data, broker_id)

        return await self._run(work)

    async def get_brokers(self) -> dict[int, BrokerIdZNode]:
        """Every live broker's registration, by id."""
        out: dict[int, BrokerIdZNode] = {}
        for broker_id in await self.get_broker_ids():
            node = await self.get_broker(broker_id)
            if node is not None:
                out[broker_id] = node
        return out

    async def get_broker_epoch(self, broker_id: int) -> int | None:
        """The broker epoch (czxid of ``/brokers/ids/<id>``), or None if not registered."""

        def work() -> int | None:
            stat = self._kz.exists(BrokerIdZNode.path_for(broker_id))
            return int(stat.czxid) if stat is not None else None

        return await self._run(work)

    async def watch_broker_ids(self, callback: Callable[[list[int]], None]) -> WatchHandle:
        """Call ``callback(sorted live broker ids)`` now and on every change."""

        def on_children(children: list[str]) -> None:
            callback(sorted(int(c) for c in children if c.isdigit()))

        return await self.watch_children(BROKER_IDS_PATH, on_children)

    # ------------------------------------------------------------------ controller

    async def try_elect_controller(self, broker_id: int) -> int | None:
        """Try to become the controller: atomically create the ephemeral ``/controller`` and
        increment ``/controller_epoch`` (created as 0 if missing, so the first epoch is 1).

        Returns the new controller epoch, or None if another broker is the controller. If this
        session already is the controller, returns the current epoch. Records
        :attr:`controller_epoch` and :attr:`controller_epoch_zk_version` for fencing.
        """
        result = await self._run(self._elect_sync, broker_id)
        if result is None:
            return None
        epoch, zk_version = result
        self.controller_epoch = epoch
        self.controller_epoch_zk_version = zk_version
        log.info("broker %d elected controller, epoch %d", broker_id, epoch)
        return epoch

    def _read_epoch_sync(self) -> tuple[int, int] | None:
        try:
            data, stat = self._kz.get(CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return ControllerEpochZNode.decode(data).epoch, int(stat.version)

    def _we_are_controller_sync(self, broker_id: int) -> bool:
        try:
            data, stat = self._kz.get(CONTROLLER_PATH)
        except NoNodeError:
            return False
        try:
            holder = ControllerZNode.decode(data).broker_id
        except ZNodeDecodeError:
            return False
        return holder == broker_id and int(stat.ephemeralOwner) == self._current_session_sync()

    def _elect_sync(self, broker_id: int) -> tuple[int, int] | None:
        if self._kz.exists(CONTROLLER_PATH) is not None:
            if self._we_are_controller_sync(broker_id):
                current = self._read_epoch_sync()
                return current
            return None
        current = self._read_epoch_sync()
        if current is None:
            with contextlib.suppress(NodeExistsError):
                self._kz.create(
                    CONTROLLER_EPOCH_PATH,
                    ControllerEpochZNode(ControllerEpochZNode.INITIAL).encode(),
                )
            current = self._read_epoch_sync()
            if current is None:
                return None
        epoch, version = current
        new_epoch = epoch + 1
        tx = self._kz.transaction()
        tx.create(CONTROLLER_PATH, ControllerZNode(broker_id).encode(), ephemeral=True)
        tx.set_data(
            CONTROLLER_EPOCH_PATH, ControllerEpochZNode(new_epoch).encode(), version=version
        )
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return new_epoch, int(results[1].version)
        if any(isinstance(r, NodeExistsError | BadVersionError) for r in results):
            # Lost the race, or our own earlier attempt succeeded and its response was lost.
            if self._we_are_controller_sync(broker_id):
                now = self._read_epoch_sync()
                if now is not None and now[0] == new_epoch:
                    return now
            return None
        raise ZkError(f"controller election failed: {results!r}")

    async def get_controller(self) -> int | None:
        """The controller's broker id, or None."""

        def work() -> int | None:
            try:
                data, _ = self._kz.get(CONTROLLER_PATH)
            except NoNodeError:
                return None
            return ControllerZNode.decode(data).broker_id

        return await self._run(work)

    async def get_controller_epoch(self) -> Versioned[int] | None:
        """``/controller_epoch`` and its znode version, or None if no election happened yet."""
        current = await self._run(self._read_epoch_sync)
        return Versioned(current[0], current[1]) if current is not None else None

    async def watch_controller(self, callback: Callable[[int | None], None]) -> WatchHandle:
        """Call ``callback(controller id or None)`` now and whenever ``/controller`` changes."""

        def on_data(data: bytes | None, _version: int | None) -> None:
            controller: int | None = None
            if data:
                try:
                    controller = ControllerZNode.decode(data).broker_id
                except ZNodeDecodeError:
                    log.warning("unreadable %s: %r", CONTROLLER_PATH, data[:100])
            callback(controller)

        return await self.watch_data(CONTROLLER_PATH, on_data)

    async def get_controller_registration(self) -> tuple[int, int] | None:
        """The controller's broker id and the czxid of its ``/controller`` znode, or None."""

        def work() -> tuple[int, int] | None:
            try:
                data, stat = self._kz.get(CONTROLLER_PATH)
                return ControllerZNode.decode(data).broker_id, int(stat.czxid)
            except (NoNodeError, ZNodeDecodeError):
                return None

        return await self._run(work)

    async def delete_dead_controller(self, broker_id: int, czxid: int) -> bool:
        """Delete ``/controller`` if it still is the znode (``czxid``) of ``broker_id``, whose
        process was found dead (docs/failover.md): the election then runs at once instead of
        at the expiry of its session. Returns whether it was deleted."""

        def work() -> bool:
            try:
                data, stat = self._kz.get(CONTROLLER_PATH)
                if ControllerZNode.decode(data).broker_id != broker_id or stat.czxid != czxid:
                    return False
                self._kz.delete(CONTROLLER_PATH, version=stat.version)
            except (NoNodeError, BadVersionError, ZNodeDecodeError):
                return False
            return True

        return await self._run(work)

    async def resign_controller(self, broker_id: int) -> None:
        """Delete ``/controller`` if this session holds it for ``broker_id``."""

        def work() -> None:
            if self._we_are_controller_sync(broker_id):
                with contextlib.suppress(NoNodeError):
                    self._kz.delete(CONTROLLER_PATH)

        await self._run(work)
        self.controller_epoch = None
        self.controller_epoch_zk_version = None

    # ------------------------------------------------------------------ producer ids

    async def allocate_producer_id_block(
        self, broker_id: int, block_size: int = DEFAULT_PRODUCER_ID_BLOCK_SIZE
    ) -> tuple[int, int]:
        """Claim the next block of producer ids; returns (first, last), inclusive. A
        conditional-update loop on ``/latest_producer_id_block``, so ids never repeat across
        brokers and restarts."""
        if block_size < 1:
            raise ValueError("block_size must be positive")

        def work() -> tuple[int, int]:
            while True:
                try:
                    data, stat = self._kz.get(PRODUCER_ID_BLOCK_PATH)
                except NoNodeError:
                    self._kz.ensure_path(PRODUCER_ID_BLOCK_PATH)
                    continue
                if data:
                    current = ProducerIdBlockZNode.decode(data)
                    if current.block_end > LONG_MAX - block_size:
                        raise ZkError("all producer ids are exhausted")
                    start = current.next_block_start
                else:
                    start = 0
                block = ProducerIdBlockZNode(broker_id, start, start + block_size - 1)
                try:
                    self._kz.set(PRODUCER_ID_BLOCK_PATH, block.encode(), version=stat.version)
                except BadVersionError:
                    continue
                return block.block_start, block.block_end

        first, last = await self._run(work)
        log.info("broker %d got producer id block [%d, %d]", broker_id, first, last)
        return first, last


def _implements_protocol(client: ZkClient) -> ZkOperations:
    return client  # mypy checks that ZkClient implements ZkOperations


__all__ = [
    "DEFAULT_PRODUCER_ID_BLOCK_SIZE",
    "DEFAULT_RESERVED_BROKER_MAX_ID",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "BrokerIdAlreadyRegisteredError",
    "ControllerMovedError",
    "TopicExistsError",
    "UnknownTopicError",
    "Versioned",
    "WatchHandle",
    "ZkClient",
    "ZkConnectionError",
    "ZkError",
    "ZkOperations",
    "ZkState",
]


def _registered_endpoints(data: bytes, broker_id: int) -> set[str]:
    """The endpoints a registration advertises (empty when it cannot be read)."""
    try:
        return set(BrokerIdZNode.decode(data, broker_id).endpoints)
    except ValueError:
        return set()


def _answering_endpoint(endpoints: set[str]) -> str | None:
    """The first of ``endpoints`` (``LISTENER://host:port``) that accepts a TCP connection."""
    for text in sorted(endpoints):
        try:
            ep = Endpoint.parse(text)
        except ValueError:
            continue
        try:
            with socket.create_connection((ep.host, ep.port), timeout=1.0):
                return f"{ep.host}:{ep.port}"
        except OSError:
            continue
    return None
