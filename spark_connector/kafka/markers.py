"""How a producer's transaction ended on one partition, read from the partition itself: the
first transaction marker (control batch) of that producer id after its data.

The coordinator forgets a transaction's outcome once its id starts a new one, but every
partition of the transaction keeps its COMMIT or ABORT marker. The exactly-once sink asks
this only when the coordinator cannot tell any more (a recorded transaction whose id has
since been re-initialised): the markers are the ground truth.

Reads with read_uncommitted from the offset of the transaction's first record, through the
connector's :class:`~spark_connector.kafka.fetcher.PartitionFetcher`, up to the high
watermark. Concurrency: one call per thread; the fetcher is closed before returning.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from spark_connector.kafka.fetcher import NONE, RETRIABLE, PartitionFetcher
from spark_connector.records.decoder import is_abort_marker, iter_batches, records_section

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = ["ABORT", "COMMIT", "marker_outcome"]

COMMIT, ABORT = "commit", "abort"


def marker_outcome(
    bootstrap: str,
    topic: str,
    partition: int,
    start: int,
    producer_id: int,
    *,
    timeout_s: float = 30.0,
    security: ClientSecurity | None = None,
) -> str | None:
    """``"commit"`` or ``"abort"``: the first marker of ``producer_id`` at or after offset
    ``start`` of ``topic[partition]``; None when there is none (yet) up to the high
    watermark. Raises ``RuntimeError`` when the partition cannot be read in ``timeout_s``.
    ``security``: TLS and SASL of the connections."""
    deadline = time.monotonic() + timeout_s
    with PartitionFetcher(
        bootstrap, topic, partition, read_committed=False, security=security
    ) as fetcher:
        low, high = fetcher.watermarks(deadline)
        position = max(start, low)
        while position < high:
            result = fetcher.fetch(position)
            if result.error_code in RETRIABLE or result.error_code < 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{topic}[{partition}]: cannot read the markers of producer "
                        f"{producer_id}: error {result.error_code}"
                    )
                time.sleep(0.1)
                continue
            if result.error_code != NONE:
                raise RuntimeError(
                    f"{topic}[{partition}]: cannot read the markers of producer {producer_id}: "
                    f"error {result.error_code}"
                )
            if result.records is None:
                return None
            moved = position
            for batch in iter_batches(result.records):
                if batch.next_offset <= position:
                    continue
                moved = batch.next_offset
                if batch.control and batch.producer_id == producer_id:
                    records = records_section(result.records, batch)
                    return ABORT if is_abort_marker(records) else COMMIT
            if moved == position:
                return None
            position = moved
    return None
