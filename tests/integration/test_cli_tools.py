"""Integration tests of the command-line tools against a real one-broker cluster:
``millrace topics`` (create/list/describe/alter/delete), ``millrace produce`` /
``millrace consume``, ``millrace perf`` and ``millrace dump-log`` on the broker's own files.

The cluster comes from the ``cluster`` fixture (``millrace cluster up`` in a temporary
directory on free ports; ``cluster down`` plus a kill-by-pid safety net at teardown). Every
tool runs as a separate ``python -m broker.cli.main`` process, as a user would run it.
The pure helpers of the tools (bootstrap resolution, argument parsing, output formats) are
tested here too, under the ``unit`` marker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.harness.waiting import wait_for

pytestmark = pytest.mark.timeout(120)
integration = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "broker.cli.main"]


def millrace(
    *args: str, stdin: bytes | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``millrace ARGS`` in a fresh process; return the completed process (text)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MILLRACE_BOOTSTRAP", None)
    proc = subprocess.run(
        [*CLI, *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        timeout=timeout_s,
        env=env,
        cwd=REPO,
        check=False,
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, (
        f"{' '.join(proc.args[3:])} exited {proc.returncode}\n"
        f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


def _topics(bootstrap: str) -> set[str]:
    return set(ok(millrace("topics", "list", "--bootstrap-server", bootstrap)).split())


@integration
def test_topics_round_trip(cluster: Any, topic_name: str) -> None:
    bs = cluster.bootstrap
    out = ok(
        millrace(
            "topics",
            "create",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=3600000",
        )
    )
    assert f"Created topic {topic_name}." in out
    cluster.admin().wait_for_leaders(topic_name, 3)

    # list, through --dir's cluster.json instead of --bootstrap-server
    listed = ok(millrace("topics", "list", "--dir", str(cluster.dir))).split()
    assert topic_name in listed

    lines = ok(
        millrace("topics", "describe", "--bootstrap-server", bs, "--topic", topic_name)
    ).splitlines()
    assert len(lines) == 4, lines
    head = lines[0].split("\t")
    assert head[0] == f"Topic: {topic_name}"
    assert head[1].startswith("TopicId: ")
    assert head[2] == "PartitionCount: 3"
    assert head[3] == "ReplicationFactor: 1"
    assert head[4].startswith("Configs: ")
    assert "retention.ms=3600000" in head[4].removeprefix("Configs: ").split(",")
    for p, line in enumerate(lines[1:]):
        assert line == (f"\tTopic: {topic_name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1"), (
            line
        )

    # a 1-broker cluster has no under-replicated partitions
    under = ok(
        millrace(
            "topics",
            "describe",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--under-replicated-partitions",
        )
    )
    assert under.strip() == ""

    # alter: set and delete config overrides, add a partition
    ok(
        millrace(
            "topics",
            "alter",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--config",
            "retention.ms=1234567",
            "--config",
            "cleanup.policy=compact",
        )
    )

    def configs() -> list[str]:
        first = ok(
            millrace("topics", "describe", "--bootstrap-server", bs, "--topic", topic_name)
        ).splitlines()[0]
        return first.split("\tConfigs: ", 1)[1].split(",")

    wait_for(
        lambda: {"retention.ms=1234567", "cleanup.policy=compact"} <= set(configs()),
        what="altered configs visible in describe",
    )
    overrides = ok(
        millrace("topics", "describe", "--bootstrap-server", bs, "--topics-with-overrides")
    )
    assert f"Topic: {topic_name}\t" in overrides

    ok(
        millrace(
            "topics",
            "alter",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--delete-config",
            "cleanup.policy",
        )
    )
    wait_for(
        lambda: "cleanup.policy=compact" not in configs(), what="deleted config gone in describe"
    )

    ok(
        millrace(
            "topics", "alter", "--bootstrap-server", bs, "--topic", topic_name, "--partitions", "4"
        )
    )
    cluster.admin().wait_for_leaders(topic_name, 4)
    header = ok(
        millrace("topics", "describe", "--bootstrap-server", bs, "--topic", topic_name)
    ).splitlines()[0]
    assert "\tPartitionCount: 4\t" in header

    shrink = millrace(
        "topics", "alter", "--bootstrap-server", bs, "--topic", topic_name, "--partitions", "2"
    )
    assert shrink.returncode == 1
    assert "--partitions" in shrink.stderr and topic_name in shrink.stderr

    out = ok(millrace("topics", "delete", "--bootstrap-server", bs, "--topic", topic_name))
    assert f"Deleted topic {topic_name}." in out
    wait_for(lambda: topic_name not in _topics(bs), what=f"{topic_name} gone from the list")
    gone = millrace("topics", "delete", "--bootstrap-server", bs, "--topic", topic_name)
    assert gone.returncode == 1
    assert f"'{topic_name}'" in gone.stderr
    ok(millrace("topics", "delete", "--bootstrap-server", bs, "--topic", topic_name, "--if-exists"))


@integration
def test_create_existing_topic(cluster: Any, topic_name: str) -> None:
    bs = cluster.bootstrap
    create = ["topics", "create", "--bootstrap-server", bs, "--topic", topic_name]
    ok(millrace(*create, "--partitions", "1"))
    again = millrace(*create, "--partitions", "1")
    assert again.returncode == 1
    assert again.stderr.strip() == f"millrace topics: Topic '{topic_name}' already exists."
    ok(millrace(*create, "--partitions", "1", "--if-not-exists"))

    # an explicit assignment: two partitions, each on broker 1
    assigned = f"{topic_name}-assigned"
    ok(
        millrace(
            "topics",
            "create",
            "--dir",
            str(cluster.dir),
            "--topic",
            assigned,
            "--replica-assignment",
            "1,1",
        )
    )
    cluster.admin().wait_for_leaders(assigned, 2)
    lines = ok(millrace("topics", "describe", "--dir", str(cluster.dir), "--topic", assigned))
    assert "\tPartitionCount: 2\tReplicationFactor: 1\t" in lines.splitlines()[0]


@integration
def test_produce_and_consume_lines(cluster: Any, topic_name: str) -> None:
    bs = cluster.bootstrap
    cluster.create_topic(topic_name, partitions=1)
    lines = [f"line {i} \u00e9" for i in range(10)]
    produced = millrace(
        "produce",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        stdin=("\n".join(lines) + "\n").encode(),
    )
    ok(produced)
    assert f"Produced 10 records to topic {topic_name}" in produced.stderr

    consumed = millrace(
        "consume",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--from-beginning",
        "--max-messages",
        "10",
        "--timeout-ms",
        "30000",
    )
    assert ok(consumed).splitlines() == lines
    assert "Processed a total of 10 messages" in consumed.stderr

    # keyed records, printed with their keys, from a given partition and offset
    ok(
        millrace(
            "produce",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--key-separator",
            ":",
            stdin=b"k1:v1\nk2:v:2\n",
        )
    )
    keyed = millrace(
        "consume",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--partition",
        "0",
        "--offset",
        "10",
        "--print-key",
        "--max-messages",
        "2",
        "--timeout-ms",
        "30000",
    )
    assert ok(keyed).splitlines() == ["k1\tv1", "k2\tv:2"]

    # the broker's segment file is readable by dump-log
    segment = cluster.active_segment(topic_name, 0)
    dump = ok(millrace("dump-log", "--files", str(segment), "--print-data-log"))
    assert dump.splitlines()[0] == f"Dumping {segment}"
    assert "payload: line 0 \u00e9" in dump
    assert "key: k2 payload: v:2" in dump
    assert "isvalid: false" not in dump
    assert "invalid bytes" not in dump


@integration
def test_perf_produce_and_consume(cluster: Any, topic_name: str) -> None:
    bs = cluster.bootstrap
    cluster.create_topic(topic_name, partitions=2)
    produce = ok(
        millrace(
            "perf",
            "produce",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--num-records",
            "2000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-property",
            "linger.ms=5",
        )
    )
    final = produce.strip().splitlines()[-1]
    assert final.startswith("2000 records sent, "), final
    assert " ms 50th, " in final and " ms 99th, " in final

    consume = ok(
        millrace(
            "perf",
            "consume",
            "--bootstrap-server",
            bs,
            "--topic",
            topic_name,
            "--messages",
            "2000",
            "--timeout",
            "30000",
        )
    )
    out = consume.strip().splitlines()
    assert out[-3].startswith("start.time, end.time, data.consumed.in.MB")
    assert out[-2].split(", ")[4] == "2000"
    assert out[-1].startswith("2000 records received, ")


@integration
def test_bad_usage_names_the_option(cluster: Any, topic_name: str) -> None:
    bs = cluster.bootstrap
    bad = millrace(
        "topics", "create", "--bootstrap-server", bs, "--topic", topic_name, "--partitions", "0"
    )
    assert bad.returncode == 2
    assert "--partitions" in bad.stderr

    unknown = millrace("topics", "create", "--bootstrap-server", bs, "--topic", "x", "--bogus")
    assert unknown.returncode == 2
    assert "--bogus" in unknown.stderr

    conflict = millrace(
        "topics",
        "create",
        "--bootstrap-server",
        bs,
        "--topic",
        topic_name,
        "--partitions",
        "2",
        "--replica-assignment",
        "1,1",
    )
    assert conflict.returncode == 2
    assert "--replica-assignment" in conflict.stderr

    bad_config = millrace(
        "topics", "create", "--bootstrap-server", bs, "--topic", topic_name, "--config", "nonsense"
    )
    assert bad_config.returncode == 1
    assert "--config 'nonsense'" in bad_config.stderr

    missing = millrace("topics", "describe", "--bootstrap-server", bs, "--topic", "no-such-topic")
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == "millrace topics: Topic 'no-such-topic' does not exist as expected"
    )

    offset = millrace("consume", "--bootstrap-server", bs, "--topic", topic_name, "--offset", "5")
    assert offset.returncode == 2
    assert "--offset" in offset.stderr

    nodir = millrace("topics", "list", "--dir", str(cluster.dir / "nope"))
    assert nodir.returncode == 1
    assert "--dir" in nodir.stderr and "cluster.json" in nodir.stderr


# --- pure helpers (no cluster) ----------------------------------------------------------------


@pytest.mark.unit
def test_resolve_bootstrap_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.cli.common import DEFAULT_BOOTSTRAP, CliError, resolve_bootstrap

    (tmp_path / "cluster.json").write_text('{"bootstrap_servers": "127.0.0.1:1111"}')
    monkeypatch.setenv("MILLRACE_BOOTSTRAP", "127.0.0.1:2222")
    assert resolve_bootstrap("h:1", str(tmp_path)) == "h:1"
    assert resolve_bootstrap(None, str(tmp_path)) == "127.0.0.1:1111"
    assert resolve_bootstrap(None, None) == "127.0.0.1:2222"
    monkeypatch.delenv("MILLRACE_BOOTSTRAP")
    assert resolve_bootstrap(None, None) == DEFAULT_BOOTSTRAP
    with pytest.raises(CliError, match="--dir"):
        resolve_bootstrap(None, str(tmp_path / "missing"))


@pytest.mark.unit
def test_parse_replica_assignment() -> None:
    from broker.cli.common import CliError
    from broker.cli.topics import parse_replica_assignment

    assert parse_replica_assignment("1:2,2:1") == [[1, 2], [2, 1]]
    assert parse_replica_assignment("3") == [[3]]
    for bad in ("1:x", "1:1", "1:2,3"):
        with pytest.raises(CliError, match="--replica-assignment"):
            parse_replica_assignment(bad)


@pytest.mark.unit
def test_describe_line_formats() -> None:
    from broker.cli.topics import PartitionView, TopicView, format_partition, format_topic

    view = TopicView("t", "abc", False, (PartitionView(0, 1, (1, 2), (1,)),))
    assert format_topic(view, ["a=1", "b=2"]) == (
        "Topic: t\tTopicId: abc\tPartitionCount: 1\tReplicationFactor: 2\tConfigs: a=1,b=2"
    )
    assert format_partition("t", view.partitions[0]) == (
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2\tIsr: 1"
    )
    assert "Leader: none" in format_partition("t", PartitionView(1, -1, (1,), ()))


@pytest.mark.unit
def test_console_formats() -> None:
    from broker.cli.console import MessageFormat, split_key
    from broker.cli.perf import LatencyStats, percentile

    assert split_key(b"k:v:w", b":") == (b"k", b"v:w")
    assert split_key(b"no-sep", b":") is None
    assert split_key(b"line", None) == (None, b"line")

    fmt = MessageFormat.from_properties({"print.offset": "true"}, print_key=True)
    assert fmt.render(None, b"v", offset=7) == b"Offset:7\tnull\tv\n"
    assert MessageFormat().render(b"k", b"v") == b"v\n"

    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 3.0
    assert percentile([], 0.99) == 0.0
    stats = LatencyStats(start=0.0)
    for ms in (1.0, 2.0, 3.0, 40.0):
        stats.record(ms, 100)
    assert stats.window_line(2.0).startswith("4 records sent, 2.0 records/sec")
    final = stats.final_line(2.0)
    assert final.startswith("4 records sent, 2.000000 records/sec")
    assert "40.00 ms max latency" in final and "3 ms 50th" in final
