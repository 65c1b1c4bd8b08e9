"""One cleaning round of one log (Kafka's ``Cleaner.doClean``), run in a cleaner worker
process.

Theory of operation. The broker hands the worker a :class:`CleaningJob`: a snapshot of the
log's inactive segments (base offset and size: those bytes never change while the segment
stays in the log, except by a truncation that the broker detects before it swaps), the dirty
range ``[first dirty offset, first uncleanable offset)``, the aborted transactions of the log,
the last batch of each active producer and the settings. The worker then:

1. builds the :class:`~broker.log.cleaner.offset_map.OffsetMap` over the dirty range: the
   latest offset of every key, skipping data of aborted transactions and control batches. If
   the map reaches its capacity, the round stops there: ``end offset`` = the map's latest
   offset + 1 (the rest stays dirty for the next round);
2. groups the segments from the first one up to the end offset so that each group fits in
   one segment (``segment.bytes``, ``segment.index.bytes``, offsets within 2^31 of the base:
   Kafka's ``groupSegmentsBySize``), and rewrites every group into one new segment named
   ``<base>.log.cleaned`` (with ``.index.cleaned``, ``.timeindex.cleaned``,
   ``.txnindex.cleaned``), keeping what :class:`~broker.log.cleaner.batch_filter.BatchFilter`
   says, indexing it as appends do, and fsyncing it.

The broker then swaps each group's ``.cleaned`` files into the live log (``Log.replace_with
_cleaned``); the ``.cleaned``/``.swap`` file names make every moment of that crash-safe (see
:mod:`broker.log.log_loader`). The worker never touches the live segments' files except to
read them.

Reads and writes are throttled together to ``log.cleaner.io.max.bytes.per.second`` and made
in ``log.cleaner.io.buffer.size`` windows (a batch larger than that is read whole, once).

Records are scanned by the native cleaner (:mod:`~broker.log.cleaner.native`: the offset map
and the per-record filter in C) when the extension is built and ``CleaningJob.native`` is
set (the default), else by the Python cleaner, its reference; both write the same bytes.

Why a process: cleaning reads and scans every record of the dirty section; in a thread the
Python parts of a round (per batch, and every record with the Python cleaner) would hold the
GIL and stall the broker's event loop (produce and fetch latency), in a process it runs on
another core and the broker only renames files.

Concurrency: a worker process runs one job at a time; jobs of one log never overlap (the
manager's rule).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from broker.log.cleaner.batch_filter import BatchFilter, ProducerTail, marker_type
from broker.log.cleaner.native import (
    NATIVE,
    is_native,
    new_offset_map,
    records_section,
)
from broker.log.cleaner.offset_map import OffsetMap
from broker.log.cleaner.transactions import CleanedTransactions
from broker.log.offset_index import OffsetIndex
from broker.log.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    LogSegment,
    segment_file,
)
from broker.log.transaction_index import AbortedTxn
from broker.protocol.batch_rewrite import records_of
from broker.protocol.records import HEADER_SIZE, MIN_BATCH_LENGTH, BatchHeader, read_header

if TYPE_CHECKING:
    from broker.log.cleaner._native_cleaner import OffsetMap as NativeOffsetMap

__all__ = [
    "CLEANED_SUFFIX",
    "CleanedGroup",
    "CleaningJob",
    "CleaningResult",
    "SegmentRef",
    "group_segments",
    "run_cleaning",
    "worker_init",
]

_OFFSET_ENTRY = 8
_TIME_ENTRY = 12


class CleaningAborted(Exception):
    """The log changed under the worker (a segment shrank or vanished): nothing is kept."""


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One inactive segment as the broker saw it when the job was made."""

    base_offset: int
    size: int
    offset_index_entries: int
    time_index_entries: int


@dataclass(frozen=True, slots=True)
class CleaningJob:
    directory: str
    segments: tuple[SegmentRef, ...]
    first_dirty_offset: int
    first_uncleanable_offset: int
    aborted: tuple[AbortedTxn, ...]
    producers: Mapping[int, ProducerTail]
    now_ms: int
    delete_retention_ms: int
    max_batch_bytes: int
    segment_bytes: int
    max_index_bytes: int
    index_interval_bytes: int
    map_capacity: int
    io_buffer_bytes: int
    io_bytes_per_second: float
    native: bool = NATIVE  # scan records with the native cleaner (when it is built)


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    """One ``.cleaned`` segment at ``base_offset`` replacing the segments ``replaced``."""

    base_offset: int
    replaced: tuple[int, ...]
    size: int


@dataclass(frozen=True, slots=True)
class CleaningResult:
    end_offset: int
    groups: tuple[CleanedGroup, ...] = ()
    map_bytes_read: int = 0
    bytes_read: int = 0  # by the rewrite (Kafka's "MB of log processed")
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    keys_mapped: int = 0
    map_seconds: float = 0.0
    clean_seconds: float = 0.0
    throttled_seconds: float = 0.0


def worker_init() -> None:
    """Cleaner worker set-up: die with the broker (a SIGKILLed broker leaves no cleaner
    behind), and leave SIGINT to the broker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() == 1:  # the broker died before prctl
            os._exit(1)


@dataclass(slots=True)
class _Throttle:
    """Keeps the I/O rate at ``rate`` bytes per second (Kafka's ``Throttler``)."""

    rate: float
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    slept: float = 0.0

    def __call__(self, nbytes: int) -> None:
        if self.rate <= 0 or self.rate == float("inf"):
            return
        self.done += nbytes
        elapsed = time.monotonic() - self.started
        ahead = self.done / self.rate - elapsed
        if ahead > 0.01:
            time.sleep(ahead)
            self.slept += ahead


def _batches(
    path: Path, start: int, end: int, window: int, throttle: _Throttle
) -> Iterator[tuple[bytes, BatchHeader]]:
    """Every batch of the file region ``[start, end)``: (buffer, header in it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as exc:
        raise CleaningAborted(f"{path} is gone") from exc
    try:
        if os.fstat(fd).st_size < end:
            raise CleaningAborted(f"{path} shrank below {end} bytes")
        pos = start
        want = window  # at least the size of the batch at ``pos`` when it is known
        while pos < end:
            data = os.pread(fd, min(max(window, want), end - pos), pos)
            off = 0
            want = window
            while off + HEADER_SIZE <= len(data):
                header = read_header(data, off)
                if header.batch_length < MIN_BATCH_LENGTH:
                    raise CleaningAborted(f"{path}: bad batch framing at {pos + off}")
                if off + header.size > len(data):
                    want = header.size
                    break
                yield data, header
                off += header.size
            if off == 0:  # a batch larger than the window: read it whole
                if len(data) < HEADER_SIZE:
                    raise CleaningAborted(f"{path}: torn batch at {pos}")
                header = read_header(data, 0)
                if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > end:
                    raise CleaningAborted(f"{path}: bad batch framing at {pos}")
                data = os.pread(fd, header.size, pos)
                yield data, read_header(data, 0)
                off = header.size
            pos += off
            throttle(off)
    finally:
        os.close(fd)


def _start_position(directory: Path, seg: SegmentRef, offset: int) -> int:
    """Where to start reading ``seg`` for ``offset`` (its offset index; 0 if unreadable)."""
    if offset <= seg.base_offset:
        return 0
    try:
        index = OffsetIndex.load(
            segment_file(directory, seg.base_offset, INDEX_SUFFIX), seg.base_offset, seg.size
        )
    except Exception:  # noqa: BLE001 - an index is an optimisation here; scan from the start
        return 0
    try:
        return index.lookup(offset)[1]
    finally:
        index.close()


def _build_offset_map(
    job: CleaningJob,
    directory: Path,
    offset_map: OffsetMap | NativeOffsetMap,
    throttle: _Throttle,
) -> int:
    """Map the dirty range; returns bytes read."""
    start, upper = job.first_dirty_offset, job.first_uncleanable_offset
    txns = CleanedTransactions(job.aborted)
    segments = job.segments
    native = offset_map if is_native(offset_map) else None
    read = 0
    for i, seg in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else upper
        if next_base <= start:
            continue
        if seg.base_offset >= upper:
            break
        path = segment_file(directory, seg.base_offset, LOG_SUFFIX)
        position = _start_position(directory, seg, start)
        for data, header in _batches(path, position, seg.size, job.io_buffer_bytes, throttle):
            read += header.size
            if header.base_offset >= upper or not _map_batch(
                job, data, header, txns, offset_map, native
            ):
                return read
            if header.last_offset >= start:
                offset_map.update_latest_offset(header.last_offset)
        # offsets of a gap at the segment's end belong to the mapped section too
        offset_map.update_latest_offset(min(next_base, upper) - 1)
    return read


def _map_batch(
    job: CleaningJob,
    data: bytes,
    header: BatchHeader,
    txns: CleanedTransactions,
    offset_map: OffsetMap | NativeOffsetMap,
    native: NativeOffsetMap | None,
) -> bool:
    """Map the keys of one batch of the dirty range (a marker ends its transaction; the
    records of an aborted transaction are not mapped). False when the map is full."""
    start = job.first_dirty_offset
    if header.is_control:
        payload, records = records_of(data, header, job.max_batch_bytes)
        txns.on_control_batch(header.producer_id, header.last_offset, marker_type(records, payload))
        return True
    if txns.on_data_batch(header.producer_id, header.is_transactional, header.last_offset):
        return True
    if native is not None:
        return native.map_records(
            records_section(data, header, job.max_batch_bytes),
            header.record_count,
            header.base_offset,
            start,
        )
    _payload, records = records_of(data, header, job.max_batch_bytes)
    base = header.base_offset
    for r in records:
        offset = base + r.offset_delta
        if r.key is not None and offset >= start:
            if offset_map.full:
                return False
            offset_map.put(r.key, offset)
    return True


def group_segments(
    segments: list[SegmentRef], max_size: int, max_index_bytes: int, end_offset: int
) -> list[list[SegmentRef]]:
    """Consecutive segments merged into groups that each fit one segment (Kafka's
    ``groupSegmentsBySize``)."""
    groups: list[list[SegmentRef]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        oi = segments[i].offset_index_entries * _OFFSET_ENTRY
        ti = segments[i].time_index_entries * _TIME_ENTRY
        i += 1
        while i < len(segments):
            nxt = segments[i]
            last = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else end_offset - 1
            if (
                size + nxt.size > max_size
                or oi + nxt.offset_index_entries * _OFFSET_ENTRY > max_index_bytes
                or ti + nxt.time_index_entries * _TIME_ENTRY > max_index_bytes
                or (nxt.size > 0 and last - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(nxt)
            size += nxt.size
            oi += nxt.offset_index_entries * _OFFSET_ENTRY
            ti += nxt.time_index_entries * _TIME_ENTRY
            i += 1
        groups.append(group)
    return groups


def cleaned_paths(directory: Path, base_offset: int) -> list[Path]:
    return [
        directory / f"{base_offset:020d}{suffix}{CLEANED_SUFFIX}" for suffix in SEGMENT_SUFFIXES
    ]


class _CleanedWriter:
    """The ``.cleaned`` segment of one group, written through a buffer."""

    def __init__(self, job: CleaningJob, directory: Path, base_offset: int) -> None:
        for stale in cleaned_paths(directory, base_offset):
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        self.segment = LogSegment.create(
            directory,
            base_offset,
            max_index_size=job.max_index_bytes,
            created_ms=job.now_ms,
            suffix=CLEANED_SUFFIX,
        )
        self._interval = job.index_interval_bytes
        self._flush_at = job.io_buffer_bytes
        self._buf = bytearray()
        self._infos: list[tuple[int, int, int]] = []
        self.written = 0

    def write(self, data: bytes | memoryview) -> None:
        header = read_header(data, 0)
        self._buf += data
        self._infos.append((header.last_offset, header.max_timestamp, header.size))
        if len(self._buf) >= self._flush_at:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self.segment.append(self._buf, self._infos, index_interval_bytes=self._interval)
            self.written += len(self._buf)
            self._buf = bytearray()
            self._infos = []

    def finish(self) -> int:
        self._flush()
        self.segment.on_become_inactive()
        self.segment.flush()
        self.segment.close()
        return self.segment.size


def run_cleaning(job: CleaningJob) -> CleaningResult:
    """Run one cleaning round (in a worker process): see the module docstring."""
    directory = Path(job.directory)
    throttle = _Throttle(job.io_bytes_per_second)
    started = time.monotonic()
    offset_map = new_offset_map(job.map_capacity, native=job.native)
    map_read = _build_offset_map(job, directory, offset_map, throttle)
    end_offset = offset_map.latest_offset + 1
    mapped = time.monotonic()
    if end_offset <= job.first_dirty_offset:
        return CleaningResult(end_offset=job.first_dirty_offset, map_bytes_read=map_read)
    to_clean = [s for s in job.segments if s.base_offset < end_offset]
    txns = CleanedTransactions(job.aborted)
    batch_filter = BatchFilter(
        offset_map,
        txns,
        job.producers,
        now_ms=job.now_ms,
        delete_retention_ms=job.delete_retention_ms,
        round_end_offset=end_offset,
        max_batch_bytes=job.max_batch_bytes,
    )
    groups: list[CleanedGroup] = []
    read = 0
    written = 0
    for group in group_segments(to_clean, job.segment_bytes, job.max_index_bytes, end_offset):
        writer = _CleanedWriter(job, directory, group[0].base_offset)
        txns.on_kept_abort = writer.segment.txn_index.append
        try:
            for seg in group:
                path = segment_file(directory, seg.base_offset, LOG_SUFFIX)
                for data, header in _batches(path, 0, seg.size, job.io_buffer_bytes, throttle):
                    read += header.size
                    kept = batch_filter.filter(data, header)
                    if kept is not None:
                        writer.write(kept)
                        throttle(len(kept))
            size = writer.finish()
        except BaseException:
            writer.segment.close_handles()
            for path in cleaned_paths(directory, group[0].base_offset):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            raise
        written += size
        groups.append(CleanedGroup(group[0].base_offset, tuple(s.base_offset for s in group), size))
    stats = batch_filter.stats
    return CleaningResult(
        end_offset=end_offset,
        groups=tuple(groups),
        map_bytes_read=map_read,
        bytes_read=read,
        bytes_written=written,
        records_read=stats.records_read,
        records_kept=stats.records_kept,
        keys_mapped=len(offset_map),
        map_seconds=mapped - started,
        clean_seconds=time.monotonic() - mapped,
        throttled_seconds=throttle.slept,
    )
