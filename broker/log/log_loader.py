"""Opening a partition log from its directory: leftover files, segments, recovery (Kafka's
``LogLoader``).

Theory of operation. First the directory is cleaned of what interrupted operations left:
``*.deleted``, ``*.cleaned`` and ``*.tmp`` files are removed; ``*.swap`` segments (a
compaction's swap that did not finish) replace the segments they overlap, which is the
cleaner's crash-safety contract; index files without a ``.log`` are removed.

Then every segment is opened. Segments below the one holding the recovery point are trusted:
their indexes are loaded and sanity-checked (rebuilt from the ``.log`` if missing or bad).
Segments from the recovery point on are re-read batch by batch (framing, magic, CRC-32C,
increasing offsets); at the first bad or torn batch the ``.log`` is truncated and every later
segment deleted, so nothing corrupt is ever served. After a clean shutdown the whole log is
trusted. The leader-epoch checkpoint is loaded (rebuilt from the batches if corrupt) and
extended with the epochs of re-validated batches.

Finally the producer state is rebuilt: the newest snapshot at or below the first recovered
segment (or the log start) is loaded and the batch headers are replayed from there. The
transaction markers met in the recovered segments rebuild those segments' ``.txnindex``
(aborted transactions), so the aborted-transaction index is as durable as the ``.log``.

Concurrency: runs once per log, before the log is shared (at broker start-up, in the log
manager's worker thread, or when a partition is created).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker.clock import Clock
from broker.log.errors import CorruptCheckpointError
from broker.log.file_records import iter_headers
from broker.log.leader_epoch import LeaderEpochFileCache
from broker.log.log_segments import LogSegments
from broker.log.producer_state import CompletedTxn, EndTxnMarkerInfo, ProducerStateManager
from broker.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    LogSegment,
    segment_file,
)
from broker.log.transaction_index import AbortedTxn
from broker.protocol.control_records import ControlType, InvalidControlRecordError, decode_marker
from broker.protocol.records import BatchHeader, read_header
from broker.topic_config import LogConfig

__all__ = [
    "LoadedLog",
    "LogLoader",
    "marker_reader",
]

logger = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)(\.swap)?$")


def marker_reader(segments: LogSegments) -> Callable[[BatchHeader], EndTxnMarkerInfo]:
    """(aborted, coordinator epoch) of a control batch found by a header scan of
    ``segments`` (a malformed marker counts as an abort from an unknown coordinator)."""

    def read(header: BatchHeader) -> EndTxnMarkerInfo:
        data = segments.read_batch(header)
        try:
            marker = decode_marker(data, read_header(data, 0))
        except InvalidControlRecordError as exc:
            logger.warning("malformed transaction marker at offset %d: %s", header.base_offset, exc)
            return True, None
        return marker.control_type is ControlType.ABORT, marker.coordinator_epoch

    return read


@dataclass(slots=True)
class LoadedLog:
    """What loading found: the segments and the log's offsets and caches."""

    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    leader_epoch_cache: LeaderEpochFileCache
    dir_dirty: bool


@dataclass(slots=True)
class _Recovered:
    """What the segment pass of loading kept: the segments, the leader epochs of the
    re-validated batches, the base of the first segment re-validated (None: none was)."""

    kept: list[LogSegment] = field(default_factory=list)
    epochs: list[tuple[int, int, int]] = field(default_factory=list)
    first_recovered: int | None = None


@dataclass(slots=True)
class _DirectoryScan:
    """The segment files of a partition directory: ``.log.swap`` bases, index ``.swap``
    files, ``.log`` bases, and index files (base, path)."""

    swaps: list[int] = field(default_factory=list)
    index_swaps: list[Path] = field(default_factory=list)
    logs: set[int] = field(default_factory=set)
    indexes: list[tuple[int, Path]] = field(default_factory=list)


class LogLoader:
    """Loads and recovers one partition directory (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock,
        producer_state: ProducerStateManager,
        leader_epoch_path: Path,
        new_jitter: Callable[[], int],
    ) -> None:
        self.dir = directory
        self.config = config
        self._clock = clock
        self._producer_state = producer_state
        self._leader_epoch_path = leader_epoch_path
        self._new_jitter = new_jitter

    def load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> LoadedLog:
        bases = self.clean_directory()
        now = self._clock.time_ms()
        segments = [
            LogSegment.open(self.dir, b, created_ms=now, roll_jitter_ms=self._new_jitter())
            for b in bases
        ]
        if clean_shutdown or not segments:
            recover_from = len(segments)
        else:
            recover_from = max(bisect.bisect_right(bases, recovery_point) - 1, 0)
        recovered = self._recover_segments(segments, recover_from)
        dir_dirty = not recovered.kept
        log_segments = self._with_active_segment(recovered.kept, log_start_offset, now)
        leo = log_segments.active.next_offset
        start = max(log_start_offset, log_segments.first.base_offset)
        # everything re-validated was also fsynced by seg.flush() above
        point = leo if clean_shutdown or recover_from < len(segments) else min(recovery_point, leo)
        cache = self._load_epoch_cache(log_segments, recovered.epochs, start)
        if start <= leo:
            cache.truncate_from_end(leo)
            cache.truncate_from_start(start)
            self.load_producer_state(log_segments, start, leo, recovered.first_recovered)
        return LoadedLog(log_segments, start, point, cache, dir_dirty)

    def _recover_segments(self, segments: list[LogSegment], recover_from: int) -> _Recovered:
        """Trust the segments below ``recover_from`` whose indexes load, re-validate the
        others (:meth:`LogSegment.recover`); from the first one truncated at or after
        ``recover_from`` on, later segments are deleted. Empty segments in the middle go."""
        out = _Recovered()
        min_offset = 0
        truncated_at: int | None = None
        last = len(segments) - 1
        for i, seg in enumerate(segments):
            if truncated_at is not None:
                logger.warning(
                    "%s: deleting segment %d after corruption", self.dir, seg.base_offset
                )
                seg.delete_files_now()
                continue
            if not (i < recover_from and seg.base_offset >= min_offset and seg.load_indexes()):
                if out.first_recovered is None:
                    out.first_recovered = seg.base_offset
                truncated = seg.recover(
                    index_interval_bytes=self.config.index_interval_bytes,
                    max_index_size=self.config.segment_index_bytes,
                    min_offset=min_offset,
                    epochs=out.epochs,
                )
                if truncated and i >= recover_from:
                    truncated_at = i
                if i < last and truncated_at is None:
                    seg.on_become_inactive()
                seg.flush()
            if seg.is_empty and out.kept and truncated_at is None and i < last:
                # an empty segment in the middle holds nothing: drop it
                seg.delete_files_now()
                continue
            out.kept.append(seg)
            min_offset = max(min_offset, seg.next_offset)
        return out

    def _with_active_segment(
        self, kept: list[LogSegment], log_start_offset: int, now: int
    ) -> LogSegments:
        """The kept segments, the last one active (a new empty one at the log start if
        none was kept), every other one inactive."""
        max_index = self.config.segment_index_bytes
        if not kept:
            kept.append(
                LogSegment.create(
                    self.dir,
                    max(log_start_offset, 0),
                    max_index_size=max_index,
                    created_ms=now,
                    roll_jitter_ms=self._new_jitter(),
                )
            )
        log_segments = LogSegments(kept)
        active = log_segments.active
        if not active.active:
            active.make_active(max_index)
        for seg in kept[:-1]:
            if seg.active:  # recovered as last before later segments were dropped
                seg.on_become_inactive()
                seg.flush()
        return log_segments

    def load_producer_state(
        self, segments: LogSegments, start: int, end: int, rebuild_from: int | None
    ) -> None:
        """Rebuild the producer state for ``[start, end)``; with ``rebuild_from``, the
        aborted transactions whose markers lie at or after it are written to their
        segments' ``.txnindex`` (those indexes were reset by recovery)."""
        producer_state = self._producer_state

        def record(completed: CompletedTxn) -> None:
            if not completed.is_aborted:
                return
            lso = producer_state.last_stable_offset_for(completed)
            segments.floor(completed.last_offset).txn_index.append(
                AbortedTxn(
                    completed.producer_id, completed.first_offset, completed.last_offset, lso
                )
            )

        producer_state.load(
            start,
            end,
            segments.batches_from,
            marker_reader(segments),
            replay_before=rebuild_from,
            on_completed=record if rebuild_from is not None else None,
        )

    def clean_directory(self) -> list[int]:
        """Finish interrupted operations in the directory and return the segment bases."""
        scan = self._scan_directory()
        for base in sorted(scan.swaps):
            self._complete_swap(base, scan.logs)
        for path in scan.index_swaps:  # an index renamed .swap before its .log was: not swapped
            if path.exists():
                logger.info("%s: removing leftover file %s", self.dir, path.name)
                path.unlink()
        for base, path in scan.indexes:
            if base not in scan.logs:
                logger.info("%s: removing orphan index %s", self.dir, path.name)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        return sorted(scan.logs)

    def _scan_directory(self) -> _DirectoryScan:
        """The segment files of the directory by kind; the leftovers of interrupted
        operations (``*.deleted``, ``*.cleaned``, ``*.tmp``) are removed on the way."""
        scan = _DirectoryScan()
        for entry in os.scandir(self.dir):
            if not entry.is_file():
                continue
            name = entry.name
            path = Path(entry.path)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                logger.info("%s: removing leftover file %s", self.dir, name)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            m = _SEGMENT_FILE.match(name)
            if m is None:
                continue
            base = int(m.group(1))
            is_log = m.group(2) == LOG_SUFFIX
            if m.group(3):
                if is_log:
                    scan.swaps.append(base)
                else:
                    scan.index_swaps.append(path)
            elif is_log:
                scan.logs.add(base)
            else:
                scan.indexes.append((base, path))
        return scan

    def _complete_swap(self, base: int, logs: set[int]) -> None:
        swap_log = segment_file(self.dir, base, LOG_SUFFIX + SWAP_SUFFIX)
        fd = os.open(swap_log, os.O_RDONLY)
        try:
            end = base
            for header in iter_headers(fd, 0, os.fstat(fd).st_size):
                end = header.next_offset
        finally:
            os.close(fd)
        for other in sorted(logs):
            if base <= other < max(end, base + 1):
                logger.info("%s: swap segment %d replaces segment %d", self.dir, base, other)
                for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
                    with contextlib.suppress(FileNotFoundError):
                        segment_file(self.dir, other, suffix).unlink()
                logs.discard(other)
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX):
            src = segment_file(self.dir, base, suffix + SWAP_SUFFIX)
            if src.exists():
                os.replace(src, segment_file(self.dir, base, suffix))
        logs.add(base)

    def _load_epoch_cache(
        self,
        segments: LogSegments,
        recovered_epochs: list[tuple[int, int, int]],
        log_start_offset: int,
    ) -> LeaderEpochFileCache:
        """Load the checkpoint (rebuilt from the batches at or after the log start if it is
        corrupt) and add the epochs of re-validated batches it lacks."""

        def leo() -> int:
            return segments.active.next_offset

        try:
            loaded = LeaderEpochFileCache.load(self._leader_epoch_path, leo)
        except CorruptCheckpointError:
            logger.exception(
                "%s: corrupt leader epoch checkpoint; rebuilding from the log", self.dir
            )
            loaded = LeaderEpochFileCache(self._leader_epoch_path, leo)
            for header in segments.batches_from(log_start_offset):
                epoch = header.partition_leader_epoch
                if epoch >= 0 and epoch > loaded.latest_epoch:
                    loaded.assign(epoch, header.base_offset)
            loaded.flush()
        for epoch, start, last in recovered_epochs:
            if last >= log_start_offset and epoch > loaded.latest_epoch:
                loaded.assign(epoch, max(start, log_start_offset))
        return loaded
