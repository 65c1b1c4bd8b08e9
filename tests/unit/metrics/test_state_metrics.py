"""The state collectors on real broker parts: replica_metrics.py over a real ReplicaManager
(partition and leader counts, under-replicated and min-ISR partitions, ISR shrinks and
expands, purgatory sizes while an acks=all produce waits, produce and fetch counts recorded
by the replica manager), controller_metrics.py over a controller context (active or not),
server_metrics.py (broker state, ZooKeeper session state and counts)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.controller.context import ControllerContext
from broker.controller.reassignment import ReplicaAssignment
from broker.controller.state_machines import PartitionState
from broker.log.log_manager import LogManager
from broker.metrics import controller_metrics, replica_metrics, server_metrics
from broker.protocol import records
from broker.protocol.errors import ErrorCode
from broker.replication.replica_manager import (
    FetchRequestPartition,
    PartitionStateSpec,
    ReplicaManager,
)
from broker.request_metrics import MetricsRecorder
from broker.server import BrokerState
from broker.topic_config import LogConfig
from broker.types import TopicPartition
from broker.zk import znodes
from broker.zk.interface import ZkState
from tests.unit.metrics.exposition import scrape, value

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
LAG_MS = 10_000
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
RM = "kafka_server_replicamanager"


class _NoFetchers:
    def add_partition(self, *_args: object) -> None: ...
    def remove_partition(self, _tp: TopicPartition) -> None: ...
    def remove_idle_fetchers(self) -> int:
        return 0

    async def shutdown(self) -> None: ...


def _replica_manager(tmp_path: Path, recorder: MetricsRecorder) -> ReplicaManager:
    clock = ManualClock(NOW)
    log_config = LogConfig(min_insync_replicas=2)
    config = BrokerConfig(
        {"broker.id": "1", "log.dirs": str(tmp_path), "replica.lag.time.max.ms": str(LAG_MS)}
    )
    lm = LogManager([tmp_path], log_config, clock=clock, broker_id=1)
    lm.startup(lambda _topic: log_config)
    rm = ReplicaManager(config, lm, clock=clock, broker_id=1, metrics=recorder)
    rm.fetchers = _NoFetchers()  # type: ignore[assignment]
    rm.become_leader_or_follower(
        1,
        [
            PartitionStateSpec(A0, 1, 1, (1, 2), (1, 2)),  # led here, ISR full, at min ISR
            PartitionStateSpec(A1, 1, 1, (1,), (1, 2)),  # led here, under-replicated
            PartitionStateSpec(B0, 2, 1, (2, 1), (2, 1)),  # followed
        ],
        {2: ("127.0.0.1", 19092)},
        lambda _topic: log_config,
    )
    return rm


def _batch(n: int) -> bytes:
    return records.encode_batch([records.SimpleRecord(b"v%d" % i, b"k", NOW) for i in range(n)])


def test_replica_manager_figures(tmp_path: Path) -> None:
    recorder = MetricsRecorder()
    rm = _replica_manager(tmp_path, recorder)
    broker: Any = SimpleNamespace(replica_manager=rm, metrics=recorder)

    async def scenario() -> dict[str, Any]:
        # acks=all on A0 waits for follower 2: one Produce operation in the purgatory
        produce = asyncio.create_task(
            rm.append_records({A0: _batch(5)}, required_acks=-1, timeout_ms=60_000)
        )
        await asyncio.sleep(0)
        waiting = scrape(await replica_metrics.collect(broker))
        # follower 2 fetches past the append: the produce completes
        rm._read_all(
            [FetchRequestPartition(A0, 5, 1 << 20)],
            max_bytes=1 << 20,
            committed_only=False,
            min_one=True,
            replica_id=2,
        )
        result = (await produce)[A0]
        assert result.error == ErrorCode.none
        # a produce refused (A1 has 1 in-sync replica, min.insync.replicas 2)
        refused = await rm.append_records({A1: _batch(2)}, required_acks=-1, timeout_ms=1000)
        assert refused[A1].error == ErrorCode.not_enough_replicas
        return waiting

    waiting = asyncio.run(scenario())
    produce_size = value(
        waiting,
        "kafka_server_delayedoperationpurgatory_numdelayedoperations",
        delayedOperation="Produce",
    )
    assert produce_size == 1
    assert (
        value(
            waiting,
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            delayedOperation="Produce",
        )
        == 1
    )

    s = scrape(asyncio.run(replica_metrics.collect(broker)))
    assert value(s, f"{RM}_partitioncount") == 3
    assert value(s, f"{RM}_leadercount") == 2
    assert value(s, f"{RM}_underreplicatedpartitions") == 1
    assert value(s, f"{RM}_underminisrpartitioncount") == 1
    assert value(s, f"{RM}_atminisrpartitioncount") == 1
    assert value(s, f"{RM}_offlinereplicacount") == 0
    for kind in ("Produce", "Fetch"):
        assert (
            value(
                s,
                "kafka_server_delayedoperationpurgatory_numdelayedoperations",
                delayedOperation=kind,
            )
            == 0
        )

    t = scrape(recorder.families())
    btm = "kafka_server_brokertopicmetrics"
    assert value(t, f"{btm}_messagesin_total", topic="a") == 5
    assert (value(t, f"{btm}_bytesin_total", topic="a") or 0) > 0
    assert value(t, f"{btm}_totalproducerequests_total", topic="a") == 2
    assert value(t, f"{btm}_failedproducerequests_total", topic="a") == 1


def test_isr_shrinks_and_expands_are_counted(tmp_path: Path) -> None:
    recorder = MetricsRecorder()
    rm = _replica_manager(tmp_path, recorder)
    broker: Any = SimpleNamespace(replica_manager=rm, metrics=recorder)
    clock = rm.clock
    assert isinstance(clock, ManualClock)
    asyncio.run(rm.append_records({A0: _batch(1)}, required_acks=1, timeout_ms=1000))
    clock.advance(LAG_MS + 1)
    rm.maybe_shrink_isrs()  # follower 2 never fetched: out of A0's ISR
    assert rm.partitions[A0].isr == (1,)
    rm._read_all(  # it catches up: back in
        [FetchRequestPartition(A0, 1, 1 << 20)],
        max_bytes=1 << 20,
        committed_only=False,
        min_one=True,
        replica_id=2,
    )
    assert rm.partitions[A0].isr == (1, 2)
    s = scrape(asyncio.run(replica_metrics.collect(broker)))
    assert value(s, f"{RM}_isrshrinks_total") == 1
    assert value(s, f"{RM}_isrexpands_total") == 1


def test_a_starting_broker_has_no_replica_figures() -> None:
    broker: Any = SimpleNamespace(replica_manager=None)
    assert asyncio.run(replica_metrics.collect(broker)) == []


def _context() -> ControllerContext:
    ctx = ControllerContext()
    for tp, replicas, leader in ((A0, (1, 2), 1), (A1, (1, 2), 2), (B0, (2, 1), -1)):
        ctx.assignments[tp] = ReplicaAssignment(replicas)
        ctx.states[tp] = znodes.PartitionState(
            leader=leader, leader_epoch=1, isr=(leader,), controller_epoch=1
        )
        ctx.partition_states.initialize(
            tp, PartitionState.OfflinePartition if leader < 0 else PartitionState.OnlinePartition
        )
    return ctx


@pytest.mark.parametrize("active", [True, False])
def test_controller_figures_only_on_the_active_controller(active: bool) -> None:
    controller = SimpleNamespace(
        is_active=active, ctx=_context(), driver=SimpleNamespace(unclean_elections=2)
    )
    s = scrape(asyncio.run(controller_metrics.collect(SimpleNamespace(controller=controller))))  # type: ignore[arg-type]
    kc = "kafka_controller_kafkacontroller"
    expected = {
        "activecontrollercount": 1,
        "offlinepartitionscount": 1,
        "globalpartitioncount": 3,
        "globaltopiccount": 2,
        "preferredreplicaimbalancecount": 2,  # A1 led by 2, B0 leaderless
    }
    for name, n in expected.items():
        assert value(s, f"{kc}_{name}") == (n if active else 0), name
    assert value(s, "kafka_controller_controllerstats_uncleanleaderelections_total") == 2


def test_topics_being_deleted_are_not_offline_or_imbalanced() -> None:
    ctx = _context()
    ctx.deleting.add("b")
    controller = SimpleNamespace(
        is_active=True, ctx=ctx, driver=SimpleNamespace(unclean_elections=0)
    )
    s = scrape(asyncio.run(controller_metrics.collect(SimpleNamespace(controller=controller))))  # type: ignore[arg-type]
    assert value(s, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(s, "kafka_controller_kafkacontroller_preferredreplicaimbalancecount") == 1


@pytest.mark.parametrize(
    ("zk_state", "shown"),
    [
        (ZkState.CONNECTED, "CONNECTED"),
        (ZkState.SUSPENDED, "CONNECTING"),
        (ZkState.LOST, "CLOSED"),
        (ZkState.CLOSED, "CLOSED"),
    ],
)
def test_server_figures(zk_state: ZkState, shown: str) -> None:
    zk = SimpleNamespace(state=zk_state, expires=1, disconnects=4)
    broker: Any = SimpleNamespace(
        metrics=MetricsRecorder(), state=BrokerState.PENDING_CONTROLLED_SHUTDOWN, zk=zk
    )
    s = scrape(asyncio.run(server_metrics.collect(broker)))
    assert value(s, "kafka_server_kafkaserver_brokerstate") == 6
    for name in server_metrics.SESSION_STATES:
        assert value(s, "kafka_server_sessionexpirelistener_sessionstate", state=name) == (
            1 if name == shown else 0
        )
    assert value(s, "kafka_server_sessionexpirelistener_zookeeperexpires_total") == 1
    assert value(s, "kafka_server_sessionexpirelistener_zookeeperdisconnects_total") == 4
    assert value(s, "kafka_server_brokertopicmetrics_messagesin_total") == 0
