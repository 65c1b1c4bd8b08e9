"""Cluster operations through the ``millrace`` command on 3 brokers (issue 3, "Operations").

* ``millrace topics describe`` prints Leader/Replicas/Isr per partition like kafka-topics.sh,
  matching what Metadata says; ``--under-replicated-partitions`` lists the partitions of a
  hard-stopped broker and nothing once it is back in the ISR.
* ``millrace reassign --generate/--execute/--verify`` (kafka-reassign-partitions.sh options
  and JSON format) moves a partition to another broker and raises another's replication
  factor from 1 to 3; ``--verify`` reports completion, the new replicas are all in the ISR,
  the old replica's directory is removed and every record is still served.
* ``millrace elect-leaders --election-type preferred --all-topic-partitions``
  (kafka-leader-election.sh) gives leadership back to the preferred replicas after a broker
  restart (``auto.leader.rebalance.enable=false`` so nothing else does).
* Kafka 3.9.1's own ``kafka-reassign-partitions`` (ReassignPartitionsCommand) moves replicas
  too: ``--execute``, then ``--verify`` until it reports completion and clears the
  replication throttles (IncrementalAlterConfigs DELETE on every broker and on the topic),
  exit status 0; ``--throttle`` is refused with a message that names what is missing
  (replication throttles are not implemented) and moves nothing.

Each tool runs as its own process in the cluster directory (``Cluster.cli``).
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import KafkaError, Producer

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

BROKERS = [1, 2, 3]
PROPS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "auto.leader.rebalance.enable": "false",
    # the last broker of `cluster down` cannot hand its leadership to anyone: don't wait 3 x 5 s
    "controlled.shutdown.retry.backoff.ms": "500",
}
PARTITION_LINE = re.compile(
    r"^\s*Topic: (?P<topic>\S+)\tPartition: (?P<partition>\d+)\tLeader: (?P<leader>\S+)\t"
    r"Replicas: (?P<replicas>[\d,]*)\tIsr: (?P<isr>[\d,]*)"
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(PROPS, brokers=3),
]


@pytest.fixture(autouse=True)
def _all_brokers_running(request: pytest.FixtureRequest) -> None:
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").ensure_all_running()


def ids(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def describe_lines(
    c: Cluster, topic: str, *flags: str
) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """``millrace topics describe --topic T FLAGS`` parsed: {partition: (leader, replicas, isr)}
    (leader -1 for ``none``). Asserts every partition line is well formed."""
    out = c.cli("topics", "describe", "--bootstrap-server", c.bootstrap, "--topic", topic, *flags)
    parsed: dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]] = {}
    for line in out.splitlines():
        if not line.strip() or line.startswith("Topic:"):
            continue
        m = PARTITION_LINE.match(line)
        assert m, f"not a kafka-topics partition line: {line!r}\n{out}"
        assert m["topic"] == topic, line
        leader = -1 if m["leader"] == "none" else int(m["leader"])
        parsed[int(m["partition"])] = (leader, ids(m["replicas"]), ids(m["isr"]))
    return parsed


def produce(c: Cluster, topic: str, values: list[bytes], partitions: int) -> None:
    """acks=all produce round-robin over ``partitions``; every record acknowledged."""
    errors: list[KafkaError] = []
    lock = threading.Lock()

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            with lock:
                errors.append(err)

    p = Producer(c.conf({"acks": "all", "enable.idempotence": True, "linger.ms": 5}))
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions, on_delivery=on_delivery)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]


def write_plan(c: Cluster, topic: str, name: str, assignment: dict[int, list[int]]) -> Path:
    """A kafka-reassign-partitions plan ({partition: replicas}, any log dir) in the cluster
    directory."""
    plan = c.dir / f"{topic}-{name}.json"
    partitions = [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for p, r in assignment.items()
    ]
    plan.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return plan


# --- shared cluster ----------------------------------------------------------------------------


def test_topics_describe_shows_leader_replicas_isr(cluster: Cluster, topic_name: str) -> None:
    c = cluster
    c.cli(
        "topics",
        "create",
        "--bootstrap-server",
        c.bootstrap,
        "--topic",
        topic_name,
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    )
    meta = c.wait_isr_complete(topic_name, 60, brokers=BROKERS)
    out = c.cli("topics", "describe", "--bootstrap-server", c.bootstrap, "--topic", topic_name)
    header = [line for line in out.splitlines() if line.startswith("Topic:")]
    assert len(header) == 1, out
    assert "\tPartitionCount: 3\t" in header[0] and "\tReplicationFactor: 3\t" in header[0], out

    shown = describe_lines(c, topic_name)
    assert sorted(shown) == [0, 1, 2], out
    for p, (leader, replicas, isr) in shown.items():
        m_leader, m_replicas, m_isr = meta[p]
        assert (leader, replicas) == (m_leader, m_replicas), (p, shown[p], meta[p])
        assert sorted(isr) == sorted(m_isr) == BROKERS, (p, shown[p], meta[p])
    assert describe_lines(c, topic_name, "--under-replicated-partitions") == {}
    assert describe_lines(c, topic_name, "--unavailable-partitions") == {}


def _parse_json_blocks(out: str) -> list[dict[str, Any]]:
    """The JSON objects printed one per line (kafka-reassign-partitions.sh style)."""
    return [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]


def test_reassign_moves_replicas_and_increases_rf(cluster: Cluster, topic_name: str) -> None:
    c = cluster
    c.cli(
        "topics",
        "create",
        "--bootstrap-server",
        c.bootstrap,
        "--topic",
        topic_name,
        "--replica-assignment",
        "1,2",
    )
    c.wait_isr_complete(topic_name, 60)
    assert {p: r for p, (_l, r, _i) in c.describe(topic_name).items()} == {0: (1,), 1: (2,)}
    values = [f"reassign-{i:05d}".encode() for i in range(1000)]
    produce(c, topic_name, values, 2)
    moved_before = c.wait_replicas_identical(topic_name, 0, [1], 10)

    # --generate: the current assignment and a proposal over the given brokers
    topics_file = c.dir / f"{topic_name}-topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic_name}]}))
    out = c.cli(
        "reassign",
        "--generate",
        "--bootstrap-server",
        c.bootstrap,
        "--topics-to-move-json-file",
        str(topics_file),
        "--broker-list",
        "1,2,3",
    )
    assert "Current partition replica assignment" in out, out
    assert "Proposed partition reassignment configuration" in out, out
    blocks = _parse_json_blocks(out)
    assert len(blocks) == 2, out
    current, proposed = blocks
    assert {(e["topic"], e["partition"]): e["replicas"] for e in current["partitions"]} == {
        (topic_name, 0): [1],
        (topic_name, 1): [2],
    }, current
    assert proposed["version"] == 1, proposed
    assert sorted(e["partition"] for e in proposed["partitions"]) == [0, 1], proposed
    for e in proposed["partitions"]:
        assert e["topic"] == topic_name and len(e["replicas"]) == 1, e
        assert set(e["replicas"]) <= set(BROKERS), e

    # --execute our own plan: move partition 0 from 1 to 3, grow partition 1 from RF 1 to 3
    target = {0: [3], 1: [2, 3, 1]}
    plan = write_plan(c, topic_name, "plan", target)
    out = c.cli(
        "reassign",
        "--execute",
        "--bootstrap-server",
        c.bootstrap,
        "--reassignment-json-file",
        str(plan),
    )
    assert "Successfully started partition reassignment" in out, out

    verify_out: list[str] = []

    def completed() -> bool:
        text = c.cli(
            "reassign",
            "--verify",
            "--bootstrap-server",
            c.bootstrap,
            "--reassignment-json-file",
            str(plan),
        )
        verify_out[:] = [text]
        return all(
            re.search(rf"Reassignment of partition {re.escape(topic_name)}-{p} is complete", text)
            for p in target
        )

    c.wait_for(completed, 90, f"reassign --verify reporting completion (last: {verify_out})")

    def reassigned() -> dict[int, Any] | None:
        d = c.describe(topic_name)
        if {p: list(r) for p, (_l, r, _i) in d.items()} != target:
            return None
        if not all(sorted(i) == sorted(r) and lead in r for lead, r, i in d.values()):
            return None
        return d

    desc = c.wait_for(reassigned, 30, f"{topic_name} replicas {target}, all in the ISR")
    assert desc[0][0] == 3, desc
    # the replica that left broker 1 is deleted there; the new ones hold the same batches
    c.wait_for(
        lambda: not c.log_dir(topic_name, 0, 1).is_dir(),
        30,
        f"{topic_name}-0 removed from broker 1",
    )
    assert c.wait_replicas_identical(topic_name, 0, [3], 30) == moved_before
    c.wait_replicas_identical(topic_name, 1, BROKERS, 60)

    served = c.consume(topic_name, [0, 1])
    got = sorted(m.value() for msgs in served.values() for m in msgs)
    assert got == sorted(values), f"served {len(got)} of {len(values)} records after reassignment"


# --- with a broker stopped -------------------------------------------------------------------


@pytest.mark.fault
def test_under_replicated_partitions_after_hard_stop(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=3)
    c.create_topic(topic_name, 3, replication_factor=3)
    c.wait_isr_complete(topic_name, 60, brokers=BROKERS)
    assert describe_lines(c, topic_name, "--under-replicated-partitions") == {}

    c.stop_broker(hard=True, broker_id=3)
    c.wait_for(
        lambda: all(3 not in isr for _l, _r, isr in c.describe(topic_name).values()),
        60,
        "broker 3 out of every ISR",
    )
    shown = describe_lines(c, topic_name, "--under-replicated-partitions")
    assert sorted(shown) == [0, 1, 2], shown
    for p, (leader, replicas, isr) in shown.items():
        assert sorted(replicas) == BROKERS and sorted(isr) == [1, 2], (p, shown[p])
        assert leader in (1, 2), (p, shown[p])
    assert describe_lines(c, topic_name, "--unavailable-partitions") == {}

    c.start_broker(3)
    c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
    assert describe_lines(c, topic_name, "--under-replicated-partitions") == {}


@pytest.mark.fault
def test_elect_leaders_restores_preferred_leaders(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=3)
    c.create_topic(topic_name, 3, replication_factor=3)
    desc = c.wait_isr_complete(topic_name, 60, brokers=BROKERS)
    preferred = {p: replicas[0] for p, (_l, replicas, _i) in desc.items()}
    assert all(desc[p][0] == preferred[p] for p in desc), desc
    produce(c, topic_name, [f"e{i}".encode() for i in range(300)], 3)

    victim = preferred[0]
    c.stop_broker(hard=False, broker_id=victim)
    c.start_broker(victim)
    after = c.wait_isr_complete(topic_name, 90, brokers=BROKERS)
    moved = sorted(p for p in after if preferred[p] == victim)
    assert moved and all(after[p][0] != victim for p in moved), (
        f"setup: broker {victim} should lead none of its preferred partitions {moved} after "
        f"a restart with auto.leader.rebalance.enable=false: {after}"
    )
    shown = describe_lines(c, topic_name)
    assert all(shown[p][0] != victim for p in moved), shown

    out = c.cli(
        "elect-leaders",
        "--bootstrap-server",
        c.bootstrap,
        "--election-type",
        "preferred",
        "--all-topic-partitions",
    )
    assert "Successfully completed leader election (PREFERRED)" in out, out
    for p in moved:
        assert f"{topic_name}-{p}" in out, out
    c.wait_for(
        lambda: all(l_ == preferred[p] for p, (l_, _r, _i) in c.describe(topic_name).items()),
        30,
        f"preferred leaders {preferred} back",
    )
    shown = describe_lines(c, topic_name)
    assert {p: v[0] for p, v in shown.items()} == preferred, shown
    served = c.consume(topic_name, [0, 1, 2])
    assert sum(len(m) for m in served.values()) == 300


# --- Kafka's own reassignment tool ---------------------------------------------------------------


def test_kafka_reassign_partitions_tool_executes_verifies_and_refuses_throttles(
    cluster: Cluster, topic_name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from tests.harness.kafka_tools import kafka_tool_runner

    c = cluster
    kafka_tool = kafka_tool_runner(tmp_path_factory.mktemp("kafka-reassign"))
    main = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"
    c.create_topic(topic_name, replica_assignment=[[1], [2]])
    c.wait_isr_complete(topic_name, 60)
    values = [f"kafka-reassign-{i:05d}".encode() for i in range(600)]
    produce(c, topic_name, values, 2)

    def tool(*args: str) -> tuple[int, str]:
        proc = kafka_tool(main, "--bootstrap-server", c.bootstrap, *args)
        return proc.returncode, proc.stdout + proc.stderr

    # --throttle: refused before anything moves (the throttle is set first, as Kafka's tool does)
    throttled = str(write_plan(c, topic_name, "throttled", {0: [2, 3]}))
    rc, out = tool("--execute", "--reassignment-json-file", throttled, "--throttle", "1000000")
    assert rc != 0 and "replication throttles are not implemented" in out, out
    assert {p: r for p, (_l, r, _i) in c.describe(topic_name).items()} == {0: (1,), 1: (2,)}

    target = str(write_plan(c, topic_name, "target", {0: [3, 2], 1: [3]}))
    rc, out = tool("--execute", "--reassignment-json-file", target)
    assert rc == 0 and "Successfully started partition reassignments" in out, out

    def verified() -> str | None:
        rc, out = tool("--verify", "--reassignment-json-file", target)
        return out if rc == 0 and out.count("is completed") == 2 else None

    out = c.wait_for(verified, 90, "kafka-reassign-partitions --verify reports completion")
    assert "Clearing broker-level throttles on brokers 1,2,3" in out, out
    assert f"Clearing topic-level throttles on topic {topic_name}" in out, out
    view = c.wait_isr_complete(topic_name, 60)
    assert {p: sorted(r) for p, (_l, r, _i) in view.items()} == {0: [2, 3], 1: [3]}
    for p, replicas in ((0, [2, 3]), (1, [3])):
        c.wait_replicas_identical(topic_name, p, replicas, 60)
