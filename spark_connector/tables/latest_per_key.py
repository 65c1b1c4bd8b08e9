"""``readAs=table``: one partition's records reduced to the latest record of every key, the
rows of a compacted topic read as a table (Kafka's log compaction, done on the read side, so
a topic the cleaner has not reached yet reads the same).

Pure Arrow: no Spark, no Kafka client. Runs inside a reading task, on its thread.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from spark_connector.read.consumer import ARROW_BATCH_ROWS

__all__ = ["latest_per_key"]


def _latest(table: pa.Table) -> pa.Table:
    """The last row of every non-null key of ``table`` (rows in offset order), in order."""
    import pyarrow.compute as pc

    keys = table.column("key")
    index = pa.table({"key": keys, "i": pa.array(range(table.num_rows), pa.int64())})
    index = index.filter(pc.is_valid(keys))
    last = index.group_by("key", use_threads=False).aggregate([("i", "max")])["i_max"]
    return table.take(last.sort())


def latest_per_key(
    batches: Iterator[pa.RecordBatch], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """``readAs=table``: the records of one partition reduced to the latest record of every
    key, tombstoned keys (latest value null) and keyless records dropped. Keys of a compacted
    topic are partitioned by key, so one partition's reduction is the table's rows for those
    keys. The reduction runs batch by batch (Arrow group-by), so the task holds at most the
    live keys plus one batch, and only live rows leave the task."""
    import pyarrow.compute as pc

    state: pa.Table | None = None
    for batch in batches:
        chunk = pa.Table.from_batches([batch], schema)
        state = _latest(chunk if state is None else pa.concat_tables([state, chunk]))
    if state is None:
        return
    live = state.filter(pc.is_valid(state.column("value")))
    for batch in live.combine_chunks().to_batches(ARROW_BATCH_ROWS):
        yield batch
