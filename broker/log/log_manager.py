"""All partition logs of a broker, across its log directories.

Theory of operation. Each log directory (``log.dirs``) holds partition directories
``<topic>-<partition>`` plus log-dir-level files (formats in :mod:`broker.log.checkpoints`):

* ``meta.properties``: ``version=0``, ``broker.id``, ``cluster.id``; a directory that names
  another broker or cluster is refused at start-up;
* ``recovery-point-offset-checkpoint``: per partition, the offset below which the log was
  fsynced (recovery re-validates only from there);
* ``log-start-offset-checkpoint``: per partition, the log start offset (DeleteRecords);
* (``replication-offset-checkpoint``, the high watermarks, belongs to the replication layer,
  which writes it with :class:`~broker.log.checkpoints.OffsetCheckpointFile`);
* ``.kafka_cleanshutdown``: written after every log was closed and checkpointed; if present
  at start-up the logs are trusted without re-validation, then it is removed.

Start-up also finishes interrupted deletions (``*-delete`` partition directories; the logs
remove their own ``*.deleted`` files) and skips anything it does not recognise. New logs go to
the online log directory holding the fewest partitions. The periodic tasks (retention
``cleanup``, ``flush_dirty``, ``checkpoint``) are driven by the broker's scheduler.

Log directory failure (KIP-112, :mod:`broker.log.log_dir_failure`): an ``OSError`` while a
directory is loaded at start-up, while its checkpoints are written, or while one of its logs
works, takes the directory offline in the manager's failure channel. Its logs are then closed
without writing anything (``handle_log_dir_failure``, called by the replica manager), no new
log is placed in it, the checkpoints and the clean-shutdown marker skip it, and a log whose
directory may be offline is not re-created empty elsewhere (``get_or_create_log`` with
``is_new`` False). Start-up fails only if every directory fails.

Concurrency: like :class:`~broker.log.log.Log`, every method is called from the broker's
event-loop thread; there are no locks. Exceptions: ``startup`` may run in a worker thread
before the loop uses the manager, and ``flush_dirty`` and ``checkpoint`` may run in a worker
thread concurrently with the loop (they work on snapshots and only fsync and write files).
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from broker.clock import Clock
from broker.log.checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    OffsetCheckpointFile,
    atomic_write,
    fsync_dir,
    read_properties,
    remove_durably,
    write_properties,
)
from broker.log.errors import (
    InconsistentBrokerMetadataError,
    KafkaStorageError,
    LogDirOfflineError,
)
from broker.log.log import DELETE_DIR_SUFFIX, Log, parse_topic_partition
from broker.log.log_dir_failure import LogDirFailureChannel
from broker.topic_config import LogConfig
from broker.types import TopicPartition

__all__ = ["LogManager"]

logger = logging.getLogger(__name__)

_SKIPPED_DIR_SUFFIXES = ("-future", "-stray")


class LogManager:
    """Owns every :class:`Log` of this broker and the log-dir-level files (see the module
    docstring for the files and their formats).

    Concurrency: event-loop thread, except ``flush_dirty``/``checkpoint`` (see module).
    """

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        clock: Clock,
        broker_id: int,
        cluster_id: str | None = None,
        failure_channel: LogDirFailureChannel | None = None,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.failure_channel = failure_channel or LogDirFailureChannel()
        """Where this broker's log directories go offline (shared with the replica manager)."""
        self.default_config = default_config
        self.broker_id = broker_id
        #: called with each deleted log's partition (the log cleaner forgets it)
        self.deletion_listeners: list[Callable[[TopicPartition], None]] = []
        self.cluster_id = cluster_id
        self._clock = clock
        # deleted logs whose files are still open: (close at ms, log)
        self._closing: list[tuple[int, Log]] = []
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._started = False

    # --- start-up ----------------------------------------------------------------------

    def startup(self, topic_configs: Callable[[str], LogConfig]) -> None:
        """Load every partition of every log directory (see the module docstring). A
        directory that fails with an ``OSError`` goes offline (its logs are not loaded);
        raises :class:`KafkaStorageError` if every directory does."""
        for log_dir in self.log_dirs:
            try:
                self._load_dir(log_dir, topic_configs)
            except OSError as exc:
                self.failure_channel.mark_offline(log_dir, f"error while loading {log_dir}", exc)
                for tp in [tp for tp, d in self._dir_of.items() if d == log_dir]:
                    self._dir_of.pop(tp)
                    self._logs.pop(tp).close_handles()
        if not self.live_log_dirs:
            raise KafkaStorageError(
                "none of the log dirs "
                f"{', '.join(str(d) for d in self.log_dirs)} can be loaded: "
                + "; ".join(f"{d}: {self.failure_channel.status(d).reason}" for d in self.log_dirs)
            )
        self._started = True
        self.checkpoint()

    def _load_dir(self, log_dir: Path, topic_configs: Callable[[str], LogConfig]) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self._check_meta_properties(log_dir)
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read_or_empty()
        start_offsets = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read_or_empty()
        status = self.failure_channel.status(log_dir)
        for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
            if not entry.is_dir(follow_symlinks=False):
                continue
            name = entry.name
            if name.endswith(DELETE_DIR_SUFFIX):
                logger.info("finishing deletion of %s", entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            if name.endswith(_SKIPPED_DIR_SUFFIXES):
                logger.warning("skipping %s (not supported)", entry.path)
                continue
            try:
                tp = parse_topic_partition(name)
            except ValueError:
                logger.debug("skipping unrelated directory %s", entry.path)
                continue
            if tp in self._logs:
                raise KafkaStorageError(
                    f"partition {tp} found in both {self._dir_of[tp]} and {log_dir}"
                )
            log = Log.open(
                Path(entry.path),
                topic_configs(tp.topic),
                clock=self._clock,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                clean_shutdown=clean,
                dir_status=status,
            )
            self._logs[tp] = log
            self._dir_of[tp] = log_dir
        if clean:
            remove_durably(marker)
        logger.info("log dir %s loaded (%s shutdown)", log_dir, "clean" if clean else "unclean")

    def _check_meta_properties(self, log_dir: Path) -> None:
        path = log_dir / META_PROPERTIES
        if path.exists():
            props = read_properties(path)
            if props.get("version", "0") != "0":
                raise InconsistentBrokerMetadataError(
                    f"{path}: unsupported version {props.get('version')}"
                )
            try:
                stored_id = int(props["broker.id"])
            except (KeyError, ValueError) as exc:
                raise InconsistentBrokerMetadataError(f"{path}: no valid broker.id") from exc
            if stored_id != self.broker_id:
                raise InconsistentBrokerMetadataError(
                    f"{path} belongs to broker {stored_id}, not {self.broker_id}"
                )
            stored_cluster = props.get("cluster.id") or None
            if self.cluster_id is None:
                self.cluster_id = stored_cluster
            elif stored_cluster is not None and stored_cluster != self.cluster_id:
                raise InconsistentBrokerMetadataError(
                    f"{path} belongs to cluster {stored_cluster}, not {self.cluster_id}"
                )
            if stored_cluster is not None or self.cluster_id is None:
                return
        props_out: dict[str, str] = {}
        if self.cluster_id is not None:
            props_out["cluster.id"] = self.cluster_id
        props_out["version"] = "0"
        props_out["broker.id"] = str(self.broker_id)
        write_properties(path, props_out)

    # --- log directories -----------------------------------------------------------------

    @property
    def live_log_dirs(self) -> list[Path]:
        """The log directories that are online, in ``log.dirs`` order."""
        channel = self.failure_channel
        return [d for d in self.log_dirs if not channel.is_offline(d)]

    @property
    def offline_log_dirs(self) -> list[Path]:
        channel = self.failure_channel
        return [d for d in self.log_dirs if channel.is_offline(d)]

    def log_dir_of(self, tp: TopicPartition) -> Path | None:
        """The log directory holding ``tp``'s log (None if this broker has no such log)."""
        return self._dir_of.get(tp)

    def handle_log_dir_failure(self, log_dir: Path) -> list[TopicPartition]:
        """``log_dir`` went offline: forget its logs and close their files without writing
        anything (Kafka's ``LogManager.handleLogDirFailure``). Returns their partitions.
        Event-loop thread (the loop owns the files)."""
        log_dir = Path(log_dir)
        if not self.failure_channel.is_offline(log_dir):
            self.failure_channel.mark_offline(log_dir, "taken offline")
        gone = sorted(tp for tp, d in self._dir_of.items() if d == log_dir)
        for tp in gone:
            self._dir_of.pop(tp)
            self._logs.pop(tp).close_handles()
        logger.warning(
            "logs in %s are offline: %s", log_dir, ", ".join(str(tp) for tp in gone) or "none"
        )
        return gone

    # --- logs --------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def all_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def get_or_create_log(
        self, tp: TopicPartition, config: LogConfig | None = None, *, is_new: bool = True
    ) -> Log:
        """The log of ``tp``, created empty in the least-loaded online log directory if
        absent. A partition that is not new (``is_new`` False: it existed before, so its log
        may be in an offline directory) is not created while any directory is offline
        (Kafka's rule); raises :class:`KafkaStorageError` then, or when no directory is
        online."""
        log = self._logs.get(tp)
        if log is not None:
            return log
        offline = self.offline_log_dirs
        if offline and not is_new:
            raise LogDirOfflineError(
                f"cannot create a log for {tp}: log dirs "
                f"{', '.join(str(d) for d in offline)} are offline"
            )
        log_dir = self._next_log_dir()
        try:
            log = Log.open(
                log_dir / str(tp),
                config or self.default_config,
                clock=self._clock,
                dir_status=self.failure_channel.status(log_dir),
            )
        except OSError as exc:
            message = f"error while creating log for {tp} in dir {log_dir}"
            self.failure_channel.mark_offline(log_dir, message, exc)
            raise LogDirOfflineError(f"{message}: {exc}") from exc
        self._logs[tp] = log
        self._dir_of[tp] = log_dir
        logger.info("created log %s in %s", tp, log_dir)
        return log

    def _next_log_dir(self) -> Path:
        live = self.live_log_dirs
        if not live:
            raise LogDirOfflineError(
                f"no online log dir: {', '.join(str(d) for d in self.log_dirs)} are offline"
            )
        if len(live) == 1:
            return live[0]  # no count: creating N logs must not cost N^2
        counts = collections.Counter(self._dir_of.values())
        return min(live, key=lambda d: counts[d])

    def delete_log(self, tp: TopicPartition) -> None:
        """Delete ``tp``'s log: rename its directory to ``<name>.<uuid>-delete``, remove it,
        and drop it from the checkpoints."""
        log = self._logs.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return
        # the files close file.delete.delay.ms later (cleanup), so fetch responses already
        # built from them can still be sent
        try:
            log.delete(close_handles=False)
        except OSError as exc:
            self.failure_channel.mark_offline(log_dir, f"error while deleting log {tp}", exc)
        else:
            self._closing.append((self._clock.time_ms() + log.config.file_delete_delay_ms, log))
            self._close_deleted()
        self._checkpoint_dir(log_dir)
        for listener in self.deletion_listeners:
            listener(tp)

    # --- periodic tasks ----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints of every online log
        dir (a dir whose checkpoint cannot be written goes offline)."""
        for log_dir in self.log_dirs:
            self._checkpoint_dir(log_dir)

    def _logs_in(self, log_dir: Path) -> dict[TopicPartition, Log]:
        dir_of = dict(self._dir_of)  # snapshots: may run in a worker thread
        return {tp: log for tp, log in list(self._logs.items()) if dir_of.get(tp) == log_dir}

    def _checkpoint_dir(self, log_dir: Path) -> bool:
        """Write ``log_dir``'s checkpoints; False (and the dir offline) if that fails."""
        if self.failure_channel.is_offline(log_dir):
            return False
        logs = self._logs_in(log_dir)
        try:
            OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(
                {tp: log.recovery_point for tp, log in logs.items()}
            )
            OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(
                {tp: log.log_start_offset for tp, log in logs.items()}
            )
        except OSError as exc:
            self.failure_channel.mark_offline(
                log_dir, f"error while writing the checkpoints of {log_dir}", exc
            )
            return False
        return True

    def cleanup(self) -> int:
        """Retention for every log (and expiry of idle producer ids); returns the number of
        segments deleted. A log whose directory fails is skipped (it is going offline)."""
        deleted = 0
        for log in list(self._logs.values()):
            try:
                deleted += log.delete_old_segments()
            except KafkaStorageError as exc:
                logger.debug("retention of %s skipped: %s", log.topic_partition, exc)
                continue
            log.producer_state.remove_expired()
        self._close_deleted()
        return deleted

    def _close_deleted(self, everything: bool = False) -> None:
        """Close the files of deleted logs whose delay has passed (or all of them)."""
        if not self._closing:
            return
        now = self._clock.time_ms()
        keep = []
        for deadline, log in self._closing:
            if everything or deadline <= now:
                log.close_handles()
            else:
                keep.append((deadline, log))
        self._closing = keep

    def flush_dirty(self) -> None:
        """Flush segments rolled since the last flush, and logs whose ``flush.ms`` passed.
        A log closed meanwhile, or whose directory fails (it goes offline), is skipped."""
        now = self._clock.time_ms()
        for log in list(self._logs.values()):
            try:
                pending = log.pending_roll_flush
                if pending is not None:
                    log.flush(pending)
                if now - log.last_flush_ms >= log.config.flush_ms:
                    log.flush()
            except KafkaStorageError as exc:
                logger.debug("flush of %s skipped: %s", log.topic_partition, exc)

    # --- shutdown ----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close every log, write the checkpoints, then the clean-shutdown markers (only in
        online directories whose logs all closed cleanly; nothing is written to an offline
        directory, so it is recovered at the next start)."""
        failed: set[Path] = set(self.offline_log_dirs)
        self._close_deleted(everything=True)
        for tp, log in list(self._logs.items()):
            if self._dir_of[tp] in failed or log.offline:
                failed.add(self._dir_of[tp])
                log.close_handles()
                continue
            try:
                log.close()
            except KafkaStorageError:
                logger.exception("failed to close log %s", tp)
                failed.add(self._dir_of[tp])
        for log_dir in self.log_dirs:
            if log_dir not in failed and not self._checkpoint_dir(log_dir):
                failed.add(log_dir)
        for log_dir in self.log_dirs:
            if log_dir not in failed:
                try:
                    atomic_write(log_dir / CLEAN_SHUTDOWN_FILE, b"")
                    fsync_dir(log_dir)
                except OSError:
                    logger.exception("failed to write the clean-shutdown marker in %s", log_dir)
        logger.info("log manager shut down (%d logs)", len(self._logs))
