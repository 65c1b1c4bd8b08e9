"""A small blocking Kafka protocol client for the transaction APIs librdkafka does not expose:
ending another process's transaction, adding offsets to it, describing and listing
transactions, fencing a transactional id.

The exactly-once sink (:mod:`spark_connector.exactly_once`) needs them because Spark splits a
micro-batch between processes: executors write into open transactions, the driver commits
them. librdkafka can only end a transaction its own producer began; the Kafka protocol lets
anyone who knows ``(transactional.id, producer id, epoch)`` end it (Flink's Kafka sink does the
same through the Java client's internals).

Requests are Kafka's, encoded with ``kio`` (generated from Kafka's JSON schemas), at versions
every broker of Kafka 3.0+ and Millrace supports: ApiVersions v3, Metadata v9, FindCoordinator
v3, InitProducerId v4, AddOffsetsToTxn v3, TxnOffsetCommit v3, EndTxn v3,
DescribeTransactions v0, ListTransactions v0. :meth:`TxnClient.check_support` says which of them
a cluster lacks.

Retries: coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS), CONCURRENT_TRANSACTIONS and connection failures are retried,
looking the coordinator up again (ListTransactions: asking for the brokers again), until
``timeout_s``; other errors raise :class:`TxnError` with Kafka's error name.

Concurrency: one client per thread; it owns its sockets. Nothing here is pickled.
"""

from __future__ import annotations

import datetime
import struct
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_connector.wire import Connection, parse_bootstrap

__all__ = ["OpenTransaction", "TxnClient", "TxnError", "parse_bootstrap"]

_RETRIABLE = {
    "not_coordinator",
    "coordinator_not_available",
    "coordinator_load_in_progress",
    "concurrent_transactions",
    "request_timed_out",
    "network_exception",
    "not_enough_replicas",
    "not_enough_replicas_after_append",
    "unknown_topic_or_partition",
}
_COORDINATOR_MOVED = {"not_coordinator", "coordinator_not_available"}
_REQUIRED = {  # api key -> (name, version used)
    18: ("ApiVersions", 3),
    3: ("Metadata", 9),
    10: ("FindCoordinator", 3),
    22: ("InitProducerId", 4),
    25: ("AddOffsetsToTxn", 3),
    26: ("EndTxn", 3),
    28: ("TxnOffsetCommit", 3),
    65: ("DescribeTransactions", 0),
    66: ("ListTransactions", 0),
}
_GROUP, _TRANSACTION = 0, 1


class TxnError(RuntimeError):
    """A transaction request failed for good; ``code`` is Kafka's error name."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """What identifies a transaction to end it: its id, producer id and epoch."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


def _code(error_code: Any) -> str:
    return getattr(error_code, "name", str(error_code))


class TxnClient:
    """Transaction-control requests against one cluster (see the module docstring)."""

    def __init__(
        self, bootstrap: str, *, timeout_s: float = 60.0, client_id: str = "millrace-spark-sink"
    ) -> None:
        self._bootstrap = parse_bootstrap(bootstrap)
        self._timeout_s = timeout_s
        self._client_id = client_id
        self._connections: dict[tuple[str, int], Connection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._coordinators: dict[tuple[int, str], tuple[str, int]] = {}

    def close(self) -> None:
        for conn in self._connections.values():
            conn.close()
        self._connections = {}

    def __enter__(self) -> TxnClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing --------------------------------------------------------------------------

    def _connection(self, address: tuple[str, int]) -> Connection:
        conn = self._connections.get(address)
        if conn is None:
            conn = Connection(address[0], address[1], min(self._timeout_s, 30.0), self._client_id)
            self._connections[address] = conn
        return conn

    def _send(self, address: tuple[str, int], entity: Any) -> Any:
        try:
            return self._connection(address).request(entity)
        except (OSError, ConnectionError, struct.error):
            dead = self._connections.pop(address, None)
            if dead is not None:
                dead.close()
            raise

    def _any_broker(self, entity: Any) -> Any:
        last: Exception | None = None
        for address in [*self._brokers.values(), *self._bootstrap]:
            try:
                return self._send(address, entity)
            except (OSError, ConnectionError) as exc:
                last = exc
        raise ConnectionError(f"no broker of {self._bootstrap} answered: {last}")

    def _retrying(self, what: str, attempt: Any) -> Any:
        """Run ``attempt()`` until it returns, retrying retriable failures until the
        deadline; ``attempt`` raises ``_Retry`` for a retriable Kafka error."""
        deadline = time.monotonic() + self._timeout_s
        delay = 0.05
        while True:
            try:
                return attempt()
            except (_Retry, OSError, ConnectionError) as exc:
                if time.monotonic() + delay > deadline:
                    raise TxnError(
                        f"{what}: still failing after {self._timeout_s:.0f}s: {exc}",
                        getattr(exc, "code", ""),
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _check(self, what: str, error_code: Any, key: tuple[int, str] | None = None) -> None:
        code = _code(error_code)
        if code == "none":
            return
        if key is not None and code in _COORDINATOR_MOVED:
            self._coordinators.pop(key, None)
        if code in _RETRIABLE:
            raise _Retry(code)
        raise TxnError(f"{what}: {code.upper()}", code)

    # --- cluster ---------------------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        response = self._any_broker(
            ApiVersionsRequest(client_software_name="millrace-spark", client_software_version="1")
        )
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    def check_support(self) -> list[str]:
        """The transaction APIs (at the versions this client uses) the cluster lacks."""
        versions = self.api_versions()
        missing = []
        for key, (name, version) in sorted(_REQUIRED.items()):
            found = versions.get(key)
            if found is None or not found[0] <= version <= found[1]:
                missing.append(f"{name} v{version}")
        return missing

    def brokers(self) -> dict[int, tuple[str, int]]:
        from kio.schema.metadata.v9.request import MetadataRequest

        response = self._any_broker(
            MetadataRequest(
                topics=(),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )
        )
        self._brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        return dict(self._brokers)

    def _coordinator(self, key_type: int, key: str) -> tuple[str, int]:
        from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
        from kio.static.primitive import i8

        found = self._coordinators.get((key_type, key))
        if found is not None:
            return found
        response = self._any_broker(FindCoordinatorRequest(key=key, key_type=i8(key_type)))
        self._check(f"FindCoordinator({key})", response.error_code)
        address = (response.host, int(response.port))
        self._coordinators[(key_type, key)] = address
        return address

    def _txn_request(self, what: str, txn_id: str, entity: Any) -> Any:
        def attempt() -> Any:
            key = (_TRANSACTION, txn_id)
            try:
                response = self._send(self._coordinator(*key), entity)
            except (OSError, ConnectionError):
                self._coordinators.pop(key, None)
                raise
            self._check(what, response.error_code, key)
            return response

        return self._retrying(what, attempt)

    # --- transactions ----------------------------------------------------------------------

    def describe(self, transactional_id: str) -> Any:
        """The coordinator's view of a transactional id (kio ``TransactionState``)."""
        from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
        from kio.schema.types import TransactionalId

        what = f"DescribeTransactions({transactional_id})"

        def attempt() -> Any:
            key = (_TRANSACTION, transactional_id)
            try:
                response = self._send(
                    self._coordinator(*key),
                    DescribeTransactionsRequest(
                        transactional_ids=(TransactionalId(transactional_id),)
                    ),
                )
            except (OSError, ConnectionError):
                self._coordinators.pop(key, None)
                raise
            [state] = response.transaction_states
            self._check(what, state.error_code, key)
            return state

        return self._retrying(what, attempt)

    def list_ongoing(self, prefix: str) -> list[str]:
        """Ids starting with ``prefix`` whose transaction is open, from every broker the
        cluster lists. A retry asks for the brokers again: a broker that died drops out of the
        listing once the cluster stops listing it (its transactions move to a new coordinator,
        which lists them), instead of being retried until the timeout."""
        from kio.schema.list_transactions.v0.request import ListTransactionsRequest

        request = ListTransactionsRequest(state_filters=("Ongoing",))

        def attempt() -> list[str]:
            found: set[str] = set()
            for address in self.brokers().values():
                response = self._listed(address, request)
                for state in response.transaction_states:
                    if state.transactional_id.startswith(prefix):
                        found.add(str(state.transactional_id))
            return sorted(found)

        result: list[str] = self._retrying("ListTransactions", attempt)
        return result

    def _listed(self, address: tuple[str, int], request: Any) -> Any:
        response = self._send(address, request)
        self._check("ListTransactions", response.error_code)
        return response

    def init_producer(self, transactional_id: str, timeout_ms: int) -> OpenTransaction:
        """InitProducerId for ``transactional_id``: bumps its epoch, which aborts its open
        transaction and fences every producer holding an older epoch."""
        from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
        from kio.schema.types import TransactionalId
        from kio.static.primitive import i32Timedelta

        response = self._txn_request(
            f"InitProducerId({transactional_id})",
            transactional_id,
            InitProducerIdRequest(
                transactional_id=TransactionalId(transactional_id),
                transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
            ),
        )
        return OpenTransaction(
            transactional_id, int(response.producer_id), int(response.producer_epoch)
        )

    def end(self, txn: OpenTransaction, *, commit: bool) -> None:
        """EndTxn: commit or abort ``txn`` (a retry of a successful EndTxn succeeds)."""
        from kio.schema.end_txn.v3.request import EndTxnRequest
        from kio.schema.types import ProducerId, TransactionalId
        from kio.static.primitive import i16

        self._txn_request(
            f"EndTxn({txn.transactional_id}, {'commit' if commit else 'abort'})",
            txn.transactional_id,
            EndTxnRequest(
                transactional_id=TransactionalId(txn.transactional_id),
                producer_id=ProducerId(txn.producer_id),
                producer_epoch=i16(txn.producer_epoch),
                committed=commit,
            ),
        )

    def add_offsets(
        self, txn: OpenTransaction, group: str, offsets: Mapping[str, Mapping[int, int]]
    ) -> None:
        """AddOffsetsToTxn then TxnOffsetCommit: ``offsets`` (topic -> partition -> next
        offset) become the group's committed offsets when ``txn`` commits."""
        from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
        from kio.schema.txn_offset_commit.v3.request import (
            TxnOffsetCommitRequest,
            TxnOffsetCommitRequestPartition,
            TxnOffsetCommitRequestTopic,
        )
        from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
        from kio.static.primitive import i16, i32, i64

        self._txn_request(
            f"AddOffsetsToTxn({txn.transactional_id}, {group})",
            txn.transactional_id,
            AddOffsetsToTxnRequest(
                transactional_id=TransactionalId(txn.transactional_id),
                producer_id=ProducerId(txn.producer_id),
                producer_epoch=i16(txn.producer_epoch),
                group_id=GroupId(group),
            ),
        )
        request = TxnOffsetCommitRequest(
            transactional_id=TransactionalId(txn.transactional_id),
            group_id=GroupId(group),
            producer_id=ProducerId(txn.producer_id),
            producer_epoch=i16(txn.producer_epoch),
            group_instance_id=None,
            topics=tuple(
                TxnOffsetCommitRequestTopic(
                    name=TopicName(topic),
                    partitions=tuple(
                        TxnOffsetCommitRequestPartition(
                            partition_index=i32(p),
                            committed_offset=i64(o),
                            committed_leader_epoch=i32(-1),
                            committed_metadata=None,
                        )
                        for p, o in sorted(parts.items())
                    ),
                )
                for topic, parts in sorted(offsets.items())
            ),
        )
        what = f"TxnOffsetCommit({txn.transactional_id}, {group})"

        def attempt() -> None:
            key = (_GROUP, group)
            try:
                response = self._send(self._coordinator(*key), request)
            except (OSError, ConnectionError):
                self._coordinators.pop(key, None)
                raise
            for topic in response.topics:
                for part in topic.partitions:
                    self._check(what, part.error_code, key)

        self._retrying(what, attempt)

    def fence(self, transactional_ids: Iterable[str], timeout_ms: int) -> None:
        """Abort the open transactions of ``transactional_ids`` and fence their producers."""
        for txn_id in transactional_ids:
            self.init_producer(txn_id, timeout_ms)


class _Retry(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code.upper())
        self.code = code
