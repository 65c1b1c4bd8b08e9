"""The file handling the offset and time indexes of a segment share (Kafka's
``AbstractIndex``): fixed-width big-endian entries in a file that is preallocated while its
segment is active and trimmed to its entries when the segment rolls or closes; positional
writes through to the page cache; truncating, renaming, deleting. A file descriptor is held
only from an index's first write until its segment rolls or closes, so that a broker hosting
many idle partitions holds one descriptor per partition (the active ``.log``), not three. Subclasses
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

    File descriptors. An index is *open for appending* (:attr:`is_open`) while it may still
    change, i.e. while its segment is active. Opening for appending makes the file on disk
    exact at once (its entries, then zeros up to the preallocated size) through a
    descriptor that is closed again straight away; the index holds a descriptor only from
    its first write (:meth:`_write`, an entry appended) until :meth:`close`, so an idle
    partition's active segment holds no index descriptor at all (Kafka's indexes hold none
    either: they are mmapped). Resizing, truncating and trimming an index that holds no
    descriptor work on the file by name (``truncate(2)``); a file found missing then is
    rewritten from the entries in memory. Entries stay readable from memory after
    :meth:`close`.

    Concurrency: owned by one segment; event-loop thread only.
    """

    ENTRY_SIZE: ClassVar[int] = 8

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._fd: int | None = None
        self._appendable = False
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
        """Open for appending (between :meth:`open_for_append` and :meth:`close`), whether
        or not a descriptor is held yet."""
        return self._appendable

    @property
    def holds_fd(self) -> bool:
        """Whether a file descriptor is open (only after a write while open for appending)."""
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
        """Open for appending (creating the file if needed) and preallocate it to hold
        ``max_index_size // ENTRY_SIZE`` entries, rewriting the in-memory entries so the
        file is exact even if it was missing or stale. No descriptor is kept unless one was
        already held: the first write opens one."""
        self._max_entries = max(max_index_size // self.ENTRY_SIZE, len(self))
        self._appendable = True
        if self._fd is not None:
            self._rewrite(self._fd)
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._rewrite(fd)
        finally:
            os.close(fd)

    def _rewrite(self, fd: int) -> None:
        """Make the file exactly the entries, then zeros up to the preallocated size."""
        data = self._encode_all()
        os.ftruncate(fd, 0)  # drop stale bytes beyond the real entries
        if data:
            os.pwrite(fd, data, 0)
        os.ftruncate(fd, self._max_entries * self.ENTRY_SIZE)

    def _writable_fd(self) -> int:
        """The descriptor for writing, opened on first use and kept until :meth:`close`."""
        if self._fd is not None:
            return self._fd
        if not self._appendable:
            raise ValueError(f"index {self.path} is not open for appending")
        try:
            self._fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            logger.warning("index %s vanished while open for appending; rewriting it", self.path)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._rewrite(self._fd)
        return self._fd

    def _set_file_size(self, size: int) -> None:
        """``ftruncate`` the held descriptor, or ``truncate`` the file by name when none is
        held (rewriting it from memory if it vanished)."""
        if self._fd is not None:
            os.ftruncate(self._fd, size)
            return
        try:
            os.truncate(self.path, size)
        except FileNotFoundError:
            logger.warning("index %s vanished while open for appending; rewriting it", self.path)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                self._rewrite(fd)
                os.ftruncate(fd, size)
            finally:
                os.close(fd)

    def resize(self, max_index_size: int) -> None:
        """Change the preallocated size of an open index (never below its entries)."""
        if not self._appendable:
            self.open_for_append(max_index_size)
            return
        self._max_entries = max(max_index_size // self.ENTRY_SIZE, len(self))
        self._set_file_size(self._max_entries * self.ENTRY_SIZE)

    def _write(self, index: int, data: bytes) -> None:
        os.pwrite(self._writable_fd(), data, index * self.ENTRY_SIZE)

    def _truncate_file(self, entries: int) -> None:
        """Zero everything after ``entries`` (so a later crash cannot resurrect removed
        entries) and keep the preallocation. Nothing to do unless open for appending (the
        next :meth:`open_for_append` rewrites the file)."""
        if not self._appendable:
            return
        self._set_file_size(entries * self.ENTRY_SIZE)
        self._set_file_size(max(self._max_entries, entries) * self.ENTRY_SIZE)

    def trim(self) -> None:
        """Shrink the file to exactly its entries (on roll and close), if open for
        appending."""
        if self._appendable:
            self._set_file_size(len(self) * self.ENTRY_SIZE)
            self._max_entries = len(self)

    def release_fd(self) -> None:
        """Close the descriptor if one is held but stay open for appending (the next write
        opens one again): after a rebuild, so a recovered idle partition holds none."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Stop appending and close the descriptor if one is held (entries stay in memory).
        Does not trim."""
        self._appendable = False
        self.release_fd()

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
