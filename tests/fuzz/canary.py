"""A well-behaved confluent-kafka client that keeps working while the fuzzer attacks.

A producer (acks=all) and an assign()-ed consumer on the canary's own topic loop
produce-one / consume-it-back in a background thread. Every failure (delivery error, wrong
offset or value, nothing consumed within the timeout) is appended to ``errors`` and stops
the loop; ``round_trips`` counts the successes and ``max_latency_s`` the slowest round trip.

Concurrency: the loop runs in its own thread; ``errors`` and the counters are read by the
runner's monitor (appends and int updates are atomic under the GIL).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition


class Canary:
    def __init__(self, bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
        self.topic = topic
        self.timeout_s = timeout_s
        self.errors: list[str] = []
        self.round_trips = 0
        self.max_latency_s = 0.0
        self._next = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        base: dict[str, Any] = {"bootstrap.servers": bootstrap}
        self.producer = Producer(
            base | {"linger.ms": 0, "acks": "all", "message.timeout.ms": 60000}
        )
        self.consumer = Consumer(
            base
            | {
                "group.id": f"canary-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])

    def round_trip(self) -> None:
        start = time.monotonic()
        value = f"canary-{self._next}".encode()
        delivered: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            delivered.append(err if err is not None else msg.offset())

        self.producer.produce(self.topic, value=value, partition=0, on_delivery=on_delivery)
        remaining = self.producer.flush(self.timeout_s)
        if remaining or not delivered:
            raise AssertionError(f"canary record {self._next} not delivered in {self.timeout_s}s")
        if not isinstance(delivered[0], int) or delivered[0] != self._next:
            raise AssertionError(f"canary record {self._next}: delivery {delivered[0]}")
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            msg = self.consumer.poll(0.5)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"canary consumer error: {err}")
            if (msg.offset(), msg.value()) != (self._next, value):
                raise AssertionError(f"canary read {(msg.offset(), msg.value())} at {self._next}")
            self._next += 1
            self.round_trips += 1
            self.max_latency_s = max(self.max_latency_s, time.monotonic() - start)
            return
        raise AssertionError(f"canary record {self._next} not consumed in {self.timeout_s}s")

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.round_trip()
            except Exception as exc:  # noqa: BLE001 - reported through errors
                self.errors.append(str(exc))
                return
            self._stop.wait(0.2)

    def start(self) -> None:
        self.round_trip()
        self._thread = threading.Thread(target=self._loop, name="fuzz-canary", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop, then one more round trip from the calling thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        if not self.errors:
            try:
                self.round_trip()
            except AssertionError as exc:
                self.errors.append(str(exc))

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
        self.consumer.close()
        self.producer.flush(10)
