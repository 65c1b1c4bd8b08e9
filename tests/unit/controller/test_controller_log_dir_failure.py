"""The controller's reaction to a log directory failure (KIP-112, ZooKeeper mode): a
``/log_dir_event_notification/log_dir_event_<seq>`` znode makes it ask the broker about all
its replicas (LeaderAndIsr); the replicas answered KAFKA_STORAGE_ERROR go offline: new
leaders from the remaining online ISR, out of every ISR, StopReplica to the broker, and
UpdateMetadata listing them as offline replicas. Runs the real controller against the fake
ZooKeeper with the capturing channel of test_controller_with_fake_zookeeper.py, whose brokers
answer LeaderAndIsr with KAFKA_STORAGE_ERROR for the partitions in ``offline_dirs``."""

from __future__ import annotations

import pytest

from broker.controller.requests import LEADER_AND_ISR, STOP_REPLICA
from broker.controller.state_machines import PartitionState, ReplicaState
from broker.metadata.cache import PartitionInfo
from broker.types import TopicPartition as TP
from broker.zk import znodes
from tests.unit.controller.test_controller_with_fake_zookeeper import (
    Cluster,
    cluster_test,
    partition_states,
)

pytestmark = pytest.mark.unit

T0, T1, T2 = TP("t", 0), TP("t", 1), TP("t", 2)


def test_log_dir_event_znode_is_kafkas() -> None:
    node = znodes.LogDirEventNotificationZNode(7)
    assert node.encode() == b'{"version":1,"broker":7,"event":1}'
    assert znodes.LogDirEventNotificationZNode.decode(node.encode()) == node
    assert znodes.LogDirEventNotificationZNode.create_path() == (
        "/log_dir_event_notification/log_dir_event_"
    )
    assert znodes.LogDirEventNotificationZNode.path(3) == (
        "/log_dir_event_notification/log_dir_event_0000000003"
    )


def cached(cluster: Cluster, tp: TP, node: int = 1) -> PartitionInfo:
    info = cluster.nodes[node].metadata.partition(tp.topic, tp.partition)
    assert info is not None
    return info


async def fail_dirs(cluster: Cluster, broker_id: int, partitions: set[TP]) -> None:
    """Broker ``broker_id`` lost the log dir holding ``partitions`` and says so."""
    cluster.offline_dirs[broker_id] = set(partitions)
    await cluster.nodes[broker_id].zk.propagate_log_dir_event(broker_id)
    await cluster.settle()


@cluster_test()
async def test_offline_replicas_lose_leadership_and_isr_membership(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [2, 3, 1], 1: [3, 2, 1], 2: [1, 2, 3]})
    ctl = cluster.active
    first = len(cluster.sent)
    await fail_dirs(cluster, 2, {T0, T1})

    # the probe: broker 2 is asked about every replica it has
    probe = next(s.request for s in cluster.sent[first:] if s.api_key == LEADER_AND_ISR[0])
    assert set(partition_states([probe])) == {T0, T1, T2}
    assert cluster.sent[first].broker_id == 2
    assert await cluster.any_zk().get_log_dir_event_notifications() == {}  # deleted

    st0, st1, st2 = [await cluster.state(tp) for tp in (T0, T1, T2)]
    assert (st0.leader, st0.leader_epoch, st0.isr) == (3, 1, (3, 1))  # next in-sync replica
    assert (st1.leader, st1.leader_epoch, st1.isr) == (3, 1, (3, 1))  # 2 left the ISR
    assert (st2.leader, st2.leader_epoch, st2.isr) == (1, 0, (1, 2, 3))  # untouched
    assert ctl.ctx.replicas_on_offline_dirs == {2: {T0, T1}}
    assert ctl.ctx.replica_states.state((T0, 2)) is ReplicaState.OfflineReplica
    assert ctl.ctx.replica_states.state((T2, 2)) is ReplicaState.OnlineReplica
    assert ctl.ctx.partition_states.state(T0) is PartitionState.OnlinePartition
    # everyone learns the new leaders and the offline replicas
    for node in (1, 2, 3):
        assert cached(cluster, T0, node).leader == 3
        assert cached(cluster, T0, node).offline_replicas == (2,)
        assert cached(cluster, T1, node).offline_replicas == (2,)
        assert cached(cluster, T2, node).offline_replicas == ()
    after = cluster.sent[first + 1 :]
    # the broker stops the offline replicas; it is not told the new states of them
    stops = [s.request for s in after if s.broker_id == 2 and s.api_key == STOP_REPLICA[0]]
    assert {
        (str(t.topic_name), int(p.partition_index), bool(p.delete_partition))
        for r in stops
        for t in r.topic_states
        for p in t.partition_states
    } == {("t", 0, False), ("t", 1, False)}
    to_2 = [s.request for s in after if s.broker_id == 2 and s.api_key == LEADER_AND_ISR[0]]
    assert T0 not in partition_states(to_2) and T1 not in partition_states(to_2)
    to_3 = [s.request for s in after if s.broker_id == 3 and s.api_key == LEADER_AND_ISR[0]]
    assert partition_states(to_3)[T0] == (3, 1, (3, 1))

    # a second event for the same directory changes nothing more
    epochs = [(await cluster.state(tp)).leader_epoch for tp in (T0, T1, T2)]
    await cluster.nodes[2].zk.propagate_log_dir_event(2)
    await cluster.settle()
    assert [(await cluster.state(tp)).leader_epoch for tp in (T0, T1, T2)] == epochs


@cluster_test(**{"unclean.leader.election.enable": "false"})
async def test_no_online_in_sync_replica_means_no_leader_unless_unclean(cluster: Cluster) -> None:
    await cluster.create_topic("clean", {0: [2, 3]})
    await cluster.create_topic("dirty", {0: [2, 3]}, {"unclean.leader.election.enable": "true"})
    zk = cluster.any_zk()
    for name in ("clean", "dirty"):  # the leader shrank the ISR to itself
        current = await zk.get_partition_state(name, 0)
        assert current is not None
        shrunk = znodes.PartitionState(2, 0, (2,), current.value.controller_epoch)
        await zk.update_partition_state(name, 0, shrunk, current.zk_version)
    await cluster.nodes[1].zk.add_isr_change_notification([TP("clean", 0), TP("dirty", 0)])
    await cluster.settle()
    await fail_dirs(cluster, 2, {TP("clean", 0), TP("dirty", 0)})
    clean = await cluster.state(TP("clean", 0))
    assert (clean.leader, clean.isr) == (-1, (2,))
    assert cluster.active.ctx.partition_states.state(TP("clean", 0)) is (
        PartitionState.OfflinePartition
    )
    dirty = await cluster.state(TP("dirty", 0))
    assert (dirty.leader, dirty.isr) == (3, (3,))


@cluster_test()
async def test_a_restarted_broker_reports_again_and_a_repaired_dir_rejoins(
    cluster: Cluster,
) -> None:
    await cluster.create_topic("t", {0: [2, 3, 1], 1: [3, 2, 1]})
    ctl = cluster.active
    await fail_dirs(cluster, 2, {T0})
    assert ctl.ctx.replicas_on_offline_dirs == {2: {T0}}

    # restarted with the directory still broken: LeaderAndIsr finds it offline again
    await cluster.stop(2)
    assert 2 not in ctl.ctx.replicas_on_offline_dirs
    await cluster.start(2)
    assert ctl.ctx.replicas_on_offline_dirs == {2: {T0}}
    assert cached(cluster, T0).offline_replicas == (2,)
    assert ctl.ctx.replica_states.state((T0, 2)) is ReplicaState.OfflineReplica

    # repaired: the restarted broker hosts the replica again (it rejoins the ISR by
    # fetching, through its leader's ISR change)
    cluster.offline_dirs[2] = set()
    await cluster.stop(2)
    await cluster.start(2)
    assert ctl.ctx.replicas_on_offline_dirs == {}
    assert ctl.ctx.replica_states.state((T0, 2)) is ReplicaState.OnlineReplica
    assert cached(cluster, T0).offline_replicas == ()
    last = [s.request for s in cluster.sent if s.broker_id == 2 and s.api_key == 4][-1]
    assert T0 in partition_states([last])


@cluster_test()
async def test_a_new_controller_finds_offline_replicas_by_itself(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [3, 2, 1]})
    cluster.offline_dirs[3] = {T0}
    # the notification is written but the controller dies before it handles it
    await cluster.stop(1)
    await cluster.nodes[3].zk.propagate_log_dir_event(3)
    await cluster.settle()
    ctl = cluster.active
    assert ctl.broker_id == 2
    assert ctl.ctx.replicas_on_offline_dirs == {3: {T0}}
    st = await cluster.state(T0)
    assert (st.leader, st.isr) == (2, (2,))
    assert await cluster.any_zk().get_log_dir_event_notifications() == {}


@cluster_test()
async def test_a_reassignment_tells_only_its_new_replicas_they_are_new(cluster: Cluster) -> None:
    """``is_new`` lets a broker create the log although one of its log dirs is offline (the
    log cannot be there); it must not be set for replicas that already exist, whose log may
    be in the offline dir (a second, empty copy would be created elsewhere)."""
    await cluster.create_topic("t", {0: [1, 2]})
    first = len(cluster.sent)
    await cluster.active.alter_partition_reassignments({T0: [1, 2, 3]})
    await cluster.settle()
    is_new: dict[int, set[bool]] = {}
    for s in cluster.sent[first:]:
        if s.api_key == LEADER_AND_ISR[0]:
            for t in s.request.topic_states:
                for p in t.partition_states:
                    is_new.setdefault(s.broker_id, set()).add(bool(p.is_new))
    assert is_new[3] == {True}
    assert is_new[1] == {False} and is_new[2] == {False}
