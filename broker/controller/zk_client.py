"""The kazoo <-> asyncio bridge: every ZooKeeper read and write the broker and controller do.

Theory of operation
-------------------
kazoo is a blocking client with its own threads (a connection thread and a callback
thread). This module is the only one that imports it (DESIGN.md section 2). Each public
method is a coroutine that runs one *blocking helper* (``_xxx_sync``) in a worker thread with
``asyncio.to_thread``; a helper may issue several ZooKeeper operations, and is wrapped in a
kazoo retry (ConnectionLoss / OperationTimeout / SessionExpired are retried until the session
timeout elapses, then surface as :class:`ZkConnectionError`). Helpers are written so that a
retry after a lost *response* is harmless (they re-read and recognise their own write).

kazoo's watch callbacks and connection-state changes arrive on kazoo's threads and hop back to
the event loop with ``loop.call_soon_threadsafe``. Watch callbacks are plain functions run on
the loop: keep them short (enqueue a controller event). Connection-state changes feed an
``asyncio.Queue`` drained by one supervisor task that :meth:`ZkClient.start` creates and
:meth:`ZkClient.close` cancels; it

* on ``LOST`` (session expired) runs the ``on_session_lost`` callbacks, so a controller or
  leader stops acting on leadership that ZooKeeper no longer backs;
* on ``CONNECTED`` with a *new* session id re-registers the broker's ephemeral
  ``/brokers/ids/<id>`` znode (if :meth:`ZkClient.register_broker` was called) and runs the
  ``on_reconnected`` callbacks (a controller re-runs its election there).

Semantics follow Kafka 3.9's ``KafkaZkClient``: controller election creates the ephemeral
``/controller`` and bumps ``/controller_epoch`` in one multi-op conditioned on the epoch's znode
version; partition-state updates are conditional on the state znode's version (optionally
also on the controller epoch's znode version, which fences a zombie controller); producer-id
blocks are allocated by a conditional-update loop; the broker id generator is the version of
``/brokers/seqid`` plus ``reserved.broker.max.id``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Generic, NamedTuple, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError

from broker.controller.znodes import (
    BROKER_IDS_PATH,
    BROKER_SEQID_PATH,
    BROKER_TOPICS_PATH,
    CLUSTER_ID_PATH,
    CONFIG_CHANGES_PATH,
    CONFIG_TOPICS_PATH,
    CONTROLLER_EPOCH_PATH,
    CONTROLLER_PATH,
    DELETE_TOPICS_PATH,
    ISR_CHANGE_NOTIFICATION_PATH,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK_PATH,
    BrokerIdZNode,
    ClusterIdZNode,
    ConfigChangeNotificationZNode,
    ControllerEpochZNode,
    ControllerZNode,
    DeleteTopicZNode,
    IsrChangeNotificationZNode,
    PartitionState,
    ProducerIdBlockZNode,
    TopicConfigZNode,
    TopicZNode,
    ZNodeDecodeError,
    now_ms_str,
    random_cluster_id,
    random_kafka_uuid,
)
from broker.types import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")
LONG_MAX = 9_223_372_036_854_775_807
DEFAULT_SESSION_TIMEOUT_MS = 18_000  # Kafka's zookeeper.session.timeout.ms
DEFAULT_RESERVED_BROKER_MAX_ID = 1000  # Kafka's reserved.broker.max.id
DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE

SessionCallback = Callable[[], Awaitable[None] | None]
StateCallback = Callable[["ZkState"], Awaitable[None] | None]


# --------------------------------------------------------------------------- errors


class ZkError(Exception):
    """A ZooKeeper operation failed; the message names the path or the entity."""


class ZkConnectionError(ZkError):
    """ZooKeeper unreachable: cannot connect, or the connection stayed lost past the retry
    deadline, or the client is closed."""


class BrokerIdAlreadyRegisteredError(ZkError):
    """``/brokers/ids/<id>`` is held by another live session."""


class TopicExistsError(ZkError):
    """The topic already exists (or is still marked for deletion)."""


class UnknownTopicError(ZkError):
    """The topic does not exist."""


class ControllerMovedError(ZkError):
    """A write fenced by the controller epoch failed: another controller was elected."""


# --------------------------------------------------------------------------- small values


class ZkState(enum.Enum):
    """The connection state, as seen on the event loop."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost, session may still be alive
    LOST = "LOST"  # session expired (ephemeral znodes gone) or connection closed
    CLOSED = "CLOSED"  # not started or closed by us


class Versioned(NamedTuple, Generic[T]):
    """A decoded znode with the znode's data version (for conditional updates)."""

    value: T
    zk_version: int


class WatchHandle:
    """Returned by the ``watch_*`` methods; :meth:`cancel` stops further callbacks."""

    __slots__ = ("_cancelled", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled


def _check_topic_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or len(name) > 249:
        raise ValueError(f"invalid topic name {name!r}")


# --------------------------------------------------------------------------- the client


class ZkClient:
    """Kafka's ZooKeeper data model (``broker.controller.znodes``) over one kazoo session.

    Responsibility: typed, async access to every znode the broker and controller use;
    connection-state tracking with session-loss / new-session callbacks; re-registration of
    the broker's ephemeral znode on a new session.

    Format: the znodes' JSON is defined in :mod:`broker.controller.znodes` (Kafka 3.9's).

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
        self.connect = connect
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = (
            connection_timeout_ms if connection_timeout_ms is not None else session_timeout_ms
        )
        self._loop = loop
        hosts, _, chroot = connect.partition("/")
        self._hosts = hosts
        self._chroot = f"/{chroot}".rstrip("/") if chroot else ""
        self._closing = False
        self._retry = KazooRetry(
            max_tries=-1,
            delay=0.05,
            backoff=2,
            max_delay=1.0,
            deadline=max(1.0, session_timeout_ms / 1000.0),
            interrupt=lambda: self._closing,
        )
        self._kz = KazooClient(
            hosts=connect,
            timeout=session_timeout_ms / 1000.0,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=1.0),
            command_retry=KazooRetry(max_tries=1),
            logger=logging.getLogger("kazoo.client"),
        )
        self._state = ZkState.CLOSED
        self._state_queue: asyncio.Queue[tuple[str, int | None]] = asyncio.Queue()
        self._state_task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._session_id: int | None = None
        self._old_session_ids: set[int] = set()
        self._lost_fired = False
        self._lost_callbacks: list[SessionCallback] = []
        self._reconnected_callbacks: list[SessionCallback] = []
        self._state_callbacks: list[StateCallback] = []
        self._registered_broker: BrokerIdZNode | None = None
        self._watches: list[object] = []
        self.controller_epoch: int | None = None
        """The epoch this client won in its last successful election."""
        self.controller_epoch_zk_version: int | None = None
        """``/controller_epoch``'s znode version after that election (the fence)."""

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect (within ``connection_timeout_ms``) and start tracking the session.

        Raises :class:`ZkConnectionError` naming the connect string on failure.
        """
        if self._state is not ZkState.CLOSED or self._state_task is not None:
            raise ZkError("ZkClient already started")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        self._closing = False
        if self._chroot:
            await asyncio.to_thread(self._ensure_chroot_sync)
        self._kz.add_listener(self._on_kazoo_state)
        timeout = self.connection_timeout_ms / 1000.0
        try:
            await asyncio.to_thread(self._kz.start, timeout)
        except (KazooTimeoutError, KazooException, OSError) as exc:
            self._kz.remove_listener(self._on_kazoo_state)
            raise ZkConnectionError(
                f"could not connect to ZooKeeper at {self.connect} within {timeout:g}s "
                f"(zookeeper.connect / zookeeper.connection.timeout.ms): {exc}"
            ) from exc
        client_id = self._kz.client_id
        self._session_id = client_id[0] if client_id else None
        self._state = ZkState.CONNECTED
        self._connected.set()
        self._state_task = asyncio.create_task(self._supervise(), name="zk-session-supervisor")
        log.info("connected to ZooKeeper %s (session 0x%x)", self.connect, self._session_id or 0)

    async def close(self) -> None:
        """Close the session (ephemeral znodes vanish at once) and stop kazoo's threads."""
        if self._closing:
            return
        self._closing = True
        task, self._state_task = self._state_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._kz.remove_listener(self._on_kazoo_state)
        await asyncio.to_thread(self._stop_kazoo_sync)
        self._state = ZkState.CLOSED
        self._connected.clear()
        log.info("ZooKeeper session to %s closed", self.connect)

    async def __aenter__(self) -> ZkClient:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _stop_kazoo_sync(self) -> None:
        try:
            self._kz.stop()
        finally:
            self._kz.close()

    def _ensure_chroot_sync(self) -> None:
        # Kafka creates a missing chroot; kazoo cannot from inside the chroot.
        root = KazooClient(hosts=self._hosts, timeout=self.session_timeout_ms / 1000.0)
        try:
            root.start(timeout=self.connection_timeout_ms / 1000.0)
            root.ensure_path(self._chroot)
        except (KazooTimeoutError, KazooException) as exc:
            raise ZkConnectionError(
                f"could not create the chroot {self._chroot} on ZooKeeper {self._hosts}: {exc}"
            ) from exc
        finally:
            root.stop()
            root.close()

    # ------------------------------------------------------------------ session state

    @property
    def state(self) -> ZkState:
        return self._state

    @property
    def session_id(self) -> int | None:
        """The current session id (changes when a session expires and a new one starts)."""
        return self._session_id

    @property
    def connected(self) -> asyncio.Event:
        """Set while the connection is up."""
        return self._connected

    def on_session_lost(self, callback: SessionCallback) -> None:
        """Run ``callback()`` (sync or async, on the loop) when the session expires."""
        self._lost_callbacks.append(callback)

    def on_reconnected(self, callback: SessionCallback) -> None:
        """Run ``callback()`` when a *new* session is established after a lost one, after the
        broker znode was re-registered."""
        self._reconnected_callbacks.append(callback)

    def on_state_change(self, callback: StateCallback) -> None:
        """Run ``callback(state)`` on every state change (CONNECTED, SUSPENDED, LOST)."""
        self._state_callbacks.append(callback)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: no blocking calls here, just hop to the loop.
        sid: int | None = None
        if state == KazooState.CONNECTED:
            client_id = self._kz.client_id
            sid = client_id[0] if client_id else None
        self._post(self._state_queue.put_nowait, (state, sid))

    def _post(self, fn: Callable[..., object], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # loop closed meanwhile
            loop.call_soon_threadsafe(fn, *args)

    async def _supervise(self) -> None:
        while True:
            kstate, sid = await self._state_queue.get()
            if self._closing:
                continue
            try:
                await self._handle_state(kstate, sid)
            except asyncio.CancelledError:
                raise
            except Exception:  # the supervisor must survive any callback
                log.exception("error while handling ZooKeeper state %s", kstate)

    async def _handle_state(self, kstate: str, sid: int | None) -> None:
        if kstate == KazooState.SUSPENDED:
            self._state = ZkState.SUSPENDED
            self._connected.clear()
            log.warning("ZooKeeper connection to %s suspended", self.connect)
            await self._fire(self._state_callbacks, ZkState.SUSPENDED)
        elif kstate == KazooState.LOST:
            self._state = ZkState.LOST
            self._connected.clear()
            log.warning("ZooKeeper session 0x%x lost", self._session_id or 0)
            if not self._lost_fired:
                self._lost_fired = True
                await self._fire(self._lost_callbacks)
            await self._fire(self._state_callbacks, ZkState.LOST)
        elif kstate == KazooState.CONNECTED:
            self._state = ZkState.CONNECTED
            self._connected.set()
            new_session = sid is not None and sid != self._session_id
            if new_session and self._session_id is not None:
                log.warning("new ZooKeeper session 0x%x (was 0x%x)", sid or 0, self._session_id)
                self._old_session_ids.add(self._session_id)
                self._session_id = sid
                if not self._lost_fired:
                    await self._fire(self._lost_callbacks)
                self._lost_fired = False
                await self._reregister_broker()
                await self._fire(self._state_callbacks, ZkState.CONNECTED)
                await self._fire(self._reconnected_callbacks)
            else:
                if sid is not None:
                    self._session_id = sid
                self._lost_fired = False
                await self._fire(self._state_callbacks, ZkState.CONNECTED)

    async def _reregister_broker(self) -> None:
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
        log.info("re-registered broker %d (broker epoch %d)", znode.broker_id, epoch)

    async def _fire(self, callbacks: Sequence[Callable[..., Any]], *args: Any) -> None:
        for callback in list(callbacks):
            try:
                result = callback(*args)
                if inspect.isawaitable(result):
                    await result
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad callback must not stop the others
                log.exception("ZooKeeper state callback %r failed", callback)

    # ------------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._state is ZkState.CLOSED or self._closing:
            raise ZkConnectionError(f"ZooKeeper client for {self.connect} is not started")
        return await asyncio.to_thread(self._retrying, fn, *args)

    def _retrying(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            result: T = self._retry.copy()(fn, *args)
            return result
        except (
            RetryFailedError,
            ConnectionClosedError,
            ConnectionLoss,
            SessionExpiredError,
            OperationTimeoutError,
        ) as exc:
            raise ZkConnectionError(
                f"ZooKeeper {self.connect} unavailable ({type(exc).__name__}: {exc})"
            ) from exc
        except KazooException as exc:
            raise ZkError(f"ZooKeeper {self.connect}: {type(exc).__name__}: {exc}") from exc

    def _current_session_sync(self) -> int:
        client_id = self._kz.client_id
        if not client_id:
            raise ConnectionLoss("not connected")  # retried by _retrying
        return int(client_id[0])

    def _dispatch(self, handle: WatchHandle, callback: Callable[..., None], *args: Any) -> None:
        if handle.cancelled:
            return
        try:
            callback(*args)
        except Exception:  # a failing watcher must not break kazoo's thread
            log.exception("ZooKeeper watch callback for %s failed", handle.path)

    # ------------------------------------------------------------------ generic watches

    async def watch_children(self, path: str, callback: Callable[[list[str]], None]) -> WatchHandle:
        """Call ``callback(children)`` on the loop now and whenever ``path``'s children change
        (the path is created if missing; the watch survives session loss)."""
        handle = WatchHandle(path)

        def on_children(children: list[str]) -> bool:
            if handle.cancelled:
                return False
            self._post(self._dispatch, handle, callback, sorted(children))
            return True

        def setup() -> None:
            self._kz.ensure_path(path)
            self._watches.append(ChildrenWatch(self._kz, path, on_children))

        await self._run(setup)
        return handle

    async def watch_data(
        self, path: str, callback: Callable[[bytes | None, int | None], None]
    ) -> WatchHandle:
        """Call ``callback(data, zk_version)`` (``None, None`` while the znode is absent) on
        the loop now and whenever the znode is created, changed or deleted."""
        handle = WatchHandle(path)

        def on_data(data: bytes | None, stat: Any) -> bool:
            if handle.cancelled:
                return False
            version = stat.version if stat is not None else None
            self._post(
                self._dispatch, handle, callback, data if stat is not None else None, version
            )
            return True

        def setup() -> None:
            self._watches.append(DataWatch(self._kz, path, on_data))

        await self._run(setup)
        return handle

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

        If another live session holds the id, wait up to ``wait_s`` seconds for it to go
        away (a hard-killed previous instance's session expires after the session timeout),
        then raise :class:`BrokerIdAlreadyRegisteredError`. A znode left by one of this
        client's own expired sessions is replaced (Kafka's KAFKA-7165 workaround). The znode
        is re-registered automatically whenever a new session starts.
        """
        epoch = await self._run(self._register_broker_sync, znode, wait_s)
        self._registered_broker = znode
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

    async def resign_controller(self, broker_id: int) -> None:
        """Delete ``/controller`` if this session holds it for ``broker_id``."""

        def work() -> None:
            if self._we_are_controller_sync(broker_id):
                with contextlib.suppress(NoNodeError):
                    self._kz.delete(CONTROLLER_PATH)

        await self._run(work)
        self.controller_epoch = None
        self.controller_epoch_zk_version = None

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
        _check_topic_name(name)
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
    ) -> Versioned[PartitionState] | None:
        """The partition's leader/ISR state and its znode version, or None."""

        def work() -> Versioned[PartitionState] | None:
            try:
                data, stat = self._kz.get(PartitionState.path(name, partition))
            except NoNodeError:
                return None
            return Versioned(PartitionState.decode(data, name, partition), int(stat.version))

        return await self._run(work)

    async def get_partition_states(self, name: str) -> dict[int, Versioned[PartitionState]]:
        """Every partition state of the topic that exists, by partition."""

        def work() -> dict[int, Versioned[PartitionState]]:
            try:
                children = self._kz.get_children(TopicZNode.partitions_path(name))
            except NoNodeError:
                return {}
            out: dict[int, Versioned[PartitionState]] = {}
            for child in children:
                if not child.isdigit():
                    continue
                p = int(child)
                try:
                    data, stat = self._kz.get(PartitionState.path(name, p))
                except NoNodeError:
                    continue
                out[p] = Versioned(PartitionState.decode(data, name, p), int(stat.version))
            return dict(sorted(out.items()))

        return await self._run(work)

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
        path = PartitionState.path(name, partition)
        data = state.encode()

        def already_written() -> int | None:
            try:
                current, stat = self._kz.get(path)
            except NoNodeError:
                return None
            try:
                same = PartitionState.decode(current, name, partition) == state
            except ZNodeDecodeError:
                same = False
            return int(stat.version) if same and stat.version == expected_version + 1 else None

        def work() -> int | None:
            if controller_epoch_zk_version is None:
                try:
                    return int(self._kz.set(path, data, version=expected_version).version)
                except BadVersionError:
                    return already_written()
                except NoNodeError:
                    return None
            tx = self._kz.transaction()
            tx.check(CONTROLLER_EPOCH_PATH, controller_epoch_zk_version)
            tx.set_data(path, data, version=expected_version)
            results = tx.commit()
            if not any(isinstance(r, Exception) for r in results):
                return int(results[1].version)
            if isinstance(results[0], BadVersionError | NoNodeError):
                raise ControllerMovedError(
                    f"controller epoch znode version is no longer {controller_epoch_zk_version}"
                    f"; not writing {path}"
                )
            if isinstance(results[1], BadVersionError):
                return already_written()
            if isinstance(results[1], NoNodeError):
                return None
            raise ZkError(f"updating {path} failed: {results!r}")

        return await self._run(work)

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
        _check_topic_name(name)
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
        _check_topic_name(name)

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
        _check_topic_name(name)

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


__all__ = [
    "BrokerIdAlreadyRegisteredError",
    "ControllerMovedError",
    "TopicExistsError",
    "UnknownTopicError",
    "Versioned",
    "WatchHandle",
    "ZkClient",
    "ZkConnectionError",
    "ZkError",
    "ZkState",
]
