"""Prometheus metrics of a real 3-broker cluster under load, checked against what the load did
(issue 30, "Proof"). Every broker's ``metrics_url`` comes from cluster.json and is scraped
with urllib and parsed with prometheus_client's own parser.

One scenario, in order, on a topic of 6 partitions with replication factor 3:

* produce with confluent-kafka (acks=all, idempotent) while scraping: every scrape answers,
  and afterwards the sum over the brokers of
  ``kafka_server_brokertopicmetrics_messagesin_total{topic}`` equals the records acknowledged
  (only leaders count appends);
* every replica's ``kafka_log_log_logendoffset`` equals the records acknowledged in its
  partition and its ``kafka_log_log_size`` equals the leader's;
* exactly one broker reports ``kafka_controller_kafkacontroller_activecontrollercount`` 1;
* a subscribed consumer group commits part of the topic: exactly one broker (its coordinator)
  reports it, as a Stable group, and its ``kafka_consumergroup_lag`` per partition equals the
  high watermark confluent-kafka sees minus the committed offset confluent-kafka reads back;
* a broker (neither the controller nor the group's coordinator) is hard-stopped: the
  under-replicated partitions summed over the live brokers rise above 0 while the
  controller's offline partitions stay 0; after ``cluster start-broker`` they fall back to 0.

Every check polls the scrapes until the condition holds or a deadline passes (no sleeps).
"""

from __future__ import annotations

import threading
import urllib.request
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from prometheus_client.parser import text_string_to_metric_families

if TYPE_CHECKING:
    from tests.harness.cluster import Cluster

PARTITIONS = 6
RECORDS = 3000
GROUP = "metrics-lag-group"
PROPS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "group.initial.rebalance.delay.ms": "0",
    "controlled.shutdown.retry.backoff.ms": "500",
}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.cluster_config(PROPS, brokers=3),
]

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str) -> Samples:
    """One scrape: sample name -> [(labels, value)]."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), sample.value))
    return out


def get(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the sample whose labels are exactly ``labels``; None when absent."""
    for have, value in samples.get(name, []):
        if have == labels:
            return value
    return None


def scrape_all(cluster: Cluster, ids: list[int] | None = None) -> dict[int, Samples]:
    cluster.reload()
    wanted = cluster.broker_ids() if ids is None else ids
    return {b: scrape(str(cluster.broker(b)["metrics_url"])) for b in wanted}


def test_metrics_follow_the_load(cluster: Cluster, topic_name: str) -> None:
    urls = {b: cluster.broker(b).get("metrics_url") for b in cluster.broker_ids()}
    assert all(isinstance(u, str) and u.startswith("http://127.0.0.1:") for u in urls.values()), (
        urls
    )
    cluster.create_topic(topic_name, PARTITIONS, replication_factor=3)
    layout = cluster.wait_isr_complete(topic_name)

    acked = produce_while_scraping(cluster, topic_name)
    check_messages_in_and_logs(cluster, topic_name, acked, layout)
    controller = check_one_active_controller(cluster)
    consumer, coordinator = commit_part_and_check_lag(cluster, topic_name, acked)
    try:
        victim = next(b for b in cluster.broker_ids() if b not in (controller, coordinator))
        check_under_replicated_rise_and_fall(cluster, victim)
    finally:
        consumer.close()


# --- steps ---------------------------------------------------------------------------------


def produce_while_scraping(cluster: Cluster, topic: str) -> dict[int, int]:
    """Produce RECORDS records round-robin (acks=all); scrape every broker meanwhile. Returns
    the acknowledged count per partition."""
    acked: dict[int, int] = defaultdict(int)
    errors: list[Any] = []
    lock = threading.Lock()

    def on_delivery(err: Any, msg: Any) -> None:
        with lock:
            if err is not None:
                errors.append(err)
            else:
                acked[msg.partition()] += 1

    def produce() -> None:
        producer = Producer(
            cluster.conf({"acks": "all", "enable.idempotence": True, "linger.ms": 5})
        )
        for i in range(RECORDS):
            producer.produce(
                topic, value=b"v%06d" % i + b"x" * 200, partition=i % PARTITIONS,
                on_delivery=on_delivery,
            )  # fmt: skip
            producer.poll(0)
        assert producer.flush(60) == 0

    thread = threading.Thread(target=produce, name="metrics-load")
    thread.start()
    scrapes = 0
    try:
        while thread.is_alive() or scrapes == 0:
            seen = scrape_all(cluster)  # raises if a broker does not answer
            assert all(
                "kafka_server_brokertopicmetrics_messagesin_total" in s for s in seen.values()
            )
            scrapes += 1
    finally:
        thread.join(90)
    assert not errors, errors[:5]
    assert sum(acked.values()) == RECORDS
    return dict(acked)


def check_messages_in_and_logs(
    cluster: Cluster, topic: str, acked: dict[int, int], layout: dict[int, Any]
) -> None:
    def messages_in_matches() -> dict[int, Samples] | None:
        seen = scrape_all(cluster)
        total = sum(
            get(s, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) or 0
            for s in seen.values()
        )
        return seen if total == RECORDS else None

    cluster.wait_for(messages_in_matches, 20, f"messages in of {topic} summing to {RECORDS}")

    def logs_match() -> bool:
        seen = scrape_all(cluster)
        for p, (leader, replicas, _isr) in layout.items():
            labels = {"topic": topic, "partition": str(p)}
            leader_size = get(seen[leader], "kafka_log_log_size", **labels)
            for b in replicas:
                if get(seen[b], "kafka_log_log_logendoffset", **labels) != acked[p]:
                    return False
                if get(seen[b], "kafka_log_log_size", **labels) != leader_size:
                    return False
                if get(seen[b], "kafka_log_log_logstartoffset", **labels) != 0:
                    return False
        return bool(leader_size)

    cluster.wait_for(logs_match, 20, "every replica's log end offset and size as acknowledged")


def check_one_active_controller(cluster: Cluster) -> int:
    def one() -> int | None:
        seen = scrape_all(cluster)
        active = [
            b
            for b, s in seen.items()
            if get(s, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        ]
        return active[0] if len(active) == 1 else None

    controller: int = cluster.wait_for(one, 20, "exactly one broker with activecontrollercount 1")
    assert controller == cluster.controller_id()
    return controller


def commit_part_and_check_lag(
    cluster: Cluster, topic: str, acked: dict[int, int]
) -> tuple[Consumer, int]:
    """A subscribed consumer commits about a third of each partition; returns it (still a
    member) and the broker coordinating its group."""
    consumer = Consumer(
        cluster.conf(
            {
                "group.id": GROUP,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 30000,
            }
        )
    )
    consumer.subscribe([topic])
    committed_goal = {p: acked[p] // 3 for p in range(PARTITIONS)}

    def assigned_and_committed() -> bool:
        consumer.poll(0.2)
        if len(consumer.assignment()) != PARTITIONS:
            return False
        consumer.commit(
            offsets=[KafkaTopicPartition(topic, p, o) for p, o in committed_goal.items()],
            asynchronous=False,
        )
        return True

    cluster.wait_for(assigned_and_committed, 30, f"{GROUP} assigned every partition, committed")
    committed = {
        tp.partition: tp.offset
        for tp in consumer.committed(
            [KafkaTopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10
        )
    }
    assert committed == committed_goal
    high = {
        p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1]
        for p in range(PARTITIONS)
    }
    assert high == acked

    def lag_as_expected() -> int | None:
        seen = scrape_all(cluster)
        reporting = [
            b
            for b, s in seen.items()
            if any(
                labels.get("consumergroup") == GROUP
                for labels, _v in s.get("kafka_consumergroup_current_offset", [])
            )
        ]
        if len(reporting) != 1:
            return None
        [coordinator] = reporting
        s = seen[coordinator]
        for p in range(PARTITIONS):
            labels = {"consumergroup": GROUP, "topic": topic, "partition": str(p)}
            if get(s, "kafka_consumergroup_current_offset", **labels) != committed[p]:
                return None
            if get(s, "kafka_consumergroup_lag", **labels) != high[p] - committed[p]:
                return None
        lag_sum = get(s, "kafka_consumergroup_lag_sum", consumergroup=GROUP, topic=topic)
        if lag_sum != sum(high[p] - committed[p] for p in range(PARTITIONS)):
            return None
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        stable = sum(get(x, prefix + "numgroupsstable") or 0 for x in seen.values())
        groups = sum(get(x, prefix + "numgroups") or 0 for x in seen.values())
        offsets = get(s, prefix + "numoffsets")
        if (stable, groups, get(s, prefix + "numgroupsstable"), offsets) != (1, 1, 1, PARTITIONS):
            return None
        return coordinator

    coordinator: int = cluster.wait_for(
        lag_as_expected, 30, f"{GROUP}'s lag reported once, as end offset minus committed"
    )
    return consumer, coordinator


def check_under_replicated_rise_and_fall(cluster: Cluster, victim: int) -> None:
    urp = "kafka_server_replicamanager_underreplicatedpartitions"
    offline = "kafka_controller_kafkacontroller_offlinepartitionscount"
    live = [b for b in cluster.broker_ids() if b != victim]
    cluster.stop_broker(hard=True, broker_id=victim)

    def risen() -> bool:
        seen = scrape_all(cluster, live)
        return (
            sum(get(s, urp) or 0 for s in seen.values()) > 0
            and sum(get(s, offline) or 0 for s in seen.values()) == 0
        )

    cluster.wait_for(risen, 30, f"under-replicated partitions > 0 after broker {victim} died")
    cluster.start_broker(victim)

    def fallen() -> bool:
        seen = scrape_all(cluster)
        return (
            sum(get(s, urp) or 0 for s in seen.values()) == 0
            and sum(get(s, offline) or 0 for s in seen.values()) == 0
        )

    cluster.wait_for(fallen, 60, f"no under-replicated partition after broker {victim} returned")
