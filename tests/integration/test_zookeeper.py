"""The embedded ZooKeeper (pyspark's jars + java), the kazoo<->asyncio ZkClient against it, and
the ``millrace cluster`` commands with real broker processes.

Every process started here is stopped by its pid in a ``finally`` (or by a fixture), also
when an assertion fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.client import (
    BrokerIdAlreadyRegisteredError,
    ControllerMovedError,
    TopicExistsError,
    UnknownTopicError,
    ZkClient,
    ZkConnectionError,
    ZkState,
)
from broker.zk.embedded_server import (
    EmbeddedZooKeeper,
    JavaNotFoundError,
    ZooKeeperStartError,
    find_java,
    four_letter_word,
    port_is_free,
    zookeeper_classpath,
    zookeeper_is_serving,
)
from tests.harness.ports import free_port
from tests.harness.processes import kill_pid, pid_alive, pids_mentioning
from tests.harness.waiting import wait_for, wait_for_async

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


# =========================================================================== embedded ZooKeeper


def test_classpath_is_the_minimal_set_from_pyspark() -> None:
    names = [p.name for p in zookeeper_classpath()]
    prefixes = [
        "zookeeper-3",
        "zookeeper-jute-",
        "slf4j-api-",
        "metrics-core-",
        "snappy-java-",
        "log4j-slf4j2-impl-",
        "log4j-api-",
        "log4j-core-",
    ]
    assert len(names) == len(prefixes), names
    for prefix in prefixes:
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    assert not any(n.startswith("netty") for n in names)
    assert all(p.is_file() for p in zookeeper_classpath())


def test_embedded_zookeeper_starts_answers_and_stops(tmp_path: Path) -> None:
    port = free_port()
    zk = EmbeddedZooKeeper(port, tmp_path / "zk", tick_time=500)
    pid = None
    try:
        zk.start()
        pid = zk.pid
        assert pid is not None and pid_alive(pid)
        assert four_letter_word("127.0.0.1", port, "ruok") == "imok"
        assert "Mode: standalone" in four_letter_word("127.0.0.1", port, "srvr")
        assert "not in the whitelist" in four_letter_word("127.0.0.1", port, "envi")
        cfg = (tmp_path / "zk" / "zoo.cfg").read_text()
        assert "admin.enableServer=false" in cfg
        assert "4lw.commands.whitelist=ruok,srvr,stat" in cfg
        assert f"clientPort={port}" in cfg and "tickTime=500" in cfg
        assert "rootLogger.level = WARN" in (tmp_path / "zk" / "log4j2.properties").read_text()
        assert (tmp_path / "zk" / "version-2").is_dir()
        zk.start()  # idempotent while running
        assert zk.pid == pid
        zk.stop()
        assert zk.pid is None
        assert not pid_alive(pid)
        assert port_is_free("127.0.0.1", port)
        assert not zookeeper_is_serving("127.0.0.1", port)
        zk.stop()  # idempotent
    finally:
        zk.stop()
        if pid is not None:
            kill_pid(pid)


def test_embedded_zookeeper_context_manager_keeps_data(tmp_path: Path) -> None:
    port = free_port()
    pids: list[int] = []
    try:
        for round_no in range(2):
            with EmbeddedZooKeeper(port, tmp_path, tick_time=500) as zk:
                assert zk.pid is not None
                pids.append(zk.pid)

                async def body(n: int = round_no, connect: str = zk.connect_string) -> str:
                    async with ZkClient(connect, session_timeout_ms=4000) as client:
                        return await client.get_or_create_cluster_id()

                ids = run(body())
                if round_no == 0:
                    first = ids
                else:
                    assert ids == first  # the data dir survived the restart
        assert not any(pid_alive(p) for p in pids)
    finally:
        for p in pids:
            kill_pid(p)


def test_start_refuses_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        zk = EmbeddedZooKeeper(port, tmp_path)
        try:
            with pytest.raises(ZooKeeperStartError, match="already in use"):
                zk.start()
            assert zk.pid is None
        finally:
            zk.stop()


def test_start_failure_shows_the_log_tail(tmp_path: Path) -> None:
    zk = EmbeddedZooKeeper(free_port(), tmp_path, jvm_options=["-Xmx1k"])
    try:
        with pytest.raises(ZooKeeperStartError, match="exited with code") as info:
            zk.start(timeout=30)
        assert "heap" in str(info.value).lower()
    finally:
        zk.stop()


def test_java_not_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(JavaNotFoundError, match=r"ZooKeeper needs Java 11\+; install a JDK"):
        find_java()
    with pytest.raises(JavaNotFoundError, match="JAVA_HOME"):
        EmbeddedZooKeeper(free_port(), tmp_path / "zk").start()
    # JAVA_HOME wins over PATH
    fake_home = tmp_path / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    fake_java = fake_home / "bin" / "java"
    fake_java.write_text("#!/bin/sh\n")
    fake_java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(fake_home))
    assert find_java() == str(fake_java)


def test_cli_zookeeper_start_runs_in_the_foreground(tmp_path: Path) -> None:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = (tmp_path / "zk.out").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "zookeeper",
            "start",
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "data"),
            "--tick-time",
            "500",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    try:
        wait_for(
            lambda: proc.poll() is not None or zookeeper_is_serving("127.0.0.1", port),
            60,
            "ZooKeeper from `millrace zookeeper start`",
        )
        assert proc.poll() is None, (tmp_path / "zk.out").read_text()
        # the command exec'd the JVM: its pid is ZooKeeper's
        assert b"ZooKeeperServerMain" in Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert "tickTime=500" in (tmp_path / "data" / "zoo.cfg").read_text()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        assert port_is_free("127.0.0.1", port)
    finally:
        out.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# =========================================================================== ZkClient


@pytest.fixture
def zk_connect(zookeeper: str, request: pytest.FixtureRequest) -> str:
    """A private chroot on the session ZooKeeper, so tests do not see each other's znodes."""
    return f"{zookeeper}/{request.node.name}-{uuid.uuid4().hex[:8]}"


def registration(broker_id: int, port: int = 9092) -> znodes.BrokerIdZNode:
    return znodes.BrokerRegistration(
        broker_id=broker_id, endpoints=[f"PLAINTEXT://127.0.0.1:{port}"]
    )


def test_connection_failure_is_clear() -> None:
    async def body() -> None:
        client = ZkClient(f"127.0.0.1:{free_port()}", connection_timeout_ms=1000)
        with pytest.raises(ZkConnectionError, match="could not connect to ZooKeeper at"):
            await client.start()
        assert client.state is ZkState.CLOSED

    run(body())


def test_cluster_id_is_created_once_and_stable(zk_connect: str) -> None:
    async def body() -> None:
        async with ZkClient(zk_connect) as a, ZkClient(zk_connect) as b:
            assert await a.get_cluster_id() is None
            await a.ensure_persistent_paths()
            first = await a.get_or_create_cluster_id()
            assert len(first) == 22
            assert await a.get_or_create_cluster_id() == first
            assert await b.get_or_create_cluster_id() == first
            assert await b.get_cluster_id() == first
            assert await a.generate_broker_id() == 1001
            assert await b.generate_broker_id() == 1002
            assert await b.generate_broker_id(reserved_max=5000) == 5003

    run(body())


def test_broker_registration_is_ephemeral_and_unique(zk_connect: str) -> None:
    async def body() -> None:
        seen: list[list[int]] = []
        async with ZkClient(zk_connect) as watcher:
            await watcher.watch_broker_ids(seen.append)
            a = ZkClient(zk_connect)
            await a.start()
            try:
                epoch = await a.register_broker(registration(1))
                assert await a.get_broker_epoch(1) == epoch
                assert await a.register_broker(registration(1)) == epoch  # same session: ok
                node = await watcher.get_broker(1)
                assert node is not None and (node.host, node.port) == ("127.0.0.1", 9092)
                assert await watcher.get_broker_ids() == [1]
                assert (await watcher.get_brokers()).keys() == {1}
                async with ZkClient(zk_connect) as b:
                    with pytest.raises(BrokerIdAlreadyRegisteredError, match="broker id 1 "):
                        await b.register_broker(registration(1, 9093))
                    t0 = time.monotonic()
                    with pytest.raises(BrokerIdAlreadyRegisteredError):
                        await b.register_broker(registration(1, 9093), wait_s=0.5)
                    assert time.monotonic() - t0 >= 0.4
                    await b.register_broker(registration(2, 9093))
                    assert await watcher.get_broker_ids() == [1, 2]
            finally:
                await a.close()  # session closed: /brokers/ids/1 vanishes at once
            assert await watcher.get_broker_ids() == []
            assert await watcher.get_broker(1) is None
            async with ZkClient(zk_connect) as c:
                await c.register_broker(registration(1, 9094))
                # a broker waiting for a stale id gets it as soon as the holder goes
                d = ZkClient(zk_connect)
                await d.start()
                try:
                    waiter = asyncio.create_task(d.register_broker(registration(1), wait_s=20))
                    await asyncio.sleep(0.3)
                    assert not waiter.done()
                    await c.deregister_broker()
                    await asyncio.wait_for(waiter, 20)
                    node = await d.get_broker(1)
                    assert node is not None and node.port == 9092
                finally:
                    await d.close()
            await wait_for_async(
                lambda: seen and seen[-1] == [], 30, "the broker watch seeing no broker"
            )
            assert [1] in seen and [1, 2] in seen and seen[-1] == []

    run(body())


def expire_session(hosts: str, client_id: tuple[int, bytes]) -> None:
    """Expire a session the standard way: connect with its id and password, then close."""
    from kazoo.client import KazooClient

    other = KazooClient(hosts=hosts, client_id=client_id, timeout=4.0)
    other.start(timeout=10)
    other.stop()
    other.close()


def test_new_session_reregisters_the_broker(zk_connect: str, zookeeper: str) -> None:
    async def body() -> None:
        lost = asyncio.Event()
        reconnected = asyncio.Event()
        states: list[ZkState] = []
        client = ZkClient(zk_connect, session_timeout_ms=4000)
        client.on_session_lost(lost.set)

        async def on_reconnected() -> None:
            reconnected.set()

        client.on_reconnected(on_reconnected)
        client.on_state_change(states.append)
        await client.start()
        try:
            old_epoch = await client.register_broker(registration(1))
            old_session = client.session_id
            assert client.state is ZkState.CONNECTED
            assert await client.try_elect_controller(1) == 1
            client_id = client._kz.client_id  # test-only peek at the kazoo session
            await asyncio.to_thread(expire_session, zookeeper, client_id)
            await asyncio.wait_for(lost.wait(), 30)
            await asyncio.wait_for(reconnected.wait(), 30)
            assert client.session_id != old_session
            assert client.state is ZkState.CONNECTED
            assert ZkState.LOST in states
            new_epoch = await client.get_broker_epoch(1)
            assert new_epoch is not None and new_epoch != old_epoch
            # leadership is not restored automatically: the controller must re-elect
            assert await client.get_controller() is None
            assert await client.try_elect_controller(1) == 2
        finally:
            await client.close()
        assert client.state is ZkState.CLOSED

    run(body())


def test_controller_election_and_epochs(zk_connect: str) -> None:
    async def body() -> None:
        changes: list[int | None] = []
        async with ZkClient(zk_connect) as b:
            await b.watch_controller(changes.append)
            a = ZkClient(zk_connect)
            await a.start()
            try:
                assert await a.get_controller_epoch() is None
                assert await a.try_elect_controller(1) == 1
                assert a.controller_epoch == 1
                assert await b.try_elect_controller(2) is None
                assert await a.try_elect_controller(1) == 1  # already the controller
                assert await b.get_controller() == 1
                epoch = await b.get_controller_epoch()
                assert epoch is not None and epoch.value == 1
                stale_fence = a.controller_epoch_zk_version
                assert stale_fence == epoch.zk_version
            finally:
                await a.close()
            await wait_for_async(
                lambda: changes[-1:] == [None], 30, "the controller watch seeing no controller"
            )
            assert changes[-1] is None and 1 in changes
            assert await b.try_elect_controller(2) == 2
            assert await b.get_controller() == 2
            # a write fenced with the old controller's epoch version is refused
            await b.create_topic("fenced", {0: [2]})
            state = znodes.PartitionState(2, 0, [2], 2)
            assert await b.create_partition_state("fenced", 0, state) == 0
            with pytest.raises(ControllerMovedError):
                await b.update_partition_state(
                    "fenced", 0, state, 0, controller_epoch_zk_version=stale_fence
                )
            assert (
                await b.update_partition_state(
                    "fenced", 0, state, 0, controller_epoch_zk_version=b.controller_epoch_zk_version
                )
                == 1
            )
            await b.resign_controller(2)
            assert await b.get_controller() is None
            assert b.controller_epoch is None

    run(body())


async def _create_and_read_topic(zk: ZkClient) -> uuid.UUID:
    """Create "orders" and read it back; returns its topic id."""
    tid = await zk.create_topic("orders", {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"})
    found = await zk.get_topic_with_version("orders")
    assert found is not None
    topic, version = found
    assert topic.topic_id == tid and version == 0
    assert topic.assignment == {0: [1, 2], 1: [2, 1]}
    assert await zk.get_topic("orders") == topic
    assert await zk.get_topic("missing") is None
    assert await zk.get_all_topics() == ["orders"]
    with pytest.raises(TopicExistsError, match="already exists"):
        await zk.create_topic("orders", {0: [1]})
    with pytest.raises(ValueError):
        await zk.create_topic("a/b", {0: [1]})
    return tid


async def _change_topic_config(zk: ZkClient) -> None:
    """Set "orders"' config: the change is announced by a config change notification."""
    assert await zk.get_topic_config("orders") == {"retention.ms": "1000"}
    await zk.set_topic_config("orders", {"cleanup.policy": "compact"})
    assert await zk.get_topic_config("orders") == {"cleanup.policy": "compact"}
    changes: list[list[str]] = []
    await zk.watch_config_changes(changes.append)
    await wait_for_async(lambda: changes, 30, "the config change watch fired")
    names = changes[-1]
    assert names and names[-1].startswith("config_change_")
    note = await zk.get_config_change(names[-1])
    assert note == znodes.ConfigChangeNotificationZNode("topics/orders")


async def _reassign_and_delete_topic(zk: ZkClient, tid: uuid.UUID) -> None:
    # assignment updates are conditional and keep the topic id
    assert await zk.set_topic_assignment("orders", {0: [1, 2], 1: [2, 1], 2: [1]}, 5) is None
    assert await zk.set_topic_assignment("orders", {0: [1, 2], 1: [2, 1], 2: [1]}, 0) == 1
    topic2 = await zk.get_topic("orders")
    assert topic2 is not None and topic2.topic_id == tid and 2 in topic2.partitions
    # deletion
    with pytest.raises(UnknownTopicError):
        await zk.mark_topic_for_deletion("missing")
    assert await zk.mark_topic_for_deletion("orders") is True
    assert await zk.mark_topic_for_deletion("orders") is False
    assert await zk.get_topics_marked_for_deletion() == ["orders"]
    await zk.create_partition_states("orders", {0: znodes.PartitionState(1, 0, [1, 2], 1)})
    await zk.delete_topic_znodes("orders")
    assert await zk.get_topic("orders") is None
    assert await zk.get_partition_state("orders", 0) is None
    assert await zk.get_topic_config("orders") == {}
    assert await zk.get_topics_marked_for_deletion() == []
    await zk.delete_topic_znodes("orders")  # idempotent


def test_topic_create_get_config_delete(zk_connect: str) -> None:
    async def body() -> None:
        topic_changes: list[list[str]] = []
        async with ZkClient(zk_connect) as zk:
            await zk.ensure_persistent_paths()
            await zk.watch_topics(topic_changes.append)
            tid = await _create_and_read_topic(zk)
            await _change_topic_config(zk)
            await _reassign_and_delete_topic(zk, tid)
            # a topic marked for deletion cannot be re-created until the deletion finishes
            await zk.create_topic("again", {0: [1]})
            await zk.mark_topic_for_deletion("again")
            await zk.delete_topic_znodes("again")
            new_id = await zk.create_topic("again", {0: [1]})
            assert new_id != tid
            await wait_for_async(
                lambda: topic_changes and topic_changes[-1] == ["again"],
                30,
                "the topic watch seeing only 'again'",
            )
            assert ["orders"] in topic_changes and topic_changes[-1] == ["again"]

    run(body())


def test_partition_state_updates_are_conditional(zk_connect: str) -> None:
    async def body() -> None:
        async with ZkClient(zk_connect) as a, ZkClient(zk_connect) as b:
            await a.create_topic("t", {0: [1, 2], 1: [2, 1]})
            s0 = znodes.PartitionState(leader=1, leader_epoch=0, isr=[1, 2], controller_epoch=1)
            s1 = znodes.PartitionState(leader=2, leader_epoch=0, isr=[2, 1], controller_epoch=1)
            assert await a.create_partition_states("t", {0: s0, 1: s1}) == {0: 0, 1: 0}
            assert await a.create_partition_states("t", {0: s0}) == {}  # exists: left out
            got = await b.get_partition_state("t", 0)
            assert got is not None and got.value == s0 and got.zk_version == 0
            shrunk = znodes.PartitionState(1, 0, [1], 1)
            assert await a.update_partition_state("t", 0, shrunk, 0) == 1
            # b still holds version 0: its write must fail
            grown = znodes.PartitionState(1, 1, [1, 2], 1)
            assert await b.update_partition_state("t", 0, grown, 0) is None
            # a retried write that already landed is recognised as success
            assert await a.update_partition_state("t", 0, shrunk, 0) == 1
            current = await b.get_partition_state("t", 0)
            assert current is not None and current.value == shrunk and current.zk_version == 1
            assert await b.update_partition_state("t", 0, grown, 1) == 2
            assert await a.update_partition_state("t", 9, grown, 0) is None  # no such znode
            states = await a.get_partition_states("t")
            assert {p: v.value for p, v in states.items()} == {0: grown, 1: s1}

    run(body())


def test_partition_states_are_written_and_read_in_pipelined_batches(zk_connect: str) -> None:
    """The batch write of leaders' ISR changes and of the controller's elections: each write
    succeeds or fails on its own version, a retried write that landed is recognised, a
    missing znode answers None, and the controller-epoch fence refuses the whole batch."""

    async def body() -> None:
        async with ZkClient(zk_connect) as a, ZkClient(zk_connect) as b:
            await a.create_topic("t", {p: [1, 2] for p in range(300)})
            first = {p: znodes.PartitionState(1, 0, [1, 2], 1) for p in range(300)}
            await a.create_partition_states("t", first)
            await b.update_partition_state("t", 7, znodes.PartitionState(1, 0, [1], 1), 0)
            shrunk = znodes.PartitionState(1, 0, [1], 1)
            updates = [(TopicPartition("t", p), shrunk, 0) for p in range(300)]
            updates.append((TopicPartition("t", 999), shrunk, 0))  # no such znode
            versions = await a.update_partition_states(updates)
            # partition 7 already holds exactly this state at version 1: recognised as written
            assert versions == [1] * 300 + [None]
            grown = znodes.PartitionState(1, 0, [1, 2], 1)
            versions = await a.update_partition_states(
                [(TopicPartition("t", 0), grown, 0), (TopicPartition("t", 1), grown, 1)]
            )
            assert versions == [None, 2]  # partition 0 is at version 1, not 0
            read = await b.get_partition_states_of(
                [TopicPartition("t", p) for p in (0, 1, 299)] + [TopicPartition("t", 999)]
            )
            assert {tp.partition: (v.value, v.zk_version) for tp, v in read.items()} == {
                0: (shrunk, 1),
                1: (grown, 2),
                299: (shrunk, 1),
            }
            assert await a.try_elect_controller(1) == 1
            fence = a.controller_epoch_zk_version
            assert fence is not None
            assert await a.update_partition_states(
                [(TopicPartition("t", 2), grown, 1)], controller_epoch_zk_version=fence
            ) == [2]
            with pytest.raises(ControllerMovedError):
                await a.update_partition_states(
                    [(TopicPartition("t", 3), grown, 1)], controller_epoch_zk_version=fence + 1
                )

    run(body())


def test_producer_id_blocks_never_overlap(zk_connect: str) -> None:
    async def body() -> None:
        async with ZkClient(zk_connect) as a, ZkClient(zk_connect) as b:
            await a.ensure_persistent_paths()

            async def grab(client: ZkClient, broker_id: int, n: int) -> list[tuple[int, int]]:
                return [await client.allocate_producer_id_block(broker_id) for _ in range(n)]

            blocks_a, blocks_b = await asyncio.gather(grab(a, 1, 15), grab(b, 2, 15))
            blocks = sorted(blocks_a + blocks_b)
            assert len(set(blocks)) == 30
            assert blocks[0] == (0, 999)
            for (_, end), (start, _) in itertools.pairwise(blocks):
                assert start == end + 1  # disjoint and contiguous
            assert all(e - s + 1 == 1000 for s, e in blocks)
        # a "restarted" broker continues after the last block
        async with ZkClient(zk_connect) as c:
            assert await c.allocate_producer_id_block(1, block_size=10) == (30_000, 30_009)
            assert await c.allocate_producer_id_block(1) == (30_010, 31_009)

    run(body())


def test_isr_change_notifications(zk_connect: str) -> None:
    async def body() -> None:
        async with ZkClient(zk_connect) as zk:
            await zk.ensure_persistent_paths()
            seen: list[list[str]] = []
            await zk.watch_isr_change_notifications(seen.append)
            name = await zk.add_isr_change_notification(
                [TopicPartition("t", 0), TopicPartition("t", 1)]
            )
            assert name.startswith("isr_change_")
            pending = await zk.get_isr_change_notifications()
            assert pending == {name: frozenset({TopicPartition("t", 0), TopicPartition("t", 1)})}
            await zk.delete_isr_change_notifications([name])
            assert await zk.get_isr_change_notifications() == {}
            await wait_for_async(
                lambda: [name] in seen and seen[-1] == [],
                30,
                "the ISR change watch seeing the notification come and go",
            )
            assert [name] in seen and seen[-1] == []

    run(body())


def test_kafka_json_on_the_wire(zk_connect: str, zookeeper: str) -> None:
    """What lands in ZooKeeper is byte-for-byte what ZkData.scala writes (read with kazoo)."""
    from kazoo.client import KazooClient

    chroot = zk_connect[len(zookeeper) :]

    async def body() -> uuid.UUID:
        async with ZkClient(zk_connect) as zk:
            await zk.ensure_persistent_paths()
            await zk.register_broker(registration(1))
            await zk.try_elect_controller(1)
            tid = await zk.create_topic("t", {0: [1]}, {"retention.ms": "100000"})
            await zk.create_partition_states("t", {0: znodes.PartitionState(1, 0, [1], 1)})
            await zk.allocate_producer_id_block(1)
            return tid

    async def later(connect: str) -> None:
        async with ZkClient(connect) as zk:
            assert await zk.get_broker_ids() == []

    raw = KazooClient(hosts=zookeeper)
    raw.start(timeout=10)
    try:
        tid = run(body())

        def get(path: str) -> bytes:
            return bytes(raw.get(chroot + path)[0])

        assert get("/controller_epoch") == b"1"
        assert get("/brokers/topics/t") == (
            b'{"partitions":{"0":[1]},"topic_id":"'
            + znodes.uuid_to_kafka_str(tid).encode()
            + b'","adding_replicas":{},"removing_replicas":{},"version":3}'
        )
        assert get("/brokers/topics/t/partitions/0/state") == (
            b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}'
        )
        assert get("/config/topics/t") == b'{"version":1,"config":{"retention.ms":"100000"}}'
        assert get("/latest_producer_id_block") == (
            b'{"version":1,"broker":1,"block_start":"0","block_end":"999"}'
        )
        for path in znodes.PERSISTENT_PATHS:
            assert raw.exists(chroot + path) is not None, path
        run(later(zk_connect))  # the broker and controller znodes were ephemeral
        assert raw.exists(chroot + "/controller") is None
    finally:
        raw.stop()
        raw.close()


# =========================================================================== millrace cluster


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env=env,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A cluster directory; at teardown every pid in its cluster.json and every process whose
    command line names the directory is SIGKILLed."""
    directory = tmp_path / "cluster"
    try:
        yield directory
    finally:
        with contextlib.suppress(Exception):
            cli("cluster", "down", "--dir", str(directory), "--timeout", "10", timeout=60)
        pids: set[int] = set(pids_mentioning(str(directory)))
        with contextlib.suppress(OSError, ValueError):
            info = json.loads((directory / "cluster.json").read_text())
            pids.update(b["pid"] for b in info.get("brokers", []) if b.get("pid"))
            if info.get("zookeeper_pid"):
                pids.add(info["zookeeper_pid"])
        for pid in sorted(pids):
            kill_pid(pid)


def _up_with_two_brokers(cluster_dir: Path) -> dict[str, Any]:
    """``cluster up`` with 2 brokers on free ports; checks what it printed and wrote in
    ``cluster.json``, and returns that."""
    zk_port, base_port = free_port(), free_port()
    while not all(port_is_free("127.0.0.1", base_port + i) for i in range(2)):
        base_port = free_port()
    up = cli(
        "cluster", "up", "--dir", str(cluster_dir), "--brokers", "2",
        "--base-port", str(base_port), "--zk-port", str(zk_port),
        "--set", "zookeeper.session.timeout.ms=6000", "--set", "num.partitions=2",
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    bootstrap = f"127.0.0.1:{base_port},127.0.0.1:{base_port + 1}"
    assert up.stdout.strip().splitlines()[-1] == bootstrap
    assert "2/2 broker(s) registered" in up.stderr
    info: dict[str, Any] = json.loads((cluster_dir / "cluster.json").read_text())
    assert info["zookeeper"] == f"127.0.0.1:{zk_port}"
    assert info["bootstrap_servers"] == bootstrap
    assert [b["id"] for b in info["brokers"]] == [1, 2]
    assert info["controller"] in (1, 2)
    assert len(info["cluster_id"]) == 22
    for b in info["brokers"]:
        assert b["host"] == "127.0.0.1" and pid_alive(b["pid"])
        props = (cluster_dir / f"broker-{b['id']}" / "server.properties").read_text()
        assert f"broker.id={b['id']}" in props and "num.partitions=2" in props
        assert b["log_dirs"] == [str(cluster_dir / f"broker-{b['id']}" / "data")]
    assert pid_alive(info["zookeeper_pid"])
    assert b"ZooKeeperServerMain" in Path(f"/proc/{info['zookeeper_pid']}/cmdline").read_bytes()
    return info


def _restart_broker_2(cluster_dir: Path, old_pid: int) -> int:
    """Controlled stop and restart of broker 2; returns its new pid."""
    stop = cli("cluster", "stop-broker", "--dir", str(cluster_dir), "--broker", "2")
    assert stop.returncode == 0, stop.stderr
    assert not pid_alive(old_pid)
    st = json.loads(cli("cluster", "status", "--dir", str(cluster_dir), "--json").stdout)
    assert [(b["id"], b["alive"], b["registered"]) for b in st["brokers"]] == [
        (1, True, True),
        (2, False, False),
    ]
    start = cli("cluster", "start-broker", "--dir", str(cluster_dir), "--broker", "2")
    assert start.returncode == 0, start.stderr
    new_pid = int(json.loads((cluster_dir / "cluster.json").read_text())["brokers"][1]["pid"])
    assert new_pid != old_pid and pid_alive(new_pid)
    return new_pid


def _kill_and_restart_broker_2(cluster_dir: Path, pid: int) -> list[int]:
    """Hard kill of broker 2: start-broker waits for the dead session's znode to expire
    (6 s here). Returns every pid of the cluster (all alive)."""
    hard = cli("cluster", "stop-broker", "--dir", str(cluster_dir), "--broker", "2", "--hard")
    assert hard.returncode == 0, hard.stderr
    assert not pid_alive(pid)
    again_start = cli("cluster", "start-broker", "--dir", str(cluster_dir), "--broker", "2")
    assert again_start.returncode == 0, again_start.stderr
    final = json.loads((cluster_dir / "cluster.json").read_text())
    pids = [b["pid"] for b in final["brokers"]] + [final["zookeeper_pid"]]
    assert all(pid_alive(p) for p in pids)
    return pids


def test_cluster_lifecycle_with_real_brokers(cluster_dir: Path) -> None:
    info = _up_with_two_brokers(cluster_dir)
    zk_port = int(info["zookeeper"].rsplit(":", 1)[1])

    again = cli("cluster", "up", "--dir", str(cluster_dir), "--zk-port", str(free_port()))
    assert again.returncode == 1 and "already running" in again.stderr

    status = cli("cluster", "status", "--dir", str(cluster_dir), "--json")
    assert status.returncode == 0, status.stderr
    st = json.loads(status.stdout)
    assert st["zookeeper_serving"] and st["controller"] == info["controller"]
    assert all(b["alive"] and b["registered"] for b in st["brokers"])

    new_pid = _restart_broker_2(cluster_dir, info["brokers"][1]["pid"])
    pids = _kill_and_restart_broker_2(cluster_dir, new_pid)

    down = cli("cluster", "down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert not any(pid_alive(p) for p in pids)
    assert port_is_free("127.0.0.1", zk_port)
    after = json.loads((cluster_dir / "cluster.json").read_text())
    assert after["state"] == "down" and after["zookeeper_pid"] is None
    assert cli("cluster", "down", "--dir", str(cluster_dir)).returncode == 0  # idempotent


def test_cluster_up_rejects_bad_settings_and_busy_ports(cluster_dir: Path) -> None:
    bad = cli(
        "cluster", "up", "--dir", str(cluster_dir), "--brokers", "1",
        "--zk-port", str(free_port()), "--base-port", str(free_port()),
        "--set", "no.such.property=1",
    )  # fmt: skip
    assert bad.returncode == 1
    assert "no.such.property" in bad.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        clash = cli(
            "cluster", "up", "--dir", str(cluster_dir), "--brokers", "1",
            "--zk-port", str(port), "--base-port", str(free_port()),
        )  # fmt: skip
    assert clash.returncode == 1 and "already in use" in clash.stderr
    assert not (cluster_dir / "cluster.json").exists()


def test_cluster_up_with_no_brokers_and_functions_api(cluster_dir: Path) -> None:
    from broker.cli import cluster

    zk_port = free_port()
    info = cluster.cluster_up(cluster_dir, brokers=0, zk_port=zk_port, progress=None)
    try:
        assert info["bootstrap_servers"] == "" and info["brokers"] == []
        assert zookeeper_is_serving("127.0.0.1", zk_port)
        status = cluster.cluster_status(cluster_dir)
        assert status["zookeeper_serving"] and status["controller"] is None
    finally:
        down = cluster.cluster_down(cluster_dir, progress=None)
    assert down["state"] == "down"
    assert not pid_alive(info["zookeeper_pid"])
    assert cluster.cluster_down(cluster_dir / "nothing-here", progress=None) == {}


def test_a_request_that_outlives_its_retry_deadline_is_retried_once_connected(
    zk_connect: str,
) -> None:
    """A broker paused (SIGSTOP) longer than its request retry deadline wakes up to a
    connected client and an expired deadline: the request is tried again, not failed
    (found by the fault harness: a broker paused during start-up exited with
    "RetryFailedError: Too many retry attempts")."""
    from kazoo.exceptions import ConnectionLoss

    async def body() -> None:
        async with ZkClient(zk_connect, session_timeout_ms=2000) as client:
            calls: list[int] = []

            def flaky() -> str:
                calls.append(1)
                if len(calls) == 1:
                    time.sleep(2.5)  # the "pause": past the 2 s retry deadline
                    raise ConnectionLoss()
                return "done"

            assert await client._run(flaky) == "done"
            assert len(calls) == 2

    run(body())
