"""``unclean.leader.election.enable``: when every in-sync replica is gone, a partition waits for
one to return (the default) rather than letting an out-of-sync replica lead and lose
acknowledged records; with the topic override set, the first live replica takes over.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(300)]

PROPS = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "5000",
    "controlled.shutdown.retry.backoff.ms": "500",
    "auto.leader.rebalance.enable": "false",
    "min.insync.replicas": "1",
}


def _only_leader_in_isr(c: Cluster, topic: str, leader: int, follower: int) -> bool:
    """Stop the follower and wait until the ISR is the leader alone."""
    c.stop_broker(hard=True, broker_id=follower)
    wait_for(
        lambda: c.describe(topic, via=leader)[0][2] == (leader,),
        60,
        f"ISR of {topic}-0 shrunk to [{leader}]",
    )
    return True


@pytest.mark.long  # make fault (the unclean election below stays in make test)
def test_offline_partition_waits_for_an_in_sync_replica(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=2)
    c.cli(
        "topics", "create", "--dir", str(c.dir), "--topic", topic_name,
        "--replica-assignment", "1:2",
    )  # fmt: skip
    c.wait_isr_complete(topic_name)
    _only_leader_in_isr(c, topic_name, leader=1, follower=2)
    c.stop_broker(hard=True, broker_id=1)  # the last in-sync replica is gone
    c.start_broker(2)  # an out-of-sync replica comes back: it must not lead
    view = wait_for(lambda: c.describe(topic_name, via=2), 30, "metadata from broker 2")
    leader, _replicas, isr = view[0]
    assert leader == -1, f"out-of-sync replica 2 became leader with unclean election off: {view}"
    assert isr == (1,), view

    c.start_broker(1)  # the in-sync replica returns and leads again
    wait_for(
        lambda: c.describe(topic_name)[0][0] == 1, 60, f"broker 1 leading {topic_name}-0 again"
    )


def test_unclean_election_lets_an_out_of_sync_replica_lead(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=2)
    c.cli(
        "topics", "create", "--dir", str(c.dir), "--topic", topic_name,
        "--replica-assignment", "1:2", "--config", "unclean.leader.election.enable=true",
    )  # fmt: skip
    c.wait_isr_complete(topic_name)
    _only_leader_in_isr(c, topic_name, leader=1, follower=2)
    c.stop_broker(hard=True, broker_id=1)
    c.start_broker(2)
    view = wait_for(
        lambda: (v := c.describe(topic_name, via=2))[0][0] == 2 and v,
        60,
        "broker 2 elected by unclean election",
    )
    assert view[0][2] == (2,), view
