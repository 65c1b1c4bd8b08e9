"""The file handling the offset and time indexes of a segment share (Kafka's
``AbstractIndex``): fixed-width big-endian entries in a file that is preallocated while its
segment is active and trimmed to its entries when the segment rolls or closes; positional
writes through to the page cache; truncating, renaming, deleting. Subclasses
(:class:`~broker.log.offset_index.OffsetIndex`, :class:`~broker.log.time_index.TimeIndex`)
define the entry format, keep the entries in memory for lookups, and check them on load.

Concurrency: owned by one segment; used only from the broker's event-loop thread.
"""

from __future__ import annotations

import logging
import operator
import os
from array import array
from itertools import islice
from pathlib import Path
from typing import ClassVar

from broker.log.errors import CorruptIndexError

__all__ = ["IndexFile", "non_decreasing", "strictly_increasing"]

logger = logging.getLogger(__name__)


def strictly_increasing(values: array[int] | list[int]) -> bool:
    """True if every element is greater than the one before it (C-speed iteration)."""
    return all(map(operator.lt, values, islice(values, 1, None)))


def non_decreasing(values: array[int] | list[int]) -> bool:
    return all(map(operator.le, values, islice(values, 1, None)))


class IndexFile:
    """File handling shared by the offset and time indexes: open for appending with
    preallocation, positional writes, trimming, renaming, deleting.

    The file descriptor is open only while the index may still change (the active segment);
    it is closed when the segment rolls, and entries stay readable from memory.

    Concurrency: owned by one segment; event-loop thread only.
    """

    ENTRY_SIZE: ClassVar[int] = 8

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._fd: int | None = None
        self._max_entries = 0

    # --- subclass interface ------------------------------------------------------------

    def __len__(self) -> int:  # number of entries
        raise NotImplementedError

    def _encode_all(self) -> bytes:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError

    # --- file handling -----------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self)

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    @staticmethod
    def read_entry_bytes(path: Path, entry_size: int) -> bytes:
        """The file's bytes up to its last non-zero entry (the real entries of a possibly
        untrimmed index). Raises CorruptIndexError if the size is not a multiple of the entry
        size; FileNotFoundError if missing."""
        data = path.read_bytes()
        if len(data) % entry_size:
            raise CorruptIndexError(
                f"index file {path} has size {len(data)}, not a multiple of {entry_size}"
            )
        used = len(data.rstrip(b"\x00"))
        entries = -(-used // entry_size)  # ceil: the last real entry may end in zero bytes
        return data[: entries * entry_size]

    def open_for_append(self, max_index_size: int) -> None:
        """Open (creating if needed) and preallocate the file to hold
        ``max_index_size // ENTRY_SIZE`` entries, rewriting the in-memory entries so the
        file is exact even if it was missing or stale."""
        self._max_entries = max(max_index_size // self.ENTRY_SIZE, len(self))
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        data = self._encode_all()
        os.ftruncate(self._fd, 0)  # drop stale bytes beyond the real entries
        if data:
            os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, self._max_entries * self.ENTRY_SIZE)

    def resize(self, max_index_size: int) -> None:
        """Change the preallocated size of an open index (never below its entries)."""
        if self._fd is None:
            self.open_for_append(max_index_size)
            return
        self._max_entries = max(max_index_size // self.ENTRY_SIZE, len(self))
        os.ftruncate(self._fd, self._max_entries * self.ENTRY_SIZE)

    def _write(self, index: int, data: bytes) -> None:
        if self._fd is None:
            raise ValueError(f"index {self.path} is not open for appending")
        os.pwrite(self._fd, data, index * self.ENTRY_SIZE)

    def _truncate_file(self, entries: int) -> None:
        """Zero everything after ``entries`` (so a later crash cannot resurrect removed
        entries) and keep the preallocation."""
        if self._fd is None:
            return
        os.ftruncate(self._fd, entries * self.ENTRY_SIZE)
        os.ftruncate(self._fd, max(self._max_entries, entries) * self.ENTRY_SIZE)

    def trim(self) -> None:
        """Shrink the file to exactly its entries (on roll and close)."""
        if self._fd is not None:
            os.ftruncate(self._fd, len(self) * self.ENTRY_SIZE)
            self._max_entries = len(self)

    def close(self) -> None:
        """Close the file descriptor (entries stay in memory). Does not trim."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def reset(self) -> None:
        """Remove every entry (before a rebuild)."""
        self._clear()
        self._truncate_file(0)

    def rename(self, new_path: Path) -> None:
        try:
            os.replace(self.path, new_path)
        except FileNotFoundError:
            logger.debug("index %s vanished before rename", self.path)
        self.path = Path(new_path)

    def delete(self) -> None:
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
