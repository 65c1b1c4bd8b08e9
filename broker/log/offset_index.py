"""The sparse offset index of one segment (``<base offset>.index``); the file handling it
shares with the time index is :class:`broker.log.index.IndexFile`.

Theory of operation. A segment's index maps a few offsets to the byte position of the batch
holding them, so a read can seek close to its target and scan only a few batch headers. An
entry is added for a batch when more than ``index.interval.bytes`` of log were written since
the previous entry (never for the first batch of a segment); it maps the batch's *last*
offset to the batch's position, exactly as Kafka's ``LogSegment.append`` does, so an index we
write is the index Kafka would write for the same ``.log``.

On-disk format: 8-byte big-endian entries ``relative offset int32 | position int32``, the
relative offset counted from the segment's base offset. While the segment is active the file
is preallocated (sparse zeros) to ``segment.index.bytes`` rounded down to the entry size, and
it is trimmed to its entries when the segment rolls or closes. A file found untrimmed after a
crash is read as Kafka does: zero entries after the first one are preallocated space, not
entries (a real entry after the first always has a positive relative offset).

Entries are also kept in memory (two ``array('i')``) for ``bisect`` lookups; writes go
through to the file with ``os.pwrite``, so the file is always current in the page cache.

Concurrency: owned by its segment; used only from the broker's event-loop thread.
"""

from __future__ import annotations

import bisect
import logging
import struct
import sys
from array import array
from pathlib import Path
from typing import ClassVar

from broker.log.errors import CorruptIndexError
from broker.log.index import IndexFile, strictly_increasing

__all__ = ["OffsetIndex"]

logger = logging.getLogger(__name__)

_OFFSET_ENTRY = struct.Struct(">ii")
_LITTLE_ENDIAN = sys.byteorder == "little"


class OffsetIndex(IndexFile):
    """Sparse map from offsets to ``.log`` positions for one segment (see module docstring
    for the format). ``lookup(o)`` gives the entry with the largest offset ``<= o``, or
    ``(base_offset, 0)`` when there is none.

    Concurrency: owned by its segment; event-loop thread only.
    """

    ENTRY_SIZE: ClassVar[int] = 8

    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self._rel = array("i")
        self._pos = array("i")

    @classmethod
    def load(cls, path: Path, base_offset: int, log_size: int) -> OffsetIndex:
        """Read and sanity-check an existing index file (raises CorruptIndexError, or
        FileNotFoundError if it is missing)."""
        index = cls(path, base_offset)
        data = cls.read_entry_bytes(path, cls.ENTRY_SIZE)
        flat = array("i")
        flat.frombytes(data)
        if _LITTLE_ENDIAN:
            flat.byteswap()
        index._rel = flat[0::2]
        index._pos = flat[1::2]
        index.sanity_check(log_size)
        return index

    def sanity_check(self, log_size: int) -> None:
        rel, pos = self._rel, self._pos
        if not rel:
            return
        if rel[0] < 0 or pos[0] < 0:
            raise CorruptIndexError(f"index {self.path} has a negative first entry")
        if pos[-1] >= log_size:
            raise CorruptIndexError(
                f"index {self.path} points at position {pos[-1]} past the log's {log_size} bytes"
            )
        if not strictly_increasing(rel) or not strictly_increasing(pos):
            raise CorruptIndexError(f"index {self.path} entries are not increasing")

    def __len__(self) -> int:
        return len(self._rel)

    def _encode_all(self) -> bytes:
        flat = array("i", bytes(8 * len(self._rel)))
        flat[0::2] = self._rel
        flat[1::2] = self._pos
        if _LITTLE_ENDIAN:
            flat.byteswap()
        return flat.tobytes()

    def _clear(self) -> None:
        self._rel = array("i")
        self._pos = array("i")

    @property
    def is_full(self) -> bool:
        return len(self._rel) >= self._max_entries

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when empty."""
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    @property
    def last_position(self) -> int:
        return self._pos[-1] if self._pos else 0

    def entry(self, n: int) -> tuple[int, int]:
        return self.base_offset + self._rel[n], self._pos[n]

    def append(self, offset: int, position: int) -> bool:
        """Add an entry; False (and nothing written) if the index is full."""
        rel = offset - self.base_offset
        if self._rel and rel <= self._rel[-1]:
            raise ValueError(
                f"index {self.path}: offset {offset} is not above last {self.last_offset}"
            )
        if len(self._rel) >= self._max_entries:
            return False
        self._write(len(self._rel), _OFFSET_ENTRY.pack(rel, position))
        self._rel.append(rel)
        self._pos.append(position)
        return True

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry with offset ``<= offset``, or
        ``(base_offset, 0)``."""
        i = bisect.bisect_right(self._rel, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i], self._pos[i]

    def skip_to(self, start: int, limit: int, max_offset: int) -> int:
        """A batch position ``p >= start`` such that the batches from ``start`` (a batch
        position) up to ``p`` all end at or before ``limit`` and hold only offsets below
        ``max_offset``: the position of the entry before the last one that lies at or before
        ``limit`` with an offset below ``max_offset`` (that entry's batch begins where the
        one before ends, at the latest), or ``start`` when there is none beyond it. A read
        of many batches then scans the headers from ``p`` instead of from ``start``."""
        k = min(
            bisect.bisect_right(self._pos, limit),
            bisect.bisect_left(self._rel, max_offset - self.base_offset),
        )
        k -= 2  # k - 1: the last entry that qualifies; the entry before it
        if k < 0:
            return start
        position = self._pos[k]
        return position if position > start else start

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset ``>= offset``."""
        keep = bisect.bisect_left(self._rel, offset - self.base_offset)
        if keep < len(self._rel):
            del self._rel[keep:]
            del self._pos[keep:]
            self._truncate_file(keep)
