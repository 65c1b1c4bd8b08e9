"""Aggregates upserted into compacted topics, exactly once.

A streaming aggregation (counts and sums per key, per window) is a table that changes every
micro-batch. Written to a compacted topic as *upserts* (record key = the group key, value =
the aggregate row), the topic converges to that table: the log cleaner keeps the latest value
of every key, ``spark.read.format("millrace").option("readAs", "table")`` and ``millrace
table`` read it back.

Serialisation (stable, so an updated row replaces the previous one):

* key: ``to_json(struct(<key columns>))``, e.g. ``{"user":"u1","window":{"start":
  "2026-11-25T08:00:00.000Z","end":"2026-11-25T08:01:00.000Z"}}``; timestamps as ISO-8601 UTC
  with milliseconds whatever the session time zone; with ``key_columns=["key"]`` and a string
  or binary ``key`` column, that column as it is;
* value: ``to_json(struct(*))`` of the whole row, same formats; null (a tombstone) for the rows
  where ``delete_when`` (a SQL boolean expression) is true.

Update output mode: Spark's Python data sources accept only append and complete streaming
writes, so the supported one-liner is ``foreachBatch`` with :func:`upsert_to`::

    (counts.writeStream.outputMode("update")
        .foreachBatch(spark_connector.upsert_to(
            "user-counts", bootstrap_servers=bs, key_columns=["user", "window"],
            checkpoint_location=ckpt, commit_offsets_to_group="counter"))
        .option("checkpointLocation", ckpt)
        .start())

Each micro-batch is written with :func:`spark_connector.write_batch` (exactly once, the
source offsets in the same transaction). Complete mode can also be written directly:
``as_upserts(counts, [...]).writeStream.outputMode("complete").format("millrace")...``.

Window expiry (``expire_windows="window", expire_after="10 minutes"``): update mode never
emits a window again once the watermark passed it; with these options the helper writes a
tombstone for every window key it wrote whose window ended ``expire_after`` before the newest
window end seen, so the compacted topic forgets closed windows. The set of live window keys is
kept per batch next to the sink's log (``<checkpoint>/millrace-sink/windows-<N>.json``), so a
replayed batch computes the same tombstones.

Concurrency: driver-side functions, called from Spark's ``foreachBatch`` thread.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["as_upserts", "upsert_batch", "upsert_to"]

_JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'", "timeZone": "UTC"}


def _key_expr(df: Any, key_columns: Sequence[str]) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import BinaryType, StringType

    fields = {f.name: f.dataType for f in df.schema.fields}
    if list(key_columns) == ["key"] and isinstance(fields["key"], StringType | BinaryType):
        return F.col("key")
    return F.to_json(F.struct(*[F.col(c) for c in key_columns]), _JSON_OPTIONS)


def as_upserts(df: Any, key_columns: Sequence[str], *, delete_when: str | None = None) -> Any:
    """``df`` as ``key``/``value`` upsert records (see the module docstring)."""
    from pyspark.sql import functions as F

    if not key_columns:
        raise ValueError("key_columns must name at least one column of the aggregate")
    missing = [c for c in key_columns if c not in df.columns]
    if missing:
        raise ValueError(f"key_columns {missing} are not columns of {df.columns}")
    key = _key_expr(df, key_columns)
    value = F.to_json(F.struct(*[F.col(c) for c in df.columns]), _JSON_OPTIONS)
    if delete_when is not None:
        value = F.when(F.expr(delete_when), F.lit(None).cast("string")).otherwise(value)
    return df.select(key.alias("key"), value.alias("value"))


def _state_path(checkpoint_location: str, batch_id: int) -> Path:
    from spark_connector.exactly_once.settings import SINK_LOG_DIR, checkpoint_dir

    return checkpoint_dir(checkpoint_location) / SINK_LOG_DIR / f"windows-{batch_id}.json"


def _load_windows(checkpoint_location: str, batch_id: int) -> dict[str, float]:
    """Live window keys -> window end (epoch seconds) after the latest batch before
    ``batch_id``."""
    directory = _state_path(checkpoint_location, 0).parent
    if not directory.is_dir():
        return {}
    earlier = sorted(
        int(p.stem.split("-", 1)[1])
        for p in directory.glob("windows-*.json")
        if p.stem.split("-", 1)[1].isdigit() and int(p.stem.split("-", 1)[1]) < batch_id
    )
    if not earlier:
        return {}
    data = json.loads(_state_path(checkpoint_location, earlier[-1]).read_text())
    return {str(k): float(v) for k, v in data.items()}


def _save_windows(checkpoint_location: str, batch_id: int, windows: dict[str, float]) -> None:
    path = _state_path(checkpoint_location, batch_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(windows, sort_keys=True))
    os.replace(tmp, path)
    for old in path.parent.glob("windows-*.json"):
        stem = old.stem.split("-", 1)[1]
        if stem.isdigit() and int(stem) < batch_id - 100:
            old.unlink(missing_ok=True)


_INTERVAL_UNITS_S = {
    "millisecond": 0.001,
    "second": 1.0,
    "minute": 60.0,
    "hour": 3600.0,
    "day": 86400.0,
    "week": 604800.0,
}


def _seconds(duration: str) -> float:
    """``expire_after`` as a watermark delay is written (``"10 minutes"``, ``"1 hour"``) or
    as a Spark time string (``"10m"``)."""
    import re

    from spark_connector.read.options import parse_duration_ms

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]+?)s?\s*", duration.lower())
    if m is not None and m.group(2) in _INTERVAL_UNITS_S:
        return float(m.group(1)) * _INTERVAL_UNITS_S[m.group(2)]
    return parse_duration_ms(duration, "expire_after") / 1000.0


def upsert_batch(
    df: Any,
    batch_id: int,
    *,
    topic: str,
    bootstrap_servers: str,
    key_columns: Sequence[str],
    checkpoint_location: str,
    commit_offsets_to_group: str | None = None,
    delete_when: str | None = None,
    expire_windows: str | None = None,
    expire_after: str | None = None,
    options: dict[str, str] | None = None,
) -> None:
    """Upsert one micro-batch of an aggregate into ``topic``, exactly once (see the module
    docstring)."""
    from pyspark.sql import functions as F

    from spark_connector.exactly_once.foreach_batch import write_batch

    records = as_upserts(df, key_columns, delete_when=delete_when)
    if (expire_windows is None) != (expire_after is None):
        raise ValueError("expire_windows and expire_after go together")
    windows: dict[str, float] | None = None
    if expire_windows is not None and expire_after is not None:
        if expire_windows not in key_columns:
            raise ValueError(f"expire_windows={expire_windows!r} must be one of key_columns")
        rows = df.select(
            _key_expr(df, key_columns).alias("key"), F.col(expire_windows)["end"].alias("end")
        ).collect()
        windows = _load_windows(checkpoint_location, batch_id)
        for row in rows:
            if row["end"] is not None:
                windows[str(row["key"])] = _epoch(row["end"])
        horizon = max(windows.values(), default=0.0) - _seconds(expire_after)
        expired = sorted(k for k, end in windows.items() if end < horizon)
        for k in expired:
            del windows[k]
        if expired:
            tombstones = df.sparkSession.createDataFrame(
                [(k, None) for k in expired], "key string, value string"
            )
            records = records.unionByName(tombstones)
    write_batch(
        records,
        batch_id,
        bootstrap_servers=bootstrap_servers,
        checkpoint_location=checkpoint_location,
        topic=topic,
        commit_offsets_to_group=commit_offsets_to_group,
        options=options,
    )
    if windows is not None:
        _save_windows(checkpoint_location, batch_id, windows)


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


def upsert_to(topic: str, **kwargs: Any) -> Callable[[Any, int], None]:
    """A ``foreachBatch`` function upserting each micro-batch into ``topic``: the arguments
    of :func:`upsert_batch` but the batch and its id."""

    def write(df: Any, batch_id: int) -> None:
        upsert_batch(df, batch_id, topic=topic, **kwargs)

    return write
