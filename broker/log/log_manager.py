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
the log directory holding the fewest partitions. The periodic tasks (retention ``cleanup``,
``flush_dirty``, ``checkpoint``) are driven by the broker's scheduler.

Concurrency: like :class:`~broker.log.log.Log`, every method is called from the broker's
event-loop thread; there are no locks. Exceptions: ``startup`` may run in a worker thread
before the loop uses the manager, and ``flush_dirty`` and ``checkpoint`` may run in a worker
thread concurrently with the loop (they work on snapshots and only fsync and write files).
"""

from __future__ import annotations

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
from broker.log.errors import InconsistentBrokerMetadataError, KafkaStorageError, LogClosedError
from broker.log.log import DELETE_DIR_SUFFIX, Log, parse_topic_partition
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
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
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
        """Load every partition of every log directory (see the module docstring)."""
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._check_meta_properties(log_dir)
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            recovery_points = OffsetCheckpointFile(
                log_dir / RECOVERY_POINT_CHECKPOINT
            ).read_or_empty()
            start_offsets = OffsetCheckpointFile(
                log_dir / LOG_START_OFFSET_CHECKPOINT
            ).read_or_empty()
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
                )
                self._logs[tp] = log
                self._dir_of[tp] = log_dir
            if clean:
                remove_durably(marker)
            logger.info("log dir %s loaded (%s shutdown)", log_dir, "clean" if clean else "unclean")
        self._started = True
        self.checkpoint()

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

    # --- logs --------------------------------------------------------------------------

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def all_logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        """The log of ``tp``, created empty in the least-loaded log directory if absent."""
        log = self._logs.get(tp)
        if log is not None:
            return log
        log_dir = self._next_log_dir()
        log = Log.open(log_dir / str(tp), config or self.default_config, clock=self._clock)
        self._logs[tp] = log
        self._dir_of[tp] = log_dir
        logger.info("created log %s in %s", tp, log_dir)
        return log

    def _next_log_dir(self) -> Path:
        counts = dict.fromkeys(self.log_dirs, 0)
        for d in self._dir_of.values():
            counts[d] = counts.get(d, 0) + 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def delete_log(self, tp: TopicPartition) -> None:
        """Delete ``tp``'s log: rename its directory to ``<name>.<uuid>-delete``, remove it,
        and drop it from the checkpoints."""
        log = self._logs.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        if log is None or log_dir is None:
            return
        # the files close file.delete.delay.ms later (cleanup), so fetch responses already
        # built from them can still be sent
        log.delete(close_handles=False)
        self._closing.append((self._clock.time_ms() + log.config.file_delete_delay_ms, log))
        self._close_deleted()
        self._checkpoint_dir(log_dir)
        for listener in self.deletion_listeners:
            listener(tp)

    # --- periodic tasks ----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints of every log dir."""
        for log_dir in self.log_dirs:
            self._checkpoint_dir(log_dir)

    def _logs_in(self, log_dir: Path) -> dict[TopicPartition, Log]:
        dir_of = dict(self._dir_of)  # snapshots: may run in a worker thread
        return {tp: log for tp, log in list(self._logs.items()) if dir_of.get(tp) == log_dir}

    def _checkpoint_dir(self, log_dir: Path) -> None:
        logs = self._logs_in(log_dir)
        OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(
            {tp: log.recovery_point for tp, log in logs.items()}
        )
        OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(
            {tp: log.log_start_offset for tp, log in logs.items()}
        )

    def cleanup(self) -> int:
        """Retention for every log (and expiry of idle producer ids); returns the number of
        segments deleted."""
        deleted = 0
        for log in list(self._logs.values()):
            deleted += log.delete_old_segments()
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
        """Flush segments rolled since the last flush, and logs whose ``flush.ms`` passed."""
        now = self._clock.time_ms()
        for log in list(self._logs.values()):
            try:
                pending = log.pending_roll_flush
                if pending is not None:
                    log.flush(pending)
                if now - log.last_flush_ms >= log.config.flush_ms:
                    log.flush()
            except (LogClosedError, OSError):
                if not log.closed:  # not a log deleted meanwhile: a real failure
                    raise

    # --- shutdown ----------------------------------------------------------------------

    def shutdown(self) -> None:
        """Close every log, write the checkpoints, then the clean-shutdown markers (only in
        directories whose logs all closed cleanly)."""
        failed: set[Path] = set()
        self._close_deleted(everything=True)
        for tp, log in list(self._logs.items()):
            try:
                log.close()
            except OSError:
                logger.exception("failed to close log %s", tp)
                failed.add(self._dir_of[tp])
        for log_dir in self.log_dirs:
            try:
                self._checkpoint_dir(log_dir)
            except OSError:
                logger.exception("failed to checkpoint %s", log_dir)
                failed.add(log_dir)
        for log_dir in self.log_dirs:
            if log_dir not in failed:
                atomic_write(log_dir / CLEAN_SHUTDOWN_FILE, b"")
                fsync_dir(log_dir)
        logger.info("log manager shut down (%d logs)", len(self._logs))
