"""``write_batch``: exactly-once writes from a ``foreachBatch`` function, any number of sinks
per batch.

Each call is one sink, named ``name`` (default: its topic), with its own log in
``<checkpoint_location>/millrace-sink/sinks/<name>/`` and its own transactional ids, so a
batch written to several topics is exactly once in each (a replay skips or finishes each
sink's batch from that sink's log). The calls of one driver process share one run name (the
zombie-driver fence of ``docs/exactly-once.md``, step 3.1).

The source offsets go to ``commit_offsets_to_group`` with the sink that is given it: give it
to the last ``write_batch`` of the function, so they become visible after every sink's output.
A warning names the case where a sink writes after the offsets were committed.

Concurrency: called from Spark's ``foreachBatch`` thread on the driver; the registry of the
batches this process wrote is guarded by a lock.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from spark_connector.exactly_once.settings import RUN_OPTION
from spark_connector.exactly_once.sink_log import new_run_name

__all__ = ["write_batch"]

log = logging.getLogger(__name__)

_RUN = new_run_name()
"""This driver process's run (every write_batch of the process belongs to it)."""

_KEEP = 256
_offsets_sink: OrderedDict[tuple[str, int], str] = OrderedDict()
_lock = threading.Lock()


def _note_offsets(checkpoint: str, batch_id: int, name: str, group: str | None) -> None:
    """Warn when a sink writes batch ``batch_id`` after another committed its offsets."""
    key = (checkpoint, batch_id)
    with _lock:
        earlier = _offsets_sink.get(key)
        if group is not None:
            _offsets_sink[key] = name
            while len(_offsets_sink) > _KEEP:
                _offsets_sink.popitem(last=False)
    if earlier is not None and earlier != name:
        log.warning(
            "write_batch: batch %d's source offsets were committed with sink '%s' before sink "
            "'%s' wrote: pass commit_offsets_to_group only to the last write_batch of the "
            "function, so the offsets never run ahead of any sink's output",
            batch_id,
            earlier,
            name,
        )


def write_batch(
    df: Any,
    batch_id: int,
    *,
    bootstrap_servers: str,
    checkpoint_location: str,
    topic: str | None = None,
    name: str | None = None,
    commit_offsets_to_group: str | None = None,
    options: dict[str, str] | None = None,
) -> None:
    """Write ``df`` to Kafka exactly once from a ``foreachBatch`` function.

    ``batch_id`` is the one Spark passes to the function: a batch this sink wrote before (a
    replay after a failure) is skipped, as Delta's ``txnAppId``/``txnVersion`` skip one. All of
    ``df`` becomes visible or none of it. ``checkpoint_location`` is the query's checkpoint
    location; ``name`` tells the sinks of one function apart (default: ``topic``; needed when
    the rows name their topics in a ``topic`` column, or when two calls write one topic).
    With ``commit_offsets_to_group`` the batch's source offsets (Spark's
    ``<checkpoint_location>/offsets/<batch_id>``) are committed to that consumer group once
    this sink's output is visible: pass it to the last call. ``options`` are more sink options
    (``kafka.*`` producer settings)::

        def fan_out(batch_df, batch_id):
            for topic in ("orders-eu", "orders-us"):
                spark_connector.write_batch(
                    batch_df.where(f"region = '{topic[-2:]}'").selectExpr("key", "value"),
                    batch_id, bootstrap_servers=bs, topic=topic, checkpoint_location=ckpt,
                    commit_offsets_to_group="router" if topic == "orders-us" else None)

        stream.writeStream.foreachBatch(fan_out).option("checkpointLocation", ckpt).start()
    """
    sink = name or topic or ""
    _note_offsets(checkpoint_location, batch_id, sink, commit_offsets_to_group)
    writer = (
        df.write.format("millrace")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("deliveryGuarantee", "exactly-once")
        .option("batchId", str(batch_id))
        .option("checkpointLocation", checkpoint_location)
        .option(RUN_OPTION, _RUN)
    )
    if topic is not None:
        writer = writer.option("topic", topic)
    if name is not None:
        writer = writer.option("sinkName", name)
    if commit_offsets_to_group is not None:
        writer = writer.option("commitOffsetsToGroup", commit_offsets_to_group)
    for key, value in (options or {}).items():
        writer = writer.option(key, value)
    writer.mode("append").save()
