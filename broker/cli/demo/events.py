"""The demo's events: the topic, 100,000 JSON events produced and consumed back (each once),
and the first batches of a segment shown with ``dump-log``.

Concurrency: the demo's one thread (client callbacks run in it too).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.cli.demo.cluster import DemoError
from broker.cli.demo.output import Progress, say

if TYPE_CHECKING:
    from confluent_kafka import Message

TOPIC = "demo-events"
PARTITIONS = 3
RECORDS = 100_000
STALL_TIMEOUT_S = 60.0


def quiet(conf: dict[str, Any]) -> dict[str, Any]:
    return {"log_level": 0, **conf}


def create_topic(bootstrap: str, timeout_s: float = 60.0) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker.cli.common import kafka_error_text

    admin = AdminClient(quiet({"bootstrap.servers": bootstrap}))
    futures = admin.create_topics(
        [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=1)],
        request_timeout=30,
        operation_timeout=30,
    )
    try:
        futures[TOPIC].result()
    except KafkaException as exc:
        raise DemoError(f"cannot create topic {TOPIC}: {kafka_error_text(exc)}") from exc
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=TOPIC, timeout=10)
        topic = md.topics.get(TOPIC)
        if (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == PARTITIONS
            and all(p.leader >= 0 for p in topic.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise DemoError(f"topic {TOPIC} has no leader for every partition after {timeout_s:.0f}s")


EVENT_TYPES = ("page_view", "click", "add_to_cart", "purchase", "search")


def make_event(i: int, rng: random.Random) -> tuple[bytes, bytes]:
    """``(key, JSON value)`` of event ``i``; the key is the user, so a user's events stay
    in order on one partition."""
    user = f"user-{rng.randrange(1000):04d}"
    now = time.time()
    event = {
        "id": i,
        "key": user,
        "type": rng.choice(EVENT_TYPES),
        "amount": round(rng.uniform(1, 500), 2),
        "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
    }
    return user.encode(), json.dumps(event, separators=(",", ":")).encode()


@dataclass(slots=True)
class ProduceResult:
    acked: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    bytes: int = 0


def produce(bootstrap: str, count: int) -> ProduceResult:
    from confluent_kafka import KafkaError, Producer

    producer = Producer(
        quiet(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
    )
    result = ProduceResult()
    progress = Progress(sys.stdout)
    rng = random.Random(42)

    def on_delivery(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            result.acked += 1
        else:
            result.failed += 1
            if len(result.errors) < 3:
                result.errors.append(f"{err.str()} ({err.name()})")

    start = time.monotonic()

    def line() -> str:
        elapsed = max(time.monotonic() - start, 1e-9)
        return (
            f"  produced {result.acked:>7,} / {count:,} records  "
            f"{result.acked / elapsed:>9,.0f} rec/s"
        )

    for i in range(count):
        key, value = make_event(i, rng)
        result.bytes += len(value)
        while True:
            try:
                producer.produce(TOPIC, value, key, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 500 == 499:
            producer.poll(0)
            progress.update(line())
    last_progress = time.monotonic()
    last_acked = result.acked
    while producer.flush(0.25):
        progress.update(line())
        if result.acked + result.failed != last_acked:
            last_acked = result.acked + result.failed
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
            raise DemoError(
                f"producer made no progress for {STALL_TIMEOUT_S:.0f}s "
                f"({result.acked} of {count} acknowledged)"
            )
    result.seconds = time.monotonic() - start
    progress.done(line())
    return result


@dataclass(slots=True)
class ConsumeResult:
    records: int = 0
    unique_ids: int = 0
    duplicates: int = 0
    bad_json: int = 0
    seconds: float = 0.0
    end_offsets: dict[int, int] = field(default_factory=dict)
    samples: list[str] = field(default_factory=list)


def consume(bootstrap: str, expected: int) -> ConsumeResult:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        quiet(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"millrace-demo-{os.getpid()}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
    )
    result = ConsumeResult()
    progress = Progress(sys.stdout)
    seen = bytearray(expected)
    try:
        for p in range(PARTITIONS):
            _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15)
            result.end_offsets[p] = high
        pending = {p for p, high in result.end_offsets.items() if high > 0}
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in sorted(pending)])
        start = time.monotonic()
        last_progress = start
        sample_partitions: set[int] = set()

        def line() -> str:
            elapsed = max(time.monotonic() - start, 1e-9)
            return (
                f"  consumed {result.records:>7,} / {expected:,} records  "
                f"{result.records / elapsed:>9,.0f} rec/s"
            )

        while pending:
            messages = consumer.consume(1000, timeout=0.5)
            now = time.monotonic()
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.fatal() or not err.retriable():
                        raise DemoError(f"consumer error: {err.str()} ({err.name()})")
                    continue
                last_progress = now
                part, offset = msg.partition() or 0, msg.offset() or 0
                _count(result, msg, seen)
                if part not in sample_partitions and len(result.samples) < 3:
                    sample_partitions.add(part)
                    _sample(result, msg)
                if offset + 1 >= result.end_offsets[part]:
                    pending.discard(part)
            progress.update(line())
            if now - last_progress > STALL_TIMEOUT_S:
                raise DemoError(
                    f"consumer made no progress for {STALL_TIMEOUT_S:.0f}s "
                    f"({result.records} records read)"
                )
        result.seconds = time.monotonic() - start
        progress.done(line())
    finally:
        consumer.close()
    return result


def first_segment(cluster_dir: Path, partition: int) -> Path | None:
    """The oldest ``.log`` segment of ``demo-events-<partition>`` on broker 1."""
    from broker.cli.cluster import ClusterError, load_cluster

    try:
        info = load_cluster(cluster_dir)
    except ClusterError:
        return None
    for broker in info.get("brokers", []):
        for log_dir in broker.get("log_dirs", []):
            base = Path(log_dir)
            if not base.is_absolute():
                base = cluster_dir / base
            segments = sorted((base / f"{TOPIC}-{partition}").glob("*.log"))
            if segments:
                return segments[0]
    matches = sorted(cluster_dir.rglob(f"{TOPIC}-{partition}/*.log"))
    return matches[0] if matches else None


def dump_first_batches(cluster_dir: Path, batches: int = 5) -> None:
    from broker.cli.dump_log import DumpOptions, dump_file

    segment = first_segment(cluster_dir, 0)
    if segment is None:
        say(f"(no segment file found for {TOPIC}-0 under {cluster_dir})")
        return
    say(f"$ millrace dump-log --files {segment} --max-batches {batches}")
    for line in dump_file(segment, DumpOptions(max_batches=batches)):
        say(line)


def _count(result: ConsumeResult, msg: Message, seen: bytearray) -> None:
    """Count the record, and its event id as new or a duplicate (or its value as bad JSON)."""
    result.records += 1
    try:
        event_id = int(json.loads(msg.value() or b"null")["id"])
    except (ValueError, TypeError, KeyError):
        result.bad_json += 1
        event_id = -1
    if 0 <= event_id < len(seen):
        if seen[event_id]:
            result.duplicates += 1
        else:
            seen[event_id] = 1
            result.unique_ids += 1


def _sample(result: ConsumeResult, msg: Message) -> None:
    """Keep the record as a sample (the samples sorted)."""
    key = (msg.key() or b"").decode(errors="replace")
    text = (msg.value() or b"").decode(errors="replace")
    result.samples.append(
        f"partition {msg.partition() or 0} offset {msg.offset() or 0} key {key} {text}"
    )
    result.samples.sort()
