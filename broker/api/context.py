"""What an API handler is given: the request header, the connection, and the broker's
services (configuration, metadata cache, replica manager, controller, producer ids).

Handlers reach storage and replication only through the replica manager and the
controller (DESIGN.md layering).

Concurrency: one context per request, used on the event loop thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.protocol.framing import RequestHeader
from broker.request_metrics import NOOP_RECORDER, Recorder
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from broker.clock import Clock
    from broker.config import BrokerConfig
    from broker.controller.controller import Controller
    from broker.coordinator.group.coordinator import GroupCoordinator
    from broker.coordinator.producer_ids import ProducerIdManager
    from broker.coordinator.transaction.coordinator import TransactionCoordinator
    from broker.metadata.cache import MetadataCache
    from broker.metadata.topic_configs import TopicConfigManager
    from broker.protocol.response import ConnectionInfo
    from broker.quota.manager import ClientQuotas
    from broker.quota.request_usage import RequestUsage
    from broker.replication.replica_manager import ReplicaManager
    from broker.security.authorizer import AclAuthorizer
    from broker.security.credentials import CredentialCache
    from broker.zk.security import ZkSecurityOps


class RequestSender(Protocol):
    """Sends one request to another broker by id (``network.broker_pool.BrokerPool``): how
    controller-bound admin requests are forwarded (:mod:`broker.api.forwarding`)."""

    async def request(self, target: int, api_key: int, api_version: int, body: Any) -> Any: ...


@dataclass(slots=True)
class BrokerServices:
    """The broker's long-lived services, shared by every handler."""

    broker_id: int
    config: BrokerConfig
    clock: Clock
    metadata: MetadataCache
    replica_manager: ReplicaManager
    controller: Controller
    topic_configs: TopicConfigManager
    producer_ids: ProducerIdManager
    group_coordinator: GroupCoordinator
    txn_coordinator: TransactionCoordinator
    forwarder: RequestSender | None = None  # to the controller (api/forwarding.py)
    own_broker_epoch: Callable[[], Awaitable[int]] | None = None
    """This broker's epoch once it is registered (controller requests wait for it and are
    refused when they name an older one); None: not checked."""
    authorizer: AclAuthorizer | None = None
    """``authorizer.class.name``'s authorizer; None: every request is allowed (Kafka
    without an authorizer)."""
    credentials: CredentialCache | None = None
    """The SCRAM credentials SASL listeners authenticate against."""
    zk_security: ZkSecurityOps | None = None
    """ZooKeeper's ACL and user-config znodes (the ACL and SCRAM admin APIs write there)."""
    quotas: ClientQuotas | None = None
    """Client quotas (``/config/users``, ``/config/clients``); None: none enforced."""
    metrics: Recorder = NOOP_RECORDER
    """Where requests, produced and fetched bytes are counted (``metrics.http.listener``;
    :mod:`broker.request_metrics`)."""


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    connection: ConnectionInfo
    services: BrokerServices
    quota: RequestUsage | None = None
    """Set by the dispatcher when a quota applies to this request's client: what it records
    (produce and fetch record their bytes themselves, :mod:`broker.quota.request_usage`)."""

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    def extra(self) -> dict[str, Any]:
        return self.connection.extra

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the connection's principal may ``operation`` on the resource (always,
        without an authorizer or for the broker's own requests)."""
        authorizer = self.services.authorizer
        if authorizer is None or self.connection.internal:
            return True
        conn = self.connection
        return authorizer.authorize(conn.principal, conn.peer, operation, resource_type, name)

    def authorize_cluster(self, operation: Operation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def authorize_any(self, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether the principal may ``operation`` on some resource of the type (KIP-679)."""
        authorizer = self.services.authorizer
        if authorizer is None or self.connection.internal:
            return True
        conn = self.connection
        return authorizer.authorize_any(conn.principal, conn.peer, operation, resource_type)
