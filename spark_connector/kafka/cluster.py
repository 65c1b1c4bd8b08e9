"""The cluster as one of the connector's clients sees it: the one wire-client core that the
batch producer, the transaction client and the fetcher share.

Theory of operation
-------------------
A :class:`Cluster` starts from the bootstrap servers (``kafka.bootstrap.servers``). It learns
the brokers and each topic's partitions and leaders from Metadata (v9, encoded by hand),
keeps one blocking :class:`~spark_connector.kafka.connection.Connection` per broker address,
and finds group and transaction coordinators with FindCoordinator (v3). Any request that any
broker can answer (:meth:`Cluster.any_broker`) goes to the bootstrap servers first, then to
the other brokers the cluster listed, each tried once per call; a connection that fails (refused, reset,
timed out, a frame that does not parse) is dropped and the next address tried.

Retries belong to the caller's deadline: :meth:`Cluster.retrying` runs an attempt until it
returns, retrying :class:`~spark_connector.kafka.errors.Retriable` Kafka errors and
connection failures with a backoff from 50 ms to 1 s, and raises
:class:`~spark_connector.kafka.errors.KafkaRequestError` naming what failed, for how long,
and (when the cluster never answered at all) the servers tried and the option that sets the
time, so an unreachable ``kafka.bootstrap.servers`` reads as one.

Security: every connection of a cluster carries its :attr:`Cluster.security` (TLS and SASL,
:mod:`spark_connector.kafka.security`), and the connections the producer and the fetcher open
beside the cluster's take it from there. A connection the brokers refuse to authenticate
raises :class:`~spark_connector.kafka.errors.AuthenticationError` at once, never retried.

Concurrency: a cluster belongs to one thread (a Spark task's, or a driver call's); it owns
its sockets. Nothing here is pickled.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from spark_connector.kafka import metadata_codec
from spark_connector.kafka.connection import Connection, parse_bootstrap
from spark_connector.kafka.errors import (
    COORDINATOR_MOVED,
    NONE,
    KafkaRequestError,
    Retriable,
    acl_hint,
    error_name,
)

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = [
    "GROUP",
    "TRANSACTION",
    "WIRE_ERRORS",
    "Cluster",
    "PartitionInfo",
    "TopicInfo",
    "Unreachable",
]

T = TypeVar("T")

GROUP, TRANSACTION = 0, 1
"""FindCoordinator key types."""

WIRE_ERRORS = (OSError, ConnectionError, struct.error, EOFError)
"""What a failed exchange on one connection raises (``socket.timeout`` is an ``OSError``)."""


class Unreachable(ConnectionError):
    """No broker answered: every known broker and bootstrap server refused or timed out."""


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int


@dataclass(slots=True)
class TopicInfo:
    """One topic of a Metadata response (``error`` 0 when it exists)."""

    name: str
    error: int
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)


class Cluster:
    """Brokers, leaders, coordinators and connections of one cluster (see the module
    docstring). One thread."""

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str,
        request_timeout_s: float = 30.0,
        timeout_option: str = "kafka.request.timeout.ms",
        security: ClientSecurity | None = None,
    ) -> None:
        self.bootstrap_text = bootstrap
        self.security = security
        """TLS and SASL of every connection (None: plaintext)."""
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.timeout_option = timeout_option
        self.brokers: dict[int, tuple[str, int]] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller = -1  # the controller's broker id, as last refreshed
        self._connections: dict[tuple[str, int], Connection] = {}
        self._coordinators: dict[tuple[int, str], tuple[str, int]] = {}
        self._answered = False  # whether any broker ever answered this cluster

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- connections -----------------------------------------------------------------------

    def connection(self, address: tuple[str, int]) -> Connection:
        """The open connection to ``address`` (made now if there is none)."""
        conn = self._connections.get(address)
        if conn is None:
            conn = self.open_connection(address)
            self._connections[address] = conn
        return conn

    def open_connection(
        self,
        address: tuple[str, int],
        timeout_s: float | None = None,
        client_id: str | None = None,
    ) -> Connection:
        """A new connection to ``address`` with the cluster's security, owned (and closed) by
        the caller: for requests pipelined on a connection of their own (the fetcher's Fetch,
        the producer's Produce); the cluster's connections carry one request at a time.
        ``timeout_s`` and ``client_id`` default to the cluster's."""
        return Connection(
            address[0],
            address[1],
            self.request_timeout_s if timeout_s is None else timeout_s,
            self.client_id if client_id is None else client_id,
            self.security,
        )

    def drop(self, address: tuple[str, int]) -> None:
        """Close the connection to ``address`` (after a failure on it)."""
        conn = self._connections.pop(address, None)
        if conn is not None:
            conn.close()

    def send(self, address: tuple[str, int], entity: Any) -> Any:
        """``entity`` (a kio request) to ``address``, its decoded response; a failed exchange
        drops the connection and raises ``ConnectionError``."""
        return self._exchange(address, lambda conn: conn.request(entity))

    def _exchange(self, address: tuple[str, int], ask: Callable[[Connection], T]) -> T:
        """``ask(connection)`` on the connection to ``address``: its answer, or, when the
        exchange fails, the connection dropped and ``ConnectionError`` raised."""
        try:
            response = ask(self.connection(address))
        except WIRE_ERRORS as exc:
            self.drop(address)
            raise ConnectionError(f"{address[0]}:{address[1]}: {_describe(exc)}") from exc
        self._answered = True
        return response

    def broker_address(self, broker: int) -> tuple[str, int] | None:
        return self.brokers.get(broker)

    def any_broker(self, entity: Any) -> Any:
        """``entity`` answered by whichever broker answers first (the bootstrap servers, then
        the other brokers the cluster listed); :class:`Unreachable` when none does."""
        return self._first_answer(lambda conn: conn.request(entity))

    def _first_answer(self, ask: Callable[[Connection], T]) -> T:
        tried: list[str] = []
        for address in dict.fromkeys([*self.bootstrap, *self.brokers.values()]):
            try:
                return self._exchange(address, ask)
            except ConnectionError as exc:
                tried.append(str(exc))
        raise Unreachable("; ".join(tried))

    # --- metadata --------------------------------------------------------------------------

    def refresh(self, topics: Iterable[str] | None = (), *, auto_create: bool = False) -> None:
        """Metadata for ``topics`` (None: every topic; empty: brokers only): updates
        :attr:`brokers` and :attr:`topics` (v9, encoded by hand:
        :mod:`~spark_connector.kafka.metadata_codec`)."""
        names = None if topics is None else sorted(set(topics))
        body = metadata_codec.encode_request(names, auto_create=auto_create)

        def ask(conn: Connection) -> metadata_codec.MetadataAnswer:
            conn.send(metadata_codec.METADATA, metadata_codec.METADATA_VERSION, body, flexible=True)
            return metadata_codec.decode_response(bytes(conn.receive()))

        answer = self._first_answer(ask)
        self.brokers = answer.brokers
        self.controller = answer.controller
        for t in answer.topics:
            info = TopicInfo(t.name, t.error)
            for index, (leader, epoch) in t.partitions.items():
                info.partitions[index] = PartitionInfo(leader, epoch)
            self.topics[info.name] = info

    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic`` as last refreshed (0: unknown or not existing)."""
        info = self.topics.get(topic)
        if info is None or info.error != NONE:
            return 0
        return len(info.partitions)

    def leader(self, topic: str, partition: int) -> int:
        """The leader's broker id as last refreshed (-1: unknown or none)."""
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info is not None else None
        if part is None or part.leader not in self.brokers:
            return -1
        return part.leader

    def leader_address(self, topic: str, partition: int) -> tuple[str, int] | None:
        leader = self.leader(topic, partition)
        return self.brokers.get(leader) if leader >= 0 else None

    # --- coordinators ----------------------------------------------------------------------

    def coordinator(self, key_type: int, key: str) -> tuple[str, int]:
        """The address of the group (``GROUP``) or transaction (``TRANSACTION``)
        coordinator of ``key``; raises :class:`Retriable` while there is none."""
        from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
        from kio.static.primitive import i8

        found = self._coordinators.get((key_type, key))
        if found is not None:
            return found
        response = self.any_broker(FindCoordinatorRequest(key=key, key_type=i8(key_type)))
        code = int(response.error_code)
        if code != NONE:
            raise Retriable(f"FindCoordinator({key})", code)
        address = (str(response.host), int(response.port))
        self._coordinators[(key_type, key)] = address
        return address

    def forget_coordinator(self, key_type: int, key: str) -> None:
        self._coordinators.pop((key_type, key), None)

    def coordinator_request(self, key_type: int, key: str, entity: Any) -> Any:
        """``entity`` sent to ``key``'s coordinator (one attempt: connection failures forget
        the coordinator and raise ``ConnectionError``)."""
        address = self.coordinator(key_type, key)
        try:
            return self.send(address, entity)
        except ConnectionError:
            self.forget_coordinator(key_type, key)
            raise

    def check_coordinator_error(self, what: str, code: int, key_type: int, key: str) -> None:
        """Raise :class:`Retriable` for a coordinator that moved or is busy (forgetting a
        moved one), :class:`KafkaRequestError` for any other error."""
        from spark_connector.kafka.errors import RETRIABLE_COORDINATOR

        if code == NONE:
            return
        if code in COORDINATOR_MOVED:
            self.forget_coordinator(key_type, key)
        if code in RETRIABLE_COORDINATOR:
            raise Retriable(what, code)
        raise KafkaRequestError(f"{what}: {error_name(code)}{acl_hint(code)}", code)

    # --- retries ---------------------------------------------------------------------------

    def retrying(self, what: str, attempt: Callable[[], T], timeout_s: float | None = None) -> T:
        """``attempt()`` until it returns, retrying :class:`Retriable` errors and connection
        failures until ``timeout_s`` (default: the request timeout) has passed."""
        budget = self.request_timeout_s if timeout_s is None else timeout_s
        started = time.monotonic()
        deadline = started + budget
        delay = 0.05
        while True:
            try:
                return attempt()
            except (Retriable, *WIRE_ERRORS) as exc:
                if time.monotonic() + delay > deadline:
                    raise self._gave_up(what, exc, time.monotonic() - started) from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _gave_up(self, what: str, exc: BaseException, elapsed: float) -> KafkaRequestError:
        if isinstance(exc, Unreachable) and not self._answered:
            return KafkaRequestError(
                f"{what}: no broker of kafka.bootstrap.servers={self.bootstrap_text!r} answered "
                f"in {elapsed:.0f} s (tried {', '.join(f'{h}:{p}' for h, p in self.bootstrap)}; "
                f"last errors: {exc}). Check the address and that the brokers run; option "
                f"'{self.timeout_option}' sets how long to wait"
            )
        code = exc.code if isinstance(exc, Retriable) else 0
        return KafkaRequestError(f"{what}: still failing after {elapsed:.0f} s: {exc}", code)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, struct.error):
        return f"malformed response ({exc})"
    return str(exc) or type(exc).__name__
