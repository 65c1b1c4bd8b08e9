"""Every option name of the ``millrace`` format, for reads and for writes, and the warning a
misspelled one gets.

Spark's own Kafka connector ignores an option it does not know (``startingOffset`` for
``startingOffsets`` reads from the default position without a word); this format ignores it
too, so a job moves over unchanged, but logs once per process which option was ignored and the
closest known name. ``kafka.*`` options are the client's and are never flagged here.

Concurrency: the set of names already warned about is guarded by a lock.
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Iterable, Mapping

__all__ = ["READ_OPTIONS", "WRITE_OPTIONS", "warn_unknown_options"]

log = logging.getLogger("spark_connector.read.options")

READ_OPTIONS = frozenset(
    {
        "subscribe",
        "subscribePattern",
        "assign",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "endingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "startingOffsetsGroupFallback",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "minPartitions",
        "maxRecordsPerPartition",
        "failOnDataLoss",
        "includeHeaders",
        "kafkaConsumer.pollTimeoutMs",
        "groupIdPrefix",
        "readAs",
        "fetcher",
        "localReads",
        "endingBatch",
        "wholeBatches",
        # Spark's Kafka source options this format accepts and has no use for
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
    }
)

WRITE_OPTIONS = frozenset(
    {
        "topic",
        "producer",
        "includeHeaders",
        "deliveryGuarantee",
        "commitOffsetsToGroup",
        "transactionalIdPrefix",
        "checkpointLocation",
        "batchId",
        "sinkName",
        "acceptPartitionCountChange",
        "batchBoundaries",
        "millrace.run",
    }
)

# Options Spark itself adds or passes to every data source.
_SPARK_OPTIONS = frozenset({"path", "paths", "queryName", "checkpointLocation"})

_warned: set[str] = set()
_lock = threading.Lock()


def warn_unknown_options(options: Mapping[str, str], known: Iterable[str], what: str) -> list[str]:
    """Log (once per process and name) every option of ``options`` that is neither a
    ``kafka.*`` option nor in ``known``, naming the closest known option; returns them."""
    names = {n.lower(): n for n in (*known, *_SPARK_OPTIONS)}
    unknown = []
    for raw in options:
        key = str(raw)
        lower = key.lower()
        if lower.startswith("kafka.") or lower in names:
            continue
        unknown.append(key)
        with _lock:
            if lower in _warned:
                continue
            _warned.add(lower)
        close = difflib.get_close_matches(lower, list(names), n=1, cutoff=0.6)
        hint = f"; did you mean '{names[close[0]]}'?" if close else ""
        log.warning(
            "option '%s' is not an option of format('millrace') %s and is ignored%s",
            key,
            what,
            hint,
        )
    return unknown
