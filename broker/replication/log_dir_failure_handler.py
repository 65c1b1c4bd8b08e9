"""Taking the partitions of a failed log directory offline (KIP-112; Kafka's
``LogDirFailureHandler`` and ``ReplicaManager.handleLogDirFailure``).

Theory of operation. The log manager's :class:`~broker.log.log_dir_failure.LogDirFailureChannel`
reports each directory that goes offline (an I/O error in one of its logs or checkpoints),
possibly from a worker thread; the report is handed to the event loop through a queue, and
one task handles the directories one at a time. For each, the replica manager
(:meth:`~broker.replication.replica_manager.ReplicaManager.handle_log_dir_failure`, the
owner of the partitions) moves every partition whose log is there from its ``partitions`` to
its ``offline_partitions``: its fetcher is removed, its log is closed without writing
anything, the produces and fetches waiting on it are woken (they answer
KAFKA_STORAGE_ERROR), and the role listeners (group and transaction coordinators) hear it is
no longer led here. Then ``log_dir_event`` writes the log-dir event
notification (``/log_dir_event_notification/log_dir_event_<seq>``, retried until written)
that makes the controller move these replicas offline and elect new leaders. If no
directory is left online, ``on_all_log_dirs_offline`` is called instead with the reason (the
broker shuts down, as Kafka halts).

The handler sees the replica manager only as a :class:`LogDirHost` (its broker id and that
one method) and the log manager for the channel and the directories still online.

Concurrency: ``handle`` and the task run on the event loop; the channel listener may be called
from any thread and only hops to the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from broker.types import TopicPartition

if TYPE_CHECKING:
    from broker.log.log_manager import LogManager

__all__ = ["LogDirFailureHandler", "LogDirHost"]

log = logging.getLogger(__name__)

LOG_DIR_EVENT_RETRY_S = 1.0


class LogDirHost(Protocol):
    """What the handler needs of the replica manager."""

    @property
    def broker_id(self) -> int: ...

    def handle_log_dir_failure(
        self, log_dir: Path
    ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """Take the partitions whose log is in the (offline) ``log_dir`` offline: returns
        those that were hosted here and those whose log the log manager closed."""
        ...


class LogDirFailureHandler:
    """The replica manager's reaction to failed log directories (see the module docstring)."""

    def __init__(
        self,
        host: LogDirHost,
        log_manager: LogManager,
        *,
        log_dir_event: Callable[[], Awaitable[None]] | None,
        on_all_log_dirs_offline: Callable[[str], None] | None,
    ) -> None:
        self._host = host
        self._log_manager = log_manager
        self._log_dir_event = log_dir_event
        self._on_all_log_dirs_offline = on_all_log_dirs_offline
        self._failed_dirs: asyncio.Queue[Path] = asyncio.Queue()
        self._listener: Callable[[Path], None] | None = None

    def start(self) -> asyncio.Task[None]:
        """Listen to the failure channel (directories already offline are handled at once)
        and start the handler task (call on the event loop; the caller owns the task)."""
        loop = asyncio.get_running_loop()
        queue = self._failed_dirs

        def on_failed_dir(log_dir: Path) -> None:  # any thread
            try:
                loop.call_soon_threadsafe(queue.put_nowait, log_dir)
            except RuntimeError:  # the loop is closed: the broker is gone anyway
                log.warning("log dir %s failed after the event loop closed", log_dir)

        task = loop.create_task(self._run(), name="log-dir-failure-handler")
        self._listener = on_failed_dir
        self._log_manager.failure_channel.add_listener(on_failed_dir)
        return task

    def stop(self) -> None:
        """Stop listening (the task is cancelled by the replica manager)."""
        if self._listener is not None:
            self._log_manager.failure_channel.remove_listener(self._listener)
            self._listener = None

    def handle(self, log_dir: Path) -> list[TopicPartition]:
        """Take the partitions whose log is in ``log_dir`` offline; returns those that were
        hosted (led or followed) here. ``log_dir`` must already be offline in the channel."""
        log_dir = Path(log_dir)
        gone, closed = self._host.handle_log_dir_failure(log_dir)
        log.warning(
            "broker %d stopped the fetchers of partitions %s and took them offline because "
            "they are in the failed log directory %s",
            self._host.broker_id,
            ", ".join(str(tp) for tp in sorted(set(gone) | set(closed))) or "(none)",
            log_dir,
        )
        return gone

    async def _run(self) -> None:
        log_manager = self._log_manager
        while True:
            log_dir = await self._failed_dirs.get()
            try:
                self.handle(log_dir)
            except Exception:
                log.exception("taking the partitions of %s offline failed", log_dir)
            if not log_manager.live_log_dirs:
                reason = (
                    f"all log dirs in {', '.join(str(d) for d in log_manager.log_dirs)} have failed"
                )
                log.error("shutting down broker %d because %s", self._host.broker_id, reason)
                if self._on_all_log_dirs_offline is not None:
                    self._on_all_log_dirs_offline(reason)
                return
            await self._propagate()

    async def _propagate(self) -> None:
        """Tell the controller (a log-dir event notification), retrying until written."""
        if self._log_dir_event is None:
            return
        while True:
            try:
                await self._log_dir_event()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "writing the log dir event notification failed; retrying in %.1fs",
                    LOG_DIR_EVENT_RETRY_S,
                )
                await asyncio.sleep(LOG_DIR_EVENT_RETRY_S)
