"""Apache Kafka 3.9.1's own Java command-line tools, unchanged, against a real Millrace broker.

``make setup`` fetches the Kafka 3.9.1 distribution's jars (broker, kafka-tools and their
runtime dependencies) into ``.cache/jvm/kafka-dist``. Each tool runs with the main class and
class path the ``bin/kafka-*.sh`` wrappers use: ``java -cp "<dist>/*" <main class> ARGS``, with
a log4j 1.x file sending WARN and above to stderr. The tests parse what the tools print and
check it against the broker's own view (end offsets, the records themselves):

* ``kafka-producer-perf-test`` (ProducerPerformance), acks=1 and idempotent acks=all;
* ``kafka-consumer-perf-test`` (ConsumerPerformance) in a consumer group;
* ``kafka-consumer-groups`` (ConsumerGroupCommand) on the group it left behind:
  describe (offsets and lag), list, reset-offsets, delete;
* ``kafka-e2e-latency`` (EndToEndLatency), which also compares every record it reads back;
* ``kafka-topics`` (TopicCommand): create, describe, list, alter, delete and its errors;
* ``kafka-log-dirs`` (LogDirsCommand): every partition's size in its log directory;
* ``kafka-configs --entity-type broker-loggers`` (ConfigCommand): the broker's loggers and
  their levels, changed at run time (what the broker writes follows) and reset.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.harness.kafka_tools import kafka_tool_runner, ok

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOOLS = "org.apache.kafka.tools."
PRODUCER_PERF = TOOLS + "ProducerPerformance"
CONSUMER_PERF = TOOLS + "ConsumerPerformance"
E2E_LATENCY = TOOLS + "EndToEndLatency"
TOPIC_COMMAND = TOOLS + "TopicCommand"
GROUP_COMMAND = TOOLS + "consumer.group.ConsumerGroupCommand"
LOG_DIRS_COMMAND = TOOLS + "LogDirsCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"

RECORDS = 50_000
RECORD_SIZE = 100

Tool = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def kafka_tool(tmp_path_factory: pytest.TempPathFactory) -> Tool:
    """``kafka_tool(main_class, *args, timeout_s=60)``: run one Kafka tool to completion."""
    return kafka_tool_runner(tmp_path_factory.mktemp("kafka-tools"))


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """{partition: high watermark} as confluent-kafka reads them from the broker."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"watermarks-{topic}"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def producer_perf(
    kafka_tool: Tool, bootstrap: str, topic: str, *props: str, records: int = RECORDS
) -> str:
    """Run ProducerPerformance; return its final summary line."""
    out = ok(
        kafka_tool(
            PRODUCER_PERF,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(RECORD_SIZE),
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            *props,
        )
    )
    return out.strip().splitlines()[-1]


PERF_SUMMARY = re.compile(
    r"(?P<sent>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, "
    r"(?P<p999>\d+) ms 99\.9th\."
)


def table(out: str, first_column: str = "GROUP") -> list[dict[str, str]]:
    """The rows of a kafka-consumer-groups offsets table (header line starting with
    ``first_column``, one word per column), as {column: value} dicts."""
    lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    for i, fields in enumerate(lines):
        if fields and fields[0] == first_column:
            header = fields
            return [dict(zip(header, row, strict=True)) for row in lines[i + 1 :]]
    raise AssertionError(f"no {first_column} header in:\n{out}")


# --- kafka-producer-perf-test ------------------------------------------------------------------


@pytest.mark.parametrize(
    "props",
    [
        ("acks=1", "linger.ms=5"),
        ("acks=all", "enable.idempotence=true", "linger.ms=5"),
    ],
    ids=["acks1", "acks-all-idempotent"],
)
def test_producer_performance(
    cluster: Any, kafka_tool: Tool, topic_name: str, props: tuple[str, ...]
) -> None:
    cluster.create_topic(topic_name, partitions=1)
    final = producer_perf(kafka_tool, cluster.bootstrap, topic_name, *props)

    m = PERF_SUMMARY.fullmatch(final)
    assert m, f"unexpected ProducerPerformance summary: {final!r}"
    assert int(m["sent"]) == RECORDS, final
    assert float(m["rate"]) > 0 and float(m["mb"]) > 0, final
    assert 0 <= float(m["avg"]) <= float(m["max"]), final
    p50, p95, p99, p999 = (int(m[k]) for k in ("p50", "p95", "p99", "p999"))
    assert p50 <= p95 <= p99 <= p999 <= float(m["max"]), final

    # Every acknowledged record is in the log, once, as sent: 100 random uppercase letters
    # with no key (ProducerPerformance's payload).
    assert end_offsets(cluster.bootstrap, topic_name, 1) == {0: RECORDS}
    records = cluster.consume(topic_name, [0])[0]
    assert [r.offset() for r in records] == list(range(RECORDS))
    bad = [
        r.offset()
        for r in records
        if r.key() is not None
        or len(r.value()) != RECORD_SIZE
        or not (r.value().isalpha() and r.value().isupper())
    ]
    assert not bad, f"{len(bad)} records differ from ProducerPerformance's payload: {bad[:10]}"


# --- kafka-consumer-perf-test and kafka-consumer-groups ----------------------------------------


@pytest.fixture(scope="module")
def consumed_group(cluster: Any, kafka_tool: Tool) -> dict[str, Any]:
    """A two-partition topic filled by ProducerPerformance, then read to the end by
    ConsumerPerformance in group ``perf-group`` (which commits its offsets on close)."""
    topic, group = "tools-consumer-perf", "perf-group"
    cluster.create_topic(topic, partitions=2)
    producer_perf(kafka_tool, cluster.bootstrap, topic, "acks=1", "linger.ms=5")
    ends = end_offsets(cluster.bootstrap, topic, 2)
    assert sum(ends.values()) == RECORDS, ends
    out = ok(
        kafka_tool(
            CONSUMER_PERF,
            "--bootstrap-server",
            cluster.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--messages",
            str(RECORDS),
            "--timeout",
            "30000",
        )
    )
    return {"topic": topic, "group": group, "ends": ends, "stdout": out}


def test_consumer_performance(consumed_group: dict[str, Any]) -> None:
    out = consumed_group["stdout"]
    lines = [ln for ln in out.splitlines() if ln.strip()]
    header_at = next(
        (i for i, ln in enumerate(lines) if ln.startswith("start.time, end.time, ")), None
    )
    assert header_at is not None and header_at + 1 < len(lines), out
    header = lines[header_at].split(", ")
    values = lines[header_at + 1].split(", ")
    assert len(values) == len(header), out
    stats = dict(zip(header, values, strict=True))

    assert int(stats["data.consumed.in.nMsg"]) == RECORDS, out
    assert float(stats["data.consumed.in.MB"]) == pytest.approx(
        RECORDS * RECORD_SIZE / (1024 * 1024), abs=1e-3
    ), out
    assert float(stats["nMsg.sec"]) > 0 and float(stats["MB.sec"]) > 0, out


def test_consumer_groups_command(
    cluster: Any, kafka_tool: Tool, consumed_group: dict[str, Any]
) -> None:
    bs, topic, group = cluster.bootstrap, consumed_group["topic"], consumed_group["group"]
    ends: dict[int, int] = consumed_group["ends"]

    def describe() -> dict[int, tuple[int, int, int]]:
        proc = kafka_tool(GROUP_COMMAND, "--bootstrap-server", bs, "--describe", "--group", group)
        out = ok(proc)
        assert f"Consumer group '{group}' has no active members." in proc.stdout + proc.stderr
        rows = table(out)
        assert all(r["GROUP"] == group and r["TOPIC"] == topic for r in rows), out
        assert all(r["CONSUMER-ID"] == "-" for r in rows), out
        return {
            int(r["PARTITION"]): (
                int(r["CURRENT-OFFSET"]),
                int(r["LOG-END-OFFSET"]),
                int(r["LAG"]),
            )
            for r in rows
        }

    # ConsumerPerformance read everything and committed: no lag on either partition.
    assert describe() == {p: (end, end, 0) for p, end in ends.items()}

    listed = ok(kafka_tool(GROUP_COMMAND, "--bootstrap-server", bs, "--list")).split()
    assert group in listed

    state = ok(
        kafka_tool(
            GROUP_COMMAND, "--bootstrap-server", bs, "--describe", "--group", group, "--state"
        )
    )
    # GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS; an empty group has no
    # assignment strategy, so its row has one field fewer than the header has words.
    lines = [ln.split() for ln in state.splitlines() if ln.strip()]
    assert lines[0][:3] == ["GROUP", "COORDINATOR", "(ID)"] and len(lines) == 2, state
    assert lines[1] == [group, bs.split(",")[0], "(1)", "Empty", "0"], state

    # Rewind the idle group to the start of the log: the lag becomes the whole topic.
    out = ok(
        kafka_tool(
            GROUP_COMMAND,
            "--bootstrap-server",
            bs,
            "--reset-offsets",
            "--group",
            group,
            "--topic",
            topic,
            "--to-earliest",
            "--execute",
        )
    )
    tokens = out.split()
    assert "NEW-OFFSET" in tokens, out
    plan = tokens[tokens.index("NEW-OFFSET") + 1 :]
    assert sorted(tuple(plan[i : i + 4]) for i in range(0, len(plan), 4)) == [
        (group, topic, str(p), "0") for p in sorted(ends)
    ], out
    assert describe() == {p: (0, end, end) for p, end in ends.items()}

    out = ok(kafka_tool(GROUP_COMMAND, "--bootstrap-server", bs, "--delete", "--group", group))
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out, out
    listed = ok(kafka_tool(GROUP_COMMAND, "--bootstrap-server", bs, "--list")).split()
    assert group not in listed


# --- kafka-e2e-latency -------------------------------------------------------------------------


def test_end_to_end_latency(cluster: Any, kafka_tool: Tool, topic_name: str) -> None:
    # broker_list topic num_messages producer_acks message_size_bytes; the tool creates the
    # topic itself, and fails if a record read back differs from the one it sent.
    count = 1000
    proc = kafka_tool(E2E_LATENCY, cluster.bootstrap, topic_name, str(count), "all", "100")
    out = ok(proc)
    assert f'Topic "{topic_name}" does not exist. Will create topic' in out, out
    avg = re.search(r"^Avg latency: ([\d.]+) ms$", out, re.MULTILINE)
    assert avg and float(avg[1]) > 0, out
    pct = re.search(r"^Percentiles: 50th = (\d+), 99th = (\d+), 99\.9th = (\d+)$", out, re.M)
    assert pct and int(pct[1]) <= int(pct[2]) <= int(pct[3]), out
    assert end_offsets(cluster.bootstrap, topic_name, 1) == {0: count}


# --- kafka-topics --------------------------------------------------------------------------------


def test_topic_command(cluster: Any, kafka_tool: Tool) -> None:
    bs = cluster.bootstrap
    # no '_' in the name: TopicCommand warns about '.'/'_' metric-name collisions otherwise
    topic_name = "kafka-topics-command"

    def topics(*args: str) -> subprocess.CompletedProcess[str]:
        return kafka_tool(TOPIC_COMMAND, "--bootstrap-server", bs, *args)

    def describe() -> tuple[dict[str, str], dict[int, dict[str, str]]]:
        """(the topic summary line, {partition: its line}) of ``--describe``."""
        out = ok(topics("--describe", "--topic", topic_name))
        summary: dict[str, str] = {}
        partitions: dict[int, dict[str, str]] = {}
        for line in out.splitlines():
            if not line.strip():
                continue
            fields = dict(
                (k.strip(), v.strip())
                for k, _, v in (f.partition(":") for f in line.strip().split("\t"))
            )
            assert fields.get("Topic") == topic_name, out
            if "Partition" in fields:
                partitions[int(fields["Partition"])] = fields
            else:
                summary = fields
        return summary, partitions

    create = ["--create", "--topic", topic_name, "--replication-factor", "1"]
    out = ok(topics(*create, "--partitions", "3", "--config", "retention.ms=86400000"))
    assert out.strip() == f"Created topic {topic_name}.", out

    summary, partitions = describe()
    assert summary["PartitionCount"] == "3" and summary["ReplicationFactor"] == "1", summary
    assert "retention.ms=86400000" in summary["Configs"].split(","), summary
    assert sorted(partitions) == [0, 1, 2]
    for fields in partitions.values():
        assert fields["Leader"] == "1" and fields["Replicas"] == "1", fields
        assert fields["Isr"] == "1", fields

    assert topic_name in ok(topics("--list")).split()

    # The errors a user sees: the topic exists already (unless --if-not-exists), too many
    # replicas for the cluster, an unknown topic.
    dup = topics(*create, "--partitions", "3")
    assert dup.returncode == 1 and "already exists" in dup.stdout, (dup.stdout, dup.stderr)
    ok(topics(*create, "--partitions", "3", "--if-not-exists"))
    rf = topics("--create", "--topic", f"{topic_name}-rf3", "--replication-factor", "3")
    assert rf.returncode == 1 and "larger than available brokers" in rf.stdout, rf.stdout
    missing = topics("--describe", "--topic", f"{topic_name}-missing")
    assert missing.returncode == 1 and "does not exist" in missing.stdout, missing.stdout

    ok(topics("--alter", "--topic", topic_name, "--partitions", "5"))
    summary, partitions = describe()
    assert summary["PartitionCount"] == "5" and sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(f["Leader"] == "1" for f in partitions.values()), partitions

    ok(topics("--delete", "--topic", topic_name))

    def listed_without_it() -> list[str] | None:
        listed = ok(topics("--list")).split()
        return None if topic_name in listed else listed

    listed = cluster.wait_for(listed_without_it, 30, f"{topic_name} gone from --list")
    assert f"{topic_name}-rf3" not in listed, listed  # the failed create left nothing behind


# --- kafka-log-dirs ------------------------------------------------------------------------------


def test_log_dirs_command(cluster: Any, kafka_tool: Tool) -> None:
    """``kafka-log-dirs --describe`` (DescribeLogDirs): each partition in the broker's log
    directory, with the size of its segment files on disk; ``--topic-list`` narrows it."""
    from confluent_kafka import Producer

    topic = "kafka-log-dirs-command"
    cluster.create_topic(topic, partitions=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    for i in range(300):
        producer.produce(topic, b"v" * 100, partition=i % 2)
    assert producer.flush(30) == 0

    def describe(*args: str) -> dict[str, Any]:
        out = ok(
            kafka_tool(
                LOG_DIRS_COMMAND, "--bootstrap-server", cluster.bootstrap, "--describe", *args
            )
        )
        lines = [line for line in out.splitlines() if line.startswith("{")]
        assert len(lines) == 1, out
        document: dict[str, Any] = json.loads(lines[0])
        return document

    def on_disk(partition: int) -> int:
        return sum(p.stat().st_size for p in cluster.segment_files(topic, partition))

    everything = describe()
    (broker,) = everything["brokers"]
    assert broker["broker"] == 1
    dirs = {d["logDir"]: d for d in broker["logDirs"]}
    assert sorted(dirs) == sorted(str(d) for d in cluster.log_dirs())
    sizes: dict[str, int] = {}
    for d in dirs.values():
        assert d["error"] is None, d
        for p in d["partitions"]:
            assert (p["offsetLag"], p["isFuture"]) == (0, False), p
            sizes[p["partition"]] = p["size"]
    assert sizes[f"{topic}-0"] == on_disk(0) > 300 // 2 * 100
    assert sizes[f"{topic}-1"] == on_disk(1) > 300 // 2 * 100

    narrowed = describe("--topic-list", topic, "--broker-list", "1")
    listed = {
        p["partition"]: p["size"]
        for d in narrowed["brokers"][0]["logDirs"]
        for p in d["partitions"]
    }
    assert listed == {f"{topic}-0": on_disk(0), f"{topic}-1": on_disk(1)}


# --- kafka-configs --entity-type broker-loggers --------------------------------------------------


def test_broker_loggers_command(cluster: Any, kafka_tool: Tool) -> None:
    """Log levels changed at run time, as with Kafka's log4j loggers: ``--describe`` lists
    the broker's loggers with their effective levels, ``--add-config LOGGER=LEVEL`` sets one
    (its children follow, and what the broker writes follows), ``--delete-config`` resets
    it; a bad level and deleting ``root`` are refused with Kafka's messages."""
    import socket
    from pathlib import Path

    def configs(*args: str) -> subprocess.CompletedProcess[str]:
        return kafka_tool(
            CONFIG_COMMAND,
            "--bootstrap-server",
            cluster.bootstrap,
            "--entity-type",
            "broker-loggers",
            "--entity-name",
            "1",
            *args,
        )

    def levels() -> dict[str, str]:
        out = ok(configs("--describe"))
        found = re.findall(r"^  (\S+)=(\S+) sensitive=false", out, re.MULTILINE)
        assert found, out
        return dict(found)

    def refused_frame_logged() -> bool:
        """Send a frame whose header does not parse; whether the broker wrote that it closed
        this connection (INFO, logger broker.network.*)."""
        with socket.create_connection((cluster.host, cluster.port), timeout=10) as sock:
            port = sock.getsockname()[1]
            sock.sendall(b"\x00\x00\x00\x02\xff\xff")
            assert sock.recv(1) == b""  # closed by the broker
        marker = f"closing connection 127.0.0.1:{port}:"
        out = Path(cluster.broker(1)["out"])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if marker in out.read_text(errors="replace"):
                return True
            time.sleep(0.1)
        return False

    before = levels()
    assert {"root", "broker", "broker.network"} <= set(before), sorted(before)[:20]
    assert before["broker.network"] == before["root"] == "INFO"
    assert refused_frame_logged()

    assert "Completed updating config" in ok(
        configs("--alter", "--add-config", "broker.network=WARN")
    )
    after = levels()
    assert after["broker.network"] == "WARN"
    assert all(v == "WARN" for k, v in after.items() if k.startswith("broker.network.")), after
    assert after["broker.replication"] == "INFO"
    assert not refused_frame_logged()

    assert "Completed updating config" in ok(
        configs("--alter", "--delete-config", "broker.network")
    )
    assert levels()["broker.network"] == "INFO"
    assert refused_frame_logged()

    bad = configs("--alter", "--add-config", "broker.network=LOUD")
    assert (
        bad.returncode != 0 and "LOUD as it is not a supported log level" in bad.stdout + bad.stderr
    )
    root = configs("--alter", "--delete-config", "root")
    assert root.returncode != 0
    assert "Removing the log level of the root logger is not allowed" in root.stdout + root.stderr
