"""Scraping the brokers' Prometheus endpoints (``metrics_url`` of ``cluster.json``): the text
format parsed with ``prometheus_client``'s parser, each scrape with a 2-second time-out, the
brokers scraped concurrently (a page waits at most one time-out for all of them); a broker
that does not answer is left out (its figures are then unknown, never invented).

Used for partition sizes: ``kafka_log_log_size{topic, partition}`` as the partition's leader
reports it, or the largest other replica's when the leader did not answer. Concurrency:
stateless functions, safe in any thread.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from broker.types import TopicPartition

SCRAPE_TIMEOUT_S = 2.0
LOG_SIZE = "kafka_log_log_size"

MetricSample = tuple[str, dict[str, str], float]


def scrape(url: str) -> list[MetricSample]:
    """(sample name, labels, value) of every sample at ``url``; [] when it does not answer."""
    from prometheus_client.parser import text_string_to_metric_families

    if not url.startswith(("http://", "https://")):
        return []
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
            text = response.read().decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return []
    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except ValueError:
        return []


def scrape_all(urls: Mapping[int, str]) -> dict[int, list[MetricSample]]:
    """Every broker's samples (broker id -> samples), scraped concurrently."""
    if not urls:
        return {}
    ids = sorted(urls)
    with ThreadPoolExecutor(max_workers=min(len(ids), 8)) as pool:
        return dict(zip(ids, pool.map(scrape, [urls[i] for i in ids]), strict=True))


def log_sizes(samples: list[MetricSample]) -> dict[TopicPartition, int]:
    """Bytes per partition replica in one broker's samples."""
    out: dict[TopicPartition, int] = {}
    for name, labels, value in samples:
        if name != LOG_SIZE or "topic" not in labels or "partition" not in labels:
            continue
        try:
            out[TopicPartition(labels["topic"], int(labels["partition"]))] = int(value)
        except ValueError:
            continue
    return out


def partition_sizes(
    urls: Mapping[int, str], leaders: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Bytes per partition: its leader's report (``leaders``: partition -> leader id), else
    the largest report of the other brokers."""
    by_broker = {b: log_sizes(s) for b, s in scrape_all(urls).items()}
    out: dict[TopicPartition, int] = {}
    for sizes in by_broker.values():
        for tp, size in sizes.items():
            out[tp] = max(out.get(tp, 0), size)
    for tp, leader in leaders.items():
        if tp in by_broker.get(leader, {}):
            out[tp] = by_broker[leader][tp]
    return out


def topic_sizes(sizes: Mapping[TopicPartition, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for tp, size in sizes.items():
        out[tp.topic] = out.get(tp.topic, 0) + size
    return out
