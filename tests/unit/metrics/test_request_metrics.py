"""broker/request_metrics.py: the null recorder, BrokerTopicMetrics counts per topic and for
all topics (Kafka's rules for what counts as failed), follower bytes kept apart, and the
request latency histogram's buckets as Prometheus reads them."""

from __future__ import annotations

import inspect
import io

import pytest

from broker.log.file_records import FetchSlice
from broker.protocol.errors import ErrorCode
from broker.replication.results import FetchResult
from broker.request_metrics import (
    LATENCY_BUCKETS_MS,
    NOOP_RECORDER,
    LatencyHistogram,
    MetricsRecorder,
    Recorder,
)
from broker.types import TopicPartition
from tests.unit.metrics.exposition import scrape, value

pytestmark = pytest.mark.unit

BTM = "kafka_server_brokertopicmetrics"


def _result(topic: str, size: int, error: ErrorCode = ErrorCode.none) -> FetchResult:
    piece = FetchSlice(io.BytesIO(b"x" * size), 0, size, 0, 0, data=b"x" * size)
    return FetchResult(TopicPartition(topic, 0), error, slice=piece if size else None)


def test_the_null_recorder_has_the_same_interface_and_records_nothing() -> None:
    public = {
        name
        for name, member in inspect.getmembers(MetricsRecorder, inspect.isfunction)
        if not name.startswith("_") and name != "forget_topic"
    }
    assert public <= {name for name in dir(Recorder)}
    assert type(NOOP_RECORDER) is Recorder and not NOOP_RECORDER.enabled
    NOOP_RECORDER.produced("t", 5, 100)
    NOOP_RECORDER.produce_failed("t", ErrorCode.invalid_record, 100)
    NOOP_RECORDER.fetched([_result("t", 10)], follower=False)
    NOOP_RECORDER.replicated_in(10)
    NOOP_RECORDER.request_done("Produce", 9, 1.0)
    assert NOOP_RECORDER.families() == []
    assert MetricsRecorder().enabled


def test_produce_counts_per_topic_and_for_all_topics() -> None:
    r = MetricsRecorder()
    r.produced("a", 10, 1000)
    r.produced("a", 0, 0)  # an idempotent retry's duplicate: a request, nothing appended
    r.produced("b", 1, 70)
    s = scrape(r.families())
    assert value(s, f"{BTM}_messagesin_total", topic="a") == 10
    assert value(s, f"{BTM}_messagesin_total", topic="b") == 1
    assert value(s, f"{BTM}_messagesin_total") == 11
    assert value(s, f"{BTM}_bytesin_total", topic="a") == 1000
    assert value(s, f"{BTM}_bytesin_total") == 1070
    assert value(s, f"{BTM}_totalproducerequests_total", topic="a") == 2
    assert value(s, f"{BTM}_totalproducerequests_total") == 3


def test_failed_produce_follows_kafkas_rules() -> None:
    r = MetricsRecorder()
    r.produce_failed("a", ErrorCode.not_leader_or_follower, 100)  # not a failure in Kafka
    r.produce_failed("a", ErrorCode.invalid_record, 100)
    r.produce_failed("a", ErrorCode.not_enough_replicas, 100)
    r.produce_failed("a", ErrorCode.message_too_large, 5000)  # rejected, not "failed"
    s = scrape(r.families())
    assert value(s, f"{BTM}_totalproducerequests_total", topic="a") == 4
    assert value(s, f"{BTM}_failedproducerequests_total", topic="a") == 2
    assert value(s, f"{BTM}_bytesrejected_total", topic="a") == 5000
    assert value(s, f"{BTM}_bytesrejected_total") == 5000
    assert value(s, f"{BTM}_messagesin_total", topic="a") == 0


def test_fetch_bytes_out_are_consumers_followers_count_as_replication() -> None:
    r = MetricsRecorder()
    r.fetched([_result("a", 300), _result("b", 0)], follower=False)
    r.fetched([_result("a", 500)], follower=True)
    r.fetched([_result("a", 0, ErrorCode.offset_out_of_range)], follower=False)
    r.fetched([_result("a", 0, ErrorCode.unknown_server_error)], follower=False)
    r.replicated_in(800)
    s = scrape(r.families())
    assert value(s, f"{BTM}_bytesout_total", topic="a") == 300
    assert value(s, f"{BTM}_bytesout_total") == 300
    assert value(s, f"{BTM}_replicationbytesout_total") == 500
    assert value(s, f"{BTM}_replicationbytesin_total") == 800
    assert value(s, f"{BTM}_totalfetchrequests_total", topic="a") == 4
    assert value(s, f"{BTM}_totalfetchrequests_total", topic="b") == 1
    assert value(s, f"{BTM}_totalfetchrequests_total") == 5
    assert value(s, f"{BTM}_failedfetchrequests_total", topic="a") == 1
    # replication bytes have no per-topic series (as in Kafka)
    assert value(s, f"{BTM}_replicationbytesout_total", topic="a") is None


def test_forget_topic_drops_its_series_only() -> None:
    r = MetricsRecorder()
    r.produced("a", 1, 10)
    r.produced("b", 1, 10)
    r.forget_topic("a")
    s = scrape(r.families())
    assert value(s, f"{BTM}_messagesin_total", topic="a") is None
    assert value(s, f"{BTM}_messagesin_total", topic="b") == 1
    assert value(s, f"{BTM}_messagesin_total") == 2


def test_latency_buckets_are_cumulative_and_inclusive_of_their_bound() -> None:
    h = LatencyHistogram()
    for ms in (0.1, 0.5, 0.6, 3.0, 10_000.0, 20_000.0):
        h.observe(ms)
    buckets = dict(h.cumulative())
    assert list(buckets) == [*(repr(b) for b in LATENCY_BUCKETS_MS), "+Inf"]
    assert buckets["0.5"] == 2  # 0.5 is "le 0.5"
    assert buckets["1.0"] == 3
    assert buckets["5.0"] == 4
    assert buckets["10000.0"] == 5
    assert buckets["+Inf"] == 6 == h.count
    assert h.sum_ms == pytest.approx(30_004.2)


def test_requests_by_name_and_version_with_a_histogram_per_name() -> None:
    r = MetricsRecorder()
    r.request_done("Produce", 9, 0.7)
    r.request_done("Produce", 8, 30.0)
    r.request_done("Metadata", 12, 2.0)
    s = scrape(r.families())
    req = "kafka_network_requestmetrics"
    assert value(s, f"{req}_requests_total", request="Produce", version="9") == 1
    assert value(s, f"{req}_requests_total", request="Produce", version="8") == 1
    assert value(s, f"{req}_requests_total", request="Metadata", version="12") == 1
    assert value(s, f"{req}_totaltimems_count", request="Produce") == 2
    assert value(s, f"{req}_totaltimems_sum", request="Produce") == pytest.approx(30.7)
    assert value(s, f"{req}_totaltimems_bucket", request="Produce", le="1.0") == 1
    assert value(s, f"{req}_totaltimems_bucket", request="Produce", le="50.0") == 2
    assert value(s, f"{req}_totaltimems_bucket", request="Produce", le="+Inf") == 2
    assert value(s, f"{req}_totaltimems_bucket", request="Metadata", le="1.0") == 0
