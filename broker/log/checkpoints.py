"""Small durable files of the log layer: offset checkpoints, clean-shutdown marker,
``meta.properties``, and the atomic-write helper they share.

On-disk formats (Kafka's, byte for byte):

* Offset checkpoints (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
  ``replication-offset-checkpoint``) in each log directory, text::

      0                      <- version
      2                      <- number of entries
      my-topic 0 1234        <- topic, partition, offset
      other 3 0

* ``.kafka_cleanshutdown``: an empty marker written after every log of the directory was
  closed and checkpointed, and removed at start-up once the logs are loaded.
* ``meta.properties``: Java properties text with ``version=0``, ``broker.id`` and
  ``cluster.id``.

Every write is crash-safe: write ``<name>.tmp``, fsync it, rename it over ``<name>``, fsync
the directory. A reader therefore sees either the old or the new content, never a mix.

Concurrency: these helpers do blocking file I/O and hold no state; the caller (the log
manager, on the broker's event loop or a worker thread it owns) serialises writes to one
file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path

from broker.log.errors import CorruptCheckpointError
from broker.types import TopicPartition

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "LOG_START_OFFSET_CHECKPOINT",
    "META_PROPERTIES",
    "RECOVERY_POINT_CHECKPOINT",
    "REPLICATION_OFFSET_CHECKPOINT",
    "OffsetCheckpointFile",
    "atomic_write",
    "fsync_dir",
    "read_properties",
    "remove_durably",
    "write_properties",
]

logger = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"
TMP_SUFFIX = ".tmp"

_CHECKPOINT_VERSION = 0


def fsync_dir(directory: Path) -> None:
    """fsync a directory so that renames and creations inside it are durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably: temp file, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


class OffsetCheckpointFile:
    """One offset checkpoint file of a log directory: ``dict[TopicPartition, int]`` on disk.

    Format: line ``0`` (version), line with the entry count, then ``<topic> <partition>
    <offset>`` lines (topics cannot contain spaces). ``write`` is atomic (see
    :func:`atomic_write`); ``read`` returns ``{}`` for a missing or empty file (Kafka creates
    its checkpoint files empty) and raises
    :class:`CorruptCheckpointError` for a malformed one.

    Concurrency: no state besides the path; one writer at a time (the log manager).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [str(_CHECKPOINT_VERSION), str(len(offsets))]
        for tp in sorted(offsets):
            lines.append(f"{tp.topic} {tp.partition} {offsets[tp]}")
        atomic_write(self.path, ("\n".join(lines) + "\n").encode("utf-8"))

    def read(self) -> dict[TopicPartition, int]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError as exc:
            raise CorruptCheckpointError(f"{self.path}: not text") from exc
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if not lines:  # Kafka creates its checkpoint files empty: no entries yet
            return {}
        if len(lines) < 2:
            raise CorruptCheckpointError(f"{self.path}: missing version or entry count")
        try:
            version = int(lines[0])
            count = int(lines[1])
        except ValueError as exc:
            raise CorruptCheckpointError(f"{self.path}: bad version or count line") from exc
        if version != _CHECKPOINT_VERSION:
            raise CorruptCheckpointError(f"{self.path}: unknown version {version}")
        entries = lines[2:]
        if count < 0 or len(entries) != count:
            raise CorruptCheckpointError(
                f"{self.path}: expected {count} entries, found {len(entries)}"
            )
        out: dict[TopicPartition, int] = {}
        for line in entries:
            parts = line.split(" ")
            if len(parts) != 3:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}")
            try:
                partition = int(parts[1])
                offset = int(parts[2])
            except ValueError as exc:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}") from exc
            if not parts[0] or partition < 0:
                raise CorruptCheckpointError(f"{self.path}: malformed line {line!r}")
            out[TopicPartition(parts[0], partition)] = offset
        return out

    def read_or_empty(self) -> dict[TopicPartition, int]:
        """``read``, but a malformed file is logged and treated as empty (every consumer of
        these checkpoints has a safe default: recovery point 0, log start from segments)."""
        try:
            return self.read()
        except CorruptCheckpointError:
            logger.exception("ignoring corrupt checkpoint file %s", self.path)
            return {}


def read_properties(path: Path) -> dict[str, str]:
    """Parse a simple Java properties file (``key=value`` lines, ``#`` comments)."""
    out: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CorruptCheckpointError(f"{path}: malformed line {raw!r}")
        out[key.strip()] = value.strip()
    return out


def write_properties(path: Path, props: Mapping[str, str]) -> None:
    """Write a Java properties file (with Java's leading date comment), atomically."""
    stamp = time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime())
    lines = ["#", f"#{stamp}"] + [f"{k}={v}" for k, v in props.items()]
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))


def remove_durably(path: Path) -> bool:
    """Unlink ``path`` if present and fsync its directory; True if it existed."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        fsync_dir(path.parent)
        return True
    return False
