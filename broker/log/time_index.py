"""The time index of one segment (``<base offset>.timeindex``).

Theory of operation (KIP-33). The time index maps "largest timestamp seen so far" to the
offset of the batch that carried it, so ListOffsets-by-timestamp can skip to roughly the
right place of the right segment. Following Kafka's ``LogSegment``: whenever an offset-index
entry is added, a time-index entry ``(max timestamp so far, offset of that max)`` is added too,
but only if the max timestamp grew since the last time entry; when the segment rolls (or the
log closes) a final entry for the segment's max timestamp is added, which is why the index
reserves one slot for it (``is_full`` at ``max_entries - 1``). Timestamps in the index are
therefore strictly increasing and offsets non-decreasing, even though record timestamps
(CreateTime) need not be.

The offset recorded is the *last* offset of the batch holding the max timestamp (Kafka's
"shallow" offset). Because every record at or below an entry's offset has a timestamp at or
below the entry's timestamp, a search for target ``t`` can start at the last entry whose
timestamp is strictly below ``t``.

On-disk format: 12-byte big-endian entries ``timestamp int64 | relative offset int32``;
preallocation, trimming and untrimmed-file detection as for the offset index.

Concurrency: owned by its segment; event-loop thread only.
"""

from __future__ import annotations

import bisect
import logging
import struct
from array import array
from pathlib import Path
from typing import ClassVar

from broker.log.errors import CorruptIndexError
from broker.log.index import IndexFile, non_decreasing, strictly_increasing

__all__ = ["NO_TIMESTAMP", "TimeIndex"]

logger = logging.getLogger(__name__)

NO_TIMESTAMP = -1
_TIME_ENTRY = struct.Struct(">qi")


class TimeIndex(IndexFile):
    """Timestamp -> offset index of one segment (format in the module docstring).

    Concurrency: owned by its segment; event-loop thread only.
    """

    ENTRY_SIZE: ClassVar[int] = 12

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._ts = array("q")
        self._rel = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int) -> TimeIndex:
        """Read and sanity-check an existing file (CorruptIndexError / FileNotFoundError)."""
        index = cls(path, base_offset)
        data = cls.read_entry_bytes(path, cls.ENTRY_SIZE)
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            index._ts.append(ts)
            index._rel.append(rel)
        index.sanity_check()
        return index

    def sanity_check(self) -> None:
        if not self._rel:
            return
        if self._rel[0] < 0:
            raise CorruptIndexError(f"time index {self.path} has a negative offset")
        if not strictly_increasing(self._ts) or not non_decreasing(self._rel):
            raise CorruptIndexError(f"time index {self.path} entries are not increasing")

    def __len__(self) -> int:
        return len(self._ts)

    def _encode_all(self) -> bytes:
        pack = _TIME_ENTRY.pack
        return b"".join(pack(ts, rel) for ts, rel in zip(self._ts, self._rel, strict=True))

    def _clear(self) -> None:
        self._ts = array("q")
        self._rel = array("i")

    @property
    def is_full(self) -> bool:
        """Full one entry early: the last slot is kept for the entry added on roll."""
        return len(self._ts) >= max(self._max_entries - 1, 1)

    @property
    def last_entry(self) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry, or ``(-1, base_offset)`` when empty."""
        if not self._ts:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[-1], self.base_offset + self._rel[-1]

    def entry(self, n: int) -> tuple[int, int]:
        return self._ts[n], self.base_offset + self._rel[n]

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's; True if
        added. With ``skip_full_check`` the reserved last slot may be used."""
        last_ts = self._ts[-1] if self._ts else NO_TIMESTAMP
        if timestamp <= last_ts:
            return False
        rel = offset - self.base_offset
        if self._rel and rel < self._rel[-1]:
            raise ValueError(
                f"time index {self.path}: offset {offset} below last {self.last_entry[1]}"
            )
        if not skip_full_check and self.is_full:
            return False
        n = len(self._ts)
        if n >= self._max_entries:  # only with skip_full_check: grow by one entry
            self.resize((n + 1) * self.ENTRY_SIZE)
        self._write(n, _TIME_ENTRY.pack(timestamp, rel))
        self._ts.append(timestamp)
        self._rel.append(rel)
        return True

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """``(timestamp, offset)`` of the last entry with timestamp ``<= timestamp``, or
        ``(-1, base_offset)``."""
        i = bisect.bisect_right(self._ts, timestamp) - 1
        if i < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._ts[i], self.base_offset + self._rel[i]

    def lookup_before(self, timestamp: int) -> int:
        """The offset of the last entry whose timestamp is strictly below ``timestamp``, or
        the base offset: every record at or below that offset is older than ``timestamp``,
        so a search for ``timestamp`` may start at the batch holding it."""
        i = bisect.bisect_left(self._ts, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.base_offset + self._rel[i]

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset ``>= offset``."""
        keep = bisect.bisect_left(self._rel, offset - self.base_offset)
        if keep < len(self._rel):
            del self._ts[keep:]
            del self._rel[keep:]
            self._truncate_file(keep)
