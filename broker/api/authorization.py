"""What the API handlers share to authorize a request as Kafka 3.9's ``KafkaApis`` and
``AuthHelper`` do: which of a request's resources the connection's principal may act on,
the ``authorized_operations`` bit fields (KIP-430), and Kafka's texts for the
authorization errors.

Rules every handler follows (Kafka's):

* A resource is checked before the handler looks at whether it exists, so a principal that
  may not DESCRIBE (or READ, WRITE, ...) a topic is answered TOPIC_AUTHORIZATION_FAILED and
  cannot learn whether it exists; where a whole request is refused (a group, a
  transactional id, a cluster action) nothing of it is done.
* The check is on the literal resource name; the authorizer applies PREFIXED and wildcard
  ACLs, DENY over ALLOW, the implied operations and ``super.users``
  (:class:`broker.security.authorizer.AclAuthorizer`).
* Without an authorizer every request is allowed, and so is every request the broker makes
  to itself (``RequestContext.authorize``); the checks then cost one attribute test
  (:func:`secured`).

Concurrency: pure functions of the request context; called on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation, ResourceType

if TYPE_CHECKING:
    from broker.api.context import RequestContext

__all__ = [
    "OPERATIONS_OMITTED",
    "SUPPORTED_OPERATIONS",
    "authorized_operations",
    "denied",
    "error_message",
    "not_authorized",
    "secured",
]

OPERATIONS_OMITTED = -(2**31)
"""``authorized_operations`` when the client did not ask for them (Integer.MIN_VALUE)."""

# Kafka's AclEntry.supportedOperations: the operations an authorized_operations field covers.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}

# Kafka's Errors.message() of the authorization errors (what ApiError carries by default).
_MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}


def secured(ctx: RequestContext) -> bool:
    """Whether this request is checked at all: an authorizer is configured and the request
    is not the broker's own."""
    return ctx.services.authorizer is not None and not ctx.connection.internal


def denied(
    ctx: RequestContext, operation: Operation, resource_type: ResourceType, names: Iterable[str]
) -> frozenset[str]:
    """The names among ``names`` the principal may not ``operation`` (each name asked once;
    Kafka's ``filterByAuthorized``, inverted so the unsecured case is an empty set)."""
    if not secured(ctx):
        return frozenset()
    return frozenset(
        name for name in set(names) if not ctx.authorize(operation, resource_type, name)
    )


def authorized_operations(ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
    """Kafka's ``AuthHelper.authorizedOperations``: one bit (``1 << code``) per operation of
    the resource type the principal may perform on the resource (every one without an
    authorizer)."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if ctx.authorize(operation, resource_type, name):
            bits |= 1 << int(operation)
    return bits


def error_message(code: ErrorCode) -> str | None:
    """Kafka's default message for an authorization error code (None for other codes)."""
    return _MESSAGES.get(code)


def not_authorized(ctx: RequestContext, api: str) -> str:
    """The message of the ClusterAuthorizationException Kafka's ``authorizeClusterOperation``
    throws (``Request <request> is not authorized.``)."""
    conn = ctx.connection
    return (
        f"Request(api={api}, principal={conn.principal}, listener={conn.listener}, "
        f"clientId={ctx.client_id}) is not authorized."
    )
