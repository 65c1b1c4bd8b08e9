"""librdkafka's per-row write path of ``format("millrace")``: one ``produce()`` per row,
at-least-once, for what the batch producer cannot do (``acks=0``, librdkafka settings it
lacks, ``producer=librdkafka``; see the ``writer`` module docstring).

Delivery is at-least-once, like Spark's Kafka sink: the producer defaults to ``acks=all``
and ``enable.idempotence=true``, every row's acknowledgement is checked, and a task reports
success only after every row has been acknowledged. Any failed delivery (or a row that
cannot be produced) fails the task with a :class:`DeliveryError`; a Spark retry then
re-sends the task's rows (duplicates, never loss).

Runs on an executor: the confluent-kafka ``Producer`` is created inside
:func:`write_rows_librdkafka`, used by the task's thread only, flushed before it returns, and
never pickled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from itertools import repeat
from typing import TYPE_CHECKING, Any

from spark_connector.write.outcome import DeliveryError, MillraceWriteCommitMessage
from spark_connector.write.plan import (
    TOPIC_OPTION,
    WriteOptionError,
    WritePlan,
    producer_config,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["write_rows_librdkafka"]

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


def write_rows_librdkafka(
    plan: WritePlan, batches: Iterator[pa.RecordBatch]
) -> MillraceWriteCommitMessage:
    """Produce every row of ``batches`` with librdkafka and wait until each is acknowledged.

    Raises :class:`WriteOptionError` for a row that cannot be produced (checked per Arrow
    batch, before any of that batch's rows are sent) and :class:`DeliveryError` if any
    delivery failed; returns only when every row was acknowledged."""
    tracker = _DeliveryTracker(only_errors=True)
    producer: Any = None
    produced = 0
    ok = False
    try:
        for batch in batches:
            n = batch.num_rows
            if n == 0:
                continue
            if producer is None:
                producer = _new_producer(plan, tracker, {"delivery.report.only.error": True})
            _produce_batch(producer, plan, batch, row_base=produced)
            produced += n
            producer.poll(0)
            if tracker.failed:
                break
        if producer is None:
            ok = True
            return MillraceWriteCommitMessage(rows=0)
        _await_deliveries(producer, tracker, plan, produced)
        ok = True
        return MillraceWriteCommitMessage(rows=produced)
    finally:
        if not ok and producer is not None:
            _purge(producer)


def _batch_rows(
    plan: WritePlan, batch: pa.RecordBatch, row_base: int
) -> Iterator[tuple[str, Any, Any, int, Any]]:
    """The (topic, value, key, partition, headers) of every row of ``batch``, all checked
    before the first is returned (``row_base``: the batch's first row in the task)."""
    n = batch.num_rows
    values = batch.column(plan.value_index).to_pylist()
    keys: Iterable[Any] = (
        repeat(None, n) if plan.key_index is None else batch.column(plan.key_index).to_pylist()
    )
    headers: Iterable[Any] = (
        repeat(None, n)
        if plan.headers_index is None
        else [
            _headers(h, row_base + i)
            for i, h in enumerate(batch.column(plan.headers_index).to_pylist())
        ]
    )
    return zip(
        _row_topics(plan, batch, row_base),
        values,
        keys,
        _row_partitions(plan, batch, row_base),
        headers,
        strict=True,
    )


def _produce_batch(producer: Any, plan: WritePlan, batch: pa.RecordBatch, row_base: int) -> None:
    """``produce()`` every row of ``batch``, waiting for queue room when it is full and
    polling for delivery reports every :data:`_POLL_EVERY_ROWS` rows."""
    from confluent_kafka import KafkaException

    produce = producer.produce
    rows = _batch_rows(plan, batch, row_base)
    i = 0
    topic = plan.topic
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
        raise DeliveryError(f"cannot produce row {row_base + i} (topic '{topic}'): {exc}") from exc


def _await_deliveries(
    producer: Any, tracker: _DeliveryTracker, plan: WritePlan, produced: int
) -> None:
    """Flush until every delivery report is in; :class:`DeliveryError` unless all
    ``produced`` rows were acknowledged."""
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


def _purge(producer: Any) -> None:
    """Drop what is still queued so the failing task does not linger; rows already sent
    may have been written (at-least-once: the retry sends them again)."""
    from confluent_kafka import KafkaException

    try:
        producer.purge()
        producer.flush(1.0)
    except (KafkaException, RuntimeError) as exc:
        log.warning("millrace writer: purging the producer after a failure: %s", exc)
