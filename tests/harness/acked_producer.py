"""An idempotent acks=all confluent-kafka producer for fault tests: numbered, padded records
written as fast as the cluster takes them, every acknowledgement recorded, and the check that
every acknowledged record is served exactly once, in order (issue 17's "nothing acknowledged
with acks=all and min ISR 2 is ever lost").

Concurrency: used from the test's thread; delivery callbacks run inside ``poll``/``flush``
on that thread (the lock guards against librdkafka's error callback).
"""

from __future__ import annotations

import threading
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

    def produce(self, n: int) -> None:
        """Produce ``n`` records and wait until every one is acknowledged or failed."""
        pad = b"x" * self.value_bytes
        for i in range(n):
            p = i % self.partitions
            value = f"{p}:{self.produced[p]:07d}:".encode() + pad
            self.produced[p] += 1
            while True:
                try:
                    self.producer.produce(
                        self.topic, value, partition=p, on_delivery=self._on_delivery
                    )
                    break
                except BufferError:
                    self.producer.poll(0.1)
            self.producer.poll(0)
        left = self.producer.flush(180)
        assert left == 0, f"{left} records still queued after flush(180)"
        with self.lock:
            assert not self.errors, f"{len(self.errors)} delivery errors, e.g. {self.errors[:3]}"

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
