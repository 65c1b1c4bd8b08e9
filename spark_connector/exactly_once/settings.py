"""The exactly-once options of a ``millrace`` write, parsed and checked (pure, no I/O), and
the picklable settings a planned writer carries to its tasks and its committer.

Options (``docs/exactly-once.md``): ``deliveryGuarantee`` (``at-least-once`` | ``exactly-once``),
``commitOffsetsToGroup``, ``transactionalIdPrefix`` (default ``millrace``), ``checkpointLocation``
(a local or mounted path: the sink keeps its log there), ``batchId`` and ``sinkName`` (set by
``write_batch``), ``acceptPartitionCountChange``, ``batchBoundaries`` (default true: each
committed batch's boundary is published for readers, ``docs/exactly-once.md``) and
``kafka.transaction.timeout.ms``. A
setting that cannot work raises :class:`ExactlyOnceError` naming the option.

Names: a task's transactional id is ``<prefix>-<sinkid>-<partition>-<slot>`` (``slot`` = Spark's
task attempt id mod :data:`SLOTS`) and the driver's ``<prefix>-<sinkid>-driver``;
:meth:`ExactlyOnce.owns` recognises the sink's own ids by their exact ``<prefix>-<sinkid>-``
start, and ``<prefix>-<sinkid>`` names the sink in its progress records.

Concurrency: immutable values.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

__all__ = [
    "AT_LEAST_ONCE",
    "DEFAULT_PREFIX",
    "DEFAULT_TRANSACTION_TIMEOUT_MS",
    "DELIVERY_GUARANTEE_OPTION",
    "EXACTLY_ONCE",
    "SINK_LOG_DIR",
    "SLOTS",
    "ExactlyOnce",
    "ExactlyOnceError",
    "Rewrite",
    "SinkOptions",
    "checkpoint_dir",
    "parse_sink_options",
]

DELIVERY_GUARANTEE_OPTION = "deliveryGuarantee"
GROUP_OPTION = "commitOffsetsToGroup"
PREFIX_OPTION = "transactionalIdPrefix"
CHECKPOINT_OPTION = "checkpointLocation"
BATCH_ID_OPTION = "batchId"  # write_batch(): the foreachBatch batch id
SINK_NAME_OPTION = "sinkName"  # write_batch(): which sink of the foreachBatch function
RUN_OPTION = "millrace.run"  # write_batch(): the driver process's run (internal)
ACCEPT_CHANGE_OPTION = "acceptPartitionCountChange"
BOUNDARIES_OPTION = "batchBoundaries"  # progress records for readers (default true)
TIMEOUT_KAFKA_OPTION = "transaction.timeout.ms"
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's default transaction.max.timeout.ms
DEFAULT_PREFIX = "millrace"
SINK_LOG_DIR = "millrace-sink"
SINKS_DIR = "sinks"
SLOTS = 8
"""Transactional ids per Spark partition of a write: a task uses slot ``task attempt id mod
SLOTS``, so the ids are bounded and two attempts of one partition rarely share one."""
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")


class ExactlyOnceError(ValueError):
    """A setting that makes exactly-once impossible, or a batch that cannot be committed;
    the message names the option, or the batch and what to do."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The exactly-once options of one write, checked (see the module docstring).

    ``log_dir`` is None for a plain ``df.write`` (no batch id: nothing to replay);
    ``batch_id`` is set for ``write_batch`` (foreachBatch), None for streaming writes (the task
    reads Spark's ``streaming.sql.batchId``)."""

    prefix: str
    log_dir: str | None
    checkpoint: str | None
    group: str | None
    timeout_ms: int
    timeout_set: bool
    batch_id: int | None = None
    accept_partition_change: bool = False
    run: str | None = None
    boundaries: bool = True


@dataclass(frozen=True, slots=True)
class Rewrite:
    """The pending batch ``batch`` must be written again: every Spark partition (``all``) or
    only ``partitions`` (their transactions were lost after others became visible)."""

    batch: int
    all: bool
    partitions: frozenset[int] = frozenset()

    def covers(self, partition: int) -> bool:
        return self.all or partition in self.partitions


@dataclass(frozen=True, slots=True)
class ExactlyOnce:
    """What a planned exactly-once writer carries to its tasks and committer (picklable).

    ``committed_through`` is the highest batch the sink log held (any state) when the writer
    was planned; ``rewrite`` the pending batch's partitions to write again, if any;
    ``two_phase`` whether the brokers offer KIP-939's two-phase commit."""

    options: SinkOptions
    sink_id: str
    committed_through: int = -1
    rewrite: Rewrite | None = None
    two_phase: bool = False
    timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    notes: tuple[str, ...] = field(default=())

    @property
    def log_dir(self) -> str | None:
        return self.options.log_dir

    @property
    def group(self) -> str | None:
        return self.options.group

    @property
    def batch_id(self) -> int | None:
        return self.options.batch_id

    @property
    def base(self) -> str:
        """``<prefix>-<sinkid>``: the sink's name in its progress records, and the start of
        every id of the sink."""
        return f"{self.options.prefix}-{self.sink_id}"

    @property
    def driver_transactional_id(self) -> str:
        return f"{self.base}-driver"

    def task_transactional_id(self, partition: int, task_attempt_id: int) -> str:
        return f"{self.base}-{partition}-{task_attempt_id % SLOTS}"

    def owns(self, transactional_id: str) -> bool:
        """Whether ``transactional_id`` is one of this sink's (task or driver)."""
        return transactional_id.startswith(self.base + "-")

    def is_task_id(self, transactional_id: str) -> bool:
        return self.owns(transactional_id) and transactional_id != self.driver_transactional_id

    def task_writes(self, batch: int, partition: int) -> bool:
        """Whether the task of Spark partition ``partition`` of batch ``batch`` writes (a
        batch the log already holds is skipped, except for the partitions to rewrite)."""
        if self.options.log_dir is None:
            return True
        if self.rewrite is not None and batch == self.rewrite.batch:
            return self.rewrite.covers(partition)
        return batch > self.committed_through


def checkpoint_dir(location: str) -> Path:
    """The directory Spark makes of ``location``: Hadoop's ``Path`` resolves a relative path
    against the working directory and does not expand ``~`` (so neither does this)."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme == "file" else location
        return Path(path).resolve()
    raise ExactlyOnceError(
        f"option '{CHECKPOINT_OPTION}' is {location!r}: exactly-once keeps its commit log next "
        "to Spark's checkpoint and needs a local or mounted file system path (file:// or a "
        "plain path)"
    )


def sink_dir_name(name: str) -> str:
    """A ``write_batch`` sink's directory name: the name itself when it is a safe file name
    (topic names are), else a safe spelling with a hash of the name."""
    if _SAFE_NAME.fullmatch(name) and name not in (".", ".."):
        return name
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:60]
    return f"{safe}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def _int_option(name: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ExactlyOnceError(f"option '{name}' is {raw!r}: an integer is needed") from None


def _transaction_timeout(text: str | None) -> int:
    """``kafka.transaction.timeout.ms`` (positive), or the sink's default."""
    timeout_ms = (
        DEFAULT_TRANSACTION_TIMEOUT_MS
        if text is None
        else _int_option(f"kafka.{TIMEOUT_KAFKA_OPTION}", text)
    )
    if timeout_ms <= 0:
        raise ExactlyOnceError(
            f"option 'kafka.{TIMEOUT_KAFKA_OPTION}' is {timeout_ms}: it must be positive"
        )
    return timeout_ms


def _log_dir(location: str, name: str | None, batch_id: int | None) -> str:
    """The sink's commit log directory next to the checkpoint at ``location``: a
    ``write_batch`` sink (``batch_id`` given) keeps its own, under its ``name``."""
    base = checkpoint_dir(location) / SINK_LOG_DIR
    if batch_id is not None:
        if not name:
            raise ExactlyOnceError(
                "write_batch(...) of rows that name their topics in a 'topic' column needs "
                "name=... (each sink of a foreachBatch function keeps its own log)"
            )
        base = base / SINKS_DIR / sink_dir_name(name)
    return str(base)


def parse_sink_options(
    options: Mapping[str, str],
    *,
    streaming: bool,
    producer_options: Mapping[str, str],
    topic: str | None = None,
) -> SinkOptions | None:
    """Parse the exactly-once options (None for at-least-once). Raises
    :class:`ExactlyOnceError` naming the option when they cannot work. ``topic`` (the
    ``topic`` option) names a ``write_batch`` sink without ``sinkName``."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    guarantee = opts.get(DELIVERY_GUARANTEE_OPTION.lower(), AT_LEAST_ONCE).strip().lower()
    group = opts.get(GROUP_OPTION.lower())
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ExactlyOnceError(
            f"option '{DELIVERY_GUARANTEE_OPTION}' is {guarantee!r}; use '{AT_LEAST_ONCE}' "
            f"(the default) or '{EXACTLY_ONCE}'"
        )
    if guarantee == AT_LEAST_ONCE:
        if group is not None:
            raise ExactlyOnceError(
                f"option '{GROUP_OPTION}' commits the source offsets with the output's "
                f"transactions and needs '{DELIVERY_GUARANTEE_OPTION}=exactly-once'"
            )
        return None
    if group is not None and not group.strip():
        raise ExactlyOnceError(f"option '{GROUP_OPTION}' must name a consumer group")
    if "transactional.id" in producer_options:
        raise ExactlyOnceError(
            "option 'kafka.transactional.id' is not supported with exactly-once: the sink "
            f"chooses one id per task (set '{PREFIX_OPTION}' to choose their prefix)"
        )
    timeout_text = producer_options.get(TIMEOUT_KAFKA_OPTION)
    timeout_ms = _transaction_timeout(timeout_text)
    batch_text = opts.get(BATCH_ID_OPTION.lower())
    batch_id = None if batch_text is None else _int_option(BATCH_ID_OPTION, batch_text)
    location = opts.get(CHECKPOINT_OPTION.lower())
    needs_log = streaming or batch_id is not None
    if needs_log and not location:
        raise ExactlyOnceError(
            f"'{DELIVERY_GUARANTEE_OPTION}=exactly-once' needs option '{CHECKPOINT_OPTION}' "
            "(the sink keeps its commit log there, so a restarted query finishes or skips a "
            "batch instead of writing it twice)"
        )
    if group is not None and not needs_log:
        raise ExactlyOnceError(
            f"option '{GROUP_OPTION}' needs the source offsets of a micro-batch: use it on a "
            "streaming write or with write_batch(...) in foreachBatch"
        )
    prefix = opts.get(PREFIX_OPTION.lower(), DEFAULT_PREFIX).strip()
    if not prefix:
        raise ExactlyOnceError(f"option '{PREFIX_OPTION}' must not be empty")
    log_dir: str | None = None
    checkpoint: str | None = None
    if needs_log and location:
        checkpoint = str(checkpoint_dir(location))
        log_dir = _log_dir(location, opts.get(SINK_NAME_OPTION.lower()) or topic, batch_id)
    accept = opts.get(ACCEPT_CHANGE_OPTION.lower(), "false").strip().lower()
    if accept not in ("true", "false"):
        raise ExactlyOnceError(f"option '{ACCEPT_CHANGE_OPTION}' is {accept!r}: true or false")
    boundaries = opts.get(BOUNDARIES_OPTION.lower(), "true").strip().lower()
    if boundaries not in ("true", "false"):
        raise ExactlyOnceError(
            f"option '{BOUNDARIES_OPTION}' is {boundaries!r}: true (the default: readers see "
            "whole micro-batches) or false"
        )
    return SinkOptions(
        prefix=prefix,
        log_dir=log_dir,
        checkpoint=checkpoint,
        group=group.strip() if group is not None else None,
        timeout_ms=timeout_ms,
        timeout_set=timeout_text is not None,
        batch_id=batch_id,
        accept_partition_change=accept == "true",
        run=opts.get(RUN_OPTION),
        boundaries=boundaries == "true",
    )
