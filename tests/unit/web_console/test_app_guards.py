"""broker/cli/web_console/app.py and prometheus.py, without a cluster: what counts as a
cross-origin form post (CSRF), the Host check of a console bound to loopback (DNS
rebinding), and partition sizes taken from the leader's metrics, else the largest replica's."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest
from starlette.requests import Request

from broker.cli.web_console import prometheus
from broker.cli.web_console.app import LoopbackHostOnly, foreign_origin, loopback
from broker.types import TopicPartition

pytestmark = pytest.mark.unit


def scope(headers: dict[str, str], host: str = "127.0.0.1:8080") -> dict[str, Any]:
    raw = [(b"host", host.encode())] + [
        (k.lower().encode(), v.encode()) for k, v in headers.items()
    ]
    return {
        "type": "http",
        "method": "POST",
        "scheme": "http",
        "path": "/topics",
        "raw_path": b"/topics",
        "query_string": b"",
        "headers": raw,
        "server": ("127.0.0.1", 8080),
    }


@pytest.mark.parametrize(
    ("headers", "refused"),
    [
        ({}, None),  # not a browser (curl): no Origin
        ({"Origin": "http://127.0.0.1:8080"}, None),
        ({"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}, None),
        ({"Origin": "http://evil.example"}, "http://evil.example"),
        ({"Origin": "http://127.0.0.1:9999"}, "http://127.0.0.1:9999"),
        ({"Origin": "https://127.0.0.1:8080"}, "https://127.0.0.1:8080"),
        ({"Origin": "null"}, "null"),
        ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site: cross-site"),
    ],
)
def test_cross_origin_posts(headers: dict[str, str], refused: str | None) -> None:
    assert foreign_origin(Request(scope(headers))) == refused


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("evil.example", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_names(host: str | None, ok: bool) -> None:
    assert loopback(host) is ok


def call(host: str) -> tuple[int, bytes]:
    sent: list[MutableMapping[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"page"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(LoopbackHostOnly(app)(scope({}, host), receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "localhost"])
def test_loopback_hosts_pass(host: str) -> None:
    assert call(host) == (200, b"page")


@pytest.mark.parametrize("host", ["evil.example:8080", "evil.example", "10.1.1.1:8080", ""])
def test_other_hosts_are_refused(host: str) -> None:
    status, body = call(host)
    assert status == 403 and b"not a loopback name" in body


def size(topic: str, partition: int, value: float) -> prometheus.MetricSample:
    return ("kafka_log_log_size", {"topic": topic, "partition": str(partition)}, value)


def test_partition_sizes_are_the_leaders(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {
        "http://b1/metrics": [size("t", 0, 100), size("t", 1, 70), ("other", {}, 1.0)],
        "http://b2/metrics": [size("t", 0, 90), size("t", 1, 80), size("u", 0, 5)],
        "http://b3/metrics": [],  # did not answer
    }
    monkeypatch.setattr(prometheus, "scrape", lambda url: answers[url])
    urls = {1: "http://b1/metrics", 2: "http://b2/metrics", 3: "http://b3/metrics"}
    leaders = {
        TopicPartition("t", 0): 2,  # the leader's 90, though a follower says 100
        TopicPartition("t", 1): 3,  # leader silent: the largest other report
        TopicPartition("u", 0): 1,  # leader has no figure: the one report
    }
    sizes = prometheus.partition_sizes(urls, leaders)
    assert sizes == {
        TopicPartition("t", 0): 90,
        TopicPartition("t", 1): 80,
        TopicPartition("u", 0): 5,
    }
    assert prometheus.topic_sizes(sizes) == {"t": 170, "u": 5}
    assert prometheus.partition_sizes({}, leaders) == {}


def test_a_scrape_of_nothing_listening_is_empty() -> None:
    assert prometheus.scrape("http://127.0.0.1:1/metrics") == []
    assert prometheus.scrape("file:///etc/passwd") == []
