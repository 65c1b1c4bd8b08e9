"""What the scrape reads of a broker: :class:`BrokerView`, a ``typing.Protocol`` naming the
attributes the state collectors (``server_metrics``, ``replica_metrics``,
``controller_metrics``, ``log_metrics``, ``coordinator_metrics``) read, and nothing else.

:class:`broker.server.Broker` satisfies it (mypy checks that where the broker builds its
:class:`~broker.metrics.endpoint.MetricsEndpoint`); a test may pass any object with these
attributes. So the metrics package depends on the parts it reads (replica manager,
controller, logs, coordinators), never on the broker process that owns them: the broker
imports the metrics endpoint, not the other way round.

Every attribute is read-only here and may be None while the broker is starting (the endpoint
serves from the very start); a collector reads nothing that is None.

Concurrency: read on the broker's event loop thread only (:mod:`broker.metrics.registry`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, SupportsInt

if TYPE_CHECKING:
    from broker.clock import Clock
    from broker.controller.controller import Controller
    from broker.coordinator.group.coordinator import GroupCoordinator
    from broker.coordinator.transaction.coordinator import TransactionCoordinator
    from broker.log.cleaner.manager import LogCleaner
    from broker.log.log_manager import LogManager
    from broker.network.broker_pool import BrokerPool
    from broker.replication.replica_manager import ReplicaManager
    from broker.request_metrics import Recorder
    from broker.zk.client import ZkClient

__all__ = ["BrokerView"]


class BrokerView(Protocol):
    """The broker as the state collectors see it (see the module docstring)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def state(self) -> SupportsInt:
        """Kafka's ``BrokerState`` value (``broker.server.BrokerState``)."""
        ...

    @property
    def metrics(self) -> Recorder:
        """The request path's counts (:mod:`broker.request_metrics`)."""
        ...

    @property
    def zk(self) -> ZkClient | None: ...

    @property
    def replica_manager(self) -> ReplicaManager | None: ...

    @property
    def controller(self) -> Controller | None: ...

    @property
    def log_manager(self) -> LogManager | None: ...

    @property
    def log_cleaner(self) -> LogCleaner | None: ...

    @property
    def group_coordinator(self) -> GroupCoordinator | None: ...

    @property
    def txn_coordinator(self) -> TransactionCoordinator | None: ...

    @property
    def broker_pool(self) -> BrokerPool | None:
        """The inter-broker connections (the consumer lag asks other leaders' end offsets)."""
        ...
