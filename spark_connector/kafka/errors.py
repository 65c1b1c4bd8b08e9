"""Kafka error codes as the connector's clients see them: names, and which ones a request may
retry. One place, so the producer, the transaction client and the fetcher agree.

Names are Kafka's (``NOT_LEADER_OR_FOLLOWER``), from ``kio``'s ``ErrorCode`` (generated from
Kafka's ``Errors``). Pure values; safe from any thread.
"""

from __future__ import annotations

__all__ = [
    "AUTHORIZATION_FAILED",
    "CONNECTION_ERROR",
    "COORDINATOR_MOVED",
    "FENCED",
    "FETCH_LEADER_MOVED",
    "LEADER_MOVED",
    "NONE",
    "OFFSET_OUT_OF_RANGE",
    "RETRIABLE_COORDINATOR",
    "AuthenticationError",
    "AuthorizationError",
    "KafkaRequestError",
    "Retriable",
    "acl_hint",
    "error_name",
]

NONE = 0
OFFSET_OUT_OF_RANGE = 1

CONNECTION_ERROR = -10_000
"""The error code of a result whose request failed on the network (not a Kafka code)."""

LEADER_MOVED = frozenset({3, 5, 6, 7, 13, 19, 20, 56, 74, 75})
"""UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT,
NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), KAFKA_STORAGE_ERROR,
FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH: a partition request the Java clients retry after
looking the leader up again."""

FETCH_LEADER_MOVED = frozenset({3, 5, 6, 9, 19, 56, 74, 75, 78})
"""UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
REPLICA_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS, KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH, OFFSET_NOT_AVAILABLE: a Fetch or ListOffsets the fetcher retries after
looking the leader up again (the leader moved or is moving)."""

COORDINATOR_MOVED = frozenset({15, 16})
"""COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look the coordinator up again."""

RETRIABLE_COORDINATOR = COORDINATOR_MOVED | {14, 51, 7, 13, 19, 20, 3}
"""... and COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, REQUEST_TIMED_OUT,
NETWORK_EXCEPTION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), UNKNOWN_TOPIC_OR_PARTITION (the
internal topic being created): a coordinator request retried until its deadline."""

FENCED = frozenset({47, 90})
"""INVALID_PRODUCER_EPOCH, PRODUCER_FENCED: another instance of the producer took over."""

AUTHORIZATION_FAILED = frozenset({29, 30, 31, 53})
"""TOPIC_, GROUP_, CLUSTER_ and TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the user lacks an ACL
(never retried)."""


def error_name(code: int) -> str:
    """Kafka's name of an error code (``NOT_COORDINATOR``), or ``error code N``
    (:data:`CONNECTION_ERROR`: ``connection failed``)."""
    from kio.schema.errors import ErrorCode

    if code == CONNECTION_ERROR:
        return "connection failed"

    try:
        return ErrorCode(int(code)).name.upper()
    except ValueError:
        return f"error code {code}"


_ACL_HINTS = {
    29: "the user needs an ACL on the topic (READ to read, WRITE to write; DESCRIBE either way)",
    30: "the user needs the READ ACL of the consumer group",
    31: "the user needs an ACL on the cluster",
    53: "the user needs the WRITE ACL of the transactional id (a prefixed ACL on the sink's "
    "transactionalIdPrefix)",
}


def acl_hint(code: int) -> str:
    """`` (what ACL is missing)`` for an authorization error code, else empty."""
    hint = _ACL_HINTS.get(int(code))
    return f" ({hint})" if hint else ""


class KafkaRequestError(RuntimeError):
    """A request failed for good. ``code`` is Kafka's error code (0 when the failure was not
    an error code: a connection that could not be made, a deadline that passed)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code

    @property
    def code_name(self) -> str:
        return error_name(self.code).lower() if self.code else ""


class Retriable(Exception):
    """A retriable Kafka error inside a retried attempt (see ``Cluster.retrying``)."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: {error_name(code)}")
        self.code = code


class AuthenticationError(RuntimeError):
    """A connection the broker would not let in: SASL authentication refused (wrong user or
    password, a mechanism it does not enable), or its TLS certificate not trusted. Never
    retried; the message names the host and the options to check."""


class AuthorizationError(RuntimeError):
    """A request the brokers refused for a missing ACL (``*_AUTHORIZATION_FAILED``); the
    message names the resource and the ACL to grant. Never retried."""
