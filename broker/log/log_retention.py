"""Retention and DeleteRecords for a partition's log: which prefix of segments goes.

Theory of operation. Only a prefix of the log is ever deleted, never past the high
watermark. ``cleanup.policy`` delete deletes the segments whose largest timestamp is older
than ``retention.ms`` and the oldest segments while the log exceeds ``retention.bytes``; in
every case segments wholly below the log start offset (moved by DeleteRecords) go. A deleted
segment's files are renamed ``*.deleted`` and removed later
(:class:`~broker.log.local_log.LocalLog`'s delayed deletion); the log start, the producer
state and the leader epoch cache follow the new first segment.

Concurrency: as :class:`~broker.log.log.Log`: the broker's event-loop thread only.
"""

from __future__ import annotations

import logging

from broker.log.errors import OffsetOutOfRangeError
from broker.log.leader_epoch import LeaderEpochFileCache
from broker.log.local_log import LocalLog, storage_operation
from broker.log.producer_state import ProducerStateManager
from broker.log.segment import LogSegment

logger = logging.getLogger("broker.log.log")


class LogRetention(LocalLog):
    """Retention and DeleteRecords (see the module docstring); :class:`~broker.log.log.Log`
    provides the producer state, the epoch cache and rolling."""

    producer_state: ProducerStateManager
    leader_epoch_cache: LeaderEpochFileCache

    def _roll(self, expected_next_offset: int | None) -> None:
        raise NotImplementedError

    @storage_operation("moving the log start of")
    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start up to ``offset`` (DeleteRecords) and delete the segments wholly
        below it. Raises OffsetOutOfRangeError beyond the log end; lower offsets are a no-op.
        """
        self._check_open()
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot move the log start of {self.topic_partition} to {offset} beyond "
                f"the log end {self.log_end_offset}"
            )
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        self._delete_segments(self._deletable(self._start_offset_breached), "log start offset")

    # ======================================================================================
    # retention and deletion
    # ======================================================================================

    @storage_operation("deleting old segments of")
    def delete_old_segments(self) -> int:
        """Apply retention; returns the number of segments deleted.

        With ``cleanup.policy`` delete: segments whose largest timestamp is older than
        ``retention.ms``, the oldest segments while the log exceeds ``retention.bytes``; in
        every case segments wholly below the log start. Only a prefix of the log is ever
        deleted, never past ``high_watermark``; if every segment (the non-empty active one
        included) qualifies, the log rolls first so the active segment can go too.
        """
        self._check_open()
        deleted = self._delete_segments(
            self._deletable(self._start_offset_breached), "log start offset"
        )
        config = self.config
        if config.delete:
            if config.retention_bytes >= 0:
                excess = self.size_in_bytes - config.retention_bytes
                if excess >= 0:
                    budget = [excess]

                    def size_breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                        if budget[0] - seg.size >= 0:
                            budget[0] -= seg.size
                            return True
                        return False

                    deleted += self._delete_segments(
                        self._deletable(size_breached), "retention.bytes"
                    )
            if config.retention_ms >= 0:
                now = self._clock.time_ms()
                limit = config.retention_ms

                def time_breached(seg: LogSegment, _nxt: LogSegment | None) -> bool:
                    return now - seg.largest_timestamp > limit

                deleted += self._delete_segments(self._deletable(time_breached), "retention.ms")
        self.delete_pending_files()
        return deleted

    def _start_offset_breached(self, _seg: LogSegment, nxt: LogSegment | None) -> bool:
        return nxt is not None and nxt.base_offset <= self._log_start_offset

    def _delete_segments(self, doomed: list[LogSegment], reason: str) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(None)
        n = len(doomed)
        logger.info(
            "%s: deleting %d segments (%s): %s",
            self.topic_partition,
            n,
            reason,
            [s.base_offset for s in doomed],
        )
        self._segments.drop_prefix(n)
        self._schedule_delete(doomed)
        self._log_start_offset = max(self._log_start_offset, self._segments.first.base_offset)
        self.producer_state.on_log_start_offset(self._log_start_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        return n
