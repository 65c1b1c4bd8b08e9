"""The leader epoch cache of one partition: which leader epoch started at which offset.

Theory of operation (KIP-101, refined by KIP-279). Every batch a leader appends is stamped
with the leader's epoch (``partitionLeaderEpoch``). The cache remembers, for each epoch, the
first offset written in it. A follower that restarts or becomes a follower asks the new
leader "where does my latest epoch end on your log?" (OffsetsForLeaderEpoch) and truncates
to the answer instead of to its high watermark, which is what keeps replicas from diverging
after leader changes. :meth:`LeaderEpochFileCache.end_offset_for` is the leader's side of
that question.

On-disk format: ``leader-epoch-checkpoint`` in the partition directory, Kafka's checkpoint
text format::

    0             <- version
    2             <- number of entries
    0 0           <- epoch, start offset
    3 1200

Every change rewrites the file atomically (temp + fsync + rename + fsync dir); changes are
rare (a new epoch, a truncation), so this is off the per-append hot path.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable
from pathlib import Path

from broker.log.checkpoints import atomic_write
from broker.log.errors import CorruptCheckpointError

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochFileCache",
    "read_leader_epoch_checkpoint",
]

logger = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
_VERSION = 0

EpochEntry = tuple[int, int]  # (epoch, start_offset)


def read_leader_epoch_checkpoint(path: Path) -> list[EpochEntry]:
    """Parse a ``leader-epoch-checkpoint`` file; ``[]`` if missing or empty (Kafka's
    ``CheckpointFile`` creates it empty and reads an empty file as no entries).

    Raises :class:`CorruptCheckpointError` if it is malformed or not monotonic.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not text") from exc
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:  # Kafka creates the file empty before its first write: no epochs yet
        return []
    try:
        if len(lines) < 2 or int(lines[0]) != _VERSION:
            raise CorruptCheckpointError(f"{path}: bad header")
        count = int(lines[1])
        if count < 0 or len(lines) - 2 != count:
            raise CorruptCheckpointError(f"{path}: expected {count} entries")
        entries: list[EpochEntry] = []
        for line in lines[2:]:
            parts = line.split(" ")
            if len(parts) != 2:
                raise CorruptCheckpointError(f"{path}: malformed line {line!r}")
            entries.append((int(parts[0]), int(parts[1])))
    except ValueError as exc:
        raise CorruptCheckpointError(f"{path}: malformed number") from exc
    for i, (epoch, start) in enumerate(entries):
        if epoch < 0 or start < 0:
            raise CorruptCheckpointError(f"{path}: negative entry {epoch} {start}")
        if i and (epoch <= entries[i - 1][0] or start < entries[i - 1][1]):
            raise CorruptCheckpointError(f"{path}: entries are not monotonic")
    return entries


class LeaderEpochFileCache:
    """Leader epoch -> start offset map of one partition, persisted in
    ``leader-epoch-checkpoint`` (see the module docstring for the format).

    Invariant: epochs strictly increase and start offsets never decrease along the list.

    Concurrency: owned by its :class:`~broker.log.log.Log`; called only from the broker's
    event-loop thread, so there is no lock.
    """

    def __init__(
        self,
        path: Path,
        log_end_offset: Callable[[], int],
        entries: list[EpochEntry] | None = None,
    ) -> None:
        """``entries`` (already read and validated) are taken as-is and not rewritten."""
        self.path = Path(path)
        self._log_end_offset = log_end_offset
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries or ():
            self._epochs.append(epoch)
            self._starts.append(start)

    @classmethod
    def load(cls, path: Path, log_end_offset: Callable[[], int]) -> LeaderEpochFileCache:
        """Read the checkpoint (raises CorruptCheckpointError if malformed)."""
        return cls(path, log_end_offset, read_leader_epoch_checkpoint(path))

    # --- queries -----------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        """The latest epoch with data, or -1 (UNDEFINED_EPOCH) when empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> EpochEntry | None:
        return (self._epochs[-1], self._starts[-1]) if self._epochs else None

    def end_offset_for(self, requested_epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch answer for ``requested_epoch``: ``(epoch, end_offset)``.

        * ``-1`` requested, or an epoch above every known one: ``(-1, -1)``;
        * the latest epoch: ``(epoch, log_end_offset)``;
        * otherwise the largest known epoch ``<= requested`` (or the requested epoch itself
          when it is below every known epoch) and the start offset of the first known epoch
          above it (KIP-279).
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, self._log_end_offset()
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    # --- changes -----------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        An epoch not above the latest one is ignored (the common case on every append).
        A new epoch whose start offset is below existing entries' start offsets removes
        those entries first, as Kafka does, so the invariant holds.
        """
        if self._epochs and epoch <= self._epochs[-1]:
            if epoch < self._epochs[-1]:
                logger.warning(
                    "%s: ignoring epoch %d at offset %d older than latest epoch %d",
                    self.path.parent.name,
                    epoch,
                    start_offset,
                    self._epochs[-1],
                )
            return False
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        removed: list[EpochEntry] = []
        while self._starts and self._starts[-1] >= start_offset:
            removed.append((self._epochs.pop(), self._starts.pop()))
        # Replacing one entry that starts at the same offset means no data was written in
        # that epoch: expected. Anything else is worth a warning.
        if len(removed) > 1 or (removed and removed[0][1] != start_offset):
            logger.warning(
                "%s: epoch %d at %d removed conflicting entries %s",
                self.path.parent.name,
                epoch,
                start_offset,
                removed,
            )
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove every entry whose start offset is ``>= end_offset`` (log truncation)."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return
        keep = bisect.bisect_left(self._starts, end_offset)
        del self._epochs[keep:]
        del self._starts[keep:]
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to ``start_offset``: drop entries wholly before it and move the
        start of the epoch containing it up to ``start_offset`` (an entry starting exactly
        at ``start_offset`` is kept as is)."""
        n = bisect.bisect_right(self._starts, start_offset)
        if n == 0 or (n == 1 and self._starts[0] == start_offset):
            return
        epoch = self._epochs[n - 1]
        del self._epochs[:n]
        del self._starts[:n]
        self._epochs.insert(0, epoch)
        self._starts.insert(0, start_offset)
        self._flush()

    def clear(self) -> None:
        """Remove every entry (truncate fully) and persist."""
        self._epochs.clear()
        self._starts.clear()
        self._flush()

    def flush(self) -> None:
        """Write the checkpoint file now (also done after every change)."""
        self._flush()

    def _flush(self) -> None:
        lines = [str(_VERSION), str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts, strict=True)]
        atomic_write(self.path, ("\n".join(lines) + "\n").encode("ascii"))

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.path}, {self.entries})"
