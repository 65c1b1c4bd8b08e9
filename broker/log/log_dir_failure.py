"""Log directory failure (KIP-112; Kafka's ``LogDirFailureChannel``).

Theory of operation. A log directory (one entry of ``log.dirs``) fails as a whole. An I/O
error (any ``OSError``: ENOSPC, EIO, EROFS, ...) while a log in the directory appends,
flushes, rolls, reads, truncates or deletes, or while the directory's checkpoints are written,
marks the directory *offline* here. From that moment every operation on a log of the
directory raises :class:`~broker.log.errors.LogDirOfflineError` (KAFKA_STORAGE_ERROR) before
it touches a file, so nothing more is written there and no partial batch is ever
acknowledged. The channel's listeners are told once per directory; the replica manager is
one: it takes the directory's partitions offline (closes their logs, stops their fetchers,
answers the requests waiting on them) and has the broker write a log-dir event notification
for the controller, which moves those replicas offline and their leadership elsewhere. A
broker whose every log directory is offline shuts down. A directory stays offline until the
broker restarts; a directory that works again then is loaded and recovered as usual.

Each directory has one :class:`LogDirStatus`, shared by every log in it: the logs check its
``offline`` flag on every operation (one attribute read), and report their I/O errors
through it.

Concurrency: thread-safe. ``mark_offline`` is called from the event loop and from worker
threads (periodic flushes and checkpoints run in ``asyncio.to_thread``); the state is guarded
by a lock, and listeners are called outside it, in the reporting thread (a listener that
must act on the event loop hops there itself, with ``loop.call_soon_threadsafe``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["LogDirFailureChannel", "LogDirListener", "LogDirStatus"]

logger = logging.getLogger(__name__)

LogDirListener = Callable[[Path], None]
"""Called with a log directory that just went offline (in the reporting thread)."""


class LogDirStatus:
    """Whether one log directory is online; shared by every log in the directory.

    ``offline`` only ever goes from False to True (until the broker restarts); ``reason``
    says why. A status without a channel (a log opened on its own, in tests or tools)
    goes offline by itself.

    Concurrency: ``offline`` is a plain attribute read without a lock (a stale False only
    lets one more operation try, and fail, on the broken disk); ``fail`` is thread-safe.
    """

    __slots__ = ("_channel", "offline", "path", "reason")

    def __init__(self, path: Path, channel: LogDirFailureChannel | None = None) -> None:
        self.path = Path(path)
        self.offline = False
        self.reason: str | None = None
        self._channel = channel

    def fail(self, message: str, exc: BaseException | None = None) -> None:
        """Report an I/O error in this directory: it goes offline (idempotent)."""
        if self._channel is not None:
            self._channel.mark_offline(self.path, message, exc)
        elif not self.offline:
            self.reason = message
            self.offline = True
            logger.error("%s: %s", message, exc)

    def __repr__(self) -> str:
        return f"LogDirStatus({str(self.path)!r}, offline={self.offline})"


class LogDirFailureChannel:
    """The offline log directories of a broker and the listeners told when one fails (see
    the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._statuses: dict[Path, LogDirStatus] = {}
        self._offline: list[Path] = []
        self._listeners: list[LogDirListener] = []

    def status(self, log_dir: Path) -> LogDirStatus:
        """The shared status object of ``log_dir`` (created on first use)."""
        path = Path(log_dir)
        with self._lock:
            found = self._statuses.get(path)
            if found is None:
                found = self._statuses[path] = LogDirStatus(path, self)
            return found

    def is_offline(self, log_dir: Path) -> bool:
        return self.status(log_dir).offline

    @property
    def offline_dirs(self) -> list[Path]:
        """The offline directories, in the order they failed."""
        with self._lock:
            return list(self._offline)

    def mark_offline(self, log_dir: Path, message: str, exc: BaseException | None = None) -> bool:
        """Take ``log_dir`` offline because of ``exc`` (Kafka's ``maybeAddOfflineLogDir``);
        logs the error and calls the listeners the first time. Returns True if the
        directory was online until now."""
        status = self.status(log_dir)
        with self._lock:
            if status.offline:
                return False
            status.offline = True
            status.reason = f"{message}: {exc}" if exc is not None else message
            self._offline.append(status.path)
            listeners = list(self._listeners)
        logger.error(
            "log directory %s is offline: %s",
            status.path,
            status.reason,
            exc_info=exc if isinstance(exc, BaseException) else None,
        )
        for listener in listeners:
            try:
                listener(status.path)
            except Exception:
                logger.exception("log dir failure listener failed for %s", status.path)
        return True

    def add_listener(self, listener: LogDirListener) -> None:
        """Call ``listener`` with every directory that goes offline from now on, and at once
        with those already offline (found at start-up, say)."""
        with self._lock:
            self._listeners.append(listener)
            already = list(self._offline)
        for path in already:
            listener(path)

    def remove_listener(self, listener: LogDirListener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
