"""The ordered segments of one partition log (Kafka's ``LogSegments``).

A log is a run of segments with increasing base offsets; the last one is the *active*
segment that appends go to. This collection keeps the segments and their base offsets in
step (``bisect`` over the bases finds the segment holding an offset) and offers the few
changes a log makes: append at the end (roll), drop a prefix (retention, log start),
drop a suffix (truncation), replace a run by one cleaned segment (compaction), replace
everything (full truncation, loading).

Reading helpers walk batch headers across segments (:meth:`LogSegments.batches_from`) and
find the segment of an offset, which recovery, producer-state replay and transaction-index
searches use.

Concurrency: owned by one :class:`~broker.log.log.Log`; event-loop thread only. ``snapshot``
returns a list copy for code that may run in a worker thread (``Log.flush``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from broker.log.segment import LogSegment
from broker.protocol.records import BatchHeader

__all__ = ["LogSegments"]


class LogSegments:
    """Segments ordered by base offset; never empty once a log is open."""

    __slots__ = ("_bases", "_segments")

    def __init__(self, segments: Iterable[LogSegment] = ()) -> None:
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.replace(segments)

    # --- queries ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, i: int) -> LogSegment:
        return self._segments[i]

    @property
    def bases(self) -> list[int]:
        return list(self._bases)

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    def snapshot(self) -> list[LogSegment]:
        """A copy of the list (safe to iterate while the log changes)."""
        return list(self._segments)

    def index_of(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (0 if below the first)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def floor(self, offset: int) -> LogSegment:
        """The segment whose range holds ``offset`` (the first if below it)."""
        return self._segments[self.index_of(offset)]

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` and every later one."""
        return self._segments[self.index_of(offset) :]

    def batches_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of every batch whose last offset is ``>= offset``, in order (positions are
        positions in their own segment files)."""
        segments = self.from_offset(offset)
        first = True
        for segment in segments:
            start = segment.offset_index.lookup(offset)[1] if first else 0
            first = False
            for header in segment.headers(start):
                if header.base_offset + header.last_offset_delta >= offset:
                    yield header

    def read_batch(self, header: BatchHeader) -> bytes:
        """The bytes of a batch found by :meth:`batches_from` (in the segment holding it)."""
        return self.floor(header.base_offset).read_batch(header)

    # --- changes -----------------------------------------------------------------------------

    def append(self, segment: LogSegment) -> None:
        if self._bases and segment.base_offset <= self._bases[-1]:
            raise ValueError(f"segment {segment.base_offset} does not follow {self._bases[-1]}")
        self._segments.append(segment)
        self._bases.append(segment.base_offset)

    def pop_active(self) -> LogSegment:
        self._bases.pop()
        return self._segments.pop()

    def drop_prefix(self, count: int) -> list[LogSegment]:
        """Remove and return the first ``count`` segments."""
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        return doomed

    def drop_after(self, offset: int) -> list[LogSegment]:
        """Remove and return every segment whose base offset is ``> offset``."""
        cut = bisect.bisect_right(self._bases, offset)
        doomed = self._segments[cut:]
        del self._segments[cut:]
        del self._bases[cut:]
        return doomed

    def replace_run(self, old: list[LogSegment], new: LogSegment) -> None:
        """Replace ``old`` (consecutive segments of this log, in order) by ``new``, which
        takes the place of the first (a cleaned segment replacing the ones it merged)."""
        i = self._segments.index(old[0])
        if self._segments[i : i + len(old)] != old or new.base_offset != old[0].base_offset:
            raise ValueError("old segments are not a run of this log starting at the new base")
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]

    def replace(self, segments: Iterable[LogSegment]) -> list[LogSegment]:
        """Make ``segments`` the whole log; returns the segments it had."""
        old = self._segments
        self._segments = []
        self._bases = []
        for segment in segments:
            self.append(segment)
        return old
