"""What a ``format("millrace")`` write task reports: the commit message Spark carries from
the task to the driver's ``commit``/``abort`` (picklable), and the error a task fails with
when rows were not acknowledged. Shared by both producers' write paths (``writer`` with
librdkafka, ``batch_write`` with the batch producer). Plain values: no I/O, no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import WriterCommitMessage

from spark_connector.exactly_once import TaskTransaction

__all__ = ["DeliveryError", "MillraceWriteCommitMessage"]


class DeliveryError(RuntimeError):
    """A row the cluster did not acknowledge (or refused): the task fails, Spark retries."""


@dataclass(slots=True)
class MillraceWriteCommitMessage(WriterCommitMessage):
    """What one task wrote: the number of rows the cluster acknowledged and, with
    exactly-once, the task's open transaction (None when it wrote nothing). Picklable."""

    rows: int
    transaction: TaskTransaction | None = None
