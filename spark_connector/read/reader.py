"""Batch and streaming readers of the ``millrace`` format.

Theory of operation
-------------------
Planning happens on the driver: :class:`~spark_connector.read.offset_reader.KafkaMetadataClient` lists
the subscribed partitions and resolves the starting / ending positions to concrete offsets,
and the pure :func:`~spark_connector.read.planner.plan_ranges` cuts them into
:class:`MillraceInputPartition`\\ s (one Spark task each). A topic the exactly-once sink
writes ends at a micro-batch boundary (``endingBatch``; a stream with ``wholeBatches``
advances one upstream batch at a time): :mod:`spark_connector.read.boundary_reads`.

Reading happens on executors: ``read()`` hands its partition's range to
:func:`~spark_connector.read.consumer.read_range` (the fetchers, read_committed, the
data-loss policy, Arrow batches: :mod:`spark_connector.read.consumer`); ``readAs=table``
reduces a partition's records to the latest per key
(:func:`~spark_connector.tables.latest_per_key.latest_per_key`). The driver reports lost
partitions and truncated logs with the same policy (``failOnDataLoss``,
:func:`~spark_connector.read.consumer.report_data_loss`).

Streaming offsets are JSON dicts ``{"topic": {"0": 42}}`` holding the next offset to read per
partition. :meth:`MillraceStreamReader.partitions` depends only on its arguments and the
options, so a replayed micro-batch reads exactly the same records. Partitions that appear
after the query started are read from offset 0 (their beginning).

Pickling: readers are pickled to executors and hold only :class:`ReadOptions`, the schema and
plain values (never a client). The streaming reader additionally keeps small driver-side
state (the Trigger.AvailableNow target and the last trigger time for ``maxTriggerDelay``),
which is only used by the long-lived driver-side Python process that plans micro-batches,
and there one :class:`KafkaMetadataClient` for the query's life (as Spark's Kafka source
keeps its admin client): a micro-batch's ``latestOffset`` is then one ListOffsets round trip
(about 1 ms on loopback) instead of a new client's connection and metadata (about 55 ms).
A look-up that fails drops the client, so the next one connects afresh; ``stop()`` closes
it; pickling leaves it out. Spark's streaming source runner calls the reader from one thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_connector.exactly_once.boundaries import Boundary
from spark_connector.read.boundary_reads import (
    batch_ends,
    boundary_options,
    in_streaming_query,
    stream_ends,
    stream_start,
    stream_target,
    task_end,
)
from spark_connector.read.consumer import read_range, report_data_loss
from spark_connector.read.offset_reader import KafkaMetadataClient
from spark_connector.read.offsets import PartitionOffsets, from_json_dict, to_json_dict
from spark_connector.read.options import ReadOptions
from spark_connector.read.planner import OffsetRange, plan_ranges, rate_limit
from spark_connector.tables.latest_per_key import latest_per_key

log = logging.getLogger(__name__)


class MillraceInputPartition(InputPartition):
    """One Spark task's share: records ``[from_offset, until_offset)`` of one partition;
    ``at_boundary``: the range ends at a micro-batch boundary (read read_committed, up to its
    end: :func:`~spark_connector.read.boundary_reads.boundary_options`)."""

    def __init__(self, offset_range: OffsetRange, at_boundary: bool = False) -> None:
        super().__init__(offset_range)
        self.range = offset_range
        self.at_boundary = at_boundary

    def __repr__(self) -> str:
        r = self.range
        return f"MillraceInputPartition({r.topic}[{r.partition}] {r.from_offset}..{r.until_offset})"


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema`` (what its Python data source checks)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _input_partitions(
    ranges: list[OffsetRange], at_boundary: set[str] | frozenset[str] = frozenset()
) -> list[MillraceInputPartition]:
    return [MillraceInputPartition(r, r.topic in at_boundary) for r in ranges]


def _nothing_subscribed(opts: ReadOptions) -> str:
    """Why a subscription covers no partition, naming the topics or the pattern."""
    if opts.subscribe is not None:
        names = ", ".join(f"'{t}'" for t in opts.subscribe)
        return f"option 'subscribe': no topic {names} exists"
    if opts.subscribe_pattern is not None:
        return f"option 'subscribePattern': no topic matches '{opts.subscribe_pattern}'"
    return "option 'assign' names no partition"


class MillraceBatchReader(DataSourceReader):
    """``spark.read.format("millrace")``: a fixed offset range per partition, resolved once
    (on the first :meth:`partitions` call) on the driver."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.boundary_topics: set[str] = set()
        """Topics read read_committed up to exactly the planned end (every topic of a read
        that looks for micro-batch boundaries, :func:`~spark_connector.read.boundary_reads.
        batch_ends`)."""

    def plan(self) -> list[OffsetRange]:
        """Resolve starting/ending positions against the cluster (a topic the exactly-once
        sink writes ends at a micro-batch boundary, :mod:`spark_connector.read.boundary_reads`)
        and plan the ranges."""
        opts = self.options
        assert opts.ending is not None
        with KafkaMetadataClient(opts) as client:
            tps = client.partitions()
            if not tps:
                log.warning(
                    "millrace reader: %s: the DataFrame is empty (as Spark's Kafka source "
                    "reads it)",
                    _nothing_subscribed(opts),
                )
                return []
            start = client.resolve(opts.starting, tps, starting=True)
            end = client.resolve(opts.ending, tps, starting=False)
        end, self.boundary_topics = batch_ends(opts, tps, start, end)
        for tp in tps:
            if end[tp] < start[tp]:
                raise ValueError(
                    f"option '{opts.ending.option}': the end offset {end[tp]} of "
                    f"{tp.topic}[{tp.partition}] is before the start offset {start[tp]} "
                    f"(option '{opts.starting.option}')"
                )
        if opts.read_as_table:  # one task per partition, empty ones too (read live)
            return [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(tps)]
        return plan_ranges(
            start,
            end,
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )

    def partitions(self) -> Sequence[InputPartition]:
        ranges = self.plan()
        return _input_partitions(ranges, self.boundary_topics)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MillraceInputPartition):
            return  # Spark's stand-in when planning found no partition: an empty DataFrame
        schema = arrow_schema(self.schema)
        options = boundary_options(self.options) if partition.at_boundary else self.options
        r = partition.range
        if partition.at_boundary and self.options.read_as_table and in_streaming_query():
            # the table side of a stream-static join: Spark plans it once and runs its tasks
            # again every micro-batch, so the boundary is looked up again when the task runs
            end = task_end(self.options, r.topic, r.partition)
            if end is not None:
                r = OffsetRange(r.topic, r.partition, r.from_offset, max(end, r.from_offset))
        batches = read_range(options, r, schema)
        if self.options.read_as_table:
            yield from latest_per_key(batches, schema)
        else:
            yield from batches


class MillraceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("millrace")`` with admission control and
    Trigger.AvailableNow.

    Read limits: :meth:`getDefaultReadLimit` is ``ReadMaxRows(maxOffsetsPerTrigger)`` when
    that option is set, else ``ReadMinRows(minOffsetsPerTrigger)``, else
    ``ReadAllAvailable``. :meth:`latestOffset` honours the limit Spark passes:
    ``ReadAllAvailable`` reads everything; ``ReadMaxRows`` shares the budget across
    partitions in proportion to their backlog; whenever the limit is not
    ``ReadAllAvailable`` and ``minOffsetsPerTrigger`` is set, a batch waits until that many
    records are available or ``maxTriggerDelay`` passed since the last batch (except under
    Trigger.AvailableNow, which must terminate)."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        # wholeBatches: whole committed upstream batches, so everything is read_committed
        self.options = boundary_options(options) if options.whole_batches else options
        self.schema = schema
        self._available_now_target: PartitionOffsets | None = None
        self._available_now_boundaries: dict[str, Boundary] | None = None
        # maxTriggerDelay counts from the query's start (Spark starts from 0, which lets
        # the first batch through below minOffsetsPerTrigger).
        self._last_trigger_ms = int(time.time() * 1000)
        self._metadata: KafkaMetadataClient | None = None  # driver side, made on first use

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_metadata"] = None  # a librdkafka handle stays in its process
        return state

    # --- driver side ---------------------------------------------------------------------

    @contextmanager
    def _lookups(self) -> Iterator[KafkaMetadataClient]:
        """The driver's metadata client, kept across micro-batches; dropped (and closed) when
        a look-up through it fails, so the next one starts with a new connection."""
        if self._metadata is None:
            self._metadata = KafkaMetadataClient(self.options)
        client = self._metadata
        try:
            yield client
        except BaseException:
            self._metadata = None
            try:
                client.close()
            except Exception:  # a broken handle: the look-up's error is the one to report
                log.debug("closing the failed metadata client failed", exc_info=True)
            raise

    def stop(self) -> None:
        """Spark's runner calls this when the query stops: close the metadata client."""
        client, self._metadata = self._metadata, None
        if client is not None:
            client.close()

    def initialOffset(self) -> dict[str, dict[str, int]]:
        with self._lookups() as client:
            tps = client.partitions()
            start = client.resolve(self.options.starting, tps, starting=True)
        if self.options.whole_batches:
            start = stream_start(self.options, start)
        return to_json_dict(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self._lookups() as client:
            self._available_now_target = client.latest(client.partitions())
        if self.options.whole_batches:
            self._available_now_boundaries = stream_target(
                self.options, {tp.topic for tp in self._available_now_target}
            )

    def _latest(self) -> PartitionOffsets:
        if self._available_now_target is not None:
            return dict(self._available_now_target)
        with self._lookups() as client:
            return client.latest(client.partitions())

    def _check_lost(self, start: PartitionOffsets, latest: PartitionOffsets) -> None:
        for tp in sorted(set(start) - set(latest)):
            report_data_loss(
                self.options, f"{tp.topic}[{tp.partition}] is gone (topic or partition deleted)"
            )
        for tp in sorted(set(start) & set(latest)):
            if latest[tp] < start[tp]:
                report_data_loss(
                    self.options,
                    f"{tp.topic}[{tp.partition}]: the log end offset {latest[tp]} is before "
                    f"the next offset to read {start[tp]} (topic re-created or truncated)",
                )

    def _delay_batch(self, start: PartitionOffsets, latest: PartitionOffsets) -> bool:
        """``minOffsetsPerTrigger`` / ``maxTriggerDelay`` (Spark's ``delayBatch``)."""
        minimum = self.options.min_offsets_per_trigger
        if minimum is None or self._available_now_target is not None:
            return False
        now_ms = int(time.time() * 1000)
        if now_ms - self._last_trigger_ms >= self.options.max_trigger_delay_ms:
            self._last_trigger_ms = now_ms
            return False
        new_records = sum(max(off - start.get(tp, 0), 0) for tp, off in latest.items())
        if new_records < minimum:
            return True
        self._last_trigger_ms = now_ms
        return False

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        start_offsets = from_json_dict(start, "start offset")
        latest = self._latest()
        self._check_lost(start_offsets, latest)
        if self.options.whole_batches:
            ends = stream_ends(self.options, start_offsets, latest, self._available_now_boundaries)
            return to_json_dict(ends)
        if isinstance(limit, ReadAllAvailable):
            return to_json_dict(latest)
        if self._delay_batch(start_offsets, latest):
            return to_json_dict({tp: off for tp, off in start_offsets.items() if tp in latest})
        if isinstance(limit, ReadMaxRows):
            # Partitions whose log moved behind the start are reset to their end (no backlog).
            effective_start = {tp: min(start_offsets.get(tp, 0), latest[tp]) for tp in latest}
            return to_json_dict(rate_limit(effective_start, latest, limit.max_rows))
        return to_json_dict(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        start_offsets = from_json_dict(start, "start offset")
        end_offsets = from_json_dict(end, "end offset")
        return _input_partitions(
            plan_ranges(
                start_offsets,
                end_offsets,
                min_partitions=self.options.min_partitions,
                max_records_per_partition=self.options.max_records_per_partition,
            )
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, no group offsets are kept."""

    # --- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, MillraceInputPartition):
            return  # Spark's stand-in for a micro-batch without a partition
        yield from read_range(self.options, partition.range, arrow_schema(self.schema))
