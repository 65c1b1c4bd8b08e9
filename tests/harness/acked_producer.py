"""An idempotent acks=all confluent-kafka producer for fault tests: numbered, padded records
written as fast as the cluster takes them (``produce``) or at a steady rate in a thread of
their own while the test kills and restarts brokers (``start`` ... ``stop``), every
acknowledgement recorded, and the check that every acknowledged record is served exactly
once, in order (issue 17's "nothing acknowledged with acks=all and min ISR 2 is ever lost").

Concurrency: ``produce`` runs on the test's thread; ``start`` runs the produce loop on a
thread of its own until ``stop``, and delivery callbacks run inside ``poll``/``flush`` on
whichever thread produces. ``lock`` guards what the callbacks record against the test's
thread reading it (``counts``, ``wait_progress``).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, Producer

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster


class AckedProducer:
    """An idempotent acks=all confluent-kafka producer: record ``i`` goes to partition
    ``i % partitions`` with value ``b"<p>:<seq>:"`` + padding (``seq`` counts per partition).
    Every acknowledgement (seq, offset) is recorded per partition, and every error.

    ``produce`` blocks until every record is acknowledged or failed (retries ride out leader
    changes and storage errors: ``message.timeout.ms`` is 3 minutes); ``check_served`` reads
    the topic back and checks exactly-once, in-order delivery of everything acknowledged."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        partitions: int,
        value_bytes: int = 1000,
        extra: dict[str, object] | None = None,
    ) -> None:
        self.topic = topic
        self.value_bytes = value_bytes
        self.partitions = partitions
        self.acked: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
        self.errors: list[tuple[int, int, KafkaError]] = []
        self.fatal: list[KafkaError] = []
        self.produced = dict.fromkeys(range(partitions), 0)
        self.lock = threading.Lock()
        # the background producer (start/stop)
        self._stop = threading.Event()
        self._unflushed = -1
        self._failure: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.producer = Producer(
            cluster.conf(
                {
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": 180000,
                    "retry.backoff.ms": 100,
                    "retry.backoff.max.ms": 1000,
                    "reconnect.backoff.max.ms": 1000,
                    "topic.metadata.refresh.interval.ms": 2000,
                    "error_cb": self._on_error,
                    **(extra or {}),
                }
            )
        )

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            with self.lock:
                self.fatal.append(err)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        p_text, seq_text, _pad = msg.value().split(b":", 2)
        with self.lock:
            if err is not None:
                self.errors.append((int(p_text), int(seq_text), err))
            else:
                self.acked[int(p_text)].append((int(seq_text), msg.offset()))

    def _produce_one(self, p: int) -> None:
        """Queue the next record of partition ``p`` (waiting for room in the queue)."""
        value = f"{p}:{self.produced[p]:07d}:".encode() + b"x" * self.value_bytes
        while True:
            try:
                self.producer.produce(self.topic, value, partition=p, on_delivery=self._on_delivery)
                break
            except BufferError:
                self.producer.poll(0.1)
        self.produced[p] += 1

    def produce(self, n: int) -> None:
        """Produce ``n`` records and wait until every one is acknowledged or failed."""
        for i in range(n):
            self._produce_one(i % self.partitions)
            self.producer.poll(0)
        left = self.producer.flush(180)
        assert left == 0, f"{left} records still queued after flush(180)"
        with self.lock:
            assert not self.errors, f"{len(self.errors)} delivery errors, e.g. {self.errors[:3]}"

    # --- in the background, while brokers come and go ---------------------------------------

    def start(self, rate: int = 300) -> AckedProducer:
        """Produce about ``rate`` records/s in all (one per partition per round) on a thread
        of its own until :meth:`stop`."""
        self._thread = threading.Thread(
            target=self._run,
            args=(self.partitions / rate,),
            name=f"producer-{self.topic}",
            daemon=True,
        )
        self._thread.start()
        return self

    def _run(self, interval: float) -> None:
        try:
            while not self._stop.is_set():
                for p in range(self.partitions):
                    self._produce_one(p)
                self.producer.poll(0)
                time.sleep(interval)  # the pace: about ``rate`` records/s
            self._unflushed = self.producer.flush(180)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self._failure = exc

    def counts(self) -> dict[int, int]:
        """Acknowledged records per partition so far."""
        with self.lock:
            return {p: len(a) for p, a in self.acked.items()}

    def wait_progress(self, records: int, timeout_s: float, what: str) -> None:
        """Until every partition has ``records`` more acknowledged records than now (the
        background producer is running: :meth:`start`)."""
        assert self._thread is not None, "wait_progress without start()"
        start = self.counts()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            now = self.counts()
            if all(now[p] >= start[p] + records for p in now):
                return
            assert self._thread.is_alive(), f"producer thread died: {self._failure!r}"
            time.sleep(0.2)
        with self.lock:
            errors = self.errors[-3:] + [(-1, -1, e) for e in self.fatal[-3:]]
        raise AssertionError(
            f"{what}: acknowledged per partition {start} -> {self.counts()} in {timeout_s:g}s, "
            f"wanted +{records} each; recent errors {errors}"
        )

    def stop(self) -> None:
        """Stop the background producer and wait until everything it queued is acknowledged
        or failed."""
        assert self._thread is not None, "stop without start()"
        self._stop.set()
        self._thread.join(240)
        assert not self._thread.is_alive(), "producer thread did not finish flushing"
        assert self._failure is None, f"producer thread failed: {self._failure!r}"
        assert self._unflushed == 0, f"{self._unflushed} records still queued after flush(180)"

    def check_served(self, cluster: Cluster) -> None:
        """Every produced record was acknowledged and is served exactly once, at its
        acknowledged offset, in production order per partition."""
        assert not self.fatal, f"fatal producer errors: {self.fatal}"
        assert not self.errors, f"{len(self.errors)} delivery errors, e.g. {self.errors[:3]}"
        served = cluster.consume(self.topic, list(range(self.partitions)), timeout_s=120)
        for p in range(self.partitions):
            acked = sorted(self.acked[p], key=lambda so: so[1])
            assert len(acked) == self.produced[p], (
                f"partition {p}: {self.produced[p]} produced, {len(acked)} acknowledged"
            )
            got = [(int(m.value().split(b":")[1]), m.offset()) for m in served[p]]
            seqs = [s for s, _o in got]
            dups = sorted(s for s, k in Counter(seqs).items() if k > 1)
            missing = sorted({s for s, _o in acked} - set(seqs))
            assert not dups and not missing, (
                f"partition {p}: {len(missing)} acknowledged records missing (e.g. "
                f"{missing[:5]}), {len(dups)} duplicated (e.g. {dups[:5]}); served {len(got)}"
            )
            assert seqs == list(range(self.produced[p])), f"partition {p}: served out of order"
            assert got == acked, f"partition {p}: served offsets differ from acknowledged ones"
