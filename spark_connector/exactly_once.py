"""Exactly-once writes of the ``millrace`` sink: Kafka transactions opened by the write tasks,
committed by the driver with the micro-batch's source offsets. The protocol, and what happens
under every fault, is ``docs/exactly-once.md``; this module implements it:

* :class:`ExactlyOnce`: the picklable settings a writer carries to its tasks (transactional
  id prefix, the sink's log directory, the consumer group, the highest batch already
  prepared, the transaction timeout);
* :class:`SinkLog`: the sink's own log next to Spark's checkpoint, one JSON file per batch
  (``prepared`` then ``committed``), written atomically;
* :func:`source_offsets`: a batch's end offsets from Spark's ``offsets/<N>`` file;
* :class:`Committer`: the driver side (commit, recovery of a prepared batch, abort, and the
  clean-up of transactions left open by failed or losing task attempts).

The task side (open a transaction, write, leave it open, describe it) is in
:func:`spark_connector.writer.write_batches`.

Concurrency: the settings are immutable; a :class:`Committer` is used by one driver thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from spark_connector.txn_client import OpenTransaction, TxnClient, TxnError

__all__ = [
    "DELIVERY_GUARANTEE_OPTION",
    "Committer",
    "ExactlyOnce",
    "ExactlyOnceError",
    "SinkLog",
    "TaskTransaction",
    "commit_batch_offsets",
    "exactly_once_settings",
    "source_offsets",
]

log = logging.getLogger(__name__)

DELIVERY_GUARANTEE_OPTION = "deliveryGuarantee"
GROUP_OPTION = "commitOffsetsToGroup"
PREFIX_OPTION = "transactionalIdPrefix"
CHECKPOINT_OPTION = "checkpointLocation"
BATCH_ID_OPTION = "batchId"  # write_batch(): the foreachBatch batch id
TIMEOUT_KAFKA_OPTION = "transaction.timeout.ms"
DEFAULT_TRANSACTION_TIMEOUT_MS = 900_000  # Kafka's default transaction.max.timeout.ms
SINK_LOG_DIR = "millrace-sink"
KEEP_BATCHES = 100  # as Spark's spark.sql.streaming.minBatchesToRetain
ABORT_LINGER_S = 5.0  # how long abort() keeps aborting transactions cancelled tasks open
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"


FAULT_ENV = "MILLRACE_SINK_FAULT_PAUSE"
"""Fault injection for tests: ``<point>=<seconds>[,...]`` makes the committer sleep at
``prepared`` (batch logged as prepared, nothing ended), ``ended`` (every transaction but the
last ended) or ``committed`` (batch logged as committed), so a test can kill the driver or a
broker exactly there. Unset in production."""


def _fault_pause(point: str) -> None:
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    for item in spec.split(","):
        name, _, seconds = item.partition("=")
        if name.strip() == point:
            log.warning("millrace sink: fault injection: pausing %s s at %r", seconds, point)
            time.sleep(float(seconds or 0))


class ExactlyOnceError(ValueError):
    """A setting that makes exactly-once impossible; the message names the option."""


@dataclass(frozen=True, slots=True)
class TaskTransaction:
    """What a write task hands the driver: its open transaction and what it covers."""

    transaction: OpenTransaction
    topic_partitions: tuple[tuple[str, int], ...]
    batch_id: int
    partition_id: int
    attempt: int


@dataclass(frozen=True, slots=True)
class ExactlyOnce:
    """Exactly-once settings of one writer (picklable: they travel to the tasks).

    ``log_dir`` is None for a plain ``df.write`` (no batch id: nothing to replay);
    ``batch_id`` is set for ``write_batch`` (foreachBatch), None for streaming writes (the task
    reads Spark's ``streaming.sql.batchId``); ``committed_through`` is the highest batch the
    sink log holds as prepared or committed when the writer was created."""

    prefix: str
    log_dir: str | None
    group: str | None
    timeout_ms: int
    committed_through: int = -1
    batch_id: int | None = None

    def transactional_id(self, partition_id: int, attempt: int) -> str:
        return f"{self.prefix}-{partition_id}-{attempt}"

    @property
    def offsets_transactional_id(self) -> str:
        return f"{self.prefix}-offsets"


def _checkpoint_dir(location: str) -> Path:
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


def exactly_once_settings(
    options: Mapping[str, str], *, streaming: bool, producer_options: Mapping[str, str]
) -> ExactlyOnce | None:
    """Parse the exactly-once options (None for at-least-once). Raises
    :class:`ExactlyOnceError` naming the option when they cannot work."""
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
                f"option '{GROUP_OPTION}' commits the source offsets in the output's "
                f"transaction and needs '{DELIVERY_GUARANTEE_OPTION}=exactly-once'"
            )
        return None
    if group is not None and not group.strip():
        raise ExactlyOnceError(f"option '{GROUP_OPTION}' must name a consumer group")
    if "transactional.id" in producer_options:
        raise ExactlyOnceError(
            "option 'kafka.transactional.id' is not supported with exactly-once: the sink "
            f"chooses one id per task (set '{PREFIX_OPTION}' to choose their prefix)"
        )
    timeout_text = producer_options.get(TIMEOUT_KAFKA_OPTION, str(DEFAULT_TRANSACTION_TIMEOUT_MS))
    try:
        timeout_ms = int(timeout_text)
    except ValueError:
        raise ExactlyOnceError(
            f"option 'kafka.{TIMEOUT_KAFKA_OPTION}' is {timeout_text!r}: an integer is needed"
        ) from None
    location = opts.get(CHECKPOINT_OPTION.lower())
    batch_text = opts.get(BATCH_ID_OPTION.lower())
    batch_id: int | None = None
    if batch_text is not None:
        try:
            batch_id = int(batch_text)
        except ValueError:
            raise ExactlyOnceError(
                f"option '{BATCH_ID_OPTION}' is {batch_text!r}: an integer is needed"
            ) from None
    needs_log = streaming or batch_id is not None
    if needs_log and not location:
        raise ExactlyOnceError(
            f"'{DELIVERY_GUARANTEE_OPTION}=exactly-once' needs option '{CHECKPOINT_OPTION}' "
            "(the sink keeps its commit log there, so a restarted query finishes or skips a "
            "batch instead of writing it twice)"
        )
    log_dir: str | None = None
    prefix = opts.get(PREFIX_OPTION.lower())
    if needs_log and location:
        checkpoint = _checkpoint_dir(location)
        log_dir = str(checkpoint / SINK_LOG_DIR)
        if prefix is None:
            prefix = "millrace-" + hashlib.sha1(str(checkpoint).encode()).hexdigest()[:16]
    if prefix is None:
        prefix = "millrace-write-" + os.urandom(8).hex()
    if group is not None and not needs_log:
        raise ExactlyOnceError(
            f"option '{GROUP_OPTION}' needs the source offsets of a micro-batch: use it on a "
            "streaming write or with write_batch(...) in foreachBatch"
        )
    committed = SinkLog(log_dir).committed_through() if log_dir is not None else -1
    return ExactlyOnce(prefix.strip(), log_dir, group, timeout_ms, committed, batch_id)


# --- the sink's log ------------------------------------------------------------------------


@dataclass(slots=True)
class BatchRecord:
    """One batch in the sink's log."""

    batch: int
    state: str  # "prepared" | "committed"
    transactions: list[OpenTransaction] = field(default_factory=list)
    group: str | None = None
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "batch": self.batch,
                "state": self.state,
                "transactions": [
                    [t.transactional_id, t.producer_id, t.producer_epoch] for t in self.transactions
                ],
                "group": self.group,
                "offsets": {
                    topic: {str(p): o for p, o in parts.items()}
                    for topic, parts in self.offsets.items()
                },
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> BatchRecord:
        data = json.loads(text)
        return cls(
            int(data["batch"]),
            str(data["state"]),
            [OpenTransaction(str(t[0]), int(t[1]), int(t[2])) for t in data["transactions"]],
            data.get("group"),
            {
                topic: {int(p): int(o) for p, o in parts.items()}
                for topic, parts in (data.get("offsets") or {}).items()
            },
        )


class SinkLog:
    """``<checkpointLocation>/millrace-sink/<N>.json``: one record per batch. Writes are
    atomic (temporary file, fsync, rename, fsync of the directory)."""

    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)

    def _path(self, batch: int) -> Path:
        return self.dir / f"{batch}.json"

    def batches(self) -> list[int]:
        if not self.dir.is_dir():
            return []
        out = []
        for entry in self.dir.iterdir():
            if entry.suffix == ".json" and entry.stem.isdigit():
                out.append(int(entry.stem))
        return sorted(out)

    def committed_through(self) -> int:
        batches = self.batches()
        return batches[-1] if batches else -1

    def get(self, batch: int) -> BatchRecord | None:
        try:
            return BatchRecord.from_json(self._path(batch).read_text())
        except FileNotFoundError:
            return None

    def forget(self, batch: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(batch).unlink()

    def put(self, record: BatchRecord) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=f".{record.batch}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(record.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(record.batch))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        for old in self.batches()[:-KEEP_BATCHES]:
            with contextlib.suppress(FileNotFoundError):
                self._path(old).unlink()


def source_offsets(log_dir: str, batch: int) -> dict[str, dict[int, int]]:
    """The end offsets of batch ``batch`` of every Kafka-like source of the query, from
    Spark's offset log ``<checkpoint>/offsets/<batch>`` (``{}`` when there is none)."""
    path = Path(log_dir).parent / "offsets" / str(batch)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {}
    out: dict[str, dict[int, int]] = {}
    for line in lines[2:]:  # "v1", the batch metadata, then one line per source
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        for topic, parts in data.items():
            if not isinstance(parts, dict):
                continue
            try:
                converted = {int(p): int(o) for p, o in parts.items()}
            except (TypeError, ValueError):
                continue
            out.setdefault(str(topic), {}).update(converted)
    return out


# --- the driver side -----------------------------------------------------------------------


class Committer:
    """Commits (or aborts) the transactions of one batch on the driver (see the module
    docstring and ``docs/exactly-once.md``, step 3)."""

    def __init__(self, settings: ExactlyOnce, bootstrap: str, *, timeout_s: float = 120.0) -> None:
        self.settings = settings
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.log = SinkLog(settings.log_dir) if settings.log_dir is not None else None
        #: how long the last committed batch took to become visible (first EndTxn to last)
        self.visibility_ms = 0.0

    def _client(self) -> TxnClient:
        return TxnClient(self.bootstrap, timeout_s=self.timeout_s)

    def commit(self, batch: int, tasks: Sequence[TaskTransaction]) -> BatchRecord:
        """Commit batch ``batch``: record it as prepared, end its transactions (the source
        offsets go with the last), record it as committed, abort what is left."""
        record = self.log.get(batch) if self.log is not None else None
        if record is not None and record.state == "committed":
            return record
        if record is None:
            settings = self.settings
            offsets: dict[str, dict[int, int]] = {}
            if settings.group is not None and settings.log_dir is not None:
                offsets = source_offsets(settings.log_dir, batch)
                if not offsets:
                    log.warning(
                        "millrace sink: batch %d has no Kafka source offsets in the checkpoint; "
                        "nothing is committed to group %s",
                        batch,
                        settings.group,
                    )
            record = BatchRecord(
                batch,
                "prepared",
                [t.transaction for t in sorted(tasks, key=lambda t: t.partition_id)],
                settings.group,
                offsets,
            )
            if self.log is not None:
                self.log.put(record)
        _fault_pause("prepared")
        with self._client() as client:
            try:
                self._finish(client, record)
            except ExactlyOnceError:
                if self.log is not None and not self._committed_any(client, record):
                    # nothing of the batch is visible: forget it, so that the next run of the
                    # query writes the batch again instead of skipping it
                    self.log.forget(batch)
                    raise ExactlyOnceError(
                        f"batch {batch} could not be committed and none of it is visible; "
                        "restart the query to write it again"
                    ) from None
                raise
            record.state = "committed"
            if self.log is not None:
                self.log.put(record)
            _fault_pause("committed")
            self._abort_leftovers(client)
        return record

    def _finish(self, client: TxnClient, record: BatchRecord) -> None:
        """End the batch's transactions, the one carrying the source offsets last. The
        offsets are added to the carrier first, so that the batch becomes visible within the
        time of the EndTxn round trips alone (logged, and kept in ``visibility_ms``)."""
        txns = list(record.transactions)
        carrier = txns.pop() if txns else None
        needs_offsets = record.group is not None and bool(record.offsets)
        if carrier is not None and needs_offsets:
            assert record.group is not None
            client.add_offsets(carrier, record.group, record.offsets)
        started = time.monotonic()
        if txns:
            with ThreadPoolExecutor(max_workers=min(8, len(txns))) as pool:
                list(pool.map(self._end, txns))
        _fault_pause("ended")
        if carrier is None and needs_offsets:
            assert record.group is not None
            carrier = client.init_producer(
                self.settings.offsets_transactional_id, self.settings.timeout_ms
            )
            client.add_offsets(carrier, record.group, record.offsets)
        if carrier is not None:
            self._end(carrier, client)
        self.visibility_ms = (time.monotonic() - started) * 1000.0
        log.info(
            "millrace sink: batch %d visible through %d transaction(s) within %.1f ms%s",
            record.batch,
            len(record.transactions),
            self.visibility_ms,
            " (atomically, with its offsets)" if len(record.transactions) == 1 else "",
        )

    def _committed_any(self, client: TxnClient, record: BatchRecord) -> bool:
        """Whether any transaction of ``record`` is (or may be) committed."""
        for txn in record.transactions:
            try:
                state = client.describe(txn.transactional_id)
            except TxnError:
                return True  # cannot tell: assume the worst
            same = (
                int(state.producer_id) == txn.producer_id
                and int(state.producer_epoch) == txn.producer_epoch
            )
            if same and str(state.transaction_state) in ("CompleteCommit", "PrepareCommit"):
                return True
            if same and str(state.transaction_state) == "Ongoing":
                return True  # still committable: not a loss
        return False

    def _end(self, txn: OpenTransaction, client: TxnClient | None = None) -> None:
        own = client is None
        c = self._client() if client is None else client
        try:
            c.end(txn, commit=True)
        except TxnError as exc:
            raise ExactlyOnceError(
                f"cannot commit transaction {txn.transactional_id} (producer {txn.producer_id}, "
                f"epoch {txn.producer_epoch}): {exc}. Its output of this batch is not visible; "
                "if the broker aborted it (the query was down longer than "
                "transaction.timeout.ms) it cannot be recovered"
            ) from exc
        finally:
            if own:
                c.close()

    def _abort_leftovers(self, client: TxnClient, keep: Sequence[str] = ()) -> None:
        """Abort every open transaction of the prefix (failed or losing task attempts)."""
        prefix = self.settings.prefix + "-"
        try:
            leftovers = [t for t in client.list_ongoing(prefix) if t not in keep]
            if leftovers:
                log.info("millrace sink: aborting %d leftover transactions", len(leftovers))
                client.fence(leftovers, self.settings.timeout_ms)
        except (TxnError, OSError) as exc:
            # the batch is committed; a leftover only delays read_committed readers until
            # the next batch's clean-up or its transaction timeout
            log.warning("millrace sink: clean-up of leftover transactions failed: %s", exc)

    def abort(self, batch: int | None, tasks: Sequence[TaskTransaction]) -> None:
        """Spark gave the batch up: abort its transactions, unless it is already prepared
        (then the next run finishes it)."""
        if self.log is not None and batch is not None and self.log.get(batch) is not None:
            log.warning("millrace sink: batch %d is prepared; the next run commits it", batch)
            return
        with self._client() as client:
            ids = [t.transaction.transactional_id for t in tasks]
            try:
                client.fence(ids, self.settings.timeout_ms)
            except TxnError as exc:
                log.warning("millrace sink: aborting batch transactions failed: %s", exc)
            # tasks Spark is still cancelling may open their transaction just after this
            # call began: keep aborting what appears for a few seconds
            deadline = time.monotonic() + ABORT_LINGER_S
            while True:
                self._abort_leftovers(client)
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.5)


def commit_batch_offsets(
    bootstrap: str, checkpoint_location: str, batch_id: int, group: str
) -> dict[str, dict[int, int]]:
    """Commit batch ``batch_id``'s source end offsets (Spark's ``offsets/<batch_id>`` of the
    query checkpointed at ``checkpoint_location``) to ``group`` with a plain OffsetCommit.

    For sinks that cannot share a Kafka transaction (Delta Lake): call it *after* the sink's
    own idempotent commit of the batch, so the group's offsets may lag the sink (until the
    replay of the batch, which the sink skips, commits them again) but never run ahead of it.
    Returns the offsets committed (``{}`` when the batch has no Kafka source offsets)."""
    from confluent_kafka import Consumer, TopicPartition

    offsets = source_offsets(str(_checkpoint_dir(checkpoint_location) / SINK_LOG_DIR), batch_id)
    if not offsets:
        return {}
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[
                TopicPartition(topic, p, o)
                for topic, parts in sorted(offsets.items())
                for p, o in sorted(parts.items())
            ],
            asynchronous=False,
        )
    finally:
        consumer.close()
    return offsets


def task_transactions(messages: Sequence[Any]) -> list[TaskTransaction]:
    """The open transactions reported by a batch's successful tasks."""
    out: list[TaskTransaction] = []
    for m in messages:
        txn = getattr(m, "transaction", None)
        if isinstance(txn, TaskTransaction):
            out.append(txn)
    return out
