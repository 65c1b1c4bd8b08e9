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
``murmur2_random``; :mod:`spark_connector.partitioner` is the pure reference); a keyless
row's partition is chosen by the client (sticky partitioning).

Delivery is at-least-once, like Spark's Kafka sink: the producer defaults to ``acks=all``
and ``enable.idempotence=true``, every row's acknowledgement is checked, and a task reports
success only after every row has been acknowledged. Any failed delivery (or a row that
cannot be produced) fails the task with a :class:`DeliveryError`; a Spark retry then
re-sends the task's rows (duplicates, never loss).

Two producers. Option ``producer`` (``auto``, the default; ``batch``; ``librdkafka``) picks:

* the **batch producer** (:func:`write_record_batches`), for a write with a ``topic``
  option, no ``headers`` column and ``kafka.*`` options it knows
  (:func:`~spark_connector.write_plan.batch_settings`): each Arrow batch's rows are encoded
  in C into whole v2 record batches, a partition at a time, and sent by an idempotent
  :class:`~spark_connector.kafka.producer.BatchProducer`; no per-row Python call;
* **librdkafka's producer**, one ``produce()`` per row, for everything else (a ``topic`` or
  ``headers`` column, ``acks=0``, SASL or other librdkafka settings) and for exactly-once.

``producer=batch`` makes a write the batch producer cannot do fail on the driver, naming
why; ``producer=librdkafka`` always goes row by row. Both place rows the same way.

Validation happens as early as possible: column types, a missing ``value`` column, a missing
``kafka.bootstrap.servers`` and "no ``topic`` option and no ``topic`` column" are checked
from the schema on the driver when Spark creates the writer (:class:`WriteOptionError`);
what only the data can tell (a null topic, a negative partition, a null header key) fails
the task with a message naming the column (each Arrow batch is checked before any of its
rows is sent).

Pickling and concurrency
------------------------
A writer is created on the driver and pickled to the executors; it holds only the options
and the schema-derived plan (plain values). The task's producer (a ``BatchProducer`` or a
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
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    StructType,
)

from spark_connector.batch_write import write_record_batches
from spark_connector.exactly_once import (
    Committer,
    ExactlyOnce,
    ExactlyOnceError,
    TaskTransaction,
    exactly_once_settings,
    task_transactions,
)
from spark_connector.kafka.transactions import OpenTransaction, TxnClient
from spark_connector.write_outcome import DeliveryError, MillraceWriteCommitMessage
from spark_connector.write_plan import (
    PRODUCER_OPTION,
    TOPIC_OPTION,
    BatchSettings,
    WriteOptionError,
    WritePlan,
    batch_settings,
    plan_write,
    producer_config,
)

if TYPE_CHECKING:
    import pyarrow as pa

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

# Poll the producer for delivery reports every this many rows.
_POLL_EVERY_ROWS = 1000
# How long one flush() call waits; flush is repeated until every report has arrived
# (librdkafka bounds each message's life with message.timeout.ms / delivery.timeout.ms).
_FLUSH_STEP_S = 5.0


class _DeliveryTracker:
    """Counts delivery reports of one task's producer. Called back from ``poll``/``flush``
    on the task's own thread (confluent-kafka serves callbacks in the polling thread).

    At-least-once producers ask librdkafka for failure reports only
    (``delivery.report.only.error``, :attr:`only_errors`): a Python callback per
    acknowledged row cost the write task about a fifth of its time. librdkafka reports every
    message that fails, and ``flush()`` returns 0 only when no message is still waiting for
    its acknowledgement or its failure, so after such a flush the rows acknowledged are the
    rows produced minus those reported failed (:meth:`settle`)."""

    __slots__ = ("acked", "errors", "failed", "only_errors")

    def __init__(self, only_errors: bool = False) -> None:
        self.acked = 0
        self.failed = 0
        self.errors: list[str] = []
        self.only_errors = only_errors

    def settle(self, produced: int) -> None:
        """Called after ``flush()`` returned 0 for ``produced`` rows."""
        if self.only_errors:
            self.acked = produced - self.failed

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked += 1
            return
        self.failed += 1
        if len(self.errors) < 5:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")


class _TransactionalDeliveryTracker(_DeliveryTracker):
    """Also remembers the partitions written, which the task's transaction must cover."""

    __slots__ = ("partitions",)

    def __init__(self) -> None:
        super().__init__()
        self.partitions: set[tuple[str, int]] = set()

    def __call__(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked += 1
            self.partitions.add((msg.topic(), msg.partition()))
            return
        super().__call__(err, msg)


def _headers(value: Any, row: int) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    out: list[tuple[str, bytes | None]] = []
    for h in value:
        key = h.get("key") if h is not None else None
        if key is None:
            raise WriteOptionError(f"column 'headers': row {row} has a header with a null key")
        out.append((key, h.get("value")))
    return out


def _new_producer(
    plan: WritePlan, tracker: _DeliveryTracker, extra: Mapping[str, object] | None = None
) -> Any:
    from confluent_kafka import KafkaException, Producer

    conf = producer_config(plan)
    conf.update(extra or {})
    conf["on_delivery"] = tracker
    try:
        return Producer(conf)
    except (KafkaException, ValueError, TypeError) as exc:
        raise WriteOptionError(
            f"cannot create the producer from the 'kafka.*' options (passed to librdkafka "
            f"without the 'kafka.' prefix): {exc}"
        ) from exc


def _produce_blocking(
    producer: Any, topic: str, value: Any, key: Any, partition: int, headers: Any
) -> None:
    """``produce`` once the local queue has room (it raised ``BufferError``)."""
    while True:
        producer.poll(0.1)  # serve delivery reports, freeing queue space
        try:
            if headers is None:
                producer.produce(topic, value, key, partition)
            else:
                producer.produce(topic, value, key, partition, headers=headers)
            return
        except BufferError:
            continue


def _row_topics(plan: WritePlan, batch: pa.RecordBatch, row_base: int) -> Iterable[str]:
    if plan.topic is not None:
        return repeat(plan.topic, batch.num_rows)
    assert plan.topic_index is not None
    topics: list[str | None] = batch.column(plan.topic_index).to_pylist()
    for i, topic in enumerate(topics):
        if not topic:
            raise WriteOptionError(
                f"row {row_base + i} has a null or empty 'topic' column and no "
                f"'{TOPIC_OPTION}' option is set"
            )
    return topics  # type: ignore[return-value]  # no None left


def _row_partitions(plan: WritePlan, batch: pa.RecordBatch, row_base: int) -> Iterable[int]:
    if plan.partition_index is None:
        return repeat(-1, batch.num_rows)  # librdkafka's RD_KAFKA_PARTITION_UA: partitioner
    out: list[int] = []
    for i, p in enumerate(batch.column(plan.partition_index).to_pylist()):
        if p is None:
            out.append(-1)
        elif p < 0:
            raise WriteOptionError(
                f"column 'partition': row {row_base + i} has partition {p}; partitions are "
                ">= 0 (or null for the partitioner)"
            )
        else:
            out.append(p)
    return out


def _task_batch_id(eos: ExactlyOnce) -> tuple[int, int, int]:
    """(batch id, Spark partition id, attempt number) of the running write task."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    if tc is None:
        raise RuntimeError("an exactly-once write must run inside a Spark task")
    batch = eos.batch_id
    if batch is None:
        prop = tc.getLocalProperty("streaming.sql.batchId")
        batch = int(prop) if prop is not None else -1
    return batch, tc.partitionId(), tc.attemptNumber()


def _open_transaction(plan: WritePlan, eos: ExactlyOnce, txn_id: str, producer: Any) -> None:
    try:
        producer.init_transactions(eos.timeout_ms / 1000)
        producer.begin_transaction()
    except Exception as exc:
        raise DeliveryError(
            f"cannot open transaction {txn_id} at {plan.bootstrap_servers}: {exc}"
        ) from exc


def _describe_open(
    plan: WritePlan, txn_id: str
) -> tuple[OpenTransaction, tuple[tuple[str, int], ...]]:
    """The task's transaction as its coordinator sees it; it must be open."""
    with TxnClient(plan.bootstrap_servers) as client:
        state = client.describe(txn_id)
    if str(state.transaction_state) != "Ongoing" or int(state.producer_id) < 0:
        raise DeliveryError(
            f"transaction {txn_id} is {state.transaction_state} after the task's writes, not "
            "Ongoing (its producer was fenced or it timed out); the task is retried"
        )
    covered = tuple((str(t.topic), int(p)) for t in state.topics for p in t.partitions)
    return OpenTransaction(txn_id, int(state.producer_id), int(state.producer_epoch)), covered


def write_batches(
    plan: WritePlan, batches: Iterator[pa.RecordBatch], eos: ExactlyOnce | None = None
) -> MillraceWriteCommitMessage:
    """Produce every row of ``batches`` and wait until each is acknowledged.

    Runs on an executor (the body of both writers' ``write``). Raises
    :class:`WriteOptionError` for a row that cannot be produced (checked per Arrow batch,
    before any of that batch's rows are sent) and :class:`DeliveryError` if any delivery
    failed; returns only when every row was acknowledged.

    With ``eos`` (exactly-once, ``docs/exactly-once.md`` step 2) the rows go into a
    transaction of this task attempt that is left open for the driver to commit, and the
    message carries it; a batch the sink already prepared is read and not written.
    """
    from confluent_kafka import KafkaException

    if eos is None and plan.producer != "librdkafka":
        settings = batch_settings(plan)
        if isinstance(settings, BatchSettings):
            return write_record_batches(plan, settings, batches)
        log.info("millrace writer: producing row by row with librdkafka: %s", settings)
    txn_id: str | None = None
    batch_id = partition_id = attempt = -1
    if eos is not None:
        batch_id, partition_id, attempt = _task_batch_id(eos)
        if eos.log_dir is not None and batch_id <= eos.committed_through:
            for _ in batches:  # a replay of a batch the sink already prepared or committed
                pass
            return MillraceWriteCommitMessage(rows=0)
        txn_id = eos.transactional_id(partition_id, attempt)
    tracker = (
        _DeliveryTracker(only_errors=True) if txn_id is None else _TransactionalDeliveryTracker()
    )
    producer: Any = None
    produced = 0
    row_base = 0
    ok = False
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            if producer is None:
                extra: dict[str, object] = (
                    {"delivery.report.only.error": True}
                    if txn_id is None
                    else {
                        "transactional.id": txn_id,
                        "transaction.timeout.ms": eos.timeout_ms if eos is not None else 60000,
                    }
                )
                producer = _new_producer(plan, tracker, extra)
                if txn_id is not None and eos is not None:
                    _open_transaction(plan, eos, txn_id, producer)
            produce = producer.produce
            values = batch.column(plan.value_index).to_pylist()
            keys: Iterable[Any] = (
                repeat(None, n)
                if plan.key_index is None
                else batch.column(plan.key_index).to_pylist()
            )
            headers: Iterable[Any] = (
                repeat(None, n)
                if plan.headers_index is None
                else [
                    _headers(h, row_base + i)
                    for i, h in enumerate(batch.column(plan.headers_index).to_pylist())
                ]
            )
            rows = zip(
                _row_topics(plan, batch, row_base),
                values,
                keys,
                _row_partitions(plan, batch, row_base),
                headers,
                strict=True,
            )
            i = 0
            try:
                for i, (topic, value, key, partition, hdrs) in enumerate(rows):
                    try:
                        if hdrs is None:
                            produce(topic, value, key, partition)
                        else:
                            produce(topic, value, key, partition, headers=hdrs)
                    except BufferError:
                        _produce_blocking(producer, topic, value, key, partition, hdrs)
                    if i % _POLL_EVERY_ROWS == 0:
                        producer.poll(0)
            except KafkaException as exc:
                raise DeliveryError(
                    f"cannot produce row {row_base + i} (topic '{topic}'): {exc}"
                ) from exc
            produced += n
            row_base += n
            producer.poll(0)
            if tracker.failed:
                break
        if producer is None:
            ok = True
            return MillraceWriteCommitMessage(rows=0)
        while producer.flush(_FLUSH_STEP_S) > 0:
            log.info("millrace writer: waiting for %d delivery reports", len(producer))
        tracker.settle(produced)
        if tracker.failed:
            raise DeliveryError(
                f"{tracker.failed} of {produced} rows were not acknowledged by the cluster "
                f"at {plan.bootstrap_servers}; first errors: {'; '.join(tracker.errors)}"
            )
        if tracker.acked != produced:
            raise DeliveryError(
                f"only {tracker.acked} of {produced} rows were acknowledged by the cluster"
            )
        task_txn: TaskTransaction | None = None
        if txn_id is not None:
            txn, covered = _describe_open(plan, txn_id)
            assert isinstance(tracker, _TransactionalDeliveryTracker)
            missing = tracker.partitions - set(covered)
            if missing:
                raise DeliveryError(
                    f"transaction {txn_id} does not cover partitions it wrote: "
                    f"{sorted(missing)}; the task is retried"
                )
            task_txn = TaskTransaction(txn, covered, batch_id, partition_id, attempt)
        ok = True
        # With a transaction, the producer is dropped without close(): close() would abort
        # the transaction the driver is going to commit.
        return MillraceWriteCommitMessage(rows=produced, transaction=task_txn)
    finally:
        if not ok and producer is not None:
            # Drop what is still queued so the failing task does not linger; rows already
            # sent may have been written (at-least-once: the retry sends them again; with a
            # transaction they are aborted).
            try:
                producer.purge()
                producer.flush(1.0)
                if txn_id is not None:
                    producer.abort_transaction(10.0)
            except (KafkaException, RuntimeError) as exc:
                log.warning("millrace writer: purging the producer after a failure: %s", exc)


def _summarize(messages: list[Any]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, MillraceWriteCommitMessage)]
    return sum(m.rows for m in done), len(messages) - len(done)


def _check_producer(plan: WritePlan, eos: ExactlyOnce | None) -> None:
    """With ``producer=batch``, the write must be one the batch producer can do (driver)."""
    if plan.producer != "batch":
        return
    if eos is not None:
        raise WriteOptionError(
            f"option '{PRODUCER_OPTION}' is batch, but exactly-once writes go through "
            "librdkafka's transactional producer (use producer=auto)"
        )
    settings = batch_settings(plan)
    if not isinstance(settings, BatchSettings):
        raise WriteOptionError(
            f"option '{PRODUCER_OPTION}' is batch, but the batch producer cannot do this "
            f"write: {settings}"
        )


def _exactly_once(
    plan: WritePlan, options: Mapping[str, str], *, streaming: bool
) -> ExactlyOnce | None:
    """The writer's exactly-once settings, checked against the cluster (driver side)."""
    try:
        eos = exactly_once_settings(
            options, streaming=streaming, producer_options=plan.producer_options
        )
    except ExactlyOnceError as exc:
        raise WriteOptionError(str(exc)) from None
    if eos is None:
        return None
    try:
        with TxnClient(plan.bootstrap_servers, timeout_s=30.0) as client:
            missing = client.check_support()
    except (OSError, ConnectionError) as exc:
        raise WriteOptionError(
            f"'deliveryGuarantee=exactly-once': cannot reach the brokers at "
            f"{plan.bootstrap_servers} to check their transaction support: {exc}"
        ) from exc
    if missing:
        raise WriteOptionError(
            f"'deliveryGuarantee=exactly-once' needs Kafka transactions, and the brokers at "
            f"{plan.bootstrap_servers} lack {', '.join(missing)}: use brokers of Kafka 3.0 or "
            "later (or Millrace), or write with deliveryGuarantee=at-least-once"
        )
    return eos


class MillraceBatchWriter(DataSourceArrowWriter):
    """``df.write.format("millrace")``: one producer per task; at-least-once by default,
    all-or-nothing with ``deliveryGuarantee=exactly-once`` (the tasks' transactions are
    committed by :meth:`commit`, aborted by :meth:`abort`).

    Responsibility: validate options and schema on the driver (constructor), produce every
    row of a task's Arrow batches and wait for their acknowledgements (``write``, on an
    executor). Format: see the module docstring (Spark's Kafka sink columns and options).
    Concurrency: the instance is pickled to executors and holds only plain values; each
    ``write`` call creates, uses and flushes its own producer on the task thread.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.plan = plan_write(options, schema)
        self.eos = _exactly_once(self.plan, options, streaming=False)
        _check_producer(self.plan, self.eos)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MillraceWriteCommitMessage:
        return write_batches(self.plan, iterator, self.eos)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, _ = _summarize(list(messages))
        if self.eos is not None:
            batch = self.eos.batch_id if self.eos.batch_id is not None else 0
            Committer(self.eos, self.plan.bootstrap_servers).commit(
                batch, task_transactions(messages)
            )
        log.info("millrace write committed: %d rows from %d tasks", rows, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        rows, failed = _summarize(list(messages))
        if self.eos is not None:
            Committer(self.eos, self.plan.bootstrap_servers).abort(
                self.eos.batch_id, task_transactions(messages)
            )
            log.warning("millrace write aborted: %d tasks failed; nothing is visible", failed)
            return
        log.warning(
            "millrace write aborted: %d tasks failed; %d rows of successful tasks stay written "
            "(the Kafka sink is at-least-once, not transactional)",
            failed,
            rows,
        )


class MillraceStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("millrace")``: each micro-batch task produces its rows and
    waits for their acknowledgements: at-least-once by default (a replayed micro-batch writes
    again), exactly-once with ``deliveryGuarantee=exactly-once`` (``docs/exactly-once.md``:
    the tasks' transactions are committed by :meth:`commit` with the batch's source offsets).

    Same format, validation and pickling rules as :class:`MillraceBatchWriter`; ``commit``
    and ``abort`` run on the driver once per micro-batch.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.plan = plan_write(options, schema)
        self.eos = _exactly_once(self.plan, options, streaming=True)
        _check_producer(self.plan, self.eos)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MillraceWriteCommitMessage:
        return write_batches(self.plan, iterator, self.eos)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, _ = _summarize(list(messages))
        if self.eos is not None:
            Committer(self.eos, self.plan.bootstrap_servers).commit(
                batchId, task_transactions(messages)
            )
        log.info("millrace stream batch %d committed: %d rows", batchId, rows)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows, failed = _summarize(list(messages))
        if self.eos is not None:
            Committer(self.eos, self.plan.bootstrap_servers).abort(
                batchId, task_transactions(messages)
            )
        log.warning(
            "millrace stream batch %d aborted: %d tasks failed, %d rows %s",
            batchId,
            failed,
            rows,
            "not visible" if self.eos is not None else "already written",
        )
