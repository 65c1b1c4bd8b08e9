"""What a ``format("millrace")`` write task reports: the commit message Spark carries from
the task to the driver's ``commit``/``abort`` (picklable), with the task's open transaction
for exactly-once, and the error a task fails with when rows were not acknowledged. Shared by
both producers' write paths (``row_write`` with librdkafka, ``batch_write`` with the batch
producer) and the exactly-once sink. Plain values: no I/O, no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from spark_connector.kafka.transactions import OpenTransaction

__all__ = ["DeliveryError", "MillraceWriteCommitMessage", "TaskTransaction"]


class DeliveryError(RuntimeError):
    """A row the cluster did not acknowledge (or refused): the task fails, Spark retries."""


@dataclass(frozen=True, slots=True)
class TaskTransaction:
    """What an exactly-once write task hands the driver (``docs/exactly-once.md``, step 2):
    its batch, Spark partition and attempt, the rows it wrote, its open transaction named by
    its own producer's id and epoch (None when it had no rows), per output partition the
    offsets its records got ``(topic, partition, first, end)``, and the partition count it
    saw per topic. ``skipped``: the sink log already holds this partition of the batch."""

    batch: int
    partition: int
    attempt: int
    rows: int
    transaction: OpenTransaction | None = None
    outputs: tuple[tuple[str, int, int, int], ...] = ()
    counts: tuple[tuple[str, int], ...] = ()
    skipped: bool = False


@dataclass(slots=True)
class MillraceWriteCommitMessage(WriterCommitMessage):
    """What one task wrote: the number of rows the cluster acknowledged and, with
    exactly-once, the task's report (its open transaction). Picklable."""

    rows: int
    transaction: TaskTransaction | None = None
