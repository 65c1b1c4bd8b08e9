"""The broker-latency probe's pure parts (bench/broker_latency.py): the requests it sends are
the Produce and Fetch Kafka's schemas describe (a malformed one would measure an error path),
and the report's medians and rows: a swapped row would publish a wrong comparison."""

from __future__ import annotations

import argparse

import pytest

from bench import broker_latency
from bench.broker_latency import Probe
from broker.protocol import records, registry
from broker.protocol.api_keys import ApiKey

pytestmark = pytest.mark.unit


def test_the_produce_carries_one_batch_of_ten_100_byte_records() -> None:
    body = broker_latency._produce_body("events")
    request = registry.decode_request(ApiKey.PRODUCE, broker_latency.PRODUCE_VERSION, body, 0)
    assert int(request.acks) == 1 and request.transactional_id is None
    [topic] = request.topic_data
    [part] = topic.partition_data
    assert topic.name == "events" and int(part.index) == 0
    [header] = list(records.iter_batches(part.records))
    assert header.record_count == 10 and records.crc_ok(part.records, header)
    assert all(len(r.value or b"") == 100 for r in records.decode_records(part.records, header))


def test_the_fetch_long_polls_at_the_given_offset() -> None:
    body = broker_latency._fetch_body("events", 1230)
    request = registry.decode_request(ApiKey.FETCH, broker_latency.FETCH_VERSION, body, 0)
    assert int(request.replica_id) == -1 and int(request.min_bytes) == 1
    assert request.max_wait.total_seconds() == 0.5
    assert int(request.isolation_level) == 0 and int(request.session_epoch) == -1
    [topic] = request.topics
    [part] = topic.partitions
    assert (topic.topic, int(part.partition), int(part.fetch_offset)) == ("events", 0, 1230)


def test_report_rows_are_each_systems_medians_over_rounds() -> None:
    probes = [
        Probe("Millrace", [100.0] * 98 + [900.0, 1000.0], 250.0),
        Probe("Kafka", [200.0] * 100, 500.0),
        Probe("Millrace", [120.0] * 100, 270.0),
        Probe("Kafka", [300.0] * 100, 400.0),
        Probe("Millrace", [140.0] * 100, 260.0),
    ]
    assert probes[0].percentile(50) == 100.0 and probes[0].percentile(99) == 1000.0
    text = broker_latency.report(probes, argparse.Namespace(rounds=3, pairs=100))
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| Kafka") or line.startswith("| Millrace")
    ]
    assert rows == [
        "| Kafka | 250 | 250 | 250 | 450 | 200, 300 |",
        "| Millrace | 120 | 120 | 140 | 260 | 100, 120, 140 |",
    ]
