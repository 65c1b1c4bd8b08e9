"""The controller (broker/controller/controller.py and its helpers) against the in-memory
ZooKeeper of tests/fakes/zookeeper.py: election and fail-over, broker failure and start-up,
topic and partition creation, deletion, ISR-change notifications, controlled shutdown,
preferred and unclean elections, reassignment, the controller-moved policy, and illegal
state transitions being visible. No sockets: the controller's channel is a capturing fake
that applies UpdateMetadata to the broker's own metadata cache."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest

from broker.api.inter_broker import handle_update_metadata
from broker.config import BrokerConfig
from broker.controller.controller import Controller, NotControllerError
from broker.controller.events import (
    BrokerReachable,
    BrokerUnreachable,
    ControllerUnreachable,
    LeaderImbalanceCheck,
)
from broker.controller.requests import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from broker.controller.state_machines import PartitionState, ReplicaState
from broker.metadata.cache import MetadataCache
from broker.metadata.topic_configs import TopicConfigManager
from broker.protocol import interbroker
from broker.protocol.errors import ErrorCode
from broker.topic_names import TopicExistsError
from broker.types import TopicPartition as TP
from broker.zk import znodes
from tests.fakes.zookeeper import FakeZkClient, FakeZooKeeper

pytestmark = pytest.mark.unit
ib: Any = interbroker

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass(frozen=True, slots=True)
class Sent:
    """One request the controller queued for a broker."""

    sender: int
    broker_id: int
    api_key: int
    request: Any


class CapturingChannel:
    """The controller channel, without sockets: records what is sent and hands each request
    to the target broker's handler (in the order sent), as the real channel would."""

    def __init__(self, controller_id: int, cluster: Cluster) -> None:
        self.controller_id = controller_id
        self.cluster = cluster
        self.brokers: dict[int, tuple[str, int]] = {}
        self.closed = False

    def add_broker(self, broker_id: int, host: str, port: int) -> None:
        self.brokers[broker_id] = (host, port)

    def remove_broker(self, broker_id: int) -> None:
        self.brokers.pop(broker_id, None)

    def send(
        self, broker_id: int, api_key: int, api_version: int, request: Any, callback: Any = None
    ) -> None:
        if broker_id not in self.brokers or self.closed:
            return
        self.cluster.sent.append(Sent(self.controller_id, broker_id, api_key, request))
        self.cluster.deliver(broker_id, api_key, api_version, request, callback)

    async def close(self) -> None:
        self.closed = True


def local_handler(metadata: MetadataCache) -> Callable[[int, int, Any], Awaitable[Any]]:
    """What the broker's dispatcher does with its own controller's UpdateMetadata."""
    services = SimpleNamespace(
        metadata=metadata,
        replica_manager=SimpleNamespace(check_controller_epoch=lambda _e: True),
        own_broker_epoch=None,  # the fake ZooKeeper's brokers are not registered processes
    )
    ctx = SimpleNamespace(
        services=services,
        connection=SimpleNamespace(listener="PLAINTEXT"),
        authorize_cluster=lambda _operation: True,  # the broker's own request
    )

    async def handle(api_key: int, _version: int, request: Any) -> Any:
        if api_key == UPDATE_METADATA[0]:
            return await handle_update_metadata(ctx, request)
        return None

    return handle


@dataclass(slots=True)
class Node:
    broker_id: int
    zk: FakeZkClient
    controller: Controller | None
    metadata: MetadataCache
    topic_configs: TopicConfigManager


class Cluster:
    """Brokers registered on one fake ZooKeeper, each with its controller role."""

    def __init__(self, **props: str) -> None:
        self.zk = FakeZooKeeper()
        self.props = {"auto.leader.rebalance.enable": "false", **props}
        self.nodes: dict[int, Node] = {}
        self.sent: list[Sent] = []
        self._deliveries: list[asyncio.Task[Any]] = []
        self.offline_dirs: dict[int, set[TP]] = {}
        """Per broker, the partitions its LeaderAndIsr answers call KAFKA_STORAGE_ERROR."""

    def deliver(
        self, broker_id: int, api_key: int, api_version: int, request: Any, callback: Any = None
    ) -> None:
        node = self.nodes.get(broker_id)

        async def handle() -> Any:
            # a broker registered but not yet in ``nodes`` (still starting) answers too
            if api_key == LEADER_AND_ISR[0]:
                response = self.leader_and_isr_response(broker_id, request)
            elif node is not None:
                response = await local_handler(node.metadata)(api_key, api_version, request)
            else:
                return None
            if callback is not None and response is not None:
                callback(response)
            return response

        self._deliveries.append(asyncio.get_running_loop().create_task(handle()))

    def leader_and_isr_response(self, broker_id: int, request: Any) -> Any:
        """What the broker answers: KAFKA_STORAGE_ERROR for its offline partitions."""
        offline = self.offline_dirs.get(broker_id, set())
        return ib.LeaderAndIsrResponse(
            error_code=ErrorCode.none,
            topics=tuple(
                ib.LeaderAndIsrTopicError(
                    topic_id=t.topic_id,
                    partition_errors=tuple(
                        ib.LeaderAndIsrPartitionError(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.kafka_storage_error
                            if TP(str(t.topic_name), int(p.partition_index)) in offline
                            else ErrorCode.none,
                        )
                        for p in t.partition_states
                    ),
                )
                for t in request.topic_states
            ),
        )

    async def start(self, broker_id: int, *, controller: bool = True) -> Node:
        zk = self.zk.client()
        await zk.start()
        await zk.ensure_persistent_paths()
        cfg = BrokerConfig({**self.props, "broker.id": str(broker_id)})
        topic_configs = TopicConfigManager(zk, cfg)
        await topic_configs.load_all()
        metadata = MetadataCache("cluster")
        await zk.register_broker(
            znodes.BrokerIdZNode.create(broker_id, [f"PLAINTEXT://127.0.0.1:{9090 + broker_id}"])
        )
        ctl = None
        if controller:
            ctl = Controller(
                zk,
                metadata,
                cfg,
                broker_id,
                topic_configs,
                channel_factory=lambda cid, _handler: CapturingChannel(cid, self),
            )
            ctl.set_local_handler(local_handler(metadata))
            await topic_configs.start()
            await ctl.startup()
        node = Node(broker_id, zk, ctl, metadata, topic_configs)
        self.nodes[broker_id] = node
        await self.settle()
        return node

    async def stop(self, broker_id: int) -> None:
        """A hard stop: the broker's session closes (its ephemeral znodes vanish)."""
        node = self.nodes.pop(broker_id)
        if node.controller is not None:
            await node.controller.shutdown()
        await node.topic_configs.stop()
        await node.zk.close()
        await self.settle()

    async def settle(self) -> None:
        """Until watches have fired and every controller's queue is empty."""
        for _ in range(10):
            for _ in range(3):
                await asyncio.sleep(0)
            for node in list(self.nodes.values()):
                if node.controller is not None:
                    await node.controller.events.drain()
            deliveries, self._deliveries = self._deliveries, []
            await asyncio.gather(*deliveries)

    async def close(self) -> None:
        for broker_id in list(self.nodes):
            await self.stop(broker_id)

    @property
    def active(self) -> Controller:
        active = [
            n.controller for n in self.nodes.values() if n.controller and n.controller.is_active
        ]
        assert len(active) == 1, active
        return active[0]

    async def state(self, tp: TP) -> znodes.PartitionState:
        found = await self.any_zk().get_partition_state(tp.topic, tp.partition)
        assert found is not None
        return found.value

    def any_zk(self) -> FakeZkClient:
        return next(iter(self.nodes.values())).zk

    async def create_topic(
        self,
        name: str,
        assignment: dict[int, list[int]],
        configs: dict[str, str | None] | None = None,
    ) -> None:
        await self.active.create_topic(
            name, num_partitions=-1, replication_factor=-1, assignment=assignment, configs=configs
        )
        await self.settle()

    def sent_to(self, broker_id: int, api: tuple[int, int]) -> list[Any]:
        return [s.request for s in self.sent if s.broker_id == broker_id and s.api_key == api[0]]


def cluster_test(
    brokers: int = 3, **props: str
) -> Callable[[Callable[[Cluster], Coroutine[Any, Any, None]]], Callable[[], None]]:
    """Run the decorated coroutine with brokers 1..n started (broker 1 first, so it is the
    controller), and close everything afterwards."""

    def wrap(body: Callable[[Cluster], Coroutine[Any, Any, None]]) -> Callable[[], None]:
        def test() -> None:
            async def main() -> None:
                cluster = Cluster(**props)
                try:
                    for b in range(1, brokers + 1):
                        await cluster.start(b)
                    await body(cluster)
                finally:
                    await cluster.close()

            run(main())

        test.__name__ = body.__name__
        test.__doc__ = body.__doc__
        return test

    return wrap


def partition_states(tps: list[Any]) -> dict[TP, tuple[int, int, tuple[int, ...]]]:
    """(leader, leader epoch, isr) of every partition in LeaderAndIsr/UpdateMetadata requests."""
    out = {}
    for request in tps:
        for topic in request.topic_states:
            for p in topic.partition_states:
                out[TP(str(topic.topic_name), int(p.partition_index))] = (
                    int(p.leader),
                    int(p.leader_epoch),
                    tuple(int(r) for r in p.isr),
                )
    return out


# --------------------------------------------------------------------------- election


@cluster_test()
async def test_first_broker_is_elected_and_others_learn_the_controller(cluster: Cluster) -> None:
    c1, c2 = cluster.nodes[1].controller, cluster.nodes[2].controller
    assert c1 is not None and c2 is not None
    assert c1.is_active and c1.epoch == 1 and not c2.is_active
    assert await cluster.any_zk().get_controller() == 1
    assert cluster.nodes[2].metadata.controller_id == 1
    # every live broker got UpdateMetadata with all three brokers
    assert {b.id for b in cluster.nodes[1].metadata.brokers()} == {1, 2, 3}
    assert cluster.sent_to(3, UPDATE_METADATA)
    with pytest.raises(NotControllerError):
        await c2.create_topic("t", num_partitions=1, replication_factor=1)


@cluster_test()
async def test_failover_elects_a_new_controller_that_moves_leadership(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    await cluster.stop(1)
    c2 = cluster.active
    assert c2.broker_id == 2 and c2.epoch == 2
    # partition 0 was led by broker 1: the next in-sync replica in assignment order leads
    st = await cluster.state(TP("t", 0))
    assert (st.leader, st.leader_epoch, st.isr, st.controller_epoch) == (2, 1, (2, 3), 2)
    st1 = await cluster.state(TP("t", 1))
    assert (st1.leader, st1.isr) == (2, (2, 3))
    assert c2.ctx.partition_states.state(TP("t", 0)) is PartitionState.OnlinePartition
    assert c2.ctx.replica_states.state((TP("t", 0), 1)) is ReplicaState.OfflineReplica
    # the new controller tells every live replica every partition, with its own epoch
    lair = [r for s in cluster.sent if s.sender == 2 and s.api_key == 4 for r in [s.request]]
    assert {int(r.controller_epoch) for r in lair} == {2}
    assert partition_states(cluster.sent_to(3, LEADER_AND_ISR))[TP("t", 0)] == (2, 1, (2, 3))


# --------------------------------------------------------------------------- brokers


@cluster_test()
async def test_broker_failure_moves_leadership_to_the_next_isr_replica(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 3, 1], 1: [3, 1, 2]})
    ctl = cluster.active
    cluster.sent.clear()
    await cluster.stop(2)
    st = await cluster.state(TP("t", 0))
    assert (st.leader, st.leader_epoch, st.isr) == (3, 1, (3, 1))
    st1 = await cluster.state(TP("t", 1))
    assert (st1.leader, st1.leader_epoch, st1.isr) == (3, 1, (3, 1))  # 2 left the ISR
    assert ctl.ctx.partition_states.state(TP("t", 0)) is PartitionState.OnlinePartition
    assert ctl.ctx.replica_states.state((TP("t", 0), 2)) is ReplicaState.OfflineReplica
    assert partition_states(cluster.sent_to(3, LEADER_AND_ISR))[TP("t", 0)] == (3, 1, (3, 1))
    assert cluster.nodes[1].metadata.partition("t", 0).leader == 3  # type: ignore[union-attr]


@cluster_test()
async def test_a_broker_failure_writes_every_partition_once_even_after_a_version_race(
    cluster: Cluster,
) -> None:
    """The elections and ISR shrinks of a broker failure are written as one batch; a
    partition whose znode a leader changed meanwhile (its version moved under the
    controller) is read again and written on top of the leader's change."""
    assignment = {p: [2, 3, 1] if p % 2 else [3, 2, 1] for p in range(40)}
    await cluster.create_topic("many", assignment)
    zk = cluster.any_zk()
    raced = TP("many", 6)  # led by 3: its leader shrinks the ISR behind the controller
    found = await zk.get_partition_state(raced.topic, raced.partition)
    assert found is not None
    behind = znodes.PartitionState(
        leader=3, leader_epoch=found.value.leader_epoch, isr=(3, 2), controller_epoch=1
    )
    assert (
        await zk.update_partition_state(raced.topic, raced.partition, behind, found.zk_version)
        is not None
    )
    await cluster.stop(2)
    for p, replicas in assignment.items():
        st = await cluster.state(TP("many", p))
        if replicas[0] == 2:  # led by 2: the next in-sync replica leads
            assert (st.leader, st.leader_epoch, st.isr) == (3, 1, (3, 1)), p
        elif p == 6:  # the leader had dropped 1; the controller drops 2 on top
            assert (st.leader, st.leader_epoch, st.isr) == (3, 1, (3,)), p
        else:
            assert (st.leader, st.leader_epoch, st.isr) == (3, 1, (3, 1)), p


@cluster_test()
async def test_a_partition_without_live_in_sync_replica_gets_leader_minus_one(
    cluster: Cluster,
) -> None:
    await cluster.create_topic("solo", {0: [3]})
    await cluster.stop(3)
    st = await cluster.state(TP("solo", 0))
    assert (st.leader, st.leader_epoch, st.isr) == (-1, 1, (3,))  # the ISR keeps the last member
    ctl = cluster.active
    assert ctl.ctx.partition_states.state(TP("solo", 0)) is PartitionState.OfflinePartition
    # broker 3 comes back: the offline partition is elected again and 3 leads
    await cluster.start(3)
    st = await cluster.state(TP("solo", 0))
    assert (st.leader, st.leader_epoch, st.isr) == (3, 2, (3,))
    assert ctl.ctx.partition_states.state(TP("solo", 0)) is PartitionState.OnlinePartition
    assert ctl.ctx.replica_states.state((TP("solo", 0), 3)) is ReplicaState.OnlineReplica
    assert partition_states(cluster.sent_to(3, LEADER_AND_ISR))[TP("solo", 0)] == (3, 2, (3,))


@cluster_test(**{"unclean.leader.election.enable": "false"})
async def test_unclean_election_follows_the_topic_config(cluster: Cluster) -> None:
    await cluster.create_topic("clean", {0: [2, 3]})
    await cluster.create_topic("dirty", {0: [2, 3]}, {"unclean.leader.election.enable": "true"})
    zk = cluster.any_zk()
    for name in ("clean", "dirty"):  # the leader shrank the ISR to itself
        current = await zk.get_partition_state(name, 0)
        assert current is not None
        shrunk = znodes.PartitionState(2, 0, (2,), current.value.controller_epoch)
        await zk.update_partition_state(name, 0, shrunk, current.zk_version)
    await cluster.stop(2)
    assert (await cluster.state(TP("clean", 0))).leader == -1
    dirty = await cluster.state(TP("dirty", 0))
    assert (dirty.leader, dirty.isr) == (3, (3,))


@cluster_test()
async def test_broker_startup_gets_metadata_and_its_partitions(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2]})
    await cluster.stop(3)
    cluster.sent.clear()
    await cluster.start(3)
    assert cluster.sent_to(3, UPDATE_METADATA)
    assert cluster.sent_to(3, LEADER_AND_ISR) == []  # it hosts nothing
    await cluster.stop(2)
    cluster.sent.clear()
    await cluster.start(2)
    # broker 2 is told its partition (it left the ISR when it failed)
    assert partition_states(cluster.sent_to(2, LEADER_AND_ISR))[TP("t", 0)] == (1, 1, (1,))
    assert cluster.sent_to(1, LEADER_AND_ISR) == []  # only the new broker


# --------------------------------------------------------------------------- topics


@cluster_test()
async def test_create_topic_writes_znodes_initializes_and_informs_brokers(cluster: Cluster) -> None:
    ctl = cluster.active
    info = await ctl.create_topic(
        "orders", num_partitions=3, replication_factor=2, configs={"retention.ms": "1000"}
    )
    await cluster.settle()
    zk = cluster.any_zk()
    topic = await zk.get_topic("orders")
    assert topic is not None and topic.topic_id == info.topic_id and len(topic.partitions) == 3
    assert await zk.get_topic_config("orders") == {"retention.ms": "1000"}
    for p, replicas in topic.partitions.items():
        st = await cluster.state(TP("orders", p))
        assert (st.leader, st.leader_epoch, st.isr) == (replicas[0], 0, tuple(replicas))
        assert ctl.ctx.partition_states.state(TP("orders", p)) is PartitionState.OnlinePartition
        for r in replicas:
            assert ctl.ctx.replica_states.state((TP("orders", p), r)) is ReplicaState.OnlineReplica
            assert all(
                ps.is_new
                for req in cluster.sent_to(r, LEADER_AND_ISR)
                for t in req.topic_states
                for ps in t.partition_states
            )
    cached = cluster.nodes[1].metadata.topic("orders")
    assert cached is not None and len(cached.partitions) == 3
    assert cluster.nodes[1].topic_configs.overrides("orders") == {"retention.ms": "1000"}
    with pytest.raises(TopicExistsError):
        await ctl.create_topic("orders", num_partitions=1, replication_factor=1)


@cluster_test()
async def test_topic_created_in_zookeeper_by_another_broker_comes_online(cluster: Cluster) -> None:
    c2 = cluster.nodes[2].controller
    assert c2 is not None and not c2.is_active
    await c2.auto_create_topic("auto", 2, 2)  # writes the znodes only
    await cluster.nodes[3].zk.create_topic("tool", {0: [3, 1]})  # as a tool would
    await cluster.settle()
    for p in (0, 1):
        st = await cluster.state(TP("auto", p))
        assert st.leader >= 0 and len(st.isr) == 2
    assert (await cluster.state(TP("tool", 0))).isr == (3, 1)
    assert cluster.nodes[2].metadata.topic("auto") is not None
    assert (
        cluster.active.ctx.partition_states.state(TP("tool", 0)) is PartitionState.OnlinePartition
    )


@cluster_test()
async def test_internal_topic_from_any_broker_keeps_its_configs(cluster: Cluster) -> None:
    """``create_internal_topic`` on a broker that is not the controller writes the topic's
    config znode too (``__consumer_offsets`` must be compacted whoever creates it)."""
    c2 = cluster.nodes[2].controller
    assert c2 is not None and not c2.is_active
    configs = {"cleanup.policy": "compact", "min.insync.replicas": "2"}
    await c2.create_internal_topic("__internal_a", 3, 3, configs)
    await cluster.active.create_internal_topic("__internal_b", 2, 5, configs)  # rf capped at 3
    await c2.create_internal_topic("__internal_a", 3, 3, configs)  # exists: not an error
    await cluster.settle()
    for name, parts in (("__internal_a", 3), ("__internal_b", 2)):
        assert await cluster.any_zk().get_topic_config(name) == configs
        for p in range(parts):
            st = await cluster.state(TP(name, p))
            assert st.leader >= 0 and len(st.isr) == 3
    await cluster.nodes[3].topic_configs.ensure_loaded(["__internal_a"])  # as LeaderAndIsr does
    log_config = cluster.nodes[3].topic_configs.log_config_for("__internal_a")
    assert log_config.compact and log_config.min_insync_replicas == 2


@cluster_test()
async def test_create_partitions_adds_online_partitions(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2]})
    ctl = cluster.active
    await ctl.create_partitions("t", 3, [[2, 3], [3, 1]])
    await cluster.settle()
    topic = await cluster.any_zk().get_topic("t")
    assert topic is not None and topic.assignment == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    assert (await cluster.state(TP("t", 2))).leader == 3
    assert ctl.ctx.partition_states.state(TP("t", 1)) is PartitionState.OnlinePartition
    with pytest.raises(Exception, match="must be larger"):
        await ctl.create_partitions("t", 2, None)


@cluster_test()
async def test_delete_topic_stops_replicas_and_removes_everything(cluster: Cluster) -> None:
    await cluster.create_topic("doomed", {0: [1, 2], 1: [2, 3]})
    ctl = cluster.active
    cluster.sent.clear()
    await ctl.delete_topic("doomed")
    await cluster.settle()
    zk = cluster.any_zk()
    assert await zk.get_topic("doomed") is None
    assert await zk.get_topic_config("doomed") == {}
    assert await zk.get_topics_marked_for_deletion() == []
    stops = cluster.sent_to(2, STOP_REPLICA)
    assert stops and all(
        p.delete_partition for r in stops for t in r.topic_states for p in t.partition_states
    )
    deleted = partition_states(cluster.sent_to(3, UPDATE_METADATA))
    assert deleted[TP("doomed", 1)][0] == -2  # LeaderDuringDelete
    assert cluster.nodes[1].metadata.topic("doomed") is None
    assert TP("doomed", 0) not in ctl.ctx.partition_states
    assert ctl.ctx.replica_states.replicas_of(TP("doomed", 0)) == {}
    assert cluster.nodes[1].topic_configs.overrides("doomed") == {}


@cluster_test()
async def test_topic_marked_for_deletion_by_a_tool_is_deleted(cluster: Cluster) -> None:
    await cluster.create_topic("old", {0: [1]})
    assert await cluster.nodes[3].zk.mark_topic_for_deletion("old") is True
    await cluster.settle()
    assert await cluster.any_zk().get_topic("old") is None
    assert "old" not in cluster.active.ctx.topic_ids


# --------------------------------------------------------------------------- ISR changes


@cluster_test()
async def test_isr_change_notification_is_propagated(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 3]})
    zk2 = cluster.nodes[2].zk
    current = await zk2.get_partition_state("t", 0)
    assert current is not None
    shrunk = znodes.PartitionState(2, 0, (2,), current.value.controller_epoch)
    assert await zk2.update_partition_state("t", 0, shrunk, current.zk_version) == 1
    cluster.sent.clear()
    await zk2.add_isr_change_notification([TP("t", 0)])
    await cluster.settle()
    assert partition_states(cluster.sent_to(3, UPDATE_METADATA))[TP("t", 0)] == (2, 0, (2,))
    assert await zk2.get_isr_change_notifications() == {}
    assert cluster.active.ctx.state_versions[TP("t", 0)] == 1


# --------------------------------------------------------------------------- shutdown, elections


@cluster_test()
async def test_controlled_shutdown_moves_leaders_and_stops_followers(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 1], 1: [1, 2]})
    await cluster.create_topic("single", {0: [2]})
    ctl = cluster.active
    epoch = await cluster.any_zk().get_broker_epoch(2)
    assert epoch is not None
    cluster.sent.clear()
    remaining = await ctl.controlled_shutdown(2, epoch)
    assert remaining == []  # single-0 has no other replica: not counted
    st0, st1 = await cluster.state(TP("t", 0)), await cluster.state(TP("t", 1))
    assert (st0.leader, st0.leader_epoch, st0.isr) == (1, 1, (1,))
    assert (st1.leader, st1.isr) == (1, (1,))
    stopped = {
        (str(t.topic_name), int(p.partition_index), bool(p.delete_partition))
        for r in cluster.sent_to(2, STOP_REPLICA)
        for t in r.topic_states
        for p in t.partition_states
    }
    assert stopped == {("t", 0, False), ("t", 1, False)}
    assert 2 in ctl.ctx.shutting_down
    with pytest.raises(Exception, match="stale"):
        await ctl.controlled_shutdown(2, epoch + 1000)


@cluster_test()
async def test_preferred_election_restores_the_preferred_leader(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 1], 1: [1, 2]})
    await cluster.stop(2)
    await cluster.start(2)
    zk2 = cluster.nodes[2].zk  # broker 2 caught up: its leader adds it back to the ISR
    current = await zk2.get_partition_state("t", 0)
    assert current is not None and current.value.leader == 1
    grown = znodes.PartitionState(
        1, current.value.leader_epoch, (1, 2), current.value.controller_epoch
    )
    await zk2.update_partition_state("t", 0, grown, current.zk_version)
    await zk2.add_isr_change_notification([TP("t", 0)])
    await cluster.settle()
    results = await cluster.active.elect_leaders(0, None)
    assert results[TP("t", 0)] == (ErrorCode.none, None)
    assert results[TP("t", 1)] == (ErrorCode.election_not_needed, None)
    assert (await cluster.state(TP("t", 0))).leader == 2
    unknown = await cluster.active.elect_leaders(0, [TP("nope", 0)])
    assert unknown[TP("nope", 0)][0] == ErrorCode.unknown_topic_or_partition


@cluster_test(**{"leader.imbalance.per.broker.percentage": "0"})
async def test_leader_imbalance_check_moves_leaders_back(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 1]})
    await cluster.stop(2)
    await cluster.start(2)
    zk2 = cluster.nodes[2].zk
    current = await zk2.get_partition_state("t", 0)
    assert current is not None
    grown = znodes.PartitionState(
        1, current.value.leader_epoch, (1, 2), current.value.controller_epoch
    )
    await zk2.update_partition_state("t", 0, grown, current.zk_version)
    await zk2.add_isr_change_notification([TP("t", 0)])
    await cluster.settle()
    cluster.active.events.put(LeaderImbalanceCheck())
    await cluster.settle()
    assert (await cluster.state(TP("t", 0))).leader == 2


# --------------------------------------------------------------------------- reassignment


@cluster_test()
async def test_reassignment_completes_once_the_target_is_in_sync(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2]})
    ctl = cluster.active
    results = await ctl.alter_partition_reassignments({TP("t", 0): [2, 3]})
    assert results == {TP("t", 0): (ErrorCode.none, None)}
    ongoing = await ctl.list_partition_reassignments(None)
    assert ongoing == {TP("t", 0): ([2, 3, 1], [3], [1])}
    topic = await cluster.any_zk().get_topic("t")
    assert topic is not None and topic.adding_replicas == {0: (3,)}
    assert ctl.ctx.replica_states.state((TP("t", 0), 3)) is ReplicaState.OnlineReplica
    assert partition_states(cluster.sent_to(3, LEADER_AND_ISR))[TP("t", 0)][0] == 1
    # broker 3 caught up: the leader (1) writes the new ISR and notifies
    zk1 = cluster.nodes[1].zk
    current = await zk1.get_partition_state("t", 0)
    assert current is not None
    grown = znodes.PartitionState(
        1, current.value.leader_epoch, (1, 2, 3), current.value.controller_epoch
    )
    await zk1.update_partition_state("t", 0, grown, current.zk_version)
    cluster.sent.clear()
    await zk1.add_isr_change_notification([TP("t", 0)])
    await cluster.settle()
    st = await cluster.state(TP("t", 0))
    assert (st.leader, st.isr) == (2, (2, 3))  # the leader moved into the target
    topic = await cluster.any_zk().get_topic("t")
    assert topic is not None and topic.assignment == {0: [2, 3]} and topic.adding_replicas == {}
    assert await ctl.list_partition_reassignments(None) == {}
    stops = cluster.sent_to(1, STOP_REPLICA)
    assert stops and all(
        p.delete_partition for r in stops for t in r.topic_states for p in t.partition_states
    )
    assert (TP("t", 0), 1) not in ctl.ctx.replica_states
    bad = await ctl.alter_partition_reassignments({TP("t", 0): [2, 9]})
    assert bad[TP("t", 0)][0] == ErrorCode.invalid_replica_assignment


# --------------------------------------------------------------------------- moved, sessions


@cluster_test()
async def test_a_fenced_write_makes_the_controller_resign_and_reelect(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2]})
    ctl = cluster.active
    old_version = ctl.ctx.epoch_zk_version
    # another controller bumped /controller_epoch meanwhile (its znode version moves on)
    cluster.zk.set(znodes.CONTROLLER_EPOCH_PATH, znodes.ControllerEpochZNode(7).encode())
    with pytest.raises(NotControllerError):
        await ctl.create_partitions("t", 2, None)
    await cluster.settle()
    # it still holds /controller, so the re-election finds itself controller again, with
    # the current fence, and finishes the partition it could not initialize
    assert ctl.is_active and ctl.ctx.epoch_zk_version == old_version + 1
    assert (await cluster.state(TP("t", 1))).leader >= 0


@cluster_test()
async def test_session_expiry_resigns_and_the_new_session_reelects(cluster: Cluster) -> None:
    node = cluster.nodes[1]
    ctl = node.controller
    assert ctl is not None and ctl.epoch == 1
    await node.zk.expire_session()
    await cluster.settle()
    # exactly one controller (whichever broker won the new election), with a new epoch
    active = cluster.active
    assert active.epoch == 2 and await node.zk.get_controller() == active.broker_id
    assert {n.metadata.controller_id for n in cluster.nodes.values()} == {active.broker_id}
    assert await cluster.any_zk().get_broker_epoch(1) is not None  # re-registered


# --------------------------------------------------------------------------- illegal transitions


@cluster_test()
async def test_illegal_partition_transition_is_logged_and_skipped(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 1], 1: [2, 3]})
    ctl = cluster.active
    ctl.ctx.partition_states.remove(TP("t", 0))  # a bug: the machine lost the partition
    with _capture_errors() as errors:
        await cluster.stop(2)
    assert any(
        "illegal state change of partition t-0 from NonExistentPartition to OfflinePartition" in m
        for m in errors
    ), errors
    assert (await cluster.state(TP("t", 0))).leader == 2  # nothing written for it
    assert (await cluster.state(TP("t", 1))).leader == 3  # the others made progress


@cluster_test()
async def test_illegal_replica_transition_is_logged(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 3]})
    ctl = cluster.active
    ctl.ctx.replica_states.initialize((TP("t", 0), 3), ReplicaState.ReplicaDeletionSuccessful)
    with _capture_errors() as errors:
        await cluster.stop(3)
    assert any(
        "illegal state change of replica t-0 replica 3 from ReplicaDeletionSuccessful to "
        "OfflineReplica" in m
        for m in errors
    ), errors
    assert (await cluster.state(TP("t", 0))).isr == (1,)


class _ErrorCollector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


class _capture_errors:
    """Collect the ERROR records of the controller's loggers."""

    def __enter__(self) -> list[str]:
        self.handler = _ErrorCollector()
        logging.getLogger("broker.controller").addHandler(self.handler)
        return self.handler.messages

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("broker.controller").removeHandler(self.handler)


# --------------------------------------------------------------------------- bounces


async def _bounce(cluster: Cluster, broker_id: int) -> None:
    """The broker's process dies and restarts before anyone reacts: its session closes and
    a new one registers the same id (a new broker epoch), with no settling in between."""
    node = cluster.nodes.pop(broker_id)
    if node.controller is not None:
        await node.controller.shutdown()
    await node.topic_configs.stop()
    await node.zk.close()
    await cluster.start(broker_id)


@cluster_test()
async def test_a_bounced_leader_loses_leadership_and_leaves_the_isr(cluster: Cluster) -> None:
    """As Kafka's controller (KIP-380): a broker whose epoch changed is failed, then
    started: its partitions get another leader and it leaves their ISR (its log may have
    lost a tail in recovery), to come back as a follower that catches up."""
    await cluster.create_topic("t", {0: [2, 3, 1]})
    await _bounce(cluster, 2)
    st = await cluster.state(TP("t", 0))
    assert st.leader == 3 and 2 not in st.isr, st
    assert st.leader_epoch == 1
    assert cluster.active.ctx.replica_states.state((TP("t", 0), 2)) is ReplicaState.OnlineReplica


@cluster_test()
async def test_a_bounce_during_controller_failover_is_found_by_the_new_controller(
    cluster: Cluster,
) -> None:
    """The controller dies and the leader of a partition restarts before a new controller
    reads ZooKeeper: nobody saw the bounce, but its new registration is younger than the
    partition's state, so the new controller still fails it over (found by the fault
    harness: the restarted leader kept leading with a log its recovery had cut)."""
    await cluster.create_topic("t", {0: [2, 3, 1], 1: [3, 1, 2]})
    old = cluster.nodes.pop(1)  # the controller goes away...
    assert old.controller is not None
    await old.controller.shutdown()
    await old.topic_configs.stop()
    await old.zk.close()
    await _bounce(cluster, 2)  # ...and the leader of t-0 restarts meanwhile
    await cluster.settle()
    ctl = cluster.active
    assert ctl.broker_id in (2, 3)
    st = await cluster.state(TP("t", 0))
    assert st.leader == 3 and 2 not in st.isr, st
    st1 = await cluster.state(TP("t", 1))
    assert st1.leader == 3 and 2 not in st1.isr, st1


@cluster_test()
async def test_failover_without_bounces_changes_no_leader(cluster: Cluster) -> None:
    """The bounce check finds nothing when no broker restarted: leaders stay."""
    await cluster.create_topic("t", {0: [2, 3, 1], 1: [3, 2, 1]})
    await cluster.stop(1)
    after = [await cluster.state(TP("t", p)) for p in (0, 1)]
    assert [(s.leader, s.isr) for s in after] == [(2, (2, 3)), (3, (3, 2))]


# --------------------------------------------------------------------------- dead processes


@cluster_test()
async def test_a_dead_process_is_fenced_before_its_session_expires(cluster: Cluster) -> None:
    """docs/failover.md: the liveness watch reports broker 2's process gone while its
    registration lives on: it is failed over at once, and the same registration is not
    counted live by later broker changes."""
    await cluster.create_topic("t", {0: [2, 3, 1], 1: [3, 2, 1]})
    ctl = cluster.active
    epoch = ctl.ctx.broker_epochs[2]
    ctl.events.put(BrokerUnreachable(2, epoch))
    await cluster.settle()
    st = await cluster.state(TP("t", 0))
    assert (st.leader, st.leader_epoch, st.isr) == (3, 1, (3, 1))
    assert 2 not in (await cluster.state(TP("t", 1))).isr
    assert ctl.ctx.fenced == {2: epoch} and 2 not in ctl.ctx.live_brokers
    assert await cluster.any_zk().get_broker_epoch(2) == epoch  # still registered
    assert {b.id for b in cluster.nodes[1].metadata.brokers()} == {1, 3}
    # another broker change does not bring the fenced registration back
    await cluster.start(4)
    assert ctl.ctx.fenced == {2: epoch} and 2 not in ctl.ctx.live_brokers
    # its session expires at last: the fence is dropped
    await cluster.stop(2)
    assert ctl.ctx.fenced == {}


@cluster_test()
async def test_a_false_death_report_is_undone_when_the_broker_answers(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 3, 1]})
    ctl = cluster.active
    epoch = ctl.ctx.broker_epochs[2]
    ctl.events.put(BrokerUnreachable(2, epoch + 1))  # about another registration: ignored
    await cluster.settle()
    assert (await cluster.state(TP("t", 0))).leader == 2
    ctl.events.put(BrokerUnreachable(2, epoch))
    await cluster.settle()
    assert (await cluster.state(TP("t", 0))).leader == 3
    ctl.events.put(BrokerReachable(2, epoch))
    await cluster.settle()
    assert ctl.ctx.fenced == {} and ctl.ctx.broker_epochs[2] == epoch
    assert ctl.ctx.replica_states.state((TP("t", 0), 2)) is ReplicaState.OnlineReplica
    assert {b.id for b in cluster.nodes[1].metadata.brokers()} == {1, 2, 3}
    # it is a follower now (a higher leader epoch), back in the ISR once it catches up
    assert (await cluster.state(TP("t", 0))).leader == 3


@cluster_test()
async def test_a_restarted_fenced_broker_is_started_with_its_new_epoch(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 3, 1]})
    ctl = cluster.active
    old = ctl.ctx.broker_epochs[2]
    ctl.events.put(BrokerUnreachable(2, old))
    await cluster.settle()
    await _bounce(cluster, 2)  # a new process, a new registration
    await cluster.settle()
    assert ctl.ctx.fenced == {} and ctl.ctx.broker_epochs[2] != old
    assert ctl.ctx.replica_states.state((TP("t", 0), 2)) is ReplicaState.OnlineReplica


@cluster_test()
async def test_a_dead_controller_is_replaced_without_waiting_for_its_session(
    cluster: Cluster,
) -> None:
    """Another broker found the controller's process gone: it deletes that /controller
    (and only that one), and the election runs at once."""
    zk = cluster.nodes[2].zk
    registration = await zk.get_controller_registration()
    assert registration is not None and registration[0] == 1
    c2 = cluster.nodes[2].controller
    assert c2 is not None
    c2.events.put(ControllerUnreachable(1, registration[1] + 1))  # not that znode: kept
    await cluster.settle()
    assert await zk.get_controller_registration() == registration
    # the controller's process dies; its ZooKeeper session lives on (no heartbeats missed yet)
    dead = cluster.nodes.pop(1)
    assert dead.controller is not None
    await dead.controller.shutdown()
    try:
        assert await zk.get_controller_registration() == registration
        c2.events.put(ControllerUnreachable(1, registration[1]))
        await cluster.settle()
        assert cluster.active.broker_id in (2, 3)
    finally:
        await dead.topic_configs.stop()
        await dead.zk.close()
    assert (await zk.get_controller_epoch()).value == 2  # type: ignore[union-attr]
