"""Retention and DeleteRecords for a partition's log: which prefix of segments goes.

Theory of operation. Only a prefix of the log is ever deleted, never past the high
watermark. ``cleanup.policy`` delete deletes the segments whose largest timestamp is older
than ``retention.ms`` and the oldest segments while the log exceeds ``retention.bytes``; in
every case segments wholly below the log start offset (moved by DeleteRecords) go.
:class:`LogRetention` chooses the segments; the :class:`~broker.log.log.Log` that owns it
deletes them (``delete``): their files are renamed ``*.deleted`` and removed later
(:class:`~broker.log.local_log.LocalLog`'s delayed deletion), and the log start, the producer
state and the leader epoch cache follow the new first segment.

Concurrency: as :class:`~broker.log.log.Log`: the broker's event-loop thread only.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.clock import Clock
from broker.log.local_log import LocalLog
from broker.log.segment import LogSegment

__all__ = ["LogRetention", "SegmentPredicate"]

SegmentPredicate = Callable[[LogSegment, "LogSegment | None"], bool]
"""Whether a segment (given the next one, None for the last) may go."""


class LogRetention:
    """Chooses the segments retention and DeleteRecords delete (see the module docstring).

    ``high_watermark`` reads the log's high watermark (None: no bound); ``delete`` deletes
    a prefix of segments for a reason and returns how many went."""

    def __init__(
        self,
        local: LocalLog,
        *,
        clock: Clock,
        high_watermark: Callable[[], int | None],
        delete: Callable[[list[LogSegment], str], int],
    ) -> None:
        self._local = local
        self._clock = clock
        self._high_watermark = high_watermark
        self._delete = delete

    def delete_below_log_start(self) -> int:
        """Delete the segments wholly below the log start offset."""
        return self._delete(self._deletable(self._start_offset_breached), "log start offset")

    def delete_old_segments(self) -> int:
        """Apply retention; returns the number of segments deleted.

        With ``cleanup.policy`` delete: segments whose largest timestamp is older than
        ``retention.ms``, the oldest segments while the log exceeds ``retention.bytes``; in
        every case segments wholly below the log start. Only a prefix of the log is ever
        deleted, never past the high watermark (the log rolls first if every segment, the
        non-empty active one included, goes).
        """
        deleted = self.delete_below_log_start()
        config = self._local.config
        if config.delete:
            if config.retention_bytes >= 0:
                deleted += self._delete_over_size(config.retention_bytes)
            if config.retention_ms >= 0:
                deleted += self._delete_older_than(config.retention_ms)
        return deleted

    def _delete_over_size(self, retention_bytes: int) -> int:
        excess = self._local.size_in_bytes - retention_bytes
        if excess < 0:
            return 0
        budget = [excess]

        def size_breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
            if budget[0] - seg.size >= 0:
                budget[0] -= seg.size
                return True
            return False

        return self._delete(self._deletable(size_breached), "retention.bytes")

    def _delete_older_than(self, retention_ms: int) -> int:
        now = self._clock.time_ms()

        def time_breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
            return now - seg.largest_timestamp > retention_ms

        return self._delete(self._deletable(time_breached), "retention.ms")

    def _start_offset_breached(self, _seg: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= self._local.log_start_offset

    def _deletable(self, predicate: SegmentPredicate) -> list[LogSegment]:
        """The longest prefix of segments that ``predicate`` accepts, each wholly below the
        high watermark (and the log end); never an empty last segment."""
        segments = self._local.log_segments
        leo = self._local.log_end_offset
        hw = self._high_watermark()
        bound = leo if hw is None else min(hw, leo)
        out: list[LogSegment] = []
        for i, segment in enumerate(segments):
            nxt = segments[i + 1] if i + 1 < len(segments) else None
            if nxt is None and segment.is_empty:
                break
            upper = nxt.base_offset if nxt is not None else leo
            if bound >= upper and predicate(segment, nxt):
                out.append(segment)
            else:
                break
        return out
