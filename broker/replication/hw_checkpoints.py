"""The high-watermark checkpoint: ``replication-offset-checkpoint`` in each log dir (Kafka's
file name and text format, :class:`~broker.log.checkpoints.OffsetCheckpointFile`), holding
every partition's high watermark so a restarted broker starts from it rather than from 0.

Read once at start-up; written periodically and at shutdown by the replica manager. A dir
where the file cannot be written goes offline (KIP-112); an unreadable file is ignored with
a warning (the high watermarks then start at 0 and catch up from the leaders).

Concurrency: event loop thread (called by the replica manager).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

from broker.log.checkpoints import OffsetCheckpointFile
from broker.log.log_manager import LogManager
from broker.replication.partition import Partition
from broker.types import TopicPartition

log = logging.getLogger(__name__)

HW_CHECKPOINT = "replication-offset-checkpoint"


def read_high_watermarks(log_dirs: Iterable[str | Path]) -> dict[TopicPartition, int]:
    """Every log dir's checkpointed high watermarks (an unreadable file is skipped)."""
    out: dict[TopicPartition, int] = {}
    for log_dir in log_dirs:
        path = Path(log_dir) / HW_CHECKPOINT
        if path.exists():
            try:
                out.update(OffsetCheckpointFile(path).read())
            except (OSError, ValueError) as exc:
                log.warning("ignoring unreadable %s: %s", path, exc)
    return out


def write_high_watermarks(
    log_manager: LogManager, partitions: Mapping[TopicPartition, Partition]
) -> None:
    """Write ``replication-offset-checkpoint`` in every online log dir (a dir where it
    cannot be written goes offline)."""
    channel = log_manager.failure_channel
    by_dir: dict[Path, dict[TopicPartition, int]] = {}
    for log_dir in log_manager.live_log_dirs:
        by_dir[Path(log_dir)] = {}
    for tp, partition in partitions.items():
        parent = Path(partition.log.dir).parent
        if parent in by_dir:
            by_dir[parent][tp] = partition.high_watermark
    for parent, hws in by_dir.items():
        if not parent.exists() or channel.is_offline(parent):
            continue
        try:
            OffsetCheckpointFile(parent / HW_CHECKPOINT).write(hws)
        except OSError as exc:
            channel.mark_offline(parent, f"error while writing {HW_CHECKPOINT}", exc)
