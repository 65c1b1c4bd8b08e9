"""broker/metrics/registry.py and endpoint.py without a broker: the scrape reads every state
collector on the event loop thread; a collector that raises or overruns is left out (logged,
counted) while the others are served; a loop that does not run gives a prompt partial answer;
a real HTTP scrape of the endpoint on a free port serves the text format with the process
metrics, and the endpoint stops."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics.endpoint import MetricsEndpoint, metrics_url
from broker.metrics.registry import BrokerCollector, StateCollector
from broker.metrics.server_metrics import collect as server_collect
from broker.server import BrokerState

pytestmark = pytest.mark.unit

FAKE_BROKER: Any = SimpleNamespace(name="fake")


def _gauge(name: str, v: float) -> Metric:
    return GaugeMetricFamily(name, name, value=v)


async def _drain() -> None:
    """Cancel and await what is left on the loop (a scrape given up on), so nothing is left
    unstarted when the loop closes."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own (the broker's), stopped afterwards."""
    new = asyncio.new_event_loop()
    thread = threading.Thread(target=new.run_forever, daemon=True)
    thread.start()
    try:
        yield new
    finally:
        asyncio.run_coroutine_threadsafe(_drain(), new).result(5)
        new.call_soon_threadsafe(new.stop)
        thread.join(5)
        new.close()


def _samples(collector: BrokerCollector) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        s.name + str(sorted(s.labels.items()) or ""): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_collectors_run_on_the_event_loop_thread(loop: asyncio.AbstractEventLoop) -> None:
    threads: list[int] = []

    async def first(broker: Any) -> list[Metric]:
        threads.append(threading.get_ident())
        assert broker is FAKE_BROKER
        return [_gauge("first", 1)]

    async def second(_broker: Any) -> list[Metric]:
        await asyncio.sleep(0)  # a collector may await
        threads.append(threading.get_ident())
        return [_gauge("second", 2)]

    collector = BrokerCollector(FAKE_BROKER, loop, collectors=[first, second])
    samples = _samples(collector)
    assert samples["first"] == 1 and samples["second"] == 2
    assert len(threads) == 2 and threading.get_ident() not in threads
    assert len(set(threads)) == 1


def test_a_failing_collector_is_left_out_and_counted(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    async def good(_broker: Any) -> list[Metric]:
        return [_gauge("good", 1)]

    async def broken(_broker: Any) -> list[Metric]:
        raise RuntimeError("boom")

    collector = BrokerCollector(FAKE_BROKER, loop, collectors=[broken, good])
    samples = _samples(collector)
    assert samples["good"] == 1
    key = f"millrace_metrics_collector_errors_total[('collector', '{__name__}.{broken.__qualname__}')]"
    assert samples[key] == 1
    assert "boom" in caplog.text
    assert _samples(collector)[key] == 2  # counted on every scrape


def test_a_slow_collector_overruns_the_budget_alone(loop: asyncio.AbstractEventLoop) -> None:
    async def good(_broker: Any) -> list[Metric]:
        return [_gauge("good", 1)]

    async def slow(_broker: Any) -> list[Metric]:
        await asyncio.sleep(30)
        return [_gauge("slow", 1)]

    collector = BrokerCollector(FAKE_BROKER, loop, collectors=[good, slow], timeout_s=0.5)
    started = time.monotonic()
    samples = _samples(collector)
    assert time.monotonic() - started < 2.0
    assert samples["good"] == 1 and "slow" not in samples
    assert any(k.startswith("millrace_metrics_collector_errors_total") for k in samples)


def test_a_blocked_loop_times_out_and_a_stopped_loop_answers_at_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def good(_broker: Any) -> list[Metric]:
        return [_gauge("good", 1)]

    collector = BrokerCollector(FAKE_BROKER, loop, collectors=[good], timeout_s=0.3)
    release = threading.Event()
    loop.call_soon_threadsafe(release.wait, 5.0)  # the loop thread blocked
    try:
        started = time.monotonic()
        samples = _samples(collector)
        assert time.monotonic() - started < 2.0
        assert "good" not in samples
        assert samples["millrace_metrics_collector_errors_total[('collector', 'snapshot')]"] == 1
    finally:
        release.set()

    stopped = asyncio.new_event_loop()  # never run
    try:
        collector = BrokerCollector(FAKE_BROKER, stopped, collectors=[good])
        started = time.monotonic()
        samples = _samples(collector)
        assert time.monotonic() - started < 0.5 and "good" not in samples
    finally:
        stopped.close()


def test_a_scrape_on_the_loop_thread_does_not_deadlock() -> None:
    async def good(_broker: Any) -> list[Metric]:
        return [_gauge("good", 1)]

    async def main() -> dict[str, float]:
        collector = BrokerCollector(FAKE_BROKER, asyncio.get_running_loop(), collectors=[good])
        return _samples(collector)

    samples = asyncio.run(main())
    assert "good" not in samples
    assert samples["millrace_metrics_collector_errors_total[('collector', 'snapshot')]"] == 1


def test_http_scrape_of_a_real_endpoint() -> None:
    from broker.request_metrics import MetricsRecorder

    recorder = MetricsRecorder()
    recorder.produced("orders", 3, 300)
    broker: Any = SimpleNamespace(metrics=recorder, state=BrokerState.RUNNING, zk=None)
    collectors: list[StateCollector] = [server_collect]

    async def main() -> tuple[str, str]:
        endpoint = MetricsEndpoint(broker, "127.0.0.1", 0, collectors=collectors)
        endpoint.start()
        assert endpoint.port > 0 and endpoint.url == metrics_url("127.0.0.1", endpoint.port)
        assert endpoint.url is not None
        url = endpoint.url

        def get() -> str:
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.headers["Content-Type"].startswith("text/plain")
                return str(response.read().decode())

        try:
            text = await asyncio.to_thread(get)
        finally:
            await endpoint.stop()
        return url, text

    url, text = asyncio.run(main())
    families = {f.name: f for f in text_string_to_metric_families(text)}
    messages = families["kafka_server_brokertopicmetrics_messagesin"]
    assert {(tuple(s.labels.items()), s.value) for s in messages.samples} == {
        ((), 3.0),
        ((("topic", "orders"),), 3.0),
    }
    assert families["kafka_server_kafkaserver_brokerstate"].samples[0].value == 3
    state = {
        s.labels["state"]: s.value
        for s in families["kafka_server_sessionexpirelistener_sessionstate"].samples
    }
    assert state == {"CONNECTED": 0, "CONNECTING": 0, "CLOSED": 1}  # no session yet
    assert "process_cpu_seconds" in families  # the process collector, registered on purpose
    assert "python_gc_objects_collected" not in families  # no default collectors
    with pytest.raises(OSError):  # stopped: nothing listens any more
        urllib.request.urlopen(url, timeout=2)


def test_a_busy_port_fails_with_the_property_named() -> None:
    from broker.config_def import ConfigError

    broker: Any = SimpleNamespace()

    async def main() -> None:
        first = MetricsEndpoint(broker, "127.0.0.1", 0, collectors=[])
        first.start()
        try:
            second = MetricsEndpoint(broker, "127.0.0.1", first.port, collectors=[])
            with pytest.raises(ConfigError, match="metrics.http.listener"):
                second.start()
        finally:
            await first.stop()

    asyncio.run(main())
