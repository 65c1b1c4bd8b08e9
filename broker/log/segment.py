"""One log segment: a ``.log`` file of record batches plus its offset and time indexes.

Theory of operation. A partition's log is a sequence of segments; only the last (active) one
is appended to. A segment is named by its base offset (20 digits, zero padded) and holds:

* ``<base>.log``: v2 record batches, concatenated exactly as appended (Kafka's format; the
  broker never rewrites batch bytes except ``baseOffset``, ``partitionLeaderEpoch`` and, for
  LogAppendTime topics, ``maxTimestamp``/attributes/CRC, before they are written);
* ``<base>.index``: the sparse offset index (:mod:`broker.log.offset_index`);
* ``<base>.timeindex``: the time index (:mod:`broker.log.time_index`).

The segment knows its valid size, the offset after its last batch, its largest timestamp
(and the last offset of the batch that carried it), and the bytes written since the last index
entry. ``append`` writes a run of batches with one ``pwrite`` and does constant work per batch
(index bookkeeping), never per record. Reads scan batch headers forward from an index entry
with :func:`~broker.log.file_records.iter_headers`, which reads headers in windows so that
small batches cost few system calls, and hand out whole batches as a
:class:`~broker.log.file_records.FetchSlice`. The last append, when it is small (at most
``TAIL_BYTES``: a low-latency producer's batch), stays in memory until the next append,
truncation or roll (so a partition holds at most one); a read that starts inside it (a
consumer or follower waiting at the log's end) is answered from it with no scan and no
system call.

``recover`` re-reads the ``.log`` batch by batch (framing, magic, CRC-32C, offsets that only
go up), rebuilds both indexes exactly as appends would have built them, and truncates the file
at the first batch that is torn or corrupt. It is how the loader treats segments written after
the last flush, and segments whose indexes fail their sanity check.

File descriptors. Every segment holds its ``.log`` open (reads and ``sendfile`` use it). The
offset and time indexes of the active segment hold a descriptor only from the first entry
appended to them since the segment was created or opened (``recover`` lets go of the
descriptors its rebuild used) until the segment rolls or closes; before that their files
exist on disk, exact and preallocated, but are not held open
(:class:`~broker.log.index.IndexFile`). The ``.txnindex`` is opened per append only. So an
idle partition holds one descriptor, like Kafka's (whose mmapped indexes hold none), and
10,000 idle partitions fit a 20,000-descriptor limit.

Deletion renames every file to ``<name>.deleted``; the log deletes the files later (Kafka's
``file.delete.delay.ms``), so a fetch that still holds the open ``.log`` file can finish.

Concurrency: owned by its :class:`~broker.log.log.Log`; used only from the broker's event-loop
thread, except ``flush``, which may run in a worker thread (see its docstring). The ``.log``
file object is shared read-only with :class:`~broker.log.file_records.FetchSlice` holders.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import crc32c

from broker.log.errors import CorruptIndexError, KafkaStorageError
from broker.log.file_records import FetchSlice, bytes_in_window, iter_headers
from broker.log.offset_index import OffsetIndex
from broker.log.time_index import NO_TIMESTAMP, TimeIndex
from broker.log.transaction_index import TransactionIndex
from broker.protocol.records import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    decode_records,
    read_header,
)

__all__ = [
    "CLEANED_SUFFIX",
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "INT32_MAX",
    "LOG_SUFFIX",
    "SEGMENT_SUFFIXES",
    "SWAP_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "TXNINDEX_SUFFIX",
    "LogSegment",
    "segment_file",
]

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
TXNINDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a cleaner's output, not part of the log (removed at load)
SWAP_SUFFIX = ".swap"  # a cleaner's output being swapped in (the loader completes the swap)
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)
INT32_MAX = 2**31 - 1

TAIL_BYTES = 4096
"""An append of at most this many bytes is kept in memory as the segment's tail (see the
module docstring): one per partition at most, the bytes a waiting fetch is about to read."""

_BASE_OFFSET = struct.Struct(">q")

_RECOVER_WINDOW = 1024 * 1024
"""Recovery reads the ``.log`` in windows of this size into one reused buffer (grown only for
a batch larger than it): whole batches, for their CRC. One window is the whole transient
memory of a recovery, whatever the segment's size."""


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / f"{base_offset:020d}{suffix}"


class _RecoveryWindow:
    """The read buffer of :meth:`LogSegment.recover`: one ``bytearray`` of at most
    :data:`_RECOVER_WINDOW` bytes (less for a smaller file), filled in place with
    ``os.preadv`` at each step, so recovering a 1 GB segment allocates one window, not one
    ``bytes`` object per window. A batch larger than the window gets a buffer of its size.

    Concurrency: used by the one thread recovering the segment; the view a :meth:`read`
    returned is valid until the next :meth:`read`.
    """

    __slots__ = ("_buf", "_fd", "_file_size", "view")

    def __init__(self, fd: int, file_size: int) -> None:
        self._fd = fd
        self._file_size = file_size
        self._buf = bytearray(min(_RECOVER_WINDOW, file_size))
        self.view = memoryview(self._buf)[:0]
        """The bytes the last :meth:`read` returned (none yet)."""

    def read(self, position: int, need: int) -> memoryview:
        """The file's bytes from ``position``: a window's worth (or up to the end of the
        file), and at least ``need`` bytes unless the file ends before."""
        n = max(need, min(_RECOVER_WINDOW, self._file_size - position))
        if n > len(self._buf):
            self._buf = bytearray(n)  # a new one: the caller may still hold a view of the old
        target = memoryview(self._buf)
        got = 0
        while got < n:
            read = os.preadv(self._fd, [target[got:n]], position + got)
            if read == 0:
                break  # the file ended
            got += read
        self.view = target[:got]
        return self.view


def _framing_problem(header: BatchHeader, pos: int, file_size: int) -> str:
    """Why the batch header at ``pos`` does not frame a v2 batch inside the file, or ""."""
    if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > file_size:
        return f"batch length {header.batch_length} does not fit the file"
    if header.magic != 2:
        return f"magic {header.magic}"
    return ""


def _fdatasync(fd: int) -> None:
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


def _fsync_path(path: Path) -> None:
    """fsync a file by name (a missing file, e.g. renamed for deletion meanwhile, is fine)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LogSegment:
    """A segment's files and state (see the module docstring for the format and rules).

    Attributes kept exact at all times: ``size`` (valid bytes of ``.log``), ``next_offset``
    (offset after the last batch; the base offset when empty), ``max_timestamp`` and
    ``offset_of_max_timestamp`` (-1 / base when unknown), ``active``.

    Concurrency: event-loop thread only (owned by one Log), except ``flush``.
    """

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        file: BinaryIO,
        *,
        created_ms: int,
        roll_jitter_ms: int = 0,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self._file = file
        self._fd = file.fileno()
        self.log_path = segment_file(directory, base_offset, LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(
            segment_file(directory, base_offset, INDEX_SUFFIX + suffix), base_offset
        )
        self.time_index = TimeIndex(
            segment_file(directory, base_offset, TIMEINDEX_SUFFIX + suffix), base_offset
        )
        self.txn_index = TransactionIndex(
            segment_file(directory, base_offset, TXNINDEX_SUFFIX + suffix)
        )
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.bytes_since_last_index_entry = 0
        self.created_ms = created_ms
        self.roll_jitter_ms = roll_jitter_ms
        self.active = False
        self.closed = False
        self._rolling_based_timestamp: int | None = None
        self._tail: _Tail | None = None
        self._writes = 0  # bumped by every change; flush() records what it made durable
        self._synced = 0

    # --- construction ------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        max_index_size: int,
        created_ms: int,
        roll_jitter_ms: int = 0,
        suffix: str = "",
    ) -> LogSegment:
        """A new, empty, active segment. Existing empty files are reused; a non-empty
        ``.log`` of the same name is an error (it would be overwritten). ``suffix`` names
        the files of a segment that is not (yet) part of the log, e.g. the cleaner's
        ``CLEANED_SUFFIX``: ``<base>.log.cleaned``, ``<base>.index.cleaned``, ..."""
        path = segment_file(directory, base_offset, LOG_SUFFIX + suffix)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(fd).st_size:
            os.close(fd)
            raise KafkaStorageError(f"segment {path} already exists and is not empty")
        file = os.fdopen(fd, "r+b", buffering=0)
        seg = cls(
            directory,
            base_offset,
            file,
            created_ms=created_ms,
            roll_jitter_ms=roll_jitter_ms,
            suffix=suffix,
        )
        seg.offset_index.open_for_append(max_index_size)
        seg.time_index.open_for_append(max_index_size)
        seg.active = True
        seg._writes += 1
        return seg

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, *, created_ms: int, roll_jitter_ms: int = 0
    ) -> LogSegment:
        """Open an existing ``.log``; the caller then calls ``load_indexes`` or ``recover``."""
        path = segment_file(directory, base_offset, LOG_SUFFIX)
        file = open(path, "r+b", buffering=0)  # noqa: SIM115 - owned by the segment
        return cls(
            directory, base_offset, file, created_ms=created_ms, roll_jitter_ms=roll_jitter_ms
        )

    def load_indexes(self) -> bool:
        """Load both index files and the tail state; False if an index is missing or fails
        its sanity check (the caller then runs ``recover``)."""
        try:
            self.offset_index = OffsetIndex.load(
                self.offset_index.path, self.base_offset, self.size
            )
            self.time_index = TimeIndex.load(self.time_index.path, self.base_offset)
            self._rescan_tail(exact_max_timestamp=False)
        except FileNotFoundError as exc:
            logger.warning("segment %s: index missing (%s); rebuilding", self.log_path, exc)
            return False
        except CorruptIndexError as exc:
            logger.warning("segment %s: %s; rebuilding", self.log_path, exc)
            return False
        return True

    # --- state helpers -----------------------------------------------------------------

    @property
    def file(self) -> BinaryIO:
        return self._file

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def largest_timestamp(self) -> int:
        """The segment's age for time retention: its max timestamp, or the ``.log`` file's
        modification time when no record carries a timestamp."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        try:
            return int(os.fstat(self._fd).st_mtime * 1000)
        except OSError:
            return NO_TIMESTAMP

    def rolling_based_timestamp(self) -> int | None:
        """The max timestamp of the first batch (what segment.ms is measured from)."""
        if self._rolling_based_timestamp is None and self.size:
            for header in iter_headers(self._fd, 0, self.size):
                self._rolling_based_timestamp = header.max_timestamp
                break
        return self._rolling_based_timestamp

    def _rescan_tail(self, *, exact_max_timestamp: bool) -> None:
        """Recompute next_offset, bytes since the last index entry and the max timestamp
        from the indexes plus a scan of the batches after the last index entry (or, with
        ``exact_max_timestamp``, after the last time-index entry)."""
        t_ts, t_off = self.time_index.last_entry
        start = self.offset_index.last_position
        if exact_max_timestamp:
            start = min(start, self.offset_index.lookup(t_off)[1])
        max_ts, max_off = t_ts, t_off
        next_offset = self.base_offset
        end = start
        for header in iter_headers(self._fd, start, self.size):
            if header.max_timestamp > max_ts:
                max_ts, max_off = header.max_timestamp, header.last_offset
            next_offset = header.next_offset
            end = header.position + header.size
        if end != self.size:
            # the batches after the last index entry do not tile the rest of the file
            raise CorruptIndexError(
                f"segment {self.log_path}: batches end at {end}, the file at {self.size}"
            )
        self.next_offset = next_offset
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = max_off if max_ts >= 0 else self.base_offset
        entries = self.offset_index.entries
        self.bytes_since_last_index_entry = (
            self.size - self.offset_index.last_position if entries else self.size
        )

    # --- recovery ----------------------------------------------------------------------

    def recover(
        self,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        min_offset: int,
        epochs: list[tuple[int, int, int]] | None = None,
    ) -> int:
        """Validate every batch and rebuild both indexes; truncate the ``.log`` at the first
        invalid or torn batch. Returns the number of bytes truncated (0 if all valid).

        A batch is valid if it is framed inside the file, has magic 2, its CRC-32C matches,
        its base offset is ``>=`` both ``min_offset`` and the previous batch's next offset,
        and its last offset fits a relative int32. After this the indexes are open for
        appending (the caller makes the segment inactive if it is not the last).

        ``epochs``, if given, receives ``(partitionLeaderEpoch, base offset, last offset)`` for
        each batch whose epoch is above the last one recorded there (for the leader epoch
        cache).
        """
        self._reset_for_recovery(max_index_size)
        self._tail = None
        file_size = os.fstat(self._fd).st_size
        expected = max(min_offset, self.base_offset)
        pos = 0
        last_entry_pos = 0
        window = _RecoveryWindow(self._fd, file_size)
        buf = window.view
        buf_start = 0
        reason = ""
        while pos < file_size:
            if file_size - pos < HEADER_SIZE:
                reason = f"{file_size - pos} trailing bytes, less than a batch header"
                break
            off = pos - buf_start
            if off + HEADER_SIZE > len(buf):
                buf = window.read(pos, HEADER_SIZE)
                buf_start, off = pos, 0
            header = read_header(buf, off)
            reason = _framing_problem(header, pos, file_size)
            if reason:
                break
            if off + header.size > len(buf):
                buf = window.read(pos, header.size)
                buf_start, off = pos, 0
            reason = self._content_problem(buf, off, header, expected)
            if reason:
                break
            last_entry_pos = self._recovered_batch(
                header, pos, last_entry_pos, index_interval_bytes, epochs
            )
            expected = header.next_offset
            pos += header.size
        return self._finish_recovery(file_size, pos, reason, expected, last_entry_pos)

    def _reset_for_recovery(self, max_index_size: int) -> None:
        """Empty indexes open for appending, and no timestamps yet."""
        self.offset_index.reset()  # the entries of a half-loaded index go before reopening
        self.offset_index.open_for_append(max_index_size)
        self.time_index.reset()
        self.time_index.open_for_append(max_index_size)
        self.txn_index.reset()  # rebuilt from the markers by the producer-state replay
        self.active = True
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self._rolling_based_timestamp = None

    def _content_problem(
        self, buf: memoryview, off: int, header: BatchHeader, expected: int
    ) -> str:
        """Why the framed batch at ``off`` in ``buf`` is invalid (its CRC, its offsets
        below ``expected`` or beyond a relative int32), or "" if it is valid."""
        crc = crc32c.crc32c(buf[off + ATTRIBUTES_OFFSET : off + header.size])
        if crc != header.crc:
            return "CRC mismatch"
        last_offset = header.base_offset + header.last_offset_delta
        if (
            header.base_offset < expected
            or header.last_offset_delta < 0
            or last_offset - self.base_offset > INT32_MAX
        ):
            return (
                f"offsets {header.base_offset}..{last_offset} out of order (expected >= {expected})"
            )
        return ""

    def _recovered_batch(
        self,
        header: BatchHeader,
        pos: int,
        last_entry_pos: int,
        index_interval_bytes: int,
        epochs: list[tuple[int, int, int]] | None,
    ) -> int:
        """Account for a valid batch at ``pos``: timestamps, its leader epoch, an index entry
        if ``index_interval_bytes`` passed since the last (at ``last_entry_pos``). Returns
        the position of the last index entry."""
        last_offset = header.base_offset + header.last_offset_delta
        if self._rolling_based_timestamp is None:
            self._rolling_based_timestamp = header.max_timestamp
        if epochs is not None:
            epoch = header.partition_leader_epoch
            if epoch >= 0 and (not epochs or epoch > epochs[-1][0]):
                epochs.append((epoch, header.base_offset, last_offset))
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = last_offset
        if pos - last_entry_pos > index_interval_bytes:
            self.offset_index.append(last_offset, pos)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            return pos
        return last_entry_pos

    def _finish_recovery(
        self, file_size: int, pos: int, reason: str, expected: int, last_entry_pos: int
    ) -> int:
        """Truncate the ``.log`` at ``pos`` (the end of the valid batches) if anything follows,
        and set the segment's size and next offset. Returns the bytes truncated."""
        truncated = file_size - pos
        if truncated:
            logger.warning(
                "segment %s: truncating %d bytes at position %d (%s)",
                self.log_path,
                truncated,
                pos,
                reason,
            )
            os.ftruncate(self._fd, pos)
        self.offset_index.release_fd()  # the rebuild wrote them; an idle log holds no index fd
        self.time_index.release_fd()
        self.size = pos
        self.next_offset = expected if pos else self.base_offset
        self.bytes_since_last_index_entry = pos - last_entry_pos
        self._writes += 1
        return truncated

    # --- appends -----------------------------------------------------------------------

    def should_roll(
        self,
        *,
        segment_bytes: int,
        segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        batch_count: int,
        now_ms: int,
    ) -> bool:
        """Kafka's roll conditions, checked before an append of ``messages_size`` bytes."""
        if max_offset_in_messages - self.base_offset > INT32_MAX:
            return True
        if self.size == 0:
            return False
        if self.size + messages_size > segment_bytes:
            return True
        rbt = self.rolling_based_timestamp()
        waited = (
            max_timestamp_in_messages - rbt
            if rbt is not None and rbt >= 0
            else now_ms - self.created_ms
        )
        if waited > segment_ms - self.roll_jitter_ms:
            return True
        oi, ti = self.offset_index, self.time_index
        if oi.entries + batch_count > oi.max_entries:
            return True
        return ti.entries + batch_count > max(ti.max_entries - 1, 1)

    def append(
        self,
        data: bytes | bytearray | memoryview,
        batches: list[tuple[int, int, int]],
        *,
        index_interval_bytes: int,
    ) -> None:
        """Write ``data`` (whole batches) at the end of the ``.log`` and index it.

        ``batches`` lists, in order, ``(last_offset, max_timestamp, size)`` of each batch in
        ``data``.
        """
        pos = self.size
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], pos + written)
        self._tail = _Tail(pos, bytes(view), batches) if 0 < len(view) <= TAIL_BYTES else None
        if self.size == 0 and batches:
            self._rolling_based_timestamp = batches[0][1]
        max_ts = self.max_timestamp
        max_off = self.offset_of_max_timestamp
        since = self.bytes_since_last_index_entry
        for last_offset, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:
                max_ts, max_off = batch_max_ts, last_offset
            if since > index_interval_bytes:
                self.offset_index.append(last_offset, pos)
                self.time_index.maybe_append(max_ts, max_off)
                since = 0
            pos += size
            since += size
        self.max_timestamp = max_ts
        self.offset_of_max_timestamp = max_off
        self.bytes_since_last_index_entry = since
        self.size = pos
        if batches:
            self.next_offset = batches[-1][0] + 1
        self._writes += 1

    # --- reads -------------------------------------------------------------------------

    def headers(self, start_position: int = 0) -> Iterator[BatchHeader]:
        return iter_headers(self._fd, start_position, self.size)

    def find_batch(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is ``>= offset`` (the batch holding ``offset``,
        or the next one if ``offset`` falls in a gap); None if there is none here."""
        if offset >= self.next_offset:
            return None
        start = self.offset_index.lookup(offset)[1]
        for header in iter_headers(self._fd, start, self.size):
            if header.base_offset + header.last_offset_delta >= offset:
                return header
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> tuple[FetchSlice | None, bool]:
        """Whole batches from the one holding ``offset``, each with base offset
        ``< max_offset``, at most ``max_bytes`` in total (the first batch whole regardless
        when ``min_one_batch``). Returns ``(slice or None, found)`` where ``found`` is False
        if this segment holds nothing at or after ``offset`` (try the next segment)."""
        if offset >= self.next_offset:
            return None, False
        tail = self._tail
        if tail is not None and offset >= tail.base_offset:
            return tail.read(self._file, offset, max_bytes, max_offset, min_one_batch), True
        start = self.offset_index.lookup(offset)[1]
        window: list[tuple[int, bytes]] = []
        headers = iter_headers(self._fd, start, self.size, window)
        first: BatchHeader | None = None
        for header in headers:
            if header.base_offset + header.last_offset_delta >= offset:
                first = header
                break
        if first is None:
            return None, False
        if first.base_offset >= max_offset:
            return None, True
        total = first.size
        if total > max_bytes and not min_one_batch:
            return None, True
        last_offset = first.last_offset
        skip = self.offset_index.skip_to(first.position, first.position + max_bytes, max_offset)
        if skip > first.position + total and skip < self.size:
            # the batches up to ``skip`` are whole, within the byte limit and below
            # max_offset (the index says so): scan the headers from there only (a big read
            # then scans a few headers, not one per batch)
            skipped = iter_headers(self._fd, skip, self.size, window)
            at = next(skipped, None)
            if (
                at is not None
                and at.base_offset < max_offset
                and skip - first.position + at.size <= max_bytes
            ):
                total = skip - first.position + at.size
                last_offset = at.base_offset + at.last_offset_delta
                headers = skipped
        for header in headers:
            if header.base_offset >= max_offset or total + header.size > max_bytes:
                break
            total += header.size
            last_offset = header.base_offset + header.last_offset_delta
        data = bytes_in_window(window, first.position, total)
        return (
            FetchSlice(self._file, first.position, total, first.base_offset, last_offset, data),
            True,
        )

    def read_batch(self, header: BatchHeader) -> bytes:
        """The bytes of one batch found by a header scan."""
        return os.pread(self._fd, header.size, header.position)

    def _first_record_at_or_after(
        self, header: BatchHeader, timestamp: int, min_offset: int, exact: bool
    ) -> tuple[int, int] | None:
        data = self.read_batch(header)
        try:
            records = decode_records(data, read_header(data, 0))
        except CorruptRecordError:
            logger.exception("segment %s: undecodable batch at %d", self.log_path, header.position)
            return None
        for record in records:
            if record.offset < min_offset:
                continue
            if record.timestamp == timestamp if exact else record.timestamp >= timestamp:
                return record.offset, record.timestamp
        return None

    def find_offset_by_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record at or after ``min_offset`` whose
        timestamp is ``>= timestamp``, or None."""
        start_offset = max(self.time_index.lookup_before(timestamp), min_offset)
        start = self.offset_index.lookup(start_offset)[1]
        for header in iter_headers(self._fd, start, self.size):
            if (
                header.max_timestamp >= timestamp
                and header.base_offset + header.last_offset_delta >= min_offset
            ):
                found = self._first_record_at_or_after(header, timestamp, min_offset, False)
                if found is not None:
                    return found
        return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """``(max timestamp, offset of the first record carrying it)``; ``(-1, -1)`` when no
        record has a timestamp."""
        if self.max_timestamp < 0 or self.size == 0:
            return NO_TIMESTAMP, -1
        header = self.find_batch(self.offset_of_max_timestamp)
        if header is not None and header.max_timestamp == self.max_timestamp:
            found = self._first_record_at_or_after(header, self.max_timestamp, 0, True)
            if found is not None:
                return found[1], found[0]
        return self.max_timestamp, self.offset_of_max_timestamp

    # --- truncation, roll, flush, close -------------------------------------------------

    def truncate_to(self, offset: int, *, max_index_size: int, now_ms: int) -> int:
        """Drop every batch whose last offset is ``>= offset``; returns bytes removed. The
        segment becomes active (its indexes are reopened and preallocated)."""
        header = self.find_batch(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        if not self.active:
            self.offset_index.open_for_append(max_index_size)
            self.time_index.open_for_append(max_index_size)
            self.active = True
        if header is None:
            return 0
        removed = self.size - header.position
        self._tail = None
        os.ftruncate(self._fd, header.position)
        self.size = header.position
        if self.size == 0:
            self.created_ms = now_ms
            self._rolling_based_timestamp = None
        self._rescan_tail(exact_max_timestamp=True)
        self._writes += 1
        return removed

    def make_active(self, max_index_size: int) -> None:
        """Open the indexes for appending (preallocated); used for the last segment."""
        self.offset_index.open_for_append(max_index_size)
        self.time_index.open_for_append(max_index_size)
        self.active = True

    def on_become_inactive(self) -> None:
        """Roll: add the final time-index entry, trim both indexes to their entries and close
        their files (they are made durable by the next ``flush``). The in-memory tail goes:
        only the active segment keeps one."""
        self._tail = None
        if self.active:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
            )
            self.offset_index.trim()
            self.time_index.trim()
            self.offset_index.close()
            self.time_index.close()
            self.active = False
            self._writes += 1

    @property
    def needs_flush(self) -> bool:
        return self._writes != self._synced

    def flush(self) -> None:
        """fsync the ``.log`` and both index files if anything changed since the last flush.

        Safe to run in a worker thread while the event loop keeps appending: it uses only the
        ``.log`` descriptor (which stays open until the files are physically deleted) and
        opens the index files by name, and it records as durable only the changes made
        before it started.
        """
        writes = self._writes
        if self.closed or writes == self._synced:
            return
        try:
            _fdatasync(self._fd)
        except OSError:
            if self.closed:  # closed (deleted) by the event loop meanwhile
                return
            raise
        for path in (self.offset_index.path, self.time_index.path):
            _fsync_path(path)
        self.txn_index.flush()
        self._synced = writes

    def close(self) -> None:
        """Final time-index entry and trim (if active), fsync, then close every file."""
        if self.closed:
            return
        self.on_become_inactive()
        self.flush()
        self.txn_index.close()
        self._file.close()
        self.closed = True

    def close_handles(self) -> None:
        """Close every file without writing anything (abandoning the segment)."""
        self._tail = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        if not self._file.closed:
            self._file.close()
        self.closed = True

    # --- deletion ----------------------------------------------------------------------

    def all_paths(self) -> list[Path]:
        return [
            segment_file(self.directory, self.base_offset, s + self.suffix)
            for s in SEGMENT_SUFFIXES
        ]

    def rename_to_deleted(self) -> list[Path]:
        """Rename the segment's files to ``*.deleted`` (index fds are closed, the ``.log`` stays
        open for readers); returns the new paths."""
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        renamed: list[Path] = []
        for path in self.all_paths():
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                os.replace(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        self.active = False
        return renamed

    def delete_files_now(self, paths: list[Path] | None = None) -> None:
        """Close every file and unlink ``paths`` (default: the live file names)."""
        self.close_handles()
        for path in paths if paths is not None else self.all_paths():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, size={self.size}, "
            f"next={self.next_offset}, active={self.active})"
        )


class _Tail:
    """A segment's last append, kept in memory when small (``TAIL_BYTES``): its file
    ``position``, its ``data`` (whole batches, exactly the bytes written there) and, per
    batch, its base and last offsets and its size. Valid until the segment's next append,
    truncation or roll, which replace or drop it: until then it is the end of the ``.log``.

    Concurrency: event-loop thread only (as the segment)."""

    __slots__ = ("base_offset", "data", "offsets", "position")

    def __init__(self, position: int, data: bytes, batches: list[tuple[int, int, int]]) -> None:
        self.position = position
        self.data = data
        offsets: list[tuple[int, int, int]] = []
        at = 0
        for last_offset, _max_ts, size in batches:
            offsets.append((_BASE_OFFSET.unpack_from(data, at)[0], last_offset, size))
            at += size
        self.offsets = offsets
        self.base_offset = offsets[0][0] if offsets else 1 << 63

    def read(
        self, file: BinaryIO, offset: int, max_bytes: int, max_offset: int, min_one_batch: bool
    ) -> FetchSlice | None:
        """:meth:`LogSegment.read` for an ``offset`` at or after the tail's first batch (and
        below the segment's next offset): the same batches, from memory."""
        at = 0
        offsets = self.offsets
        i = 0
        while offsets[i][1] < offset:  # the batch holding offset (the log's end bounds i)
            at += offsets[i][2]
            i += 1
        base, last_offset, total = offsets[i]
        if base >= max_offset or (total > max_bytes and not min_one_batch):
            return None
        for base, last, size in offsets[i + 1 :]:
            if base >= max_offset or total + size > max_bytes:
                break
            total += size
            last_offset = last
        data = self.data if at == 0 and total == len(self.data) else self.data[at : at + total]
        return FetchSlice(file, self.position + at, total, offsets[i][0], last_offset, data)
