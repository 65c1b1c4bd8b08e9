"""``millrace console`` in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``make setup``) driven by Selenium against a live 3-broker
cluster, clicking through every page and checking what it shows against what the test did:

* a topic with JSON values, keys and headers; a group with committed offsets and lag; an
  open transaction; an exactly-once sink's trace made with the connector's own task and
  committer code (no Spark); from the module's start, light background traffic (a varying
  produce rate to two topics, a slow consumer in a live group) so the plots move;
* the pages: cluster, topics, topic (offsets, sizes checked against the leader's
  ``kafka_log_log_size`` and the segments on disk, configs, plot), messages (by offset and
  by timestamp, JSON rendering, bad input), groups (lag = end - committed, members, plot),
  transactions (listed, aborted), Spark sinks;
* the actions of ``--allow-writes`` (create, change configs, delete a topic, reset offsets,
  abort), each through its confirmation page, checked with an AdminClient; a second,
  read-only console hides them and answers 403; cross-origin posts (and a DNS-rebound Host)
  are refused with 403 and change nothing;
* a console started with ``--bootstrap-server`` only (no metrics URLs), fetched over HTTP;
* a hard-stopped broker: pages still answer, under-replicated partitions shown.

One cluster, three console processes and one browser for the module; every process is
stopped by its pid. Screenshots go to the test's tmp dir, and with
``MILLRACE_CONSOLE_SCREENSHOTS=docs/images`` two of them are copied there for the README.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from prometheus_client.parser import text_string_to_metric_families

from tests.console.console_process import ROOT, Console, http
from tests.harness.waiting import wait_for

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(
        {
            "offsets.topic.num.partitions": "3",  # billing, sink-group, web-dashboard: apart
            "transaction.state.log.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            "transaction.max.timeout.ms": "300000",
        },
        brokers=3,
    ),
]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
TOPIC = "orders"
GROUP = "billing"
TXN_ID = "console-test-txn"
COMMITTED = {0: 12, 1: 4}
SCREENSHOT_ENV = "MILLRACE_CONSOLE_SCREENSHOTS"
LOAD_TOPICS = ("clicks", "views")
LIVE_GROUP = "web-dashboard"  # its __consumer_offsets partition: apart from sink-group's
LOAD_SECONDS = 12  # of traffic before the screenshots of the plots


# --- the cluster's content ----------------------------------------------------------------------


def _value(i: int) -> bytes:
    return json.dumps({"order": i, "amount": i * 10, "item": f"widget-{i}"}).encode()


class World:
    """What the test put into the cluster."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.bootstrap: str = cluster.bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        self.first_ts: dict[int, int] = {}
        self.txn_producer: Producer | None = None
        self.sink_name = ""

    def setup(self, tmp: Path) -> None:
        futures = self.admin.create_topics(
            [
                NewTopic(TOPIC, 3, 3),
                NewTopic("payments", 1, 3),
                NewTopic("sink-in", 2, 3),
                NewTopic("sink-out", 2, 3),
                NewTopic(LOAD_TOPICS[0], 3, 2),
                NewTopic(LOAD_TOPICS[1], 2, 2),
            ]
        )
        for f in futures.values():
            f.result(30)
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all"})
        for p, n in ((0, 20), (1, 10)):
            for i in range(n):
                producer.produce(
                    TOPIC,
                    _value(i),
                    key=f"k{i}" if i % 2 == 0 else None,
                    partition=p,
                    headers=[("source", b"console-test"), ("seq", str(i).encode())],
                )
        producer.flush(30)
        consumer = Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": GROUP, "enable.auto.commit": False}
        )
        try:
            consumer.commit(
                offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                asynchronous=False,
            )
            for p in (0, 1):
                (found,) = consumer.offsets_for_times([TopicPartition(TOPIC, p, 0)], 10)
                assert found.offset == 0
            msgs = self._read(consumer, 0, 1)
            self.first_ts[0] = msgs[0].timestamp()[1]
        finally:
            consumer.close()
        self.txn_producer = Producer(
            {"bootstrap.servers": self.bootstrap, "transactional.id": TXN_ID}
        )
        self.txn_producer.init_transactions(30)
        self.txn_producer.begin_transaction()
        self.txn_producer.produce("payments", b'{"pending": true}', key=b"p1")
        self.txn_producer.flush(30)
        self.sink_name = make_sink_trace(self.bootstrap, tmp / "checkpoint")

    @staticmethod
    def _read(consumer: Consumer, partition: int, n: int) -> list[Any]:
        consumer.assign([TopicPartition(TOPIC, partition, 0)])
        out: list[Any] = []
        deadline = time.monotonic() + 20
        while len(out) < n and time.monotonic() < deadline:
            out.extend(m for m in consumer.consume(n, 0.5) if m.error() is None)
        return out

    def committed(self, group: str) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            parts = consumer.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=10)
            return {tp.partition: tp.offset for tp in parts if tp.offset >= 0}
        finally:
            consumer.close()

    def topic_config(self, topic: str, name: str) -> str:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = self.admin.describe_configs([resource])[resource].result(30)
        return str(entries[name].value)

    def topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=10).topics)


def make_sink_trace(bootstrap: str, checkpoint: Path) -> str:
    """An exactly-once sink's batch 0, written and committed by the connector's own task and
    committer code (what a Spark task and the driver run), with commitOffsetsToGroup."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from spark_connector.exactly_once.committer import Committer
    from spark_connector.exactly_once.planning import open_sink, plan_batch
    from spark_connector.exactly_once.settings import parse_sink_options
    from spark_connector.exactly_once.sink_log import new_run_name
    from spark_connector.exactly_once.task import TaskIdentity, write_exactly_once
    from spark_connector.write.plan import batch_settings, plan_write

    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "topic": "sink-out",
        "deliveryGuarantee": "exactly-once",
        "checkpointLocation": str(checkpoint),
        "transactionalIdPrefix": "orders-job",
        "commitOffsetsToGroup": "sink-group",
    }
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"sink-in": {"0": 7, "1": 3}}\n'
    )
    plan = plan_write(options, schema)
    sink_options = parse_sink_options(
        options, streaming=True, producer_options=plan.producer_options, topic="sink-out"
    )
    assert sink_options is not None
    eos = plan_batch(open_sink(sink_options, bootstrap), bootstrap)
    settings = batch_settings(plan_write(options, schema))
    assert not isinstance(settings, str), settings
    reports = []
    for p in range(2):
        rows = [(f"p{p}-k{i}", f"p{p}-v{i}") for i in range(5)]
        arrow = pa.record_batch(
            [pa.array([k for k, _ in rows]), pa.array([v for _, v in rows])],
            names=["key", "value"],
        )
        message = write_exactly_once(plan, settings, eos, iter([arrow]), TaskIdentity(0, p, 0, p))
        assert message.transaction is not None
        reports.append(message.transaction)
    Committer(eos, bootstrap, new_run_name(), timeout_s=30.0).commit(0, reports)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(2):
        for _i in range(10):
            producer.produce("sink-in", b"x", partition=p)
    producer.flush(30)
    return str(eos.base)


# --- processes ------------------------------------------------------------------------------------


class Load:
    """Light background traffic for the plots, from the module's start: a producer writing to
    :data:`LOAD_TOPICS` at rates that swing between about 20 and 280 records/s (out of
    phase), and a consumer in :data:`LIVE_GROUP` (an active member) reading the first topic
    at most about 200 records/s and committing, so its lag rises with the peaks and falls
    back in the troughs. Both threads stop on :meth:`stop`; a client error is recorded."""

    PERIOD_S = 10.0

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.started = time.monotonic()
        self.threads = [
            threading.Thread(target=self._produce, name="load-producer", daemon=True),
            threading.Thread(target=self._consume, name="load-consumer", daemon=True),
        ]

    def start(self) -> None:
        self.started = time.monotonic()
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(20)

    def ran_for(self, seconds: float) -> None:
        """Wait until the traffic has run for ``seconds``."""
        time.sleep(max(self.started + seconds - time.monotonic(), 0))

    def _produce(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": 20,
                "error_cb": lambda e: self.errors.append(f"producer: {e}"),
            }
        )
        tick = 0.1
        while not self.stopping.is_set():
            phase = 2 * math.pi * (time.monotonic() - self.started) / self.PERIOD_S
            for i, topic in enumerate(LOAD_TOPICS):
                rate = 150 + 130 * math.sin(phase + i * math.pi)
                for _ in range(round(rate * tick)):
                    producer.produce(topic, b'{"event": "click", "page": "/orders"}')
            producer.poll(0)
            self.stopping.wait(tick)
        producer.flush(10)

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": LIVE_GROUP,
                "client.id": "dashboard-reader",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([LOAD_TOPICS[0]])
            while not self.stopping.is_set():
                began = time.monotonic()
                batch = consumer.consume(25, 0.05)
                if any(m.error() is None for m in batch):
                    consumer.commit(asynchronous=True)
                self.stopping.wait(max(0.125 - (time.monotonic() - began), 0))
        finally:
            consumer.close()


def make_driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.path.exists(path):
            raise AssertionError(
                f"{path} is missing: run `make setup` (it installs Debian's chromium and "
                "chromium-driver for the console's browser tests)"
            )
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        "--disable-gpu",
        "--no-first-run",
    ):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = World(cluster)
    w.setup(tmp_path_factory.mktemp("sink"))
    yield w


@pytest.fixture(scope="module")
def load(world: World) -> Iterator[Load]:
    traffic = Load(world.bootstrap)
    traffic.start()
    try:
        yield traffic
    finally:
        traffic.stop()


@pytest.fixture(scope="module")
def console(cluster: Any, world: World, load: Load) -> Iterator[Console]:
    c = Console(
        "--dir",
        str(cluster.dir),
        "--allow-writes",
        "--sample-interval",
        "1",
        "--hanging-ms",
        "600000",
    )
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def readonly(cluster: Any, world: World) -> Iterator[Console]:
    c = Console("--dir", str(cluster.dir), "--sample-interval", "30")
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = make_driver()
    try:
        driver.set_page_load_timeout(30)
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Any, str], None]:
    directory = tmp_path_factory.mktemp("screenshots")
    target = os.environ.get(SCREENSHOT_ENV)

    def shoot(driver: Any, name: str) -> None:
        path = directory / f"{name}.png"
        driver.save_screenshot(str(path))
        if target and name in ("console-cluster", "console-group"):
            out = Path(target) if Path(target).is_absolute() else ROOT / target
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out / f"{name}.png")

    return shoot


# --- helpers ------------------------------------------------------------------------------------


def by_id(driver: Any, ident: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, ident)


def css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def nav(driver: Any, key: str) -> None:
    by_id(driver, f"nav-{key}").click()
    wait(driver, lambda d: by_id(d, f"nav-{key}").get_attribute("class") == "active")


def wait(driver: Any, predicate: Callable[[Any], Any], timeout: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(predicate)


def no_traceback(driver: Any) -> None:
    source = driver.page_source
    assert "Traceback" not in source and 'File "' not in source, source[:2000]


def table_column(driver: Any, selector: str) -> list[str]:
    return [e.text for e in css(driver, selector)]


def click(driver: Any, ident: str, then: str) -> None:
    """Click ``#ident`` and wait until the next page (with ``then``) has loaded."""
    driver.execute_script("window.millraceOldPage = true;")
    by_id(driver, ident).click()
    wait(
        driver,
        lambda d: d.execute_script(
            "return window.millraceOldPage === undefined && document.readyState === 'complete';"
        ),
    )
    try:
        wait(driver, lambda d: css(d, then))
    except Exception as exc:  # a timeout: say what the page shows instead
        body = driver.find_element("tag name", "body").text[:1500]
        raise AssertionError(f"no {then} on {driver.current_url}: {body}") from exc


def submit_confirm(driver: Any, then: str = "#notice") -> None:
    wait(driver, lambda d: css(d, "#confirm"))
    click(driver, "confirm", then)


def reload_until(driver: Any, predicate: Callable[[Any], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = predicate(driver)
        if result:
            return result
        assert time.monotonic() < deadline, (
            f"condition not met on {driver.current_url}: "
            + driver.find_element("tag name", "body").text[:1500]
        )
        time.sleep(0.5)
        driver.refresh()


def log_size_metric(cluster: Any, broker_id: int, topic: str, partition: int) -> int:
    """``kafka_log_log_size`` of the partition at the broker's metrics endpoint."""
    with urllib.request.urlopen(cluster.broker(broker_id)["metrics_url"], timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            wanted = {"topic": topic, "partition": str(partition)}
            if sample.name == "kafka_log_log_size" and wanted.items() <= sample.labels.items():
                return int(sample.value)
    raise AssertionError(f"no kafka_log_log_size of {topic}-{partition} at broker {broker_id}")


def log_size_on_disk(cluster: Any, broker_id: int, topic: str, partition: int) -> int:
    """Bytes of the partition's segment files (``*.log``) in the broker's log dirs."""
    return sum(
        f.stat().st_size
        for d in cluster.broker(broker_id)["log_dirs"]
        for f in (Path(d) / f"{topic}-{partition}").glob("*.log")
    )


def chart_lines(driver: Any, title: str) -> dict[str, list[float]]:
    """The lines of the chart titled ``title``: name -> its points' y (SVG px, top down)."""
    found = driver.execute_script(
        "const svg = [...document.querySelectorAll('svg.chart')]"
        "  .find(s => s.getAttribute('aria-label') === arguments[0]);"
        "const out = {};"
        "for (const p of (svg ? svg.querySelectorAll('polyline') : []))"
        "  out[p.querySelector('title').textContent] = p.getAttribute('points');"
        "return out;",
        title,
    )
    return {
        name: [float(xy.split(",")[1]) for xy in points.split()] for name, points in found.items()
    }


def moving(driver: Any, title: str, name: str) -> bool:
    """The line ``name`` of chart ``title`` has 8+ points and swings over 20 px (of 200)."""
    ys = chart_lines(driver, title).get(name, [])
    return len(ys) >= 8 and max(ys) - min(ys) > 20


# --- the pages ----------------------------------------------------------------------------------


def test_cluster_page(console: Console, browser: Any, world: World, shots: Any) -> None:
    browser.get(console.url + "/")
    rows = css(browser, "#brokers tr")[1:]
    assert len(rows) == 3
    controller = by_id(browser, "controller").text
    assert any("controller" in r.text and r.text.startswith(controller) for r in rows)
    assert by_id(browser, "under-replicated").text == "0"
    assert by_id(browser, "offline").text == "0"
    assert int(by_id(browser, "topic-count").text) >= 4
    # the sampler draws the produce rate and the lag once it has two samples
    reload_until(browser, lambda d: len(css(d, "svg.chart polyline")) >= 2)
    no_traceback(browser)
    shots(browser, "console-cluster-start")


def test_topics_and_topic_page(console: Console, browser: Any, world: World, shots: Any) -> None:
    browser.get(console.url + "/")
    nav(browser, "topics")
    assert TOPIC in table_column(browser, "#topics td:first-child a")
    shots(browser, "console-topics")
    from selenium.webdriver.common.by import By

    browser.find_element(By.LINK_TEXT, TOPIC).click()
    wait(browser, lambda d: css(d, "#partitions"))
    assert table_column(browser, "#partitions td.end") == ["20", "10", "0"]
    assert table_column(browser, "#partitions td.start") == ["0", "0", "0"]
    rows = css(browser, "#partitions tr")[1:]
    assert all(len(r.find_elements(By.CSS_SELECTOR, "td")[2].text.split(",")) == 3 for r in rows)
    # sizes: as the leader's metrics endpoint reports them, and as its segments are on disk
    leaders = [int(r.find_elements(By.CSS_SELECTOR, "td")[1].text) for r in rows]
    shown = [int(e.get_attribute("data-bytes")) for e in css(browser, "#partitions td.size")]
    assert len(shown) == 3 and shown[0] > shown[1] > shown[2] == 0, shown
    for p, (leader, size) in enumerate(zip(leaders, shown, strict=True)):
        assert size == log_size_metric(world.cluster, leader, TOPIC, p)
        assert size == log_size_on_disk(world.cluster, leader, TOPIC, p)
    assert css(browser, "#config-retention\\.ms")
    assert css(browser, "svg.chart")
    shots(browser, "console-topic")


def test_messages_by_offset_and_timestamp(
    console: Console, browser: Any, world: World, shots: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{console.url}/topics/{TOPIC}")
    click(browser, "browse", "#browse-form")
    for field, value in (("partition", "0"), ("offset", "5"), ("count", "5")):
        by_id(browser, field).clear()
        by_id(browser, field).send_keys(value)
    Select(by_id(browser, "render")).select_by_visible_text("json")
    click(browser, "show", "#messages")
    assert table_column(browser, "#messages td.offset") == ["5", "6", "7", "8", "9"]
    values = [json.loads(v) for v in table_column(browser, "#messages td.value pre")]
    assert values == [json.loads(_value(i)) for i in range(5, 10)]
    assert table_column(browser, "#messages td.key pre") == ["null", "k6", "null", "k8", "null"]
    headers = table_column(browser, "#messages td.headers")
    assert "source: console-test" in headers[0] and "seq: 5" in headers[0]
    shots(browser, "console-messages")
    # from a timestamp: the first message of the partition
    by_id(browser, "from-timestamp").click()
    by_id(browser, "timestamp").clear()
    by_id(browser, "timestamp").send_keys(str(world.first_ts[0]))
    Select(by_id(browser, "render")).select_by_visible_text("hex")
    click(browser, "show", "#messages td.offset")
    assert table_column(browser, "#messages td.offset")[0] == "0"
    hex_value = browser.find_element(By.CSS_SELECTOR, "#messages td.value pre").text
    assert bytes.fromhex(hex_value.replace(" ", "")) == _value(0)
    no_traceback(browser)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (f"topic={TOPIC}&partition=0&offset=abc", "offset 'abc': expected a whole number"),
        (f"topic={TOPIC}&partition=0&offset=1000", "offset 1000 is beyond the end"),
        (f"topic={TOPIC}&partition=9&offset=0", "partition 9: topic 'orders' has 3 partition(s)"),
        (f"topic={TOPIC}&from=timestamp&timestamp=yesterday", "timestamp 'yesterday'"),
        ("topic=no-such-topic&partition=0", "topic 'no-such-topic' does not exist"),
    ],
)
def test_bad_message_queries_show_a_message(
    console: Console, browser: Any, query: str, expected: str
) -> None:
    browser.get(f"{console.url}/messages?{query}")
    assert expected in by_id(browser, "error").text
    no_traceback(browser)


def test_unknown_pages_show_a_message(console: Console, browser: Any) -> None:
    browser.get(f"{console.url}/topics/no-such-topic")
    assert "topic 'no-such-topic' does not exist" in by_id(browser, "error").text
    browser.get(f"{console.url}/groups/no-such-group")
    assert "consumer group 'no-such-group' does not exist" in by_id(browser, "error").text
    no_traceback(browser)


def test_group_lag(console: Console, browser: Any, world: World, shots: Any) -> None:
    from selenium.webdriver.common.by import By

    browser.get(console.url + "/")
    nav(browser, "groups")
    assert GROUP in table_column(browser, "#groups td:first-child a")
    browser.find_element(By.LINK_TEXT, GROUP).click()
    wait(browser, lambda d: css(d, "#lag"))
    rows = {
        (r.find_elements(By.TAG_NAME, "td")[0].text, r.find_elements(By.TAG_NAME, "td")[1].text): r
        for r in css(browser, "#lag tr")[1:]
    }
    ends = {0: 20, 1: 10}
    for p, committed in COMMITTED.items():
        cells = [c.text for c in rows[(TOPIC, str(p))].find_elements(By.TAG_NAME, "td")]
        assert cells[2:5] == [str(committed), str(ends[p]), str(ends[p] - committed)]
    assert by_id(browser, "total-lag").text == str(sum(ends[p] - c for p, c in COMMITTED.items()))
    assert by_id(browser, "group-state").text == "Empty"
    reload_until(browser, lambda d: css(d, "svg.chart polyline"))
    shots(browser, "console-group-billing")


def test_transactions_listed_and_aborted(
    console: Console, browser: Any, world: World, shots: Any
) -> None:
    browser.get(console.url + "/")
    nav(browser, "transactions")
    assert TXN_ID in table_column(browser, "#open-transactions td.tid")
    row = next(r for r in css(browser, "#open-transactions tr") if TXN_ID in r.text)
    assert "Ongoing" in row.text and "payments-0" in row.text
    shots(browser, "console-transactions")
    from selenium.webdriver.common.by import By

    row.find_element(By.CSS_SELECTOR, "button.abort").click()
    wait(browser, lambda d: css(d, "#plan"))
    submit_confirm(browser)
    wait(browser, lambda d: css(d, "#notice"))
    assert TXN_ID not in table_column(browser, "#open-transactions td.tid")
    click(browser, "scan", "#hanging")
    no_traceback(browser)


def test_spark_sinks(console: Console, browser: Any, world: World, shots: Any) -> None:
    browser.get(console.url + "/")
    nav(browser, "sinks")
    section = by_id(browser, f"sink-{world.sink_name}")
    from selenium.webdriver.common.by import By

    assert section.find_element(By.CSS_SELECTOR, ".prefix").text == "orders-job"
    assert section.find_element(By.CSS_SELECTOR, ".last-batch").text == "0"
    assert "sink-out" in section.find_element(By.CSS_SELECTOR, "table.outputs").text
    txns = section.find_element(By.CSS_SELECTOR, "table.txns").text
    assert f"{world.sink_name}-driver" in txns
    inputs = section.find_element(By.CSS_SELECTOR, "table.inputs").text
    assert "sink-group" in inputs, section.text
    assert not section.find_elements(By.CSS_SELECTOR, ".group-note"), section.text
    rows = [
        [c.text for c in r.find_elements(By.TAG_NAME, "td")]
        for r in section.find_elements(By.CSS_SELECTOR, "table.inputs tr")[1:]
    ]
    # 10 records per partition of sink-in, batch 0 consumed 7 and 3 of them
    assert rows == [
        ["sink-group", "sink-in", "0", "7", "10", "3"],
        ["sink-group", "sink-in", "1", "3", "10", "7"],
    ]
    shots(browser, "console-sinks")


# --- the actions ----------------------------------------------------------------------------------


def test_create_change_and_delete_a_topic(
    console: Console, browser: Any, world: World, shots: Any
) -> None:
    browser.get(console.url + "/topics")
    by_id(browser, "new-name").send_keys("created-by-console")
    by_id(browser, "new-partitions").clear()
    by_id(browser, "new-partitions").send_keys("2")
    by_id(browser, "new-replication").clear()
    by_id(browser, "new-replication").send_keys("2")
    by_id(browser, "new-configs").send_keys("cleanup.policy=compact")
    click(browser, "create", "#plan")
    assert "partitions: 2" in by_id(browser, "plan").text
    submit_confirm(browser, "#partitions")
    assert "created-by-console" in world.topics()
    assert world.topic_config("created-by-console", "cleanup.policy") == "compact"
    # change a config, through its confirmation page
    by_id(browser, "config-name").send_keys("retention.ms")
    by_id(browser, "config-value").send_keys("3600000")
    click(browser, "alter", "#plan")
    assert "set retention.ms to 3600000" in by_id(browser, "plan").text
    submit_confirm(browser)
    wait(browser, lambda d: css(d, "#notice"))
    assert world.topic_config("created-by-console", "retention.ms") == "3600000"
    assert by_id(browser, "config-retention.ms").get_attribute("class") == "override"
    # delete: a wrong name deletes nothing, the right one deletes
    click(browser, "delete", "#typed")
    by_id(browser, "typed").send_keys("wrong-name")
    submit_confirm(browser, "#typed")
    assert "does not match" in by_id(browser, "plan").text
    assert "created-by-console" in world.topics()
    by_id(browser, "typed").send_keys("created-by-console")
    submit_confirm(browser)
    wait(browser, lambda d: css(d, "#notice"))
    wait_for(lambda: "created-by-console" not in world.topics(), 60, "the topic deleted")


def test_reset_offsets_of_an_empty_group(console: Console, browser: Any, world: World) -> None:
    from selenium.webdriver.support.ui import Select

    browser.get(f"{console.url}/groups/{GROUP}")
    Select(by_id(browser, "reset-to")).select_by_visible_text("earliest")
    click(browser, "reset", "#plan")
    plan = by_id(browser, "plan").text
    assert f"{TOPIC}-0: 12 -> 0" in plan and f"{TOPIC}-1: 4 -> 0" in plan
    assert world.committed(GROUP) == COMMITTED  # nothing changed before the confirmation
    submit_confirm(browser)
    wait(browser, lambda d: css(d, "#notice"))
    assert world.committed(GROUP) == {0: 0, 1: 0}
    assert by_id(browser, "total-lag").text == "30"


def test_read_only_console_hides_and_refuses_writes(readonly: Console, browser: Any) -> None:
    browser.get(readonly.url + "/topics")
    assert not css(browser, "#create-topic")
    browser.get(f"{readonly.url}/topics/{TOPIC}")
    assert not css(browser, "#alter-config") and not css(browser, "#delete-topic")
    browser.get(f"{readonly.url}/groups/{GROUP}")
    assert not css(browser, "#reset-form")
    request = urllib.request.Request(
        readonly.url + "/topics",
        data=b"name=sneaky&partitions=1&replication=1&confirmed=1",
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 403
    assert "--allow-writes" in refused.value.read().decode()


def test_live_traffic_plots(console: Console, browser: Any, load: Load, shots: Any) -> None:
    """The plots under the module's background traffic (the README's two screenshots)."""
    load.ran_for(LOAD_SECONDS)
    browser.get(console.url + "/")
    reload_until(
        browser,
        lambda d: (
            moving(d, "Produce rate per topic", LOAD_TOPICS[0])
            and moving(d, "Produce rate per topic", LOAD_TOPICS[1])
            and moving(d, "Consumer group lag", LIVE_GROUP)
        ),
    )
    no_traceback(browser)
    shots(browser, "console-cluster")
    browser.get(f"{console.url}/groups/{LIVE_GROUP}")
    reload_until(
        browser,
        lambda d: (
            by_id(d, "group-state").text == "Stable"
            and moving(d, f"Lag of {LIVE_GROUP}", LIVE_GROUP)
        ),
    )
    members = table_column(browser, "#members td.client-id")
    assert members == ["dashboard-reader"], members
    owners = {r.text for r in css(browser, "#lag td.owner")}
    assert owners == {"dashboard-reader"}, owners
    browser.set_window_size(1400, 1060)
    try:
        shots(browser, "console-group")
    finally:
        browser.set_window_size(1400, 900)
    load.stop()
    assert not load.errors, load.errors


def test_console_from_bootstrap_servers_only(cluster: Any, world: World) -> None:
    """``--bootstrap-server`` without ``--dir``: the brokers listed, the plots drawn from the
    cluster's offsets, and no metrics (no URLs known): a hint instead, sizes "-"."""
    c = Console("--bootstrap-server", world.bootstrap, "--sample-interval", "1")
    try:
        status, html = c.get("/")
        assert status == 200, html
        for b in cluster.json["brokers"]:
            assert f"<td>{b['host']}:{b['port']}</td>" in html
        assert 'id="no-metrics"' in html and "/metrics" not in html
        assert 'aria-label="Produce rate per topic"' in html
        wait_for(lambda: "<polyline" in c.get("/")[1], 30, "a plot drawn without metrics URLs")
        status, html = c.get(f"/topics/{TOPIC}")
        assert status == 200, html
        assert 'id="no-metrics"' in html
        assert html.count('<td class="size">-</td>') == 3
        status, html = c.get("/topics")
        assert status == 200 and TOPIC in html
        assert "Traceback" not in html
    finally:
        c.stop()


def test_cross_origin_posts_change_nothing(console: Console, world: World) -> None:
    """CSRF: a form posted from another origin (or a sandboxed one, ``null``), or to a
    DNS-rebound name, is refused with 403 by the --allow-writes console, and nothing
    changes."""
    create = b"name=cross-origin&partitions=1&replication=1&confirmed=1"
    delete = b"typed=payments&confirmed=1"
    rebound = console.url.replace("127.0.0.1", "evil.example").split("//", 1)[1]
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Origin": f"http://{rebound}", "Host": rebound},
    ):
        for path, form in (("/topics", create), ("/topics/payments/delete", delete)):
            status, body = http(console.url + path, form, headers)
            assert status == 403, (headers, body)
            assert "refused" in body and "Traceback" not in body
    status, _body = http(console.url + "/", headers={"Host": rebound})
    assert status == 403
    topics = world.topics()
    assert "cross-origin" not in topics and "payments" in topics


def test_a_hard_stopped_broker_still_gives_pages(
    cluster: Any, console: Console, browser: Any, world: World, shots: Any
) -> None:
    cluster.stop_broker(hard=True, broker_id=3)
    try:
        browser.get(console.url + "/")

        # Until the controller has fenced the broker, a page may still show it up, or show
        # the message of a request that went to the dead broker: reload until the page shows
        # both the ISR shrink and the broker down. A leader drops a silent follower from the
        # ISR only after replica.lag.time.max.ms (30 s) and checks every 15 s, so this may
        # take up to 45 s (a 30 s wait failed once in CI).
        def broker_down_shown(d: Any) -> bool:
            shown = css(d, "#under-replicated")
            return (
                bool(shown)
                and shown[0].text not in ("0", "")
                and len(css(d, "#brokers tr.down")) == 1
            )

        reload_until(browser, broker_down_shown, timeout=75)
        down = [r.text for r in css(browser, "#brokers tr.down")]
        assert len(down) == 1 and down[0].startswith("3"), down
        shots(browser, "console-broker-down")
        for key in ("topics", "groups", "transactions", "sinks", "messages"):
            nav(browser, key)
            no_traceback(browser)
        browser.get(f"{console.url}/topics/{TOPIC}")
        reload_until(
            browser,
            lambda d: any(int(e.text) >= 1 for e in css(d, "#topic-under-replicated")),
        )
        no_traceback(browser)
    finally:
        cluster.start_broker(3)
