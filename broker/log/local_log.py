"""The segments of one partition's log on local disk (Kafka's ``LocalLog``): the directory,
the ordered segments, the log start / recovery point / log end markers, the active segment
and rolling, reads, flushes, truncation of the segments, and the delayed deletion of segment
files. :class:`~broker.log.log.Log` (Kafka's ``UnifiedLog``) has one and adds what spans
more than the segments: appends with their validation, producer state, leader epochs, the
high watermark, retention (:mod:`broker.log.log_retention`) and transactions.

Compaction's output comes in through ``replace_with_cleaned`` (Kafka's ``replaceSegments``),
a sequence of renames that is safe to interrupt at any point (the loader finishes or undoes
it): the cleaned files ``<base>.<suffix>.cleaned`` are renamed ``.swap`` (indexes first, the
``.log`` last) and the directory fsynced; the replaced segments are renamed ``*.deleted``; the
``.swap`` files get their final names (indexes first, the ``.log`` last) and the directory is
fsynced again. A crash before the ``.log`` becomes ``.swap`` leaves the old segments (the
``.cleaned`` files are removed at load); after it, the loader completes the swap.

Deleted segments are renamed to ``*.deleted`` and physically removed
``file.delete.delay.ms`` later (``delete_pending_files``), so a fetch response that holds a
segment's open file can still be sent.

Log directory failure (KIP-112): every log holds its directory's shared
:class:`~broker.log.log_dir_failure.LogDirStatus`. Operations that touch files are wrapped
with :func:`storage_operation`: an ``OSError`` marks the whole directory offline and is
raised as :class:`~broker.log.errors.LogDirOfflineError` (KAFKA_STORAGE_ERROR), and once the
directory is offline every operation raises that before touching a file.

Concurrency: every method must be called from the broker's event loop; there are no locks.
The one exception is ``flush``, which may run in a worker thread (``asyncio.to_thread``)
concurrently with the loop (see its docstring).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from broker.clock import Clock
from broker.log.checkpoints import fsync_dir
from broker.log.errors import LogClosedError, LogDirOfflineError, OffsetOutOfRangeError
from broker.log.file_records import FetchSlice
from broker.log.log_dir_failure import LogDirStatus
from broker.log.log_segments import LogSegments
from broker.log.segment import (
    CLEANED_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    LogSegment,
    segment_file,
)
from broker.log.time_index import NO_TIMESTAMP
from broker.protocol.records import BatchHeader
from broker.topic_config import LogConfig
from broker.types import TopicPartition

__all__ = ["DELETE_DIR_SUFFIX", "LocalLog", "parse_topic_partition", "storage_operation"]

logger = logging.getLogger(__name__)

DELETE_DIR_SUFFIX = "-delete"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Storage(Protocol):
    """What :func:`storage_operation` needs of the object whose method it guards."""

    def io_error(self, what: str, exc: OSError) -> LogDirOfflineError: ...


_L = TypeVar("_L", bound=_Storage)


def storage_operation(
    what: str,
) -> Callable[[Callable[Concatenate[_L, _P], _R]], Callable[Concatenate[_L, _P], _R]]:
    """Decorate a log method that touches files: an ``OSError`` it raises takes the log's
    directory offline and is re-raised as :class:`LogDirOfflineError` (Kafka's
    ``maybeHandleIOException``). ``what`` names the operation in the error message."""

    def decorate(fn: Callable[Concatenate[_L, _P], _R]) -> Callable[Concatenate[_L, _P], _R]:
        @functools.wraps(fn)
        def guarded(self: _L, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return fn(self, *args, **kwargs)
            except OSError as exc:
                raise self.io_error(what, exc) from exc

        return guarded

    return decorate


def parse_topic_partition(dir_name: str) -> TopicPartition:
    """``"my-topic-3"`` -> ``TopicPartition("my-topic", 3)`` (split on the last ``-``).

    Raises ValueError for names that are not partition directories.
    """
    m = _PARTITION_DIR.match(dir_name)
    if m is None or "." in m.group(2):
        raise ValueError(f"{dir_name!r} is not a <topic>-<partition> directory name")
    return TopicPartition(m.group(1), int(m.group(2)))


@dataclass(slots=True)
class _PendingDelete:
    deadline_ms: int
    segment: LogSegment
    paths: list[Path]


class LocalLog:
    """A partition's segments on disk (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        clock: Clock,
        topic_partition: TopicPartition,
        dir_status: LogDirStatus | None = None,
    ) -> None:
        self.dir = directory
        self.dir_status = dir_status if dir_status is not None else LogDirStatus(directory.parent)
        """The shared online/offline status of the log directory holding this log."""
        self.config = config
        self.topic_partition = topic_partition
        self._clock = clock
        self._rng = random.Random()
        self._segments = LogSegments()
        self._log_start_offset = 0
        self._recovery_point = 0
        self._last_flush_ms = clock.time_ms()
        self._pending_roll_flush: int | None = None
        self._pending_deletes: list[_PendingDelete] = []
        self._dir_dirty = False
        self._parent_dirty = False
        """The log dir's entry for this directory is not on disk yet (a new log)."""
        self._truncations = 0  # bumped by truncation, so a concurrent flush can tell
        self._closed = False

    def restore(
        self, segments: LogSegments, *, log_start_offset: int, recovery_point: int, dir_dirty: bool
    ) -> None:
        """Take the segments and markers the loader found (:mod:`broker.log.log_loader`)."""
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._dir_dirty = dir_dirty

    def mark_created(self) -> None:
        """This log's directory was just created: fsync the log dir holding it (and this
        directory) at the first flush."""
        self._parent_dirty = True
        self._dir_dirty = True

    def sync_dir_if_dirty(self) -> None:
        """fsync the directory if files were created or removed since the last time."""
        if self._dir_dirty:
            fsync_dir(self.dir)
            self._dir_dirty = False

    # ======================================================================================
    # state
    # ======================================================================================

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @log_start_offset.setter
    def log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset

    @property
    def log_end_offset(self) -> int:
        return self._segments.active.next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The live segments, oldest first (a copy of the list; do not mutate them)."""
        return self._segments.snapshot()

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.active

    @property
    def log_segments(self) -> LogSegments:
        """The live segments themselves (for the owning :class:`~broker.log.log.Log`: lookups
        by offset, header scans; not to be changed but through this class)."""
        return self._segments

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def pending_roll_flush(self) -> int | None:
        """Offset up to which a flush is due after a roll (Kafka flushes rolled segments
        asynchronously); the log manager's ``flush_dirty`` does it."""
        return self._pending_roll_flush

    @property
    def closed(self) -> bool:
        return self._closed

    def update_config(self, config: LogConfig) -> None:
        """Use ``config`` from now on (index sizes apply from the next segment)."""
        self.config = config

    @property
    def offline(self) -> bool:
        """True once the log's directory has failed (nothing is read or written any more)."""
        return self.dir_status.offline

    def check_open(self) -> None:
        """Raise if the log is closed or its directory offline."""
        if self._closed:
            raise LogClosedError(f"log {self.topic_partition} is closed")
        if self.dir_status.offline:
            raise LogDirOfflineError(
                f"log {self.topic_partition} is in the offline log directory {self.dir.parent}"
            )

    def io_error(self, what: str, exc: OSError) -> LogDirOfflineError:
        """Report ``exc`` (raised while ``what``): the log's directory goes offline. Returns
        the error to raise instead."""
        message = f"error while {what} {self.topic_partition} in dir {self.dir.parent}"
        self.dir_status.fail(message, exc)
        return LogDirOfflineError(f"{message}: {exc}")

    def new_jitter(self) -> int:
        """A random ``segment.jitter.ms`` share for a new segment's roll time."""
        jitter = self.config.segment_jitter_ms
        if jitter <= 0:
            return 0
        return self._rng.randrange(min(jitter, self.config.max_segment_ms))

    def maybe_flush(self, now: int) -> None:
        """Flush if ``flush.messages`` or ``flush.ms`` say so."""
        config = self.config
        if (
            self.log_end_offset - self._recovery_point >= config.flush_messages
            or now - self._last_flush_ms >= config.flush_ms
        ):
            self.flush()

    # ======================================================================================
    # appends, rolls, truncation
    # ======================================================================================

    def append(self, records: memoryview, batch_infos: list[tuple[int, int, int]]) -> None:
        """Write batches (offsets assigned, ``(last offset, timestamp, size)`` each) to the
        active segment, indexing them."""
        self._segments.active.append(
            records, batch_infos, index_interval_bytes=self.config.index_interval_bytes
        )

    def roll(self, expected_next_offset: int | None = None) -> bool:
        """Start a new active segment at ``expected_next_offset`` or the log end, whichever is
        higher. An empty active segment is replaced, or, if it already starts there, kept
        with its creation time reset (then False: nothing rolled)."""
        new_base = max(expected_next_offset or 0, self.log_end_offset)
        active = self._segments.active
        now = self._clock.time_ms()
        if active.is_empty:
            if active.base_offset == new_base:
                active.created_ms = now
                return False
            # an empty active segment is replaced, not kept
            self._segments.pop_active()
            active.delete_files_now()
        else:
            active.on_become_inactive()
            self._pending_roll_flush = new_base
        segment = LogSegment.create(
            self.dir,
            new_base,
            max_index_size=self.config.segment_index_bytes,
            created_ms=now,
            roll_jitter_ms=self.new_jitter(),
        )
        self._segments.append(segment)
        self._dir_dirty = True
        self._log_start_offset = max(self._log_start_offset, self._segments.first.base_offset)
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset ``>= offset``, ``offset`` being at or above
        the first segment's base (a batch straddling it goes entirely); the log start, the
        recovery point and a pending roll flush come down to the new log end."""
        self._truncations += 1
        self._schedule_delete(self._segments.drop_after(offset))
        self._segments.active.truncate_to(
            offset, max_index_size=self.config.segment_index_bytes, now_ms=self._clock.time_ms()
        )
        leo = self.log_end_offset
        self._log_start_offset = min(self._log_start_offset, leo)
        self._recovery_point = min(self._recovery_point, leo)
        if self._pending_roll_flush is not None and self._pending_roll_flush > leo:
            self._pending_roll_flush = leo

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty one at ``offset`` (log start = end =
        recovery point = ``offset``)."""
        self._truncations += 1
        self._schedule_delete(self._segments.replace([]))
        segment = LogSegment.create(
            self.dir,
            offset,
            max_index_size=self.config.segment_index_bytes,
            created_ms=self._clock.time_ms(),
            roll_jitter_ms=self.new_jitter(),
        )
        self._segments.replace([segment])
        self._dir_dirty = True
        self._log_start_offset = offset
        self._recovery_point = offset
        self._pending_roll_flush = None

    # ======================================================================================
    # reads
    # ======================================================================================

    @storage_operation("reading")
    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> FetchSlice | None:
        """Whole batches from the one holding ``offset`` (or the next batch, if ``offset``
        falls in a gap), all from one segment, each with base offset below ``max_offset``
        (exclusive bound, e.g. the high watermark), at most ``max_bytes`` in total except that
        with ``min_one_batch`` the first batch is returned even if larger.

        Raises OffsetOutOfRangeError outside ``[log_start_offset, log_end_offset]``; returns
        None when there is nothing to return.
        """
        self.check_open()
        leo = self.log_end_offset
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{self._log_start_offset}, {leo}] for "
                f"{self.topic_partition}"
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return None
        for segment in self._segments.from_offset(offset):
            if segment.base_offset >= limit:
                return None
            result, found = segment.read(offset, max_bytes, limit, min_one_batch)
            if found:
                return result
        return None

    def batches_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch whose last offset is ``>= offset``, in order (positions are
        positions in their segment files)."""
        return self._segments.batches_from(offset)

    @storage_operation("looking up a timestamp in")
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the earliest record at or after the log start whose
        timestamp is ``>= timestamp`` (ListOffsets by time); None if there is none."""
        self.check_open()
        lso = self._log_start_offset
        for segment in self._segments:
            if segment.next_offset <= lso or segment.max_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, lso)
            if found is not None:
                return found
        return None

    @storage_operation("reading")
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """``(max timestamp, offset of the first record with it)`` over the log, for
        ListOffsets MAX_TIMESTAMP (KIP-734); ``(-1, -1)`` when no record has a timestamp."""
        self.check_open()
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.size and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None or best.max_timestamp < 0:
            return NO_TIMESTAMP, -1
        return best.max_timestamp_and_offset()

    # ======================================================================================
    # deleting segments
    # ======================================================================================

    def delete_prefix(self, doomed: list[LogSegment]) -> None:
        """Delete ``doomed``, the oldest segments (not all of them): their files are renamed
        now and removed after the delay; the log start follows the new first segment."""
        self._segments.drop_prefix(len(doomed))
        self._schedule_delete(doomed)
        self._log_start_offset = max(self._log_start_offset, self._segments.first.base_offset)

    def _schedule_delete(self, doomed: list[LogSegment]) -> None:
        """Rename the segments' files to ``*.deleted``; delete them after the delay."""
        deadline = self._clock.time_ms() + self.config.file_delete_delay_ms
        for segment in doomed:
            paths = segment.rename_to_deleted()
            self._pending_deletes.append(_PendingDelete(deadline, segment, paths))
        if self.config.file_delete_delay_ms <= 0:
            self.delete_pending_files()

    @storage_operation("deleting segments of")
    def delete_pending_files(self) -> None:
        """Physically delete the ``*.deleted`` files whose delay has passed."""
        if not self._pending_deletes:
            return
        now = self._clock.time_ms()
        keep: list[_PendingDelete] = []
        for pending in self._pending_deletes:
            if pending.deadline_ms <= now:
                pending.segment.delete_files_now(pending.paths)
            else:
                keep.append(pending)
        self._pending_deletes = keep

    # ======================================================================================
    # compaction's swap
    # ======================================================================================

    def modification_marker(self) -> int:
        """Changes that invalidate a snapshot of the inactive segments (truncations); a
        cleaning round compares it before it swaps."""
        return self._truncations

    @storage_operation("swapping cleaned segments into")
    def replace_with_cleaned(
        self,
        base_offset: int,
        replaced: tuple[int, ...],
        snapshot: list[LogSegment],
        marker: int,
    ) -> bool:
        """Swap the ``.cleaned`` segment at ``base_offset`` in for the segments ``replaced``
        (base offsets; all in ``snapshot``, the segments the round read). False, and nothing
        changed, when the log moved on meanwhile: closed, truncated (``marker``), or those
        segments are no longer a run of inactive segments of this log, unchanged in size."""
        olds = self._run_to_replace(base_offset, replaced, snapshot, marker)
        if olds is None:
            return False
        directory = self.dir
        cleaned = {
            suffix: directory / f"{base_offset:020d}{suffix}{CLEANED_SUFFIX}"
            for suffix in SEGMENT_SUFFIXES
        }
        log_suffix = SEGMENT_SUFFIXES[0]
        if not cleaned[log_suffix].exists():
            return False
        order = [*SEGMENT_SUFFIXES[1:], log_suffix]  # indexes first, the .log last
        for suffix in order:
            swap = segment_file(directory, base_offset, suffix + SWAP_SUFFIX)
            try:
                os.replace(cleaned[suffix], swap)
            except FileNotFoundError:
                continue
        fsync_dir(directory)
        self._schedule_delete(olds)
        for suffix in order:
            swap = segment_file(directory, base_offset, suffix + SWAP_SUFFIX)
            try:
                os.replace(swap, segment_file(directory, base_offset, suffix))
            except FileNotFoundError:
                continue
        fsync_dir(directory)
        new = self._open_cleaned(base_offset)
        self._segments.replace_run(olds, new)
        logger.info(
            "%s: cleaned segment %d replaces segments %s (%d -> %d bytes)",
            self.topic_partition,
            base_offset,
            list(replaced),
            sum(s.size for s in olds),
            new.size,
        )
        return True

    def _run_to_replace(
        self,
        base_offset: int,
        replaced: tuple[int, ...],
        snapshot: list[LogSegment],
        marker: int,
    ) -> list[LogSegment] | None:
        """The segments ``replaced`` names, if they still are a run of inactive segments of
        this log starting at ``base_offset``, unchanged since ``snapshot`` and ``marker``."""
        if self._closed or marker != self._truncations:
            return None
        by_base = {s.base_offset: s for s in snapshot}
        old = [by_base.get(b) for b in replaced]
        current = list(self._segments)
        if any(s is None for s in old) or not replaced or replaced[0] != base_offset:
            return None
        olds = [s for s in old if s is not None]
        try:
            i = current.index(olds[0])
        except ValueError:
            return None
        if current[i : i + len(olds)] != olds or i + len(olds) >= len(current):
            return None
        if any(s.closed or s.active for s in olds):
            return None
        return olds

    def _open_cleaned(self, base_offset: int) -> LogSegment:
        """Open the swapped-in segment (its indexes rebuilt if they do not load)."""
        new = LogSegment.open(self.dir, base_offset, created_ms=self._clock.time_ms())
        if not new.load_indexes():
            new.recover(
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_size=self.config.segment_index_bytes,
                min_offset=base_offset,
                epochs=[],
            )
            new.on_become_inactive()
            new.flush()
        return new

    # ======================================================================================
    # flush, close, delete
    # ======================================================================================

    @storage_operation("flushing")
    def flush(self, up_to: int | None = None) -> None:
        """fsync every segment holding offsets below ``up_to`` (default: the log end) that
        changed since its last flush, and move the recovery point to ``up_to``.

        The one method that may run in a worker thread (``asyncio.to_thread``) while the
        event loop keeps using the log: it works on a snapshot of the segment list, and it
        does not move the recovery point if the log was truncated meanwhile.
        """
        self.check_open()
        truncations = self._truncations
        segments = self._segments.snapshot()
        leo = segments[-1].next_offset
        target = leo if up_to is None else min(up_to, leo)
        for segment in segments:
            if segment.base_offset < target:
                segment.flush()
        if self._dir_dirty:
            self._dir_dirty = False
            fsync_dir(self.dir)
        if self._parent_dirty:
            self._parent_dirty = False
            fsync_dir(self.dir.parent)
        if truncations == self._truncations:
            self._recovery_point = max(self._recovery_point, target)
            pending = self._pending_roll_flush
            if pending is not None and pending <= target:
                self._pending_roll_flush = None
        self._last_flush_ms = self._clock.time_ms()

    def close(self) -> None:
        """Close every segment (the active one's indexes trimmed) without flushing; pending
        ``*.deleted`` files are removed now."""
        for segment in self._segments:
            segment.close()
        for pending in self._pending_deletes:
            pending.segment.delete_files_now(pending.paths)
        self._pending_deletes = []
        self._closed = True

    def close_handles(self) -> None:
        """Close every file without flushing or writing anything (for a log being deleted,
        or to simulate a crash in tests)."""
        for segment in self._segments:
            segment.close_handles()
        for pending in self._pending_deletes:
            pending.segment.close_handles()
        self._closed = True

    def delete(self, *, close_handles: bool = True) -> None:
        """Remove the whole partition directory: close the files, rename the directory to
        ``<name>.<uuid>-delete`` (so a crash leaves a name start-up finishes deleting), then
        remove it.

        With ``close_handles=False`` the open files stay open (the log refuses use all the
        same) and the caller closes them later with :meth:`close_handles`: a fetch response
        already built from a segment sends its bytes from the open file after the directory
        is gone (Linux keeps an unlinked file's data while it is open), as Kafka's
        ``file.delete.delay.ms`` lets in-flight fetches finish."""
        if close_handles:
            self.close_handles()
        else:
            self._closed = True
        self._pending_deletes = []
        target = self.dir.with_name(f"{self.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        try:
            os.replace(self.dir, target)
            fsync_dir(self.dir.parent)
        except FileNotFoundError:
            return
        shutil.rmtree(target, ignore_errors=True)
        logger.info("deleted log %s", self.topic_partition)

    def __repr__(self) -> str:
        return (
            f"LocalLog({self.topic_partition}, start={self._log_start_offset}, "
            f"end={self.log_end_offset}, segments={len(self._segments)})"
        )
