"""The write side of the ``millrace`` format: ``df.write`` and ``df.writeStream`` to topics.

Theory of operation
-------------------
The contract is Spark's built-in Kafka sink (``spark-sql-kafka-0-10``), so a job moves over by
changing the format name:

========== ============================================= ==========================================
column     type                                          meaning
========== ============================================= ==========================================
value      string or binary (required)                   record value; null writes a tombstone
key        string or binary (optional)                   record key; null means no key
headers    array<struct<key string, value binary>>       record headers (optional)
topic      string (optional)                             target topic, unless option ``topic``
partition  int (optional)                                explicit partition; null -> partitioner
========== ============================================= ==========================================

Other columns are ignored. Options: ``kafka.bootstrap.servers`` (required), ``topic`` (wins
over the ``topic`` column), and ``kafka.<property>``: every ``kafka.``-prefixed option is
handed, prefix stripped, to the producer (librdkafka names: ``kafka.acks``,
``kafka.linger.ms``, ``kafka.compression.type``, ...).

Placement: a row with a ``partition`` goes there; a keyed row without one goes to
``toPositive(murmur2(key)) % numPartitions`` (Kafka's default partitioner, librdkafka's
``murmur2_random``; :mod:`spark_connector.records.partitioner` is the pure reference); a keyless
row's partition is chosen by the client (sticky partitioning).

Delivery is at-least-once by default, like Spark's Kafka sink: the producer defaults to
``acks=all`` and ``enable.idempotence=true``, every row's acknowledgement is checked, and a
task reports success only after every row has been acknowledged. Any failed delivery (or a
row that cannot be produced) fails the task with a :class:`DeliveryError`; a Spark retry
then re-sends the task's rows (duplicates, never loss). ``deliveryGuarantee=exactly-once``
writes each task's rows into a Kafka transaction the driver commits
(``docs/exactly-once.md``, :mod:`spark_connector.exactly_once`).

Two producers. Option ``producer`` (``auto``, the default; ``batch``; ``librdkafka``) picks:

* the **batch producer** (:func:`~spark_connector.write.batch_write.write_rows`), for every write
  whose ``kafka.*`` options it knows (:func:`~spark_connector.write.plan.batch_settings`):
  each Arrow batch's rows are encoded in C into whole v2 record batches, a partition at a
  time (consecutive small Arrow batches merged into batches of up to ``batch.size``), and
  sent by an idempotent (for exactly-once, transactional)
  :class:`~spark_connector.kafka.producer.BatchProducer`, up to 5 requests in flight per
  broker; no per-row Python call;
* **librdkafka's producer** (:mod:`spark_connector.write.row_write`), one ``produce()`` per row,
  for at-least-once writes with ``acks=0`` or librdkafka settings the batch producer lacks
  (a SASL mechanism other than PLAIN and SCRAM, ...), or on request.

Security: ``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``
and ``kafka.ssl.*`` (Spark's names; librdkafka's work too) are checked on the driver
(:mod:`spark_connector.kafka.security`) and carried, as plain strings in the plan, to the
tasks, whose batch producers build their TLS and SASL settings once per process; the
exactly-once sink's driver-side connections (transaction coordinators, the driver's producer,
markers, progress records) carry the same. The librdkafka producer gets them under its names.

``producer=batch`` makes a write the batch producer cannot do fail on the driver, naming
why; ``producer=librdkafka`` always goes row by row (at-least-once only). Exactly-once writes
always use the batch producer: a setting it cannot honour fails on the driver, naming it.
Both producers place rows the same way.

Validation happens as early as possible: column types, a missing ``value`` column, a missing
``kafka.bootstrap.servers`` and "no ``topic`` option and no ``topic`` column" are checked
from the schema on the driver when Spark creates the writer (:class:`WriteOptionError`);
what only the data can tell (a null topic, a negative partition, a null header key) fails
the task with a message naming the column (each Arrow batch is checked before any of its
rows is sent).

Pickling and concurrency
------------------------
A writer is created on the driver and pickled to the executors; it holds only the options,
the schema-derived plan and, for exactly-once, the sink's settings (plain values). Spark
creates a streaming writer again, unpickled, in the Python process that commits a batch; an
exactly-once writer plans its batch (:func:`~spark_connector.exactly_once.planning.plan_batch`)
only when it is pickled for the tasks. The task's producer (a ``BatchProducer`` or a
confluent-kafka ``Producer``) is created inside :meth:`write` on the executor, used by that
task's thread only, and flushed before :meth:`write` returns; it is never pickled or
shared. :meth:`commit` and :meth:`abort` run on the driver.

Example (batch and streaming)::

    df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value") \\
        .write.format("millrace") \\
        .option("kafka.bootstrap.servers", "127.0.0.1:9092") \\
        .option("topic", "events") \\
        .mode("append").save()

    query = (stream_df.selectExpr("key", "value")
             .writeStream.format("millrace")
             .option("kafka.bootstrap.servers", "127.0.0.1:9092")
             .option("topic", "events")
             .option("checkpointLocation", "/tmp/ckpt")
             .start())
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_connector.exactly_once.committer import Committer
from spark_connector.exactly_once.planning import open_sink, plan_batch
from spark_connector.exactly_once.settings import (
    ExactlyOnce,
    ExactlyOnceError,
    parse_sink_options,
)
from spark_connector.exactly_once.task import write_exactly_once
from spark_connector.kafka.errors import KafkaRequestError
from spark_connector.kafka.security import wire_security
from spark_connector.write.batch_write import write_record_batches
from spark_connector.write.outcome import DeliveryError, MillraceWriteCommitMessage, TaskTransaction
from spark_connector.write.plan import (
    PRODUCER_OPTION,
    BatchSettings,
    WriteOptionError,
    WritePlan,
    batch_settings,
    plan_write,
    producer_config,
)
from spark_connector.write.row_write import write_rows_librdkafka

if TYPE_CHECKING:
    import pyarrow as pa

    from kafka_security.client_security import ClientSecurity

__all__ = [
    "DeliveryError",
    "MillraceBatchWriter",
    "MillraceStreamWriter",
    "MillraceWriteCommitMessage",
    "WriteOptionError",
    "WritePlan",
    "plan_write",
    "producer_config",
]

log = logging.getLogger(__name__)


def write_batches(
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    eos: ExactlyOnce | None = None,
    settings: BatchSettings | None = None,
) -> MillraceWriteCommitMessage:
    """Produce every row of ``batches`` and wait until each is acknowledged (the body of
    both writers' ``write``, on an executor): into the task's open transaction with ``eos``
    (``docs/exactly-once.md`` step 2), else at-least-once with the batch producer or
    librdkafka (see the module docstring)."""
    if settings is None and plan.producer != "librdkafka":
        chosen = batch_settings(plan)
        settings = chosen if isinstance(chosen, BatchSettings) else None
        if settings is None:
            log.info("millrace writer: producing row by row with librdkafka: %s", chosen)
    if eos is not None:
        if settings is None:
            raise WriteOptionError("exactly-once writes need the batch producer")
        return write_exactly_once(plan, settings, eos, batches)
    if settings is not None:
        return write_record_batches(plan, settings, batches)
    return write_rows_librdkafka(plan, batches)


def _summarize(messages: list[Any]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, MillraceWriteCommitMessage)]
    return sum(m.rows for m in done), len(messages) - len(done)


def _reports(messages: list[Any]) -> list[TaskTransaction]:
    """The exactly-once task reports of a batch's successful tasks."""
    return [
        m.transaction
        for m in messages
        if isinstance(m, MillraceWriteCommitMessage) and isinstance(m.transaction, TaskTransaction)
    ]


def _batch_settings(plan: WritePlan, eos: ExactlyOnce | None) -> BatchSettings | None:
    """The batch producer's settings (driver side), checked against ``producer`` and
    exactly-once: None when the write goes row by row through librdkafka."""
    chosen = batch_settings(plan)
    if eos is not None:
        if plan.producer == "librdkafka":
            raise WriteOptionError(
                f"option '{PRODUCER_OPTION}' is librdkafka, but exactly-once writes go through "
                "the connector's transactional batch producer (use producer=auto)"
            )
        if not isinstance(chosen, BatchSettings):
            raise WriteOptionError(
                f"'deliveryGuarantee=exactly-once' writes through the connector's transactional "
                f"batch producer, which cannot do this write: {chosen}"
            )
        if chosen.acks != -1 or not chosen.idempotent:
            raise WriteOptionError(
                "'deliveryGuarantee=exactly-once' needs acks=all and idempotence: remove "
                "options 'kafka.acks' and 'kafka.enable.idempotence'"
            )
        return chosen
    if plan.producer == "batch" and not isinstance(chosen, BatchSettings):
        raise WriteOptionError(
            f"option '{PRODUCER_OPTION}' is batch, but the batch producer cannot do this "
            f"write: {chosen}"
        )
    return chosen if isinstance(chosen, BatchSettings) else None


def _security(plan: WritePlan) -> ClientSecurity:
    """The TLS and SASL settings of the plan's connections (made once per process)."""
    return wire_security(plan.producer_options)


def _exactly_once(
    plan: WritePlan, options: Mapping[str, str], *, streaming: bool
) -> ExactlyOnce | None:
    """The writer's exactly-once settings, checked against the cluster (driver side)."""
    try:
        opts = parse_sink_options(
            options, streaming=streaming, producer_options=plan.producer_options, topic=plan.topic
        )
        if opts is None:
            return None
        raw = plan.producer_options.get("request.timeout.ms", "30000")
        timeout_s = int(raw) / 1000 if raw.strip().isdigit() else 30.0
        return open_sink(opts, plan.bootstrap_servers, timeout_s, _security(plan))
    except ExactlyOnceError as exc:
        raise WriteOptionError(str(exc)) from None
    except KafkaRequestError as exc:
        raise WriteOptionError(
            f"'deliveryGuarantee=exactly-once': cannot check the brokers' transaction "
            f"support: {exc}"
        ) from exc


class _Writer:
    """What both writers share: the plan, the exactly-once settings, and the planning of a
    batch when the writer is pickled for its tasks."""

    def _setup(
        self, options: Mapping[str, str], schema: StructType, *, streaming: bool, run: str
    ) -> None:
        self.plan = plan_write(options, schema)
        self.eos = _exactly_once(self.plan, options, streaming=streaming)
        self.settings = _batch_settings(self.plan, self.eos)
        self.run = run
        self._planned = False

    def __getstate__(self) -> dict[str, Any]:
        if self.eos is not None and not self._planned:
            self.eos = plan_batch(self.eos, self.plan.bootstrap_servers, _security(self.plan))
            self._planned = True
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _committer(self) -> Committer:
        assert self.eos is not None
        return Committer(
            self.eos, self.plan.bootstrap_servers, self.run, security=_security(self.plan)
        )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MillraceWriteCommitMessage:
        return write_batches(self.plan, iterator, self.eos, self.settings)


class MillraceBatchWriter(_Writer, DataSourceArrowWriter):
    """``df.write.format("millrace")``: one producer per task; at-least-once by default,
    all-or-nothing with ``deliveryGuarantee=exactly-once`` (the tasks' transactions are
    committed by :meth:`commit`, aborted by :meth:`abort`); with ``batchId`` (what
    ``write_batch`` sets in ``foreachBatch``) exactly once per batch id, like the streaming
    sink.

    Responsibility: validate options and schema on the driver (constructor), produce every
    row of a task's Arrow batches and wait for their acknowledgements (``write``, on an
    executor). Format: see the module docstring (Spark's Kafka sink columns and options).
    Concurrency: the instance is pickled to executors and holds only plain values; each
    ``write`` call creates, uses and flushes its own producer on the task thread.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, run: str = "") -> None:
        self._setup(options, schema, streaming=False, run=run)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, _ = _summarize(list(messages))
        if self.eos is not None:
            committer = self._committer()
            try:
                if self.eos.batch_id is not None:
                    committer.commit(self.eos.batch_id, _reports(list(messages)))
                else:
                    committer.commit_write(_reports(list(messages)))
            except ExactlyOnceError as exc:
                raise DeliveryError(str(exc)) from exc
        log.info("millrace write committed: %d rows from %d tasks", rows, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, failed = _summarize(list(messages))
        if self.eos is not None:
            self._committer().abort(self.eos.batch_id, _reports(list(messages)))
            log.warning("millrace write aborted: %d tasks failed; nothing is visible", failed)
            return
        log.warning(
            "millrace write aborted: %d tasks failed; %d rows of successful tasks stay written "
            "(the Kafka sink is at-least-once, not transactional)",
            failed,
            rows,
        )


class MillraceStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("millrace")``: each micro-batch task produces its rows and
    waits for their acknowledgements: at-least-once by default (a replayed micro-batch writes
    again), exactly-once with ``deliveryGuarantee=exactly-once`` (``docs/exactly-once.md``:
    the tasks' transactions are committed by :meth:`commit`, then the batch's source offsets).

    Same format, validation and pickling rules as :class:`MillraceBatchWriter`; ``commit``
    and ``abort`` run on the driver once per micro-batch, ``run`` names the query run (the
    sink's zombie-driver fence).
    """

    def __init__(self, options: Mapping[str, str], schema: StructType, run: str = "") -> None:
        self._setup(options, schema, streaming=True, run=run)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, _ = _summarize(list(messages))
        if self.eos is not None:
            self._committer().commit(batchId, _reports(list(messages)))
        log.info("millrace stream batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, failed = _summarize(list(messages))
        if self.eos is not None:
            self._committer().abort(batchId, _reports(list(messages)))
        log.warning(
            "millrace stream batch %d aborted: %d tasks failed, %d rows %s",
            batchId,
            failed,
            rows,
            "not visible" if self.eos is not None else "already written",
        )
