"""Log directory failure on a 3-broker cluster (issue 17, KIP-112), with real broker processes,
a real full disk (a small tmpfs) and real clients.

Every test runs 3 brokers, topics with RF=3 and ``min.insync.replicas=2``, and an idempotent
acks=all confluent-kafka producer that writes numbered records as fast as the cluster takes
them. ``replica.lag.time.max.ms`` is 30 s, so the ISR shrinks promptly only through the
controller's log-dir handling, not the lag check.

* A broker with two log dirs, one of them a few-MB tmpfs that fills up: the broker stays up
  and keeps serving the partitions of its other dir; the tmpfs partitions go offline there
  (Metadata lists the broker in their ``offline_replicas``), their leadership and ISR
  membership move to the other brokers; the producer finishes with every record
  acknowledged, and every acknowledged record is read back exactly once, in order. After the
  space is freed and the broker restarted, its replicas catch up, rejoin the ISR and hold the
  same batches as the others.
* A broker whose only log dir is the tmpfs: it shuts down by itself (exit code 1, and its
  output says every log dir failed), and the cluster keeps every acknowledged record.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.acked_producer import AckedProducer
from tests.harness.cluster import REPO, Cluster, merge_props, start_cluster
from tests.harness.ports import free_port
from tests.harness.processes import pid_alive
from tests.harness.tmpfs import fill, mounted_tmpfs

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(300)]

PROPS: dict[str, object] = {
    # a SIGKILLed broker is noticed when its ZooKeeper session expires
    "zookeeper.session.timeout.ms": "6000",
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "30000",
    "unclean.leader.election.enable": "false",
    "controlled.shutdown.retry.backoff.ms": "500",
}
TMPFS_BYTES = 8 * 1024 * 1024
HEADROOM = 256 * 1024  # free space left on the tmpfs before producing


def broker_output(c: Cluster, broker_id: int) -> str:
    return Path(c.broker(broker_id)["out"]).read_text(errors="replace")


def all_output(c: Cluster) -> str:
    return "\n".join(broker_output(c, b) for b in c.broker_ids())


@contextlib.contextmanager
def cluster_with_tmpfs(
    tmp_path_factory: pytest.TempPathFactory, mount: str, props: dict[str, object]
) -> Iterator[tuple[Cluster, Path]]:
    """A 3-broker cluster whose directory holds a small tmpfs at ``mount`` (relative to the
    cluster directory, mounted before the brokers start); brokers stopped, then the tmpfs
    unmounted, whatever happens."""
    directory = tmp_path_factory.mktemp("cluster")
    with mounted_tmpfs(directory / mount, TMPFS_BYTES) as small:
        cluster = start_cluster(directory, merge_props(props, {}), brokers=3)
        try:
            yield cluster, small
        finally:
            cluster.down()


def test_full_log_dir_goes_offline_and_its_partitions_move(
    tmp_path_factory: pytest.TempPathFactory, topic_name: str
) -> None:
    props = {**PROPS, "log.dirs": "data,small"}  # relative to each broker's directory
    with cluster_with_tmpfs(tmp_path_factory, "broker-1/small", props) as (c, small):
        data = c.dir / "broker-1" / "data"
        assert c.log_dirs(1) == [data, small], c.log_dirs(1)
        # broker 1 is the preferred leader of partitions 0 and 1, a follower of the others
        assignment = [[1, 2, 3], [1, 3, 2], [2, 3, 1], [2, 1, 3], [3, 1, 2], [3, 2, 1]]
        c.create_topic(topic_name, replica_assignment=assignment)
        before = c.wait_isr_complete(topic_name, 60, brokers=[1, 2, 3])
        in_small = [p for p in range(6) if (small / f"{topic_name}-{p}").is_dir()]
        in_data = [p for p in range(6) if (data / f"{topic_name}-{p}").is_dir()]
        assert in_small and in_data and sorted(in_small + in_data) == list(range(6)), (
            f"setup: broker 1's partitions in small {in_small}, in data {in_data}"
        )
        led_in_data = [p for p in in_data if before[p][0] == 1]
        assert led_in_data, f"setup: broker 1 leads none of {in_data}: {before}"
        fill(small, HEADROOM)

        producer = AckedProducer(c, topic_name, 6)
        producer.produce(3000)  # ~3 MB, half of it for broker 1's tmpfs

        # the broker is up; its tmpfs went offline, its other dir still serves
        assert pid_alive(c.broker_pid(1)), "broker 1 died instead of taking its dir offline"
        out1 = broker_output(c, 1)
        assert "log directory small is offline" in out1, out1[-3000:]  # as in log.dirs
        assert "No space left on device" in out1
        assert "handling log directory failure for brokers [1]" in all_output(c)

        def moved() -> dict[int, Any] | None:
            view = c.describe(topic_name, via=2)
            for p, (leader, _replicas, isr) in view.items():
                if p in in_small and (leader in (-1, 1) or 1 in isr):
                    return None
                if p in in_data and sorted(isr) != [1, 2, 3]:
                    return None
            return view

        after = c.wait_for(moved, 60, "tmpfs partitions moved off broker 1, the others intact")
        assert all(after[p][0] == 1 for p in led_in_data), (
            f"broker 1 lost leadership of partitions {led_in_data} in its healthy dir: {after}"
        )
        for via in (1, 2, 3):
            assert c.offline_replicas(topic_name, via) == {
                p: (1,) if p in in_small else () for p in range(6)
            }, f"offline replicas as broker {via} answers Metadata v5"
        producer.check_served(c)
        # DescribeLogDirs (kafka-log-dirs): the failed dir answers KAFKA_STORAGE_ERROR alone
        dirs = describe_log_dirs(c, 1, topic_name)
        assert dirs[str(small)] == (56, set()), dirs
        assert dirs[str(data)] == (0, set(in_data)), dirs

        # space freed, broker restarted: the tmpfs is online again and its replicas catch up
        (small / "filler.bin").unlink()
        c.stop_broker(broker_id=1)
        assert not (small / ".kafka_cleanshutdown").exists(), "a clean marker in a failed dir"
        c.start_broker(1)
        c.wait_isr_complete(topic_name, 120, brokers=[1, 2, 3])
        for p in in_small:
            c.wait_replicas_identical(topic_name, p, [1, 2, 3], 90)
        assert c.offline_replicas(topic_name, 2) == dict.fromkeys(range(6), ())
        dirs = describe_log_dirs(c, 1, topic_name)
        assert dirs[str(small)] == (0, set(in_small)), dirs


def describe_log_dirs(c: Cluster, broker_id: int, topic: str) -> dict[str, tuple[int, set[int]]]:
    """{log dir: (error code, the partitions of ``topic`` in it)} from DescribeLogDirs v4 sent
    to ``broker_id`` (every partition asked for: topics null; other topics, such as
    ``__consumer_offsets``, left out here)."""
    from broker.protocol import registry

    request = registry.build(registry.request_class(35, 4), topics=None)
    with c.raw(broker_id=broker_id) as conn:
        response = conn.request(request)
    assert response.error_code == 0, response
    return {
        r.log_dir: (
            int(r.error_code),
            {int(p.partition_index) for t in r.topics if t.name == topic for p in t.partitions},
        )
        for r in response.results
    }


@contextlib.contextmanager
def own_broker(
    c: Cluster, broker_id: int, log_dirs: list[Path], props: dict[str, object]
) -> Iterator[subprocess.Popen[bytes]]:
    """One more broker of cluster ``c``, run by the test itself (so its exit code can be
    read), registered before the block starts; stopped by its pid afterwards if still
    running."""
    bdir = c.dir / f"broker-{broker_id}"
    bdir.mkdir(exist_ok=True)
    config = bdir / "server.properties"
    lines = [
        f"broker.id={broker_id}",
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
        f"log.dirs={','.join(str(d) for d in log_dirs)}",
        f"zookeeper.connect={c.json['zookeeper']}",
        *(f"{k}={v}" for k, v in merge_props(props, {}).items()),
    ]
    config.write_text("\n".join(lines) + "\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    out_path = bdir / "broker.out"
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "broker.cli.main", "--log-level", "INFO"),
                *("broker", "start", "--config", str(config)),
            ],
            cwd=bdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        c.wait_for(
            lambda: broker_id in {int(b.node_id) for b in c.raw_metadata(1, []).brokers},
            60,
            f"broker {broker_id} registered",
        )
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def test_broker_whose_only_log_dir_fills_shuts_down_and_nothing_is_lost(
    cluster_factory: Any, topic_name: str
) -> None:
    c: Cluster = cluster_factory(PROPS, brokers=2)
    with (
        mounted_tmpfs(c.dir / "broker-3" / "data", TMPFS_BYTES) as only_dir,
        own_broker(c, 3, [only_dir], PROPS) as proc,
    ):
        c.create_topic(topic_name, 3, replication_factor=3)
        c.wait_isr_complete(topic_name, 60, brokers=[1, 2, 3])
        fill(only_dir, HEADROOM)
        producer = AckedProducer(c, topic_name, 3)
        started = time.monotonic()
        producer.produce(1500)  # ~1.5 MB, all of it for broker 3's only dir

        try:
            code = proc.wait(max(5.0, 60 - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            pytest.fail("broker 3 is still running with its only log dir full")
        out = (c.dir / "broker-3" / "broker.out").read_text(errors="replace")
        assert code == 1, f"broker 3 exited with {code}\n{out[-3000:]}"
        assert f"shutting down broker 3 because all log dirs in {only_dir} have failed" in out
        assert f"millrace broker: broker 3 stopped: all log dirs in {only_dir} have failed" in out
        assert '"msg": "broker 3 stopped"' in out  # its shutdown ran to the end

        producer.check_served(c)
        view = c.describe(topic_name)
        assert all(leader in (1, 2) and 3 not in isr for leader, _r, isr in view.values()), view
