"""``millrace table``: a compacted topic read as a table, one row per live key.

Reads every partition of ``--topic`` from its beginning to its end (the last stable offset with
the default ``--isolation-level read_committed``, so open and aborted transactions are not
shown; for a topic the exactly-once Spark sink writes, the cut of its newest committed
micro-batch, or of ``--batch N``, so the table is one that existed after a whole batch:
``docs/exactly-once.md``; ``--no-boundary`` reads to the last stable offset), keeps the latest record of every key and drops keys whose latest record is a
tombstone (a null value), as the log cleaner eventually will. Records without a key are not
rows of a table and are skipped. The same view as ``spark.read.format("millrace")
.option("readAs", "table")``.

Output: a table sorted by key (``KEY VALUE PARTITION OFFSET TIMESTAMP``; keys and values shown
as UTF-8 text, undecodable bytes escaped) or, with ``--format json``, one JSON object per row
(``key``, ``value``, ``partition``, ``offset``, ``timestamp``). A progress line on stderr while
a large topic is read, when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.cli.client_settings import client_config, wire_security
from broker.cli.common import (
    CliError,
    Column,
    add_connection_options,
    bootstrap_servers,
    format_table,
    guard,
    positive_int,
    silence_stdout,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message

    from spark_connector.exactly_once.boundaries import Boundary

_PROG = "millrace table"
_POLL_S = 1.0


@dataclass(frozen=True, slots=True)
class Row:
    key: bytes
    value: bytes
    partition: int
    offset: int
    timestamp: int


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "table",
        help="show a compacted topic as a table: the latest value of every live key",
        description=(__doc__ or "").split("\n\n")[0],
    )
    add_connection_options(p)
    p.add_argument("--topic", required=True, help="the (compacted) topic to show")
    p.add_argument(
        "--format", choices=("table", "json"), default="table", help="output (default table)"
    )
    p.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="default read_committed: committed transactions only",
    )
    boundary = p.add_mutually_exclusive_group()
    boundary.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="a topic the exactly-once sink writes: the table after its micro-batch N (default: "
        "after the newest committed one)",
    )
    boundary.add_argument(
        "--no-boundary",
        action="store_true",
        help="read up to the last stable offset, not to a micro-batch boundary",
    )
    p.add_argument("--max-rows", type=positive_int, help="print at most this many rows")
    p.add_argument(
        "--timeout", type=float, default=60.0, metavar="SECONDS", help="give up after (default 60)"
    )
    p.set_defaults(func=run_table, _parser=p)


def text(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


def latest_rows(args: argparse.Namespace) -> list[Row]:
    """Read the topic to its end; the latest live record per key, sorted by key."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        client_config(
            args,
            {
                "group.id": "millrace-table",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": args.isolation_level,
            },
        )
    )
    try:
        ends = _end_offsets(consumer, args)
        latest: dict[bytes, Row | None] = {}
        if ends:
            consumer.assign([TopicPartition(args.topic, p, 0) for p in ends])
        pending = set(ends)
        seen = 0
        deadline = time.monotonic() + args.timeout
        progress = sys.stderr.isatty()
        while pending:
            msgs = consumer.consume(10_000, _POLL_S)
            for msg in msgs:
                seen += _take(msg, args.topic, ends, pending, latest)
            if msgs:
                deadline = time.monotonic() + args.timeout
            elif time.monotonic() > deadline:
                raise CliError(f"reading '{args.topic}': no progress for {args.timeout:g}s")
            if progress:
                sys.stderr.write(f"\r{seen:,} records read, {len(latest):,} keys")
        if progress:
            sys.stderr.write("\n")
        return sorted((r for r in latest.values() if r is not None), key=lambda r: r.key)
    finally:
        consumer.close()


def _end_offsets(consumer: Consumer, args: argparse.Namespace) -> dict[int, int]:
    """The offset to read each non-empty partition to: its high watermark, or the
    ``boundary``'s (the partitions with nothing to read left out)."""
    from confluent_kafka import TopicPartition

    md = consumer.list_topics(args.topic, timeout=args.timeout)
    topic = md.topics.get(args.topic)
    if topic is None or topic.error is not None or not topic.partitions:
        reason = topic.error if topic is not None and topic.error is not None else "not found"
        raise CliError(f"topic '{args.topic}': {reason}")
    ends: dict[int, int] = {}
    stable, cut = boundary(args)
    for p in sorted(topic.partitions):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(args.topic, p), timeout=args.timeout
        )
        if cut is not None:
            high = cut.end(p)
        elif p in stable:
            high = min(high, stable[p])
        if high > low:
            ends[p] = high
    return ends


def _take(
    msg: Message,
    topic: str,
    ends: dict[int, int],
    pending: set[int],
    latest: dict[bytes, Row | None],
) -> int:
    """Keep the record as its key's latest (None: a tombstone) and take its partition off
    ``pending`` at the end; return 1 for a record read, 0 for an end of partition."""
    from confluent_kafka import KafkaError

    err = msg.error()
    if err is not None:
        if err.code() == KafkaError._PARTITION_EOF:
            pending.discard(msg.partition())
            return 0
        raise CliError(f"reading '{topic}': {err}")
    key, value = msg.key(), msg.value()
    partition, offset = int(msg.partition() or 0), int(msg.offset() or 0)
    if offset >= ends.get(partition, 0):  # past the end (a boundary's cut)
        pending.discard(partition)
        return 0
    if key is not None:
        latest[key] = (
            None if value is None else Row(key, value, partition, offset, msg.timestamp()[1])
        )
    if offset + 1 >= ends.get(partition, 0):
        pending.discard(partition)
    return 1


def boundary(args: argparse.Namespace) -> tuple[dict[int, int], Boundary | None]:
    """The micro-batch boundary to read the topic at (``docs/exactly-once.md``): None when
    the topic is not written by the exactly-once sink, or with ``--no-boundary``; and the
    topic's last stable offsets taken before the look-up (partition -> offset; empty when
    not looked up), where a topic without a boundary ends (a sink's first batch commits its
    first boundary before any of its output, so they hold nothing of a batch)."""
    from spark_connector.exactly_once.boundaries import BoundaryError, ProgressLog

    asked = args.batch
    if args.no_boundary:
        return {}, None
    if args.isolation_level != "read_committed":
        if asked is not None:
            raise CliError("--batch reads committed micro-batches: not with read_uncommitted")
        return {}, None
    if asked is not None and asked < 0:
        raise CliError(f"--batch must be >= 0, got {asked}")
    security = wire_security(args)
    try:
        with ProgressLog(
            bootstrap_servers(args), timeout_s=args.timeout, security=security
        ) as progress:
            stable = progress.stable_ends(args.topic)
            found = (
                progress.latest(args.topic)
                if asked is None
                else progress.at_batch(args.topic, asked)
            )
    except BoundaryError as exc:
        raise CliError(str(exc).replace("option 'endingBatch'", "--batch")) from exc
    except (ConnectionError, RuntimeError) as exc:
        raise CliError(f"reading the micro-batch boundaries of '{args.topic}': {exc}") from exc
    if found is not None and sys.stderr.isatty():
        sys.stderr.write(f"{args.topic} after {found.describe()}\n")
    return stable, found


@guard(_PROG)
def run_table(args: argparse.Namespace) -> int:
    rows = latest_rows(args)
    if args.max_rows is not None:
        rows = rows[: args.max_rows]
    out: list[str]
    if args.format == "json":
        out = [
            json.dumps(
                {
                    "key": text(r.key),
                    "value": text(r.value),
                    "partition": r.partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp,
                },
                sort_keys=False,
            )
            for r in rows
        ]
    else:
        out = format_table(
            [
                Column("KEY", fit=True),
                Column("VALUE", fit=True),
                Column("PARTITION", 9, align=">"),
                Column("OFFSET", 10, align=">"),
                Column("TIMESTAMP", 13, align=">"),
            ],
            [(text(r.key), text(r.value), r.partition, r.offset, r.timestamp) for r in rows],
        )
    try:
        for line in out:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
    return 0
