"""The aborted-transaction index of a segment: ``<20-digit base offset>.txnindex``.

Theory of operation (KIP-98; Kafka's ``TransactionIndex``). When an abort marker is appended,
the log records the aborted transaction's offset range in the index of the segment that holds
the marker, so a read_committed fetch can tell consumers which producers' records to drop
(the fetch response's ``aborted_transactions``) without reading the data. The file is a
sequence of fixed-size entries, in increasing ``last_offset`` order (markers are appended in
offset order), and exists only once a segment has an entry::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64
    | last_stable_offset int64                                    (34 bytes, big-endian)

``first_offset`` is the transaction's first record on this partition, ``last_offset`` the
offset of its abort marker, ``last_stable_offset`` the partition's LSO right after the
marker (the first offset of the earliest transaction still open then, or the marker's
offset + 1): a search that meets an entry with ``last_stable_offset`` at or beyond its upper
bound need not look at later segments.

The index is rebuilt from the log by recovery (every marker below the recovery point is
replayed), so a missing or torn file is repaired rather than trusted: a trailing partial
entry is cut off when the index is opened.

File descriptors: none is held. An append opens the file, writes its entry and closes it
again (aborted transactions are rare next to appends, and a segment's index is appended to
after its segment rolled, when recovery replays the markers), so neither an active nor a
rolled segment holds a descriptor for its ``.txnindex``; ``flush`` opens the file by name.

Concurrency: not thread-safe; a segment's index is used from the broker's event loop (and
from recovery before the log is shared), except ``flush``, which may run in a worker thread
(it touches only the file by name and the dirty flag).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ENTRY_SIZE", "AbortedTxn", "CorruptTransactionIndexError", "TransactionIndex"]

logger = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class CorruptTransactionIndexError(Exception):
    """An entry of an unknown version or out of order: the index must be rebuilt."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction's range on a partition (a ``.txnindex`` entry)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            _VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


class TransactionIndex:
    """The aborted transactions of one segment, in ``last_offset`` order.

    The entries are kept in memory (an index holds one entry per aborted transaction of its
    segment) and appended to the file as they come, through a descriptor opened for that
    append only; the file is created on the first append.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._entries: list[AbortedTxn] = []
        self._dirty = False
        self._load()

    # --- reading ---------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY_SIZE
        if whole != len(data):
            logger.warning("%s: cutting a partial entry of %d bytes", self.path, len(data) - whole)
            with open(self.path, "r+b") as f:
                f.truncate(whole)
        last = -1
        for version, pid, first, last_offset, lso in _ENTRY.iter_unpack(data[:whole]):
            if version != _VERSION:
                raise CorruptTransactionIndexError(
                    f"{self.path}: entry of unknown version {version}"
                )
            if last_offset <= last:
                raise CorruptTransactionIndexError(
                    f"{self.path}: entry ending at {last_offset} after one ending at {last}"
                )
            last = last_offset
            self._entries.append(AbortedTxn(pid, first, last_offset, lso))

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    @property
    def is_empty(self) -> bool:
        return not self._entries

    @property
    def last_offset(self) -> int:
        """The last marker offset recorded (-1 when empty)."""
        return self._entries[-1].last_offset if self._entries else -1

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping ``[fetch_offset, upper_bound)``, and whether the
        search is complete (an entry's LSO reached ``upper_bound``: later segments cannot
        hold a transaction that began before it)."""
        out: list[AbortedTxn] = []
        for entry in self._entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                out.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    # --- writing ---------------------------------------------------------------------------

    def append(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction; entries must come in ``last_offset`` order."""
        if entry.last_offset <= self.last_offset:
            raise CorruptTransactionIndexError(
                f"{self.path}: appending an entry ending at {entry.last_offset}, not after "
                f"{self.last_offset}"
            )
        data = entry.encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            written = os.write(fd, data)
            while written < len(data):
                written += os.write(fd, data[written:])
        finally:
            os.close(fd)
        self._entries.append(entry)
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose marker is at or beyond ``offset``."""
        keep = [e for e in self._entries if e.last_offset < offset]
        if len(keep) == len(self._entries):
            return
        self._entries = keep
        if self.path.exists() or keep:
            with open(self.path, "r+b" if self.path.exists() else "wb") as f:
                f.truncate(len(keep) * ENTRY_SIZE)
            self._dirty = True

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it from the log)."""
        self.close()
        self._entries = []
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def flush(self) -> None:
        """fsync the file if it changed (by name; a missing file is fine). The flag is
        cleared before the fsync, so an append made meanwhile is flushed next time."""
        if not self._dirty:
            return
        self._dirty = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        except OSError:
            self._dirty = True
            raise
        finally:
            os.close(fd)

    def close(self) -> None:
        """Nothing to release (no descriptor is held between appends); kept so a segment
        closes its three indexes alike."""

    def rename(self, target: Path) -> None:
        """Move the file (``.deleted``, ``.swap``); a missing file stays missing."""
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, target)
        self.path = Path(target)

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
