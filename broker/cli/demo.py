"""``make demo`` (``python -m broker.cli.demo``): an end-to-end tour on an embedded cluster.

Steps: start a one-broker cluster in ``demo-run/cluster`` with ``millrace cluster up`` on
free loopback ports; create the topic ``demo-events`` (3 partitions); produce 100,000 JSON
events with an idempotent confluent-kafka producer (``linger.ms=5``) while showing a live
progress line; consume them all back (``assign()``, no group) with a progress line; print a
summary (records produced and consumed, rates, per-partition end offsets, three sample
records); dump the first five batches of partition 0's first segment with ``dump-log``.

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
CLUSTER_UP_TIMEOUT_S = 180.0
CLUSTER_DOWN_TIMEOUT_S = 120.0
STALL_TIMEOUT_S = 60.0
_CLI = [sys.executable, "-m", "broker.cli.main"]


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


def _run_cli(args: list[str], log_dir: Path, name: str, timeout_s: float) -> tuple[int, str, str]:
    """Run ``millrace ARGS`` with output to files (background children inherit them, so
    pipes could keep us waiting), return (rc, stdout, stderr)."""
    out_path = log_dir / f"{name}.out"
    err_path = log_dir / f"{name}.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen([*_CLI, *args], stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = -1
        except KeyboardInterrupt:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            raise
    return rc, out_path.read_text(errors="replace"), err_path.read_text(errors="replace")


def _cluster_json(cluster_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((cluster_dir / "cluster.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pids(info: dict[str, Any]) -> list[int]:
    pids = [info.get("zookeeper_pid")] + [b.get("pid") for b in info.get("brokers", [])]
    return [p for p in pids if isinstance(p, int) and p > 1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in ("Z", "X")


def _pids_mentioning(text: str) -> list[int]:
    """Pids of processes whose command line names ``text`` (our private cluster dir)."""
    found: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def cluster_up(cluster_dir: Path) -> str:
    """``millrace cluster up`` with one broker on free ports; returns the bootstrap servers."""
    taken: set[int] = set()
    zk_port, base_port = free_port(taken), free_port(taken)
    rc, stdout, stderr = _run_cli(
        [
            "cluster",
            "up",
            "--dir",
            str(cluster_dir),
            "--brokers",
            "1",
            "--base-port",
            str(base_port),
            "--zk-port",
            str(zk_port),
        ],
        cluster_dir.parent,
        "cluster-up",
        CLUSTER_UP_TIMEOUT_S,
    )
    if rc != 0:
        tail = (stderr.strip() or stdout.strip())[-2000:]
        raise DemoError(f"`millrace cluster up` failed (exit {rc}):\n{tail}")
    info = _cluster_json(cluster_dir)
    bootstrap = info.get("bootstrap_servers")
    if not isinstance(bootstrap, str) or not bootstrap:
        lines = stdout.strip().splitlines()
        if not lines:
            raise DemoError("`millrace cluster up` printed no bootstrap servers")
        bootstrap = lines[-1].strip()
    return bootstrap


def cluster_down(cluster_dir: Path) -> None:
    """``millrace cluster down``, then kill by pid whatever of ours is still alive."""
    info = _cluster_json(cluster_dir)
    if cluster_dir.is_dir():
        try:
            rc, _out, err = _run_cli(
                ["cluster", "down", "--dir", str(cluster_dir)],
                cluster_dir.parent,
                "cluster-down",
                CLUSTER_DOWN_TIMEOUT_S,
            )
            if rc != 0:
                sys.stderr.write(f"demo: `millrace cluster down` exited {rc}: {err.strip()}\n")
        except OSError as exc:
            sys.stderr.write(f"demo: cannot run `millrace cluster down`: {exc}\n")
    leftovers = {p for p in _pids(info) if _alive(p)}
    leftovers.update(_pids_mentioning(str(cluster_dir)))
    for pid in sorted(leftovers):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def embedded_cluster(cluster_dir: Path) -> Iterator[str]:
    """Start a fresh cluster in ``cluster_dir``, yield its bootstrap servers, always stop it."""
    if _cluster_json(cluster_dir):
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

    from broker.cli.topics import kafka_error_text

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
    event = {
        "id": i,
        "user": user,
        "type": rng.choice(EVENT_TYPES),
        "amount": round(rng.uniform(1, 500), 2),
        "ts": int(time.time() * 1000),
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
    info = _cluster_json(cluster_dir)
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


def run_demo(run_dir: Path, records: int) -> int:
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
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m broker.cli.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--run-dir", default="demo-run", help="working directory (demo-run)")
    parser.add_argument("--records", type=int, default=RECORDS, help="events to produce")
    args = parser.parse_args(argv)
    if args.records <= 0:
        parser.error("--records must be at least 1")
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_demo(Path(args.run_dir), args.records)
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
