"""The scrape: one prometheus_client collector that reads the whole broker on its event loop.

Theory of operation
-------------------
prometheus_client's HTTP server answers a scrape in a thread of its own and calls each
registered collector's ``collect()`` there. Broker state lives on the asyncio event loop
thread and is not safe to read from another thread, so :class:`BrokerCollector` reads
nothing itself: its ``collect()`` submits :meth:`BrokerCollector.snapshot` to the loop with
``asyncio.run_coroutine_threadsafe`` and waits for it (at most ``timeout_s``). The snapshot
awaits every *state collector* of :data:`STATE_COLLECTORS` on the loop, so each one reads a
consistent state (between two steps of the loop) and returns prometheus_client metric
families (``CounterMetricFamily``, ``GaugeMetricFamily``, ``HistogramMetricFamily``).

A state collector is ``async def collect(broker: BrokerView) -> list[Metric]``
(:class:`~broker.metrics.broker_view.BrokerView`: the attributes it may read), one per module
of this package (``server_metrics``, ``replica_metrics``, ``controller_metrics``,
``log_metrics``, ``coordinator_metrics``). Each runs with
the time left of the scrape's budget; one that raises or overruns is logged, counted in
``millrace_metrics_collector_errors_total{collector}``, and left out of that answer, the
others' figures are still served. A snapshot that cannot run (the event loop is stopped or
closed, as at the very end of a shutdown, or it does not answer within ``timeout_s``) gives
an answer with only the process metrics and the error counter, logged; a scrape never
hangs and never raises into the broker. A family name belongs to exactly one collector.

Concurrency: ``collect()`` runs in the HTTP server's threads (several scrapes may overlap);
the snapshot and every state collector run on the event loop thread. The error counts are
guarded by a lock (they are written from both).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.metrics import (
    controller_metrics,
    coordinator_metrics,
    log_metrics,
    replica_metrics,
    server_metrics,
)

if TYPE_CHECKING:
    from broker.metrics.broker_view import BrokerView

__all__ = ["STATE_COLLECTORS", "BrokerCollector", "StateCollector"]

log = logging.getLogger(__name__)

StateCollector = Callable[["BrokerView"], Awaitable[list[Metric]]]
"""``async def collect(broker) -> list[Metric]``: figures read on the event loop."""

STATE_COLLECTORS: list[StateCollector] = [
    server_metrics.collect,
    replica_metrics.collect,
    controller_metrics.collect,
    log_metrics.collect,
    coordinator_metrics.collect,
]
"""What a scrape reads, in exposition order."""

SCRAPE_TIMEOUT_S = 5.0
"""How long a scrape waits for the event loop's snapshot."""


def _name(collector: StateCollector) -> str:
    return f"{getattr(collector, '__module__', '?')}.{getattr(collector, '__qualname__', '?')}"


class BrokerCollector(Collector):
    """Serves :data:`STATE_COLLECTORS` (or ``collectors``) of one broker, read on its event
    loop ``loop`` (see the module docstring)."""

    def __init__(
        self,
        broker: BrokerView,
        loop: asyncio.AbstractEventLoop,
        *,
        collectors: list[StateCollector] | None = None,
        timeout_s: float = SCRAPE_TIMEOUT_S,
    ) -> None:
        self.broker = broker
        self.loop = loop
        self.collectors = STATE_COLLECTORS if collectors is None else collectors
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {}

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not take a snapshot (it may be on the loop)."""
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._families()
        yield self._errors_family()

    def _families(self) -> list[Metric]:
        loop = self.loop
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:  # waiting here would block the loop that must answer
            self._failed("snapshot", "the scrape ran on the event loop thread itself")
            return []
        if loop.is_closed() or not loop.is_running():
            self._failed("snapshot", "the broker's event loop is not running")
            return []
        try:
            future = asyncio.run_coroutine_threadsafe(self.snapshot(), loop)
        except RuntimeError as exc:  # closed meanwhile
            self._failed("snapshot", f"the broker's event loop is gone ({exc})")
            return []
        try:
            return future.result(timeout=self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._failed("snapshot", f"no snapshot from the event loop in {self.timeout_s:g}s")
        except concurrent.futures.CancelledError:
            self._failed("snapshot", "the snapshot was cancelled (broker shutting down)")
        except Exception as exc:  # noqa: BLE001 - a scrape must not raise
            self._failed("snapshot", f"the snapshot failed: {exc!r}")
        return []

    async def snapshot(self) -> list[Metric]:
        """Every state collector's families, read on the event loop; a collector that
        raises or overruns the scrape's budget is logged, counted and left out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s * 0.8
        results: list[list[Metric]] = [[] for _ in self.collectors]

        async def run(index: int, collector: StateCollector) -> None:
            try:
                async with asyncio.timeout_at(deadline):
                    results[index] = await collector(self.broker)
            except TimeoutError:
                self._failed(_name(collector), "overran the scrape's time budget")
            except Exception:  # a broken collector must not break the scrape
                log.exception("metrics collector %s failed", _name(collector))
                self._failed(_name(collector), None)

        async with asyncio.TaskGroup() as group:
            for index, collector in enumerate(self.collectors):
                group.create_task(run(index, collector))
        return [family for families in results for family in families]

    def _failed(self, what: str, why: str | None) -> None:
        if why is not None:
            log.warning("metrics scrape: %s: %s", what, why)
        with self._lock:
            self._errors[what] = self._errors.get(what, 0) + 1

    def _errors_family(self) -> Metric:
        family = CounterMetricFamily(
            "millrace_metrics_collector_errors",
            "Scrapes that left out a collector's figures (it raised or overran), or all the "
            "broker's (collector=snapshot: the event loop did not answer)",
            labels=["collector"],
        )
        with self._lock:
            errors = sorted(self._errors.items())
        for what, n in errors:
            family.add_metric([what], n)
        return family
