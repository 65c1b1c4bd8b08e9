"""The kazoo <-> asyncio bridge: one ZooKeeper session, used from an asyncio event loop.

Theory of operation
-------------------
kazoo is a blocking client with its own threads (a connection thread and a callback
thread). The client modules of this package (this one, ``client``, ``topics`` and
``security``) are the only ones that import it (DESIGN.md section 2); this one owns the
session, and :mod:`broker.zk.client` / :mod:`broker.zk.topics` build Kafka's ZooKeeper
operations on top of it.

Each operation is a coroutine that runs one *blocking helper* in a worker thread with
``asyncio.to_thread`` through :meth:`ZkSession._run`; a helper may issue several ZooKeeper
operations, and is wrapped in a kazoo retry (ConnectionLoss / OperationTimeout /
SessionExpired are retried until the session timeout elapses, then surface as
:class:`ZkConnectionError`). Helpers are written so that a retry after a lost *response* is
harmless (they re-read and recognise their own write).

kazoo's watch callbacks and connection-state changes arrive on kazoo's threads and hop back to
the event loop with ``loop.call_soon_threadsafe``. Watch callbacks are plain functions run on
the loop: keep them short (enqueue a controller event). Connection-state changes feed an
``asyncio.Queue`` drained by one supervisor task that :meth:`ZkSession.start` creates and
:meth:`ZkSession.close` cancels; it

* on ``LOST`` (session expired) runs the ``on_session_lost`` callbacks, so a controller or
  leader stops acting on leadership that ZooKeeper no longer backs;
* on ``CONNECTED`` with a *new* session id runs :meth:`ZkSession._on_new_session` (the
  Kafka client re-registers the broker's ephemeral ``/brokers/ids/<id>`` there) and then the
  ``on_reconnected`` callbacks (a controller re-runs its election there).

Concurrency: create and use on one event loop. Operations run blocking kazoo calls in worker
threads; several may run at once. Watch and state callbacks run on the event loop, never on
kazoo's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import KazooRetry, RetryFailedError

from broker.zk.interface import (
    SessionCallback,
    StateCallback,
    WatchHandle,
    ZkConnectionError,
    ZkError,
    ZkState,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_SESSION_TIMEOUT_MS = 18_000  # Kafka's zookeeper.session.timeout.ms


# How many times a request whose retry deadline passed is tried again while connected.
PAUSED_RETRIES = 3


class ZkSession:
    """One kazoo session driven from an asyncio event loop.

    Responsibility: connect (creating a missing chroot), track the connection state with
    session-loss / new-session callbacks, run blocking kazoo helpers in worker threads with
    retries, and deliver watches on the loop.

    Concurrency: create and use on one event loop. Operations run blocking kazoo calls in
    worker threads; several may run at once. Watch and state callbacks run on the event loop,
    never on kazoo's threads.
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
        # set while kazoo is connected; read by worker threads retrying a request
        self._connected_sync = threading.Event()
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
        self.expires = 0
        """Sessions that expired (Kafka's ZooKeeperExpiresPerSec count)."""
        self.disconnects = 0
        """Connections lost while the session lived on (ZooKeeperDisconnectsPerSec)."""
        self._lost_callbacks: list[SessionCallback] = []
        self._reconnected_callbacks: list[SessionCallback] = []
        self._state_callbacks: list[StateCallback] = []
        self._watches: list[object] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect (within ``connection_timeout_ms``) and start tracking the session.

        Raises :class:`ZkConnectionError` naming the connect string on failure.
        """
        if self._state is not ZkState.CLOSED or self._state_task is not None:
            raise ZkError("ZooKeeper session already started")
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

    async def __aenter__(self) -> Self:
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
            self._connected_sync.set()
        else:
            self._connected_sync.clear()
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
            self.disconnects += 1
            self._connected.clear()
            log.warning("ZooKeeper connection to %s suspended", self.connect)
            await self._fire(self._state_callbacks, ZkState.SUSPENDED)
        elif kstate == KazooState.LOST:
            self._state = ZkState.LOST
            self._connected.clear()
            log.warning("ZooKeeper session 0x%x lost", self._session_id or 0)
            if not self._lost_fired:
                self._lost_fired = True
                self.expires += 1
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
                    self.expires += 1
                    await self._fire(self._lost_callbacks)
                self._lost_fired = False
                await self._on_new_session()
                await self._fire(self._state_callbacks, ZkState.CONNECTED)
                await self._fire(self._reconnected_callbacks)
            else:
                if sid is not None:
                    self._session_id = sid
                self._lost_fired = False
                await self._fire(self._state_callbacks, ZkState.CONNECTED)

    async def _on_new_session(self) -> None:
        """Re-create what belonged to the expired session (subclasses: ephemeral znodes);
        runs before the ``on_reconnected`` callbacks."""

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
        for again in range(PAUSED_RETRIES + 1):
            try:
                result: T = self._retry.copy()(fn, *args)
                return result
            except RetryFailedError as exc:
                # The retry deadline is wall-clock time: a process paused (SIGSTOP, a frozen
                # VM) past it wakes up to find its deadline gone and the client connected
                # again (on a new session). As Kafka's ZooKeeper client retries a request
                # until connected, try again while the connection is back.
                if (
                    again < PAUSED_RETRIES
                    and not self._closing
                    and self._connected_sync.wait(self.connection_timeout_ms / 1000.0)
                ):
                    log.warning("ZooKeeper request outlived its retry deadline; retrying")
                    continue
                raise ZkConnectionError(
                    f"ZooKeeper {self.connect} unavailable ({type(exc).__name__}: {exc})"
                ) from exc
            except (
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
        raise AssertionError("unreachable")

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
