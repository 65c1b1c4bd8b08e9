"""The controller's figures (``kafka.controller:type=KafkaController`` and
``type=ControllerStats``), read from its context at scrape time.

As in Kafka, only the active controller reports the cluster-wide gauges; every other broker
reports 0 (sum them over the cluster, or take the max):
``ActiveControllerCount`` (1 on the active controller), ``OfflinePartitionsCount``
(partitions in the OfflinePartition state, topics being deleted left out),
``GlobalPartitionCount`` (partitions with a leader-and-ISR state), ``GlobalTopicCount``,
``PreferredReplicaImbalanceCount`` (partitions whose leader is not their first assigned
replica, topics being deleted left out). ``UncleanLeaderElectionsPerSec``: leaders this
broker elected, as controller, from outside the ISR (offline-partition elections with
``unclean.leader.election.enable``, and unclean ElectLeaders).

Concurrency: :func:`collect` runs on the event loop thread (the scrape's snapshot); it only
reads the controller context, between two of the controller's steps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.controller.state_machines import PartitionState

if TYPE_CHECKING:
    from broker.metrics.broker_view import BrokerView

__all__ = ["collect"]


async def collect(broker: BrokerView) -> list[Metric]:
    controller = broker.controller
    active = controller is not None and controller.is_active
    offline = partitions = topics = imbalance = 0
    if controller is not None and active:
        ctx = controller.ctx
        offline = sum(
            1
            for tp in ctx.partition_states.partitions_in(PartitionState.OfflinePartition)
            if tp.topic not in ctx.deleting
        )
        partitions = len(ctx.states)
        topics = len({tp.topic for tp in ctx.assignments})
        for tp, state in ctx.states.items():
            assignment = ctx.assignments.get(tp)
            if (
                tp.topic not in ctx.deleting
                and assignment is not None
                and assignment.replicas
                and state.leader != assignment.replicas[0]
            ):
                imbalance += 1
    gauges = (
        ("activecontrollercount", "ActiveControllerCount", 1 if active else 0),
        ("offlinepartitionscount", "OfflinePartitionsCount", offline),
        ("globalpartitioncount", "GlobalPartitionCount", partitions),
        ("globaltopiccount", "GlobalTopicCount", topics),
        ("preferredreplicaimbalancecount", "PreferredReplicaImbalanceCount", imbalance),
    )
    out: list[Metric] = [
        GaugeMetricFamily(
            f"kafka_controller_kafkacontroller_{name}",
            f"kafka.controller:type=KafkaController,name={jmx}",
            value=value,
        )
        for name, jmx, value in gauges
    ]
    out.append(
        CounterMetricFamily(
            "kafka_controller_controllerstats_uncleanleaderelections",
            "kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec",
            value=controller.driver.unclean_elections if controller is not None else 0,
        )
    )
    return out
