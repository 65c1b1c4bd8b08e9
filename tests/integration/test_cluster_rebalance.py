"""Automatic leader rebalance (``auto.leader.rebalance.enable``, ``leader.imbalance.*``):
after a broker comes back, the controller moves leadership back to the preferred replicas
on its own, without an ElectLeaders request.
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
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "2",
    "leader.imbalance.per.broker.percentage": "0",
}


def test_leaders_return_to_preferred_replicas_automatically(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=3)
    c.create_topic(topic_name, partitions=3, replication_factor=3)
    c.wait_isr_complete(topic_name)
    preferred = {p: view[1][0] for p, view in c.describe(topic_name).items()}
    assert sorted(preferred.values()) == [1, 2, 3], preferred

    c.stop_broker(hard=False, broker_id=2)  # controlled: its leadership moves away
    led_by_2 = [p for p, b in preferred.items() if b == 2]
    after_stop = c.describe(topic_name)
    assert all(after_stop[p][0] != 2 for p in led_by_2), after_stop

    c.start_broker(2)
    c.wait_isr_complete(topic_name)

    def balanced() -> dict[int, int] | None:
        leaders = {p: view[0] for p, view in c.describe(topic_name).items()}
        return leaders if leaders == preferred else None

    wait_for(balanced, 60, f"leaders back on their preferred replicas {preferred}")
