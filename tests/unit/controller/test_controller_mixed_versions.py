"""The controller in a mixed cluster (issue 29): AlterPartition and AllocateProducerIds from
Kafka brokers, checked as Kafka 3.9's ``KafkaController`` checks them, and the requests the
controller sends at every ``inter.broker.protocol.version``, read back by the broker's
handlers. A real :class:`Controller` on the fake ZooKeeper of
``test_controller_with_fake_zookeeper``."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from broker.api.inter_broker import (
    handle_update_metadata,
    leader_and_isr_partitions,
    stop_replica_partitions,
    update_metadata_partitions,
)
from broker.controller.alter_partition import AlterPartition, IsrProposal, TopicProposals
from broker.controller.controller import NotControllerError
from broker.controller.requests import (
    leader_and_isr_requests,
    stop_replica_requests,
    update_metadata_requests,
)
from broker.metadata.cache import MetadataCache
from broker.protocol import registry
from broker.protocol.errors import ErrorCode
from broker.protocol.inter_broker_protocol import IBP_VERSIONS, parse_ibp
from broker.types import TopicPartition as TP
from tests.unit.controller.test_controller_with_fake_zookeeper import (
    UPDATE_METADATA,
    Cluster,
    cluster_test,
)

pytestmark = pytest.mark.unit


def proposal(
    cluster: Cluster,
    *,
    broker: int = 1,
    isr: tuple[int, ...] = (1, 2),
    leader_epoch: int | None = None,
    partition_epoch: int | None = None,
    recovery: int = 0,
    version: int = 3,
    topic: str = "t",
    partition: int = 0,
    broker_epoch: int | None = None,
) -> AlterPartition:
    ctx = cluster.active.ctx
    tp = TP(topic, partition)
    state = ctx.states.get(tp)
    p = IsrProposal(
        partition,
        state.leader_epoch if leader_epoch is None and state else (leader_epoch or 0),
        isr,
        recovery,
        ctx.state_versions.get(tp, 0) if partition_epoch is None else partition_epoch,
    )
    topics = [TopicProposals(topic if version < 2 else None, ctx.topic_ids.get(topic), [p])]
    epoch = ctx.broker_epochs[broker] if broker_epoch is None else broker_epoch
    return AlterPartition(broker, epoch, version, topics)


def only(result: Any) -> Any:
    assert result.error == ErrorCode.none, result
    [topic] = result.topics
    [partition] = topic.partitions
    return partition


@cluster_test()
async def test_alter_partition_writes_the_isr_and_tells_every_broker(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2, 3]})
    controller = cluster.active
    before = controller.ctx.state_versions[TP("t", 0)]
    sent = len(cluster.sent)
    out = only(await controller.alter_partition(proposal(cluster, isr=(1, 2))))
    assert out.error == ErrorCode.none
    assert (out.leader, out.isr, out.partition_epoch) == (1, (1, 2), before + 1)
    state = await cluster.state(TP("t", 0))
    assert (state.leader, state.isr, state.controller_epoch) == (1, (1, 2), controller.epoch)
    await cluster.settle()
    told = {s.broker_id for s in cluster.sent[sent:] if s.api_key == UPDATE_METADATA[0]}
    assert told == {1, 2, 3}
    # the same request again (a retry after a lost answer): the state in force, no write
    again = only(
        await controller.alter_partition(proposal(cluster, isr=(1, 2), partition_epoch=before))
    )
    assert (again.error, again.isr, again.partition_epoch) == (ErrorCode.none, (1, 2), before + 1)
    assert controller.ctx.state_versions[TP("t", 0)] == before + 1
    # an expansion back to the full ISR, and a v0 request naming the topic
    grown = only(await controller.alter_partition(proposal(cluster, isr=(1, 2, 3), version=0)))
    assert (grown.isr, grown.partition_epoch) == ((1, 2, 3), before + 2)


@cluster_test()
async def test_alter_partition_refusals_are_kafkas(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    controller = cluster.active
    ctx = controller.ctx
    epoch = ctx.state_versions[TP("t", 0)]
    leader_epoch = ctx.states[TP("t", 0)].leader_epoch

    async def error_of(request: AlterPartition) -> ErrorCode:
        result = await controller.alter_partition(request)
        if result.error != ErrorCode.none:
            return result.error
        return only(result).error

    assert await error_of(proposal(cluster, partition_epoch=epoch + 1)) == ErrorCode.not_controller
    assert await error_of(proposal(cluster, leader_epoch=leader_epoch + 1)) == (
        ErrorCode.not_controller
    )
    assert await error_of(proposal(cluster, leader_epoch=leader_epoch - 1)) == (
        ErrorCode.fenced_leader_epoch
    )
    # an ISR naming a broker that is not live (KIP-841), by request version
    assert await error_of(proposal(cluster, isr=(1, 9))) == ErrorCode.ineligible_replica
    assert await error_of(proposal(cluster, isr=(1, 9), version=1)) == (
        ErrorCode.operation_not_attempted
    )
    # KIP-704: a recovering leader alone in its ISR only; never back to recovering
    assert await error_of(proposal(cluster, isr=(1, 2), recovery=1)) == ErrorCode.invalid_request
    assert await error_of(proposal(cluster, isr=(1,), recovery=1)) == ErrorCode.invalid_request
    # broker epochs: another registration than the sender's, or an unknown broker
    assert await error_of(proposal(cluster, broker_epoch=12345)) == ErrorCode.stale_broker_epoch
    assert await error_of(proposal(cluster, broker=9, broker_epoch=1)) == (
        ErrorCode.stale_broker_epoch
    )
    # a broker that does not lead the partition at that leader epoch
    assert await error_of(proposal(cluster, broker=2, isr=(1, 2))) == ErrorCode.invalid_request
    # unknown partitions and topic ids
    assert await error_of(proposal(cluster, partition=7)) == ErrorCode.unknown_topic_or_partition
    gone = AlterPartition(
        1,
        ctx.broker_epochs[1],
        2,
        [TopicProposals(None, None, [IsrProposal(0, 0, (1,), 0, 0)])],
    )
    assert await error_of(gone) == ErrorCode.unknown_topic_id
    # a write the znode's version rejects (someone else wrote meanwhile)
    await cluster.any_zk().update_partition_state(
        "t", 0, ctx.states[TP("t", 0)], epoch
    )  # bumps the znode version behind the controller's back
    assert await error_of(proposal(cluster, isr=(1, 3))) == ErrorCode.invalid_update_version
    # nothing was written by the refusals
    state = await cluster.state(TP("t", 0))
    assert state.isr == (1, 2, 3)
    # a controller that is not active refuses at once
    standby = cluster.nodes[2].controller
    assert standby is not None and not standby.is_active
    with pytest.raises(NotControllerError):
        await standby.alter_partition(proposal(cluster))


@cluster_test()
async def test_allocate_producer_ids_hands_out_kafkas_blocks(cluster: Cluster) -> None:
    controller = cluster.active
    epochs = controller.ctx.broker_epochs
    first = await controller.allocate_producer_ids(3, epochs[3])
    assert (first.error, first.first, first.length) == (ErrorCode.none, 0, 1000)
    znode = json.loads(cluster.any_zk().zk.get("/latest_producer_id_block")[0])
    assert znode == {"version": 1, "broker": 3, "block_start": "0", "block_end": "999"}
    # a Millrace broker claims its own blocks from the same znode: never the same ids
    own = await cluster.nodes[2].zk.allocate_producer_id_block(2)
    second = await controller.allocate_producer_ids(3, epochs[3])
    assert own == (1000, 1999) and (second.first, second.length) == (2000, 1000)
    assert (await controller.allocate_producer_ids(3, 1)).error == ErrorCode.stale_broker_epoch
    assert (await controller.allocate_producer_ids(9, 1)).error == (
        ErrorCode.broker_id_not_registered
    )


# --------------------------------------------------------------------------- every IBP

IBPS = ["0.8.2", "0.9.0", "0.10.1", "0.11.0", "1.0", "2.2", "2.4-IV0", "2.5", "2.8", "3.3", "3.9"]


@cluster_test()
async def test_requests_of_every_ibp_read_back_the_same(cluster: Cluster) -> None:
    """What the controller sends at each inter.broker.protocol.version encodes, decodes and
    reads back (through the broker's handlers) to the same partitions, leaders and brokers."""
    await cluster.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]})
    ctx = cluster.active.ctx
    parts = [TP("t", 0), TP("t", 1)]
    seen_lair, seen_um, seen_caches = set(), set(), []
    for name in IBPS:
        ibp = parse_ibp(name)
        [(_b, (key, version), lair)] = leader_and_isr_requests(
            ctx, 1, parts, only=[2], version=ibp.leader_and_isr_version
        )
        lair = registry.decode_request(key, version, registry.encode(lair), 0)
        states = {
            (t, int(p.partition_index)): (int(p.leader), tuple(p.isr), int(p.partition_epoch))
            for t, _id, p in leader_and_isr_partitions(lair)
        }
        seen_lair.add(tuple(sorted(states.items())))
        [(_b, (key, version), stop)] = stop_replica_requests(
            ctx, 1, 2, parts, delete=True, version=ibp.stop_replica_version
        )
        stop = registry.decode_request(key, version, registry.encode(stop), 0)
        assert [(tp, d) for tp, _e, d in stop_replica_partitions(stop)] == [
            (tp, True) for tp in parts
        ]
        [(_b, (key, version), um)] = update_metadata_requests(
            ctx, 1, parts, brokers=[2], version=ibp.update_metadata_version
        )
        um = registry.decode_request(key, version, registry.encode(um), 0)
        seen_um.add(
            tuple(
                sorted(
                    (t, int(p.partition_index), int(p.leader))
                    for t, _i, p in update_metadata_partitions(um)
                )
            )
        )
        cache = MetadataCache("c")
        services = SimpleNamespace(
            metadata=cache,
            replica_manager=SimpleNamespace(check_controller_epoch=lambda _e: True),
            own_broker_epoch=None,
        )
        handler_ctx = SimpleNamespace(
            services=services,
            connection=SimpleNamespace(listener="PLAINTEXT"),
            authorize_cluster=lambda _op: True,
        )
        response = await handle_update_metadata(handler_ctx, um)  # type: ignore[arg-type]
        assert response.error_code == ErrorCode.none and response.__version__ == version
        seen_caches.append(
            (
                sorted((b.id, b.host, b.port) for b in cache.brokers()),
                {p: (i.leader, i.replicas, i.isr) for p, i in cache.topic("t").partitions.items()},
            )
        )
    assert len(seen_lair) == 1 and len(seen_um) == 1
    assert all(c == seen_caches[-1] for c in seen_caches), seen_caches
    assert IBP_VERSIONS[-1] == "3.9-IV0"


@cluster_test(**{"inter.broker.protocol.version": "2.8"})
async def test_the_controller_sends_the_versions_of_its_ibp(cluster: Cluster) -> None:
    await cluster.create_topic("t", {0: [1, 2, 3]})
    versions = {(s.api_key, type(s.request).__version__) for s in cluster.sent}
    assert (4, 5) in versions and (6, 7) in versions
    assert not any(v > 5 for k, v in versions if k == 4)
    assert not any(v > 7 for k, v in versions if k == 6)
