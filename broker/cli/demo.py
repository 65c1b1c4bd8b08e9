"""``make demo`` (``python -m broker.cli.demo``): an end-to-end tour on an embedded cluster.

Steps: start a one-broker cluster in ``demo-run/cluster`` with ``millrace cluster up`` on
free loopback ports; create the topic ``demo-events`` (3 partitions); produce 100,000 JSON
events with an idempotent confluent-kafka producer (``linger.ms=5``) while showing a live
progress line; consume them all back (``assign()``, no group) with a progress line; print a
summary (records produced and consumed, rates, per-partition end offsets, three sample
records); dump the first five batches of partition 0's first segment with ``dump-log``;
then run the Spark streaming job ``jobs/stream_counts.py`` with ``spark-submit``
(``format("millrace")`` in and out, counts per user per minute, ``Trigger.AvailableNow``)
into the topic ``demo-counts`` and print the largest counts, and land the events in a Delta
Lake table with ``jobs/topic_to_delta.py`` (Delta's jars from ``make setup`` on
``spark-submit --jars``), checking the table holds every event once (``--no-spark`` skips
both jobs).

The cluster is always stopped (``millrace cluster down``), also on failure, Ctrl-C or
SIGTERM; any process still alive afterwards whose pid is in ``cluster.json`` is killed by pid.
The exit code is 0 only if every produced event was consumed back exactly once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

TOPIC = "demo-events"
PARTITIONS = 3
RECORDS = 100_000
STALL_TIMEOUT_S = 60.0


class DemoError(Exception):
    """A step of the demo failed; the message says which and why."""


# --- output ----------------------------------------------------------------------------------


class Progress:
    """A live progress line: rewritten in place on a terminal, a line a second otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self._last = 0.0
        self._width = 0

    def update(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        interval = 0.2 if self.tty else 2.0
        if not force and now - self._last < interval:
            return
        self._last = now
        if self.tty:
            pad = max(0, self._width - len(text))
            self.out.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def done(self, text: str) -> None:
        if self.tty:
            self.update(text, force=True)
            self.out.write("\n")
            self.out.flush()
        else:
            self.out.write(text + "\n")
            self.out.flush()


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


# --- cluster -----------------------------------------------------------------------------------


def free_port(taken: set[int]) -> int:
    """A currently free TCP port on 127.0.0.1 not in ``taken``."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in taken:
            taken.add(port)
            return port
    raise DemoError("no free port on 127.0.0.1")


def cluster_up(cluster_dir: Path) -> str:
    """Start a one-broker cluster on free ports (as ``millrace cluster up``); returns the
    bootstrap servers."""
    from broker.cli.cluster import ClusterError
    from broker.cli.cluster import cluster_up as start_cluster

    taken: set[int] = set()
    zk_port, base_port = free_port(taken), free_port(taken)
    try:
        info = start_cluster(cluster_dir, 1, base_port, zk_port, progress=None)
    except ClusterError as exc:
        raise DemoError(f"the cluster did not start: {exc}") from exc
    return str(info["bootstrap_servers"])


def cluster_down(cluster_dir: Path) -> None:
    """Stop the cluster (as ``millrace cluster down``: SIGTERM, then SIGKILL by pid)."""
    from broker.cli.cluster import ClusterError
    from broker.cli.cluster import cluster_down as stop_cluster

    try:
        stop_cluster(cluster_dir, progress=None)
    except (ClusterError, OSError) as exc:
        sys.stderr.write(f"demo: stopping the cluster failed: {exc}\n")


@contextlib.contextmanager
def embedded_cluster(cluster_dir: Path) -> Iterator[str]:
    """Start a fresh cluster in ``cluster_dir``, yield its bootstrap servers, always stop it."""
    if (cluster_dir / "cluster.json").exists():
        cluster_down(cluster_dir)  # a previous run that was killed before cleaning up
    shutil.rmtree(cluster_dir, ignore_errors=True)
    cluster_dir.mkdir(parents=True)
    try:
        yield cluster_up(cluster_dir)
    finally:
        say("Stopping the cluster ...")
        cluster_down(cluster_dir)


# --- steps -------------------------------------------------------------------------------------


def _quiet(conf: dict[str, Any]) -> dict[str, Any]:
    return {"log_level": 0, **conf}


def create_topic(bootstrap: str, timeout_s: float = 60.0) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker.cli.common import kafka_error_text

    admin = AdminClient(_quiet({"bootstrap.servers": bootstrap}))
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
    from confluent_kafka import KafkaError, Message, Producer

    producer = Producer(
        _quiet(
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
        _quiet(
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
                result.records += 1
                last_progress = now
                part, offset, value = msg.partition() or 0, msg.offset() or 0, msg.value()
                try:
                    event_id = int(json.loads(value or b"null")["id"])
                except (ValueError, TypeError, KeyError):
                    result.bad_json += 1
                    event_id = -1
                if 0 <= event_id < expected:
                    if seen[event_id]:
                        result.duplicates += 1
                    else:
                        seen[event_id] = 1
                        result.unique_ids += 1
                if part not in sample_partitions and len(result.samples) < 3:
                    sample_partitions.add(part)
                    key = (msg.key() or b"").decode(errors="replace")
                    text = (value or b"").decode(errors="replace")
                    result.samples.append(f"partition {part} offset {offset} key {key} {text}")
                    result.samples.sort()
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


# --- main --------------------------------------------------------------------------------------


def _raise_interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


COUNTS_TOPIC = "demo-counts"


def spark_submit(
    script: str, job_args: list[str], run_dir: Path, log_name: str, submit_args: list[str]
) -> tuple[int, str]:
    """``spark-submit jobs/<script>`` in local mode with a progress line; returns its exit
    code and its output (also kept in ``run_dir/<log_name>``)."""
    root = Path(__file__).resolve().parents[2]
    submit = Path(sys.executable).with_name("spark-submit")
    cmd = [
        str(submit) if submit.exists() else "spark-submit",
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        *submit_args,
        str(root / "jobs" / script),
        *job_args,
    ]
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    log_path = run_dir / log_name
    say(f"$ spark-submit jobs/{script} {' '.join(job_args[2:])}   (Spark output in {log_path})")
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root)
        started = time.monotonic()
        while proc.poll() is None:
            _progress(f"  job running ... {time.monotonic() - started:4.0f}s")
            time.sleep(1)
    _progress("")
    sys.stdout.write("\r")
    output = log_path.read_text(errors="replace")
    if proc.returncode != 0:
        say(f"  spark-submit failed (exit {proc.returncode}):\n{output[-2000:]}")
    return proc.returncode, output


def run_stream_job(bootstrap: str, run_dir: Path) -> int:
    """``spark-submit jobs/stream_counts.py`` over the demo topic; returns its exit code."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(_quiet({"bootstrap.servers": bootstrap}))
    admin.create_topics([NewTopic(COUNTS_TOPIC, num_partitions=1, replication_factor=1)])[
        COUNTS_TOPIC
    ].result()
    code, _output = spark_submit(
        "stream_counts.py",
        [
            "--bootstrap",
            bootstrap,
            "--input",
            TOPIC,
            "--output",
            COUNTS_TOPIC,
            "--checkpoint",
            str(run_dir / "stream-counts-checkpoint"),
            "--window",
            "1 minute",
            "--available-now",
        ],
        run_dir,
        "spark-submit.log",
        [],
    )
    return code


DELTA_ROWS = re.compile(r"topic_to_delta: the Delta table holds (\d+) rows")


def run_delta_job(bootstrap: str, run_dir: Path) -> int | None:
    """``spark-submit jobs/topic_to_delta.py``: the demo topic into a Delta table (Delta
    Lake's jars from ``make setup``); returns the table's row count, None on failure."""
    from spark_connector.session import MissingJarsError, submit_args

    try:
        delta_args = submit_args(delta=True)
    except MissingJarsError as exc:
        say(f"  {exc}")
        return None
    table = run_dir / "delta" / TOPIC
    code, output = spark_submit(
        "topic_to_delta.py",
        [
            "--bootstrap",
            bootstrap,
            "--topic",
            TOPIC,
            "--table",
            str(table),
            "--checkpoint",
            str(run_dir / "topic-to-delta-checkpoint"),
            "--decode",
            "--available-now",
        ],
        run_dir,
        "spark-submit-delta.log",
        delta_args,
    )
    match = DELTA_ROWS.search(output)
    if code != 0 or match is None:
        return None
    rows = int(match.group(1))
    say(f"  Delta table {table}: {rows:,} rows (one per event, each micro-batch written once)")
    return rows


def print_top_counts(bootstrap: str, limit: int = 5) -> int:
    """Read ``demo-counts`` (latest value per key) and print the largest counts."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        _quiet(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "millrace-demo",
                "enable.auto.commit": False,
            }
        )
    )
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(COUNTS_TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(COUNTS_TOPIC, 0, 0)])
        latest: dict[bytes, dict[str, Any]] = {}
        read = 0
        deadline = time.monotonic() + 60
        while read < high and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                if msg.error() is None:
                    read += 1
                    latest[msg.key() or b""] = json.loads(msg.value() or b"{}")
    finally:
        consumer.close()
    rows = sorted(latest.values(), key=lambda r: -int(r.get("count", 0)))
    say(f"  {COUNTS_TOPIC}: {read:,} records, {len(latest):,} (user, minute) counts; the largest:")
    for row in rows[:limit]:
        say(f"    {row.get('key')}  {row.get('window_start')}  count={row.get('count')}")
    return sum(int(r.get("count", 0)) for r in latest.values())


def _progress(text: str) -> None:
    sys.stdout.write(f"\r{text:<70}")
    sys.stdout.flush()


def run_demo(run_dir: Path, records: int, spark: bool = True) -> int:
    cluster_dir = (run_dir / "cluster").resolve()
    say(f"Millrace demo: 1-broker cluster in {cluster_dir}")
    with embedded_cluster(cluster_dir) as bootstrap:
        say(f"Cluster up: bootstrap servers {bootstrap}")
        create_topic(bootstrap)
        say(f"Created topic {TOPIC} with {PARTITIONS} partitions")
        say(f"Producing {records:,} JSON events (idempotent, linger.ms=5) ...")
        produced = produce(bootstrap, records)
        say("Consuming them back ...")
        consumed = consume(bootstrap, records)

        lost = records - consumed.unique_ids
        say()
        say("Summary")
        say(
            f"  records produced : {produced.acked:,} acknowledged, {produced.failed:,} failed"
            f" ({produced.acked / max(produced.seconds, 1e-9):,.0f} rec/s, "
            f"{produced.bytes / 2**20 / max(produced.seconds, 1e-9):.2f} MB/s)"
        )
        say(
            f"  records consumed : {consumed.records:,} "
            f"({consumed.records / max(consumed.seconds, 1e-9):,.0f} rec/s), "
            f"{consumed.unique_ids:,} distinct events, {consumed.duplicates:,} duplicates, "
            f"{lost:,} missing"
        )
        offsets = ", ".join(f"{p}: {o:,}" for p, o in sorted(consumed.end_offsets.items()))
        say(f"  end offsets      : {offsets} (total {sum(consumed.end_offsets.values()):,})")
        say("  sample records   :")
        for sample in consumed.samples:
            say(f"    {sample}")
        for err in produced.errors:
            say(f"  delivery error   : {err}")
        say()
        dump_first_batches(cluster_dir)
        say()
        ok = (
            produced.failed == 0
            and produced.acked == records
            and lost == 0
            and consumed.duplicates == 0
            and consumed.bad_json == 0
        )
        say(
            "OK: every event was consumed back exactly once."
            if ok
            else "FAILED: events were lost, duplicated or not acknowledged."
        )
        if ok and spark:
            say()
            say('Spark: counting events per user per minute with format("millrace") ...')
            if run_stream_job(bootstrap, run_dir.resolve()) != 0:
                return 1
            total = print_top_counts(bootstrap)
            ok = total == records
            say(
                f"OK: the streaming job counted all {total:,} events."
                if ok
                else f"FAILED: the streaming job counted {total:,} of {records:,} events."
            )
            say()
            say(f"Delta Lake: landing {TOPIC} in a Delta table (txnAppId/txnVersion) ...")
            rows = run_delta_job(bootstrap, run_dir.resolve())
            landed = rows == records
            ok = ok and landed
            say(
                f"OK: the Delta table holds all {records:,} events."
                if landed
                else f"FAILED: the Delta table holds {rows} rows, expected {records:,}."
            )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.cli.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", default="demo-run", help="working directory (demo-run)")
    parser.add_argument("--records", type=int, default=RECORDS, help="events to produce")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark streaming job")
    args = parser.parse_args(argv)
    if args.records <= 0:
        parser.error("--records must be at least 1")
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_demo(Path(args.run_dir), args.records, spark=not args.no_spark)
    except KeyboardInterrupt:
        sys.stderr.write("\ndemo: interrupted; the cluster was stopped\n")
        return 130
    except DemoError as exc:
        sys.stderr.write(f"demo: {exc}\n")
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


if __name__ == "__main__":
    sys.exit(main())
