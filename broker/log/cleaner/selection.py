"""Which compacted log to clean next, and which part of it (Kafka's ``LogCleanerManager``).

A compacted log is split at its *first dirty offset* (the cleaner checkpoint: everything
below has been cleaned at least once; the log start when there is no valid checkpoint) into
a clean head and a dirty tail. The dirty tail is cleanable up to the *first uncleanable
offset*, the smallest of:

* the last stable offset (the first offset of an open transaction, bounded by the high
  watermark): data that may still be aborted, or truncated, is never used to remove records;
* the base offset of the active segment (never cleaned);
* with ``min.compaction.lag.ms``, the base of the first dirty segment whose newest record is
  younger than that lag.

The *cleanable ratio* is cleanable bytes / (clean bytes + cleanable bytes), counted over the
whole segments overlapping each part. A log needs cleaning when the ratio is above
``min.cleanable.dirty.ratio`` (strictly, as in Kafka), or when
it has cleanable bytes and the oldest dirty segment's first batch is older than
``max.compaction.lag.ms`` (compaction is then due whatever the ratio). Among the logs that
need cleaning the one with the highest ratio goes first (the dirtiest), as in Kafka.

Concurrency: pure functions over snapshots taken on the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CleanableRange",
    "LogView",
    "SegmentView",
    "cleanable_range",
    "dirtiest_ratio",
    "filthiest",
]


@dataclass(frozen=True, slots=True)
class SegmentView:
    """What selection needs of one segment."""

    base_offset: int
    size: int
    largest_timestamp: int
    first_batch_timestamp: int | None


@dataclass(frozen=True, slots=True)
class LogView:
    """What selection needs of one log (a snapshot; ``segments`` end with the active one)."""

    key: object
    segments: Sequence[SegmentView]
    log_start_offset: int
    checkpoint: int | None
    last_stable_offset: int
    min_cleanable_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int


@dataclass(frozen=True, slots=True)
class CleanableRange:
    key: object
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    overdue_ms: int

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    def needs_cleaning(self, min_ratio: float) -> bool:
        if self.cleanable_bytes <= 0:
            return False
        return self.overdue_ms > 0 or self.ratio > min_ratio  # Kafka: strictly above


def cleanable_range(view: LogView, now_ms: int) -> CleanableRange:
    """The clean/cleanable split of one log at ``now_ms``."""
    segments = view.segments
    active = segments[-1]
    start = view.log_start_offset
    first_dirty = view.checkpoint
    if first_dirty is None or first_dirty < start or first_dirty > active.base_offset:
        first_dirty = start
    # the first dirty segment: the one holding first_dirty
    dirty_from = 0
    for i, seg in enumerate(segments):
        if seg.base_offset <= first_dirty:
            dirty_from = i
    inactive_dirty = segments[dirty_from:-1]
    uncleanable = min(view.last_stable_offset, active.base_offset)
    if view.min_compaction_lag_ms > 0:
        horizon = now_ms - view.min_compaction_lag_ms
        for seg in inactive_dirty:
            if seg.largest_timestamp > horizon:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    uncleanable = max(uncleanable, first_dirty)
    # bytes of the segments overlapping [log start, first dirty) and [first dirty, first
    # uncleanable), as Kafka counts them (a segment holding the boundary counts in both)
    clean_bytes = sum(s.size for s in segments[:-1] if s.base_offset < first_dirty)
    cleanable_bytes = 0
    if first_dirty < uncleanable:
        for i in range(dirty_from, len(segments) - 1):
            if segments[i].base_offset >= uncleanable:
                break
            cleanable_bytes += segments[i].size
    overdue = 0
    if view.max_compaction_lag_ms >= 0 and cleanable_bytes > 0:
        firsts = [s.first_batch_timestamp for s in inactive_dirty]
        stamps = [t for t in firsts if t is not None and t > 0]
        if stamps:
            due_before = now_ms - view.max_compaction_lag_ms
            earliest = min(stamps)
            if earliest < due_before:
                overdue = due_before - earliest
    return CleanableRange(view.key, first_dirty, uncleanable, clean_bytes, cleanable_bytes, overdue)


def filthiest(views: Sequence[LogView], now_ms: int) -> CleanableRange | None:
    """The log to clean next, or None when no log needs cleaning."""
    best: CleanableRange | None = None
    for view in views:
        if len(view.segments) < 2:
            continue
        found = cleanable_range(view, now_ms)
        if not found.needs_cleaning(view.min_cleanable_ratio):
            continue
        if best is None or found.ratio > best.ratio:
            best = found
    return best


def dirtiest_ratio(views: Sequence[LogView], now_ms: int) -> float:
    """The highest cleanable ratio among ``views``, 0.0 when there are none: Kafka's
    ``dirtiestLogCleanableRatio``, behind its ``max-dirty-percent`` gauge (taken over every
    compacted log not being cleaned, whether or not it needs cleaning)."""
    return max((cleanable_range(view, now_ms).ratio for view in views), default=0.0)
