"""The task side of the exactly-once sink (``docs/exactly-once.md``, step 2): a write task
writes its rows into a transaction of its own and leaves it open for the driver.

A task of batch ``N``, Spark partition ``p``, task attempt id ``t`` either skips (the sink log
already holds the batch, except the partitions to rewrite) or, at its first row, opens a
transactional :class:`~spark_connector.kafka.producer.BatchProducer` for
``<prefix>-<sinkid>-<p>-<t mod 8>`` (InitProducerId fences any older producer of that id),
writes every row and flushes. The commit message carries the producer's own id and epoch:
the driver commits exactly that pair.

Runs on an executor, on the task's thread; nothing here is pickled but the settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from spark_connector.exactly_once.settings import ExactlyOnce
from spark_connector.kafka.transactions import OpenTransaction
from spark_connector.write.batch_write import Transactional, write_rows
from spark_connector.write.outcome import MillraceWriteCommitMessage, TaskTransaction
from spark_connector.write.plan import BatchSettings, WritePlan

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["TaskIdentity", "task_identity", "write_exactly_once"]


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which task attempt writes: its batch, Spark partition, attempt number and Spark's task
    attempt id (unique among the application's task attempts)."""

    batch: int
    partition: int
    attempt: int
    task_attempt_id: int


def task_identity(eos: ExactlyOnce) -> TaskIdentity:
    """The running Spark task's identity (the batch from ``write_batch``'s ``batchId`` or
    Spark's ``streaming.sql.batchId``)."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError("an exactly-once write must run inside a Spark task")
    batch = eos.batch_id
    if batch is None:
        prop = tc.getLocalProperty("streaming.sql.batchId")
        batch = int(prop) if prop is not None else -1
    return TaskIdentity(batch, tc.partitionId(), tc.attemptNumber(), tc.taskAttemptId())


def write_exactly_once(
    plan: WritePlan,
    settings: BatchSettings,
    eos: ExactlyOnce,
    batches: Iterator[pa.RecordBatch],
    identity: TaskIdentity | None = None,
) -> MillraceWriteCommitMessage:
    """Write the task's rows into its own open transaction (or skip them, see the module
    docstring) and report it."""
    who = identity if identity is not None else task_identity(eos)
    if not eos.task_writes(who.batch, who.partition):
        for _ in batches:  # a replay of a batch the sink already holds
            pass
        return MillraceWriteCommitMessage(
            rows=0,
            transaction=TaskTransaction(who.batch, who.partition, who.attempt, 0, skipped=True),
        )
    txn_id = eos.task_transactional_id(who.partition, who.task_attempt_id)
    result = write_rows(plan, settings, batches, Transactional(txn_id, eos.timeout_ms))
    txn = (
        OpenTransaction(txn_id, result.producer_id, result.producer_epoch)
        if result.rows > 0
        else None
    )
    report = TaskTransaction(
        who.batch,
        who.partition,
        who.attempt,
        result.rows,
        txn,
        tuple(
            (topic, part, first, end)
            for (topic, part), (first, end) in sorted(result.outputs.items())
        ),
        tuple(sorted(result.counts.items())),
    )
    return MillraceWriteCommitMessage(rows=result.rows, transaction=report)
