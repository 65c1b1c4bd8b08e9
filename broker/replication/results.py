"""What the replica manager takes and returns for produce and fetch: one partition's
produce outcome, one partition of a fetch request, one partition's fetch result. Plain values,
shared by the replica manager, the API handlers and fetch sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.log.file_records import FetchSlice
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

__all__ = ["FetchRequestPartition", "FetchResult", "ProduceResult"]


@dataclass(slots=True)
class ProduceResult:
    error: ErrorCode = ErrorCode.none
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    last_offset: int = -1


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    tp: TopicPartition
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    """The epoch of the last record the fetcher has (Fetch v12+; -1: none or not sent): the
    leader answers a ``diverging_epoch`` when its log disagrees (KIP-595, Kafka's
    truncation on fetch)."""


@dataclass(slots=True)
class FetchResult:
    tp: TopicPartition
    error: ErrorCode = ErrorCode.none
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    slice: FetchSlice | None = None
    aborted_transactions: list[tuple[int, int]] | None = None  # read_committed only
    diverging_epoch: tuple[int, int] | None = None
    """(epoch, end offset) where the leader's log leaves the fetcher's (no records then)."""

    @property
    def size(self) -> int:
        return 0 if self.slice is None else self.slice.size
