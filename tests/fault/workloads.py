"""The workloads: real clients (confluent-kafka) doing what users do, recording what the
cluster told them, while the fault scheduler breaks things.

* :class:`Producers` (workload 1): idempotent producers, ``acks=all``, values
  ``<producer>:<seq>``; every acknowledgement (partition, offset) is recorded.
* :class:`ConsumerViews` (workload 4): consumers that each read every partition of the
  producers' topic from the beginning, recording (partition, offset, value) in the order
  seen.
* :class:`Group` (workload 2): a producer feeding a topic and a consumer group whose
  members process records and then commit (synchronously), recording what was processed
  and which commits were acknowledged.
* :class:`Transactions` (workload 3): a producer feeding a source topic and copiers, each a
  read_committed group member with a transactional producer, copying batches to an output
  topic with the consumed offsets in the transaction (``send_offsets_to_transaction``), a
  tenth of the transactions aborted on purpose; outcomes recorded per transaction; and a
  live read_committed reader of the output.

Each workload runs in threads of the runner process (librdkafka does the I/O in threads of
its own): :meth:`start`, :meth:`stop` (stop writing, drain what is in flight), then
:meth:`check` reads the topics back once the cluster is healed and returns the checker's
counts (``tests/fault/checks.py``).

Concurrency: each thread appends to its own lists; the lists are read only after
:meth:`stop` joined the threads.
"""

from __future__ import annotations

import logging
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tests.fault import checks
from tests.fault.checks import Ack, Seen, TxnRecord

log = logging.getLogger("fault.workloads")

# The settings every client of a run shares: quiet logging, and the admin's security settings
# when the run's cluster is secured (the runner adds them before any workload starts).
CLIENT_SETTINGS: dict[str, object] = {
    "log_level": 0,
    "logger": logging.getLogger("fault.librdkafka"),
}


def create_topic(bootstrap: str, topic: str, partitions: int, timeout_s: float = 120.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_SETTINGS})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.create_topics(
                [NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})]
            )[topic].result(30)
            break
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    while time.monotonic() < deadline:  # every partition with a leader
        md = admin.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if (
            t is not None
            and t.error is None
            and len(t.partitions) == partitions
            and all(p.leader >= 0 for p in t.partitions.values())
        ):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{topic} has no leaders after {timeout_s:g}s")


def read_all(
    bootstrap: str, topic: str, *, committed: bool = False, timeout_s: float = 180.0
) -> list[Seen]:
    """Every record of ``topic`` from offset 0 to its end (the high watermark, or the last
    stable offset with ``committed``), read once the cluster is healthy."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_SETTINGS})
    partitions = sorted(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"fault-read-{random.getrandbits(40)}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            **CLIENT_SETTINGS,
        }
    )
    out: list[Seen] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        deadline = time.monotonic() + timeout_s
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {topic} back: partitions {sorted(pending)} unfinished")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            out.append(Seen(msg.partition(), msg.offset(), (msg.value() or b"").decode()))
    finally:
        consumer.close()
    return out


def committed_offsets(
    bootstrap: str, group: str, topic: str, timeout_s: float = 180.0
) -> dict[int, int]:
    """The group's committed offset of each partition of ``topic`` (0: none), once stable:
    librdkafka asks for stable offsets (KIP-447), so this waits for any transaction that
    still holds offsets of the group to end (a copier replaced mid-transaction leaves one
    open until its ``transaction.timeout.ms``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_SETTINGS})
    partitions = sorted(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **CLIENT_SETTINGS})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                got = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=30)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
    finally:
        consumer.close()
    return {tp.partition: tp.offset if tp.offset >= 0 else 0 for tp in got}


class _Threads:
    """A workload's threads and its stop flag."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.hangs: list[str] = []

    def spawn(self, name: str, target: Callable[[], None]) -> None:
        def run() -> None:
            try:
                target()
            except Exception as exc:  # a client bug ends the thread: reported, not hidden
                log.exception("%s failed", name)
                self.errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=run, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def join(self, timeout_s: float = 60.0) -> None:
        self.stopping.set()
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        stuck = [t for t in self.threads if t.is_alive()]
        if stuck:
            frames = sys._current_frames()
            where = {
                t.name: "".join(traceback.format_stack(frames[t.ident], limit=4))
                for t in stuck
                if t.ident in frames
            }
            # a client call that never returned (librdkafka's transactional API was seen
            # to outlive its timeout after a fenced transaction): a liveness note with the
            # stacks, not a safety anomaly; the checks still read everything back
            self.hangs.append(f"threads did not stop: {where}")


def _paced(rate: float) -> Callable[[], None]:
    """A sleep that keeps a loop at ``rate`` iterations a second."""
    interval = 1.0 / rate
    next_at = [time.monotonic()]

    def wait() -> None:
        next_at[0] += interval
        delay = next_at[0] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -1.0:
            next_at[0] = time.monotonic()  # fell behind (a fault): do not burst

    return wait


def _idempotent_producer(bootstrap: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 90000,
            **CLIENT_SETTINGS,
        }
    )


class Producers:
    """Workload 1 (see the module docstring)."""

    name = "idempotent producers"

    def __init__(self, bootstrap: str, topic: str, producers: int = 2, rate: float = 150.0):
        self.bootstrap, self.topic = bootstrap, topic
        self.n, self.rate = producers, rate
        self.acks: list[Ack] = []
        self.failed = 0
        self.fatal = 0
        self.refused = 0
        self.t = _Threads()

    def start(self) -> None:
        for i in range(self.n):
            self.t.spawn(f"producer-{i}", lambda i=i: self._run(i))

    def _run(self, index: int) -> None:
        generation = 0
        while not self.t.stopping.is_set():
            name = f"p{index}g{generation}"
            generation += 1
            fatal = threading.Event()

            def report(
                err: Any, msg: Any, name: str = name, fatal: threading.Event = fatal
            ) -> None:
                if err is None:
                    seq = int(msg.value().decode().rsplit(":", 1)[1])
                    self.acks.append(Ack(name, seq, msg.partition(), msg.offset(), time.time()))
                else:
                    self.failed += 1
                    if err.fatal():
                        fatal.set()

            producer = _idempotent_producer(self.bootstrap)
            wait = _paced(self.rate)
            seq = 0

            def serve(
                timeout: float,
                producer: Producer = producer,
                fatal: threading.Event = fatal,
            ) -> None:
                """poll/flush; a fatal error (raised from them) ends this producer."""
                try:
                    if timeout < 0:
                        producer.flush(120)
                    else:
                        producer.poll(timeout)
                except KafkaException as exc:
                    if not exc.args[0].fatal():
                        raise
                    fatal.set()

            while not self.t.stopping.is_set() and not fatal.is_set():
                try:
                    producer.produce(
                        self.topic, value=f"{name}:{seq}", key=str(seq % 97), on_delivery=report
                    )
                    seq += 1
                except BufferError:
                    serve(0.5)
                    continue
                except KafkaException as exc:
                    if exc.args[0].fatal():
                        fatal.set()
                        break
                    self.refused += 1  # e.g. metadata in flux: the record is retried
                    serve(0.5)
                    continue
                serve(0)
                wait()
            serve(-1)
            if fatal.is_set():
                # a new producer (a new producer id) carries on; what the old one had in
                # flight may or may not be written (its acknowledgements are what count)
                self.fatal += 1

    def stop(self) -> None:
        self.t.join()

    def check(
        self, final: list[Seen], origins: dict[tuple[int, int], tuple[int, int]] | None = None
    ) -> dict[str, int]:
        counts = checks.check_producers(self.acks, final, origins)
        counts["delivery_failures"] = self.failed
        counts["produce_calls_refused"] = self.refused
        counts["producer_restarts_after_fatal_errors"] = self.fatal
        counts["client_errors"] = len(self.t.errors)
        counts["client_hangs"] = len(self.t.hangs)
        return counts


class ConsumerViews:
    """Workload 4 (see the module docstring)."""

    name = "consumers' view"

    def __init__(self, bootstrap: str, topic: str, consumers: int = 2):
        self.bootstrap, self.topic, self.n = bootstrap, topic, consumers
        self.views: dict[str, list[Seen]] = {}
        self.t = _Threads()

    def start(self) -> None:
        for i in range(self.n):
            self.views[f"c{i}"] = []
            self.t.spawn(f"viewer-{i}", lambda i=i: self._run(i))

    def _run(self, index: int) -> None:
        seen = self.views[f"c{index}"]
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **CLIENT_SETTINGS})
        parts = sorted(admin.list_topics(self.topic, timeout=30).topics[self.topic].partitions)
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"fault-view-{index}",
                "enable.auto.commit": False,
                **CLIENT_SETTINGS,
            }
        )
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
        try:
            while not self.t.stopping.is_set():
                for msg in consumer.consume(500, 0.5):
                    if msg.error() is None:
                        seen.append(Seen(msg.partition(), msg.offset(), msg.value().decode()))
        finally:
            consumer.close()

    def stop(self) -> None:
        self.t.join()

    def check(self, final: list[Seen]) -> dict[str, int]:
        counts = checks.check_consumer_views(self.views, final)
        counts["client_errors"] = len(self.t.errors)
        counts["client_hangs"] = len(self.t.hangs)
        return counts


class Group:
    """Workload 2 (see the module docstring)."""

    name = "consumer group"
    group_id = "fault-group"

    def __init__(self, bootstrap: str, topic: str, members: int = 3, rate: float = 150.0):
        self.bootstrap, self.topic = bootstrap, topic
        self.members, self.rate = members, rate
        self.processed: list[tuple[int, int]] = []
        self.commits: list[tuple[int, int]] = []
        self.commit_failures = 0
        self.feeder = Producers(bootstrap, topic, 1, rate)
        self.t = _Threads()

    def start(self) -> None:
        self.feeder.start()
        for i in range(self.members):
            self.t.spawn(f"member-{i}", lambda i=i: self._run(i))

    def _run(self, index: int) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                **CLIENT_SETTINGS,
            }
        )
        consumer.subscribe([self.topic])
        try:
            while not self.t.stopping.is_set():
                msgs = [m for m in consumer.consume(200, 0.5) if m.error() is None]
                if not msgs:
                    continue
                upto: dict[int, int] = {}
                for m in msgs:
                    self.processed.append((m.partition(), m.offset()))  # processed, then commit
                    upto[m.partition()] = max(m.offset() + 1, upto.get(m.partition(), 0))
                offsets = [TopicPartition(self.topic, p, o) for p, o in upto.items()]
                try:
                    done = consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException:
                    self.commit_failures += 1
                    continue
                for tp in done or ():
                    if tp.error is None:
                        self.commits.append((tp.partition, tp.offset))
        finally:
            consumer.close()

    def stop(self) -> None:
        self.feeder.stop()
        # members catch up with what the feeder wrote before they stop
        time.sleep(5)
        self.t.join()

    def check(self) -> dict[str, int]:
        final = committed_offsets(self.bootstrap, self.group_id, self.topic)
        counts = checks.check_group(self.processed, self.commits, final)
        counts["commit_failures"] = self.commit_failures
        counts["client_errors"] = len(self.t.errors) + len(self.feeder.t.errors)
        counts["client_hangs"] = len(self.t.hangs) + len(self.feeder.t.hangs)
        return counts


class Transactions:
    """Workload 3 (see the module docstring)."""

    name = "transactions"
    group_id = "fault-copy"

    def __init__(
        self,
        bootstrap: str,
        source: str,
        output: str,
        copiers: int = 2,
        rate: float = 150.0,
        seed: int = 0,
    ):
        self.bootstrap, self.source, self.output = bootstrap, source, output
        self.copiers = copiers
        self.feeder = Producers(bootstrap, source, 1, rate)
        self.outcomes: dict[tuple[str, int], str] = {}
        self.written: dict[tuple[str, int], int] = {}
        self.live: list[TxnRecord] = []
        self.restarts = 0
        self.rng = random.Random(seed)
        self.t = _Threads()

    def start(self) -> None:
        self.feeder.start()
        for i in range(self.copiers):
            self.t.spawn(f"copier-{i}", lambda i=i: self._run(i))
        self.t.spawn("committed-reader", self._read_live)

    def _clients(self, txid: str) -> tuple[Consumer, Producer]:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group_id,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
                **CLIENT_SETTINGS,
            }
        )
        consumer.subscribe([self.source])
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": txid,
                "transaction.timeout.ms": 20000,
                "linger.ms": 5,
                **CLIENT_SETTINGS,
            }
        )
        while not self.t.stopping.is_set():
            try:
                producer.init_transactions(30)
                break
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
        return consumer, producer

    def _run(self, index: int) -> None:
        txid = f"copier-{index}"
        txn = 0
        consumer, producer = self._clients(txid)
        try:
            while not self.t.stopping.is_set():
                msgs = [m for m in consumer.consume(100, 0.5) if m.error() is None]
                if not msgs:
                    continue
                txn += 1
                key = (txid, txn)
                try:
                    producer.begin_transaction()
                    for m in msgs:
                        producer.produce(
                            self.output,
                            value=f"{txid}:{txn}:{m.partition()}:{m.offset()}",
                            key=m.key(),
                        )
                    self.written[key] = len(msgs)
                    producer.send_offsets_to_transaction(
                        consumer.position(consumer.assignment()),
                        consumer.consumer_group_metadata(),
                        30,
                    )
                    if self.rng.random() < 0.1:
                        producer.abort_transaction(30)
                        self.outcomes[key] = "aborted"
                        self._rewind(consumer)
                    else:
                        producer.commit_transaction(60)
                        self.outcomes[key] = "committed"
                except KafkaException as exc:
                    err = exc.args[0]
                    self.outcomes.setdefault(key, "unknown")
                    if err.txn_requires_abort() and self.outcomes[key] == "unknown":
                        try:
                            producer.abort_transaction(30)
                            self.outcomes[key] = "aborted"
                            self._rewind(consumer)
                            continue
                        except KafkaException:
                            pass
                    # anything else: new clients (init_transactions finishes or aborts what
                    # the old producer left; the consumer restarts from committed offsets)
                    self.restarts += 1
                    consumer.close()
                    consumer, producer = self._clients(txid)
        finally:
            consumer.close()

    @staticmethod
    def _rewind(consumer: Consumer) -> None:
        """After an abort: back to the group's committed offsets."""
        assignment = consumer.assignment()
        if not assignment:
            return
        for tp in consumer.committed(assignment, timeout=30):
            consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))

    def _read_live(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **CLIENT_SETTINGS})
        parts = sorted(admin.list_topics(self.output, timeout=30).topics[self.output].partitions)
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "fault-copy-reader",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                **CLIENT_SETTINGS,
            }
        )
        consumer.assign([TopicPartition(self.output, p, OFFSET_BEGINNING) for p in parts])
        try:
            while not self.t.stopping.is_set():
                for m in consumer.consume(500, 0.5):
                    if m.error() is None:
                        rec = checks.parse_txn_value(m.partition(), m.offset(), m.value().decode())
                        if rec is not None:
                            self.live.append(rec)
        finally:
            consumer.close()

    def stop(self) -> None:
        self.feeder.stop()
        time.sleep(5)
        self.t.join()

    def check(self) -> dict[str, int]:
        # committed offsets first: stable once every transaction has ended, after which the
        # last stable offset of the output is its end
        source_committed = committed_offsets(self.bootstrap, self.group_id, self.source)
        output = [
            rec
            for s in read_all(self.bootstrap, self.output, committed=True)
            if (rec := checks.parse_txn_value(s.partition, s.offset, s.value)) is not None
        ]
        counts = checks.check_transactions(
            self.outcomes, self.written, output, source_committed, self.live
        )
        counts["client_restarts"] = self.restarts
        counts["client_errors"] = len(self.t.errors) + len(self.feeder.t.errors)
        counts["client_hangs"] = len(self.t.hangs) + len(self.feeder.t.hangs)
        return counts
