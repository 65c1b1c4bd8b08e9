"""Readers at micro-batch boundaries: where a read of a topic the exactly-once sink writes ends
(``docs/exactly-once.md``, "Whole micro-batches for readers").

A batch read (``spark.read.format("millrace")``, ``readAs=table`` included) ends each partition
of such a topic at the cut of a boundary (option ``endingBatch``: the newest by default, or a
batch id) instead of its end offset; a stream with ``wholeBatches=true`` starts at the newest
boundary (``startingOffsets=latest``) and advances one boundary per micro-batch. Topics no sink
writes are read as before. Reads at a boundary are read_committed: the cut counts committed
records only, and an aborted zombie write below it must not be returned.

The boundaries come from :class:`~spark_connector.exactly_once.boundaries.ProgressLog`, the
connector's wire client, with the read's TLS and SASL settings
(:mod:`spark_connector.kafka.security`); with a SASL mechanism that client does not speak
(GSSAPI, OAUTHBEARER) a read ends at the end offsets as before, with a warning.

Concurrency: driver-side functions of one planning call; nothing here is pickled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace

from spark_connector.exactly_once.boundaries import (
    Boundary,
    ProgressLog,
    boundaries_of,
)
from spark_connector.kafka.security import wire_security, wire_unsupported
from spark_connector.read.offsets import PartitionOffsets, TopicPartition
from spark_connector.read.options import OffsetKind, ReadOptions

__all__ = [
    "batch_ends",
    "boundary_options",
    "in_streaming_query",
    "stream_ends",
    "stream_start",
    "stream_target",
    "task_end",
    "uses_boundaries",
]

log = logging.getLogger("spark_connector.read.reader")

_warned_security = False


def boundary_options(options: ReadOptions) -> ReadOptions:
    """``options`` for the tasks of a read at a boundary: read_committed, up to the planned
    end (see :attr:`~spark_connector.read.options.ReadOptions.at_boundary`)."""
    if options.at_boundary:
        return options
    return replace(
        options,
        kafka_params={**options.kafka_params, "isolation.level": "read_committed"},
        at_boundary=True,
    )


def uses_boundaries(options: ReadOptions) -> bool:
    """Whether the read looks for boundaries (not with a SASL mechanism the wire client does
    not speak: see the module docstring)."""
    global _warned_security
    wanted = options.ending_batch is not None or options.whole_batches
    if not wanted:
        return False
    unsupported = wire_unsupported(options.kafka_params)
    if unsupported is not None:
        if not _warned_security and options.ending_batch == "latest":
            _warned_security = True
            log.warning(
                "millrace reader: micro-batch boundaries are read with the connector's own "
                "client, which cannot connect (%s): topics the exactly-once sink writes are "
                "read up to their end offsets",
                unsupported,
            )
        if options.ending_batch not in (None, "latest") or options.whole_batches:
            raise ValueError(
                f"options 'endingBatch' and 'wholeBatches' read with the connector's own "
                f"client, which cannot connect: {unsupported}"
            )
        return False
    return True


def _progress(options: ReadOptions) -> ProgressLog:
    return ProgressLog(
        options.bootstrap_servers,
        timeout_s=options.metadata_timeout_ms / 1000,
        client_id=options.kafka_params.get("client.id", "millrace-spark-reader"),
        security=wire_security(options.kafka_params),
    )


def batch_ends(
    options: ReadOptions,
    tps: Iterable[TopicPartition],
    start: PartitionOffsets,
    end: PartitionOffsets,
) -> tuple[PartitionOffsets, set[str]]:
    """The ending offsets of a batch read that looks for boundaries, and the topics to read
    read_committed up to exactly those ends (all of them: see below). ``end`` is the ending
    position resolved without boundaries.

    A topic no sink writes ends at its last stable offsets taken *before* the boundaries are
    looked up (:meth:`~spark_connector.exactly_once.boundaries.ProgressLog.stable_ends`): a
    sink's first batch commits its first boundary before any of its output, so offsets taken
    while there was none hold nothing of a batch, and a topic whose first boundary appears
    meanwhile is still read whole."""
    tps = list(tps)
    if not uses_boundaries(options):
        return dict(end), set()
    batch = options.ending_batch if isinstance(options.ending_batch, int) else None
    topics = {tp.topic for tp in tps}
    with _progress(options) as progress:
        stable = {topic: progress.stable_ends(topic) for topic in sorted(topics)}
        found = boundaries_of(progress, topics, batch)
    out = dict(end)
    for tp in tps:
        b = found.get(tp.topic)
        if b is None:
            lso = stable[tp.topic].get(tp.partition)
            if lso is not None:
                out[tp] = max(min(out[tp], lso), start.get(tp, 0))
            continue
        cut = b.end(tp.partition)
        if start.get(tp, 0) > cut:
            if options.starting.kind is OffsetKind.EARLIEST:
                log.warning(
                    "millrace reader: %s[%d] starts at %d (its log start), after the end of "
                    "%s (%d): nothing of it is read",
                    tp.topic,
                    tp.partition,
                    start[tp],
                    b.describe(),
                    cut,
                )
                cut = start[tp]
            else:
                raise ValueError(
                    f"option 'endingBatch': {b.describe()} ends {tp.topic}[{tp.partition}] at "
                    f"offset {cut}, before the start offset {start[tp]} (option "
                    f"'{options.starting.option}'); set endingBatch=none to read up to the end"
                )
        out[tp] = cut
    for topic, b in sorted(found.items()):
        beyond = sum(max(end.get(tp, 0) - out[tp], 0) for tp in tps if tp.topic == topic)
        log.info(
            "millrace reader: reading %s at %s%s",
            topic,
            b.describe(),
            f" ({beyond} offsets after it are not read: a batch being committed, or another "
            "writer; endingBatch=none reads them)"
            if beyond
            else "",
        )
    return out, topics


def in_streaming_query() -> bool:
    """Whether the calling task runs in a micro-batch of a streaming query (Spark's local
    property ``streaming.sql.batchId`` is set): the table side of a stream-static join, whose
    plan Spark makes once and whose tasks it runs again every micro-batch."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return context is not None and context.getLocalProperty("streaming.sql.batchId") is not None
    except Exception:  # noqa: BLE001 - no Spark task here: not a streaming one
        return False


def task_end(options: ReadOptions, topic: str, partition: int) -> int | None:
    """Where a ``readAs=table`` task in a streaming query ends ``topic[partition]`` now: the
    newest boundary's cut, or (no sink writes the topic) its last stable offset taken before
    the look-up, as :func:`batch_ends` does for the whole read; None when the partition is
    gone (the planned end stands)."""
    with _progress(options) as progress:
        stable = progress.stable_ends(topic)
        found = progress.latest(topic)
    if found is not None:
        return found.end(partition)
    return stable.get(partition)


def stream_start(options: ReadOptions, start: PartitionOffsets) -> PartitionOffsets:
    """A ``wholeBatches`` stream's initial offsets: with ``startingOffsets=latest``, the newest
    boundary of each topic a sink writes (not its end, which may be inside a batch)."""
    if options.starting.kind is not OffsetKind.LATEST or not uses_boundaries(options):
        return start
    with _progress(options) as progress:
        found = boundaries_of(progress, {tp.topic for tp in start})
    out = dict(start)
    for tp in start:
        b = found.get(tp.topic)
        if b is not None and tp.partition < b.partitions:
            out[tp] = min(out[tp], b.end(tp.partition))
    return out


def stream_ends(
    options: ReadOptions,
    start: PartitionOffsets,
    latest: PartitionOffsets,
    target: Mapping[str, Boundary] | None = None,
) -> PartitionOffsets:
    """A ``wholeBatches`` stream's next end: for each topic a sink writes, the first boundary
    past ``start`` (or ``start`` itself while there is none, or once ``target``, the
    Trigger.AvailableNow boundary, is reached); for other topics, ``latest``."""
    out = dict(latest)
    if not uses_boundaries(options):
        return out
    topics = sorted({tp.topic for tp in latest})
    with _progress(options) as progress:
        for topic in topics:
            mine = {tp.partition: off for tp, off in start.items() if tp.topic == topic}
            b, written = progress.after(topic, mine)
            if not written:
                continue
            stop = target.get(topic) if target is not None else None
            if b is not None and stop is not None and b.offset > stop.offset:
                b = None
            for tp in latest:
                if tp.topic != topic:
                    continue
                here = start.get(tp, 0)
                if b is not None and tp.partition < b.partitions:
                    out[tp] = max(here, b.end(tp.partition))
                else:
                    out[tp] = here
    return out


def stream_target(options: ReadOptions, topics: Iterable[str]) -> dict[str, Boundary]:
    """The newest boundary of each topic when Trigger.AvailableNow starts."""
    if not uses_boundaries(options):
        return {}
    with _progress(options) as progress:
        return boundaries_of(progress, topics)
