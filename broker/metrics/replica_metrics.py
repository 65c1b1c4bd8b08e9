"""The replica manager's figures (``kafka.server:type=ReplicaManager`` and
``type=DelayedOperationPurgatory``), read from its state at scrape time.

Gauges, as Kafka 3.9 defines them: ``PartitionCount`` (partitions hosted, offline ones
included), ``LeaderCount``, ``OfflineReplicaCount`` (replicas in failed log directories),
``UnderReplicatedPartitions`` (led here with an ISR smaller than the replica set),
``UnderMinIsrPartitionCount`` (led here with an ISR smaller than the effective
``min.insync.replicas``), ``AtMinIsrPartitionCount`` (ISR exactly ``min.insync.replicas``).
Counters: ``IsrShrinksPerSec`` / ``IsrExpandsPerSec`` (ISR changes this broker wrote as
leader; :meth:`broker.replication.replica_manager.ReplicaManager.count_isr_change`).
Purgatory (``delayedOperation`` Produce: acks=all produces waiting for the ISR; Fetch:
long-poll fetches waiting for ``min.bytes``): ``PurgatorySize`` (watch entries, one per
partition an operation waits on) and ``NumDelayedOperations`` (operations waiting).

Concurrency: :func:`collect` runs on the event loop thread (the scrape's snapshot).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from broker.metrics.broker_view import BrokerView

__all__ = ["DELAYED_OPERATIONS", "collect"]

DELAYED_OPERATIONS = ("Produce", "Fetch")
"""The ``delayedOperation`` label's values."""


def _kind(key: Hashable) -> str:
    """A purgatory key's operation: acks=all produces wait on ``("hw", tp)``, fetches on
    ``tp`` (:class:`~broker.replication.replica_manager.ReplicaManager`)."""
    return "Produce" if isinstance(key, tuple) and key and key[0] == "hw" else "Fetch"


async def collect(broker: BrokerView) -> list[Metric]:
    rm = broker.replica_manager
    if rm is None:  # still starting: nothing hosted yet
        return []
    partitions = list(rm.partitions.values())
    leaders = [p for p in partitions if p.is_leader]
    gauges = {
        ("partitioncount", "PartitionCount"): len(partitions) + len(rm.offline_partitions),
        ("leadercount", "LeaderCount"): len(leaders),
        ("offlinereplicacount", "OfflineReplicaCount"): len(rm.offline_partitions),
        ("underreplicatedpartitions", "UnderReplicatedPartitions"): sum(
            1 for p in leaders if len(p.isr) < len(p.replicas)
        ),
        ("underminisrpartitioncount", "UnderMinIsrPartitionCount"): sum(
            1 for p in leaders if len(p.isr) < p.effective_min_isr()
        ),
        ("atminisrpartitioncount", "AtMinIsrPartitionCount"): sum(
            1 for p in leaders if len(p.isr) == p.log.config.min_insync_replicas
        ),
    }
    out: list[Metric] = [
        GaugeMetricFamily(
            f"kafka_server_replicamanager_{name}",
            f"kafka.server:type=ReplicaManager,name={jmx}",
            value=value,
        )
        for (name, jmx), value in gauges.items()
    ]
    out += [
        CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec",
            value=rm.isr_shrinks,
        ),
        CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec",
            value=rm.isr_expands,
        ),
    ]
    sizes = rm.purgatory.sizes_by_kind(_kind)
    size = GaugeMetricFamily(
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "kafka.server:type=DelayedOperationPurgatory,name=PurgatorySize,delayedOperation=O",
        labels=["delayedOperation"],
    )
    waiting = GaugeMetricFamily(
        "kafka_server_delayedoperationpurgatory_numdelayedoperations",
        "kafka.server:type=DelayedOperationPurgatory,name=NumDelayedOperations,delayedOperation=O",
        labels=["delayedOperation"],
    )
    for kind in DELAYED_OPERATIONS:
        watches, operations = sizes.get(kind, (0, 0))
        size.add_metric([kind], watches)
        waiting.add_metric([kind], operations)
    return [*out, size, waiting]
