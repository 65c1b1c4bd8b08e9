"""A small blocking Kafka protocol client for the transaction APIs a Spark driver needs:
ending another process's transaction, taking one over for two-phase commit (KIP-939),
adding offsets to one, describing and listing transactions, fencing a transactional id, and
reading the brokers' transaction limits.

The exactly-once sink (:mod:`spark_connector.exactly_once`) needs them because Spark splits a
micro-batch between processes: executors write into open transactions, the driver commits
them. A client can only end a transaction its own producer began; the Kafka protocol lets
anyone who knows ``(transactional.id, producer id, epoch)`` end it (Flink's Kafka sink does the
same through the Java client's internals).

Requests are Kafka's, encoded with ``kio`` (generated from Kafka's JSON schemas), through the
connector's wire-client core (:class:`~spark_connector.kafka.cluster.Cluster`), at versions
every broker of Kafka 3.0+ and Millrace supports: ApiVersions v3, Metadata v9, FindCoordinator
v3, InitProducerId v4 (v6 for two-phase commit, where the brokers advertise it),
AddOffsetsToTxn v3, TxnOffsetCommit v3, EndTxn v3, DescribeTransactions v0, ListTransactions
v0, DescribeConfigs v4. :meth:`TxnClient.check_support` says which of them a cluster lacks.

Retries: coordinator errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS), CONCURRENT_TRANSACTIONS and connection failures are retried,
looking the coordinator up again (ListTransactions: asking for the brokers again), until
``timeout_s``; other errors raise :class:`TxnError` with Kafka's error name.

Security: ``security`` (TLS and SASL, :mod:`spark_connector.kafka.security`) is carried by
every connection of the client's cluster, coordinators included.

Concurrency: one client per thread; it owns its sockets. Nothing here is pickled.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_connector.kafka.cluster import GROUP, TRANSACTION, Cluster
from spark_connector.kafka.connection import parse_bootstrap
from spark_connector.kafka.errors import KafkaRequestError, Retriable

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

__all__ = [
    "MAX_TIMEOUT_MS",
    "OpenTransaction",
    "TransactionState",
    "TxnClient",
    "TxnError",
    "parse_bootstrap",
]

MAX_TIMEOUT_MS = 2**31 - 1
"""The transaction timeout a two-phase-commit transaction carries (KIP-939: never aborted by
the coordinator's timer)."""

_REQUIRED = {  # api key -> (name, version used)
    18: ("ApiVersions", 3),
    3: ("Metadata", 9),
    10: ("FindCoordinator", 3),
    22: ("InitProducerId", 4),
    24: ("AddPartitionsToTxn", 3),
    25: ("AddOffsetsToTxn", 3),
    26: ("EndTxn", 3),
    28: ("TxnOffsetCommit", 3),
    65: ("DescribeTransactions", 0),
    66: ("ListTransactions", 0),
}
_TWO_PHASE_VERSION = 6


class TxnError(KafkaRequestError):
    """A transaction request failed for good; :attr:`code_name` is Kafka's error name
    (lower case, ``producer_fenced``), empty when the failure was not an error code."""

    @property
    def fenced(self) -> bool:
        return self.code in (47, 90)


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """What identifies a transaction to end it: its id, producer id and epoch."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def as_list(self) -> list[object]:
        return [self.transactional_id, self.producer_id, self.producer_epoch]

    @classmethod
    def from_list(cls, item: list[Any]) -> OpenTransaction:
        return cls(str(item[0]), int(item[1]), int(item[2]))


@dataclass(frozen=True, slots=True)
class TransactionState:
    """DescribeTransactions' view of one transactional id (``state`` ``""`` when the id is
    unknown to its coordinator)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    partitions: frozenset[tuple[str, int]]

    def holds(self, txn: OpenTransaction) -> bool:
        """Whether this is ``txn``'s producer id and epoch."""
        return self.producer_id == txn.producer_id and self.producer_epoch == txn.producer_epoch


@dataclass(frozen=True, slots=True)
class Takeover:
    """InitProducerId with ``keepPreparedTxn`` (KIP-939): the new producer id and epoch that
    now own the id (and its kept transaction), and the producer id and epoch the kept
    transaction was written with (-1 when no transaction was open)."""

    owner: OpenTransaction
    ongoing_producer_id: int
    ongoing_producer_epoch: int


def _wrap(exc: KafkaRequestError) -> TxnError:
    return TxnError(str(exc), exc.code)


class TxnClient:
    """Transaction-control requests against one cluster (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        timeout_s: float = 60.0,
        client_id: str = "millrace-spark-sink",
        timeout_option: str = "kafka.request.timeout.ms",
        security: ClientSecurity | None = None,
    ) -> None:
        self.cluster = Cluster(
            bootstrap,
            client_id=client_id,
            request_timeout_s=min(timeout_s, 30.0),
            timeout_option=timeout_option,
            security=security,
        )
        self._timeout_s = timeout_s
        self._versions: dict[int, tuple[int, int]] | None = None

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> TxnClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing --------------------------------------------------------------------------

    def _retrying(self, what: str, attempt: Callable[[], Any]) -> Any:
        try:
            return self.cluster.retrying(what, attempt, self._timeout_s)
        except TxnError:
            raise
        except KafkaRequestError as exc:
            raise _wrap(exc) from exc

    def _txn_request(self, what: str, txn_id: str, entity: Any) -> Any:
        def attempt() -> Any:
            response = self.cluster.coordinator_request(TRANSACTION, txn_id, entity)
            self._check(what, int(response.error_code), TRANSACTION, txn_id)
            return response

        return self._retrying(what, attempt)

    def _check(self, what: str, code: int, key_type: int, key: str) -> None:
        try:
            self.cluster.check_coordinator_error(what, code, key_type, key)
        except Retriable:
            raise
        except KafkaRequestError as exc:
            raise _wrap(exc) from exc

    # --- cluster ---------------------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        from kio.schema.api_versions.v3.request import ApiVersionsRequest

        if self._versions is None:
            request = ApiVersionsRequest(
                client_software_name="millrace-spark", client_software_version="1"
            )
            response = self._retrying("ApiVersions", lambda: self.cluster.any_broker(request))
            self._versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
            }
        return self._versions

    def check_support(self) -> list[str]:
        """The transaction APIs (at the versions this client uses) the cluster lacks."""
        versions = self.api_versions()
        missing = []
        for key, (name, version) in sorted(_REQUIRED.items()):
            found = versions.get(key)
            if found is None or not found[0] <= version <= found[1]:
                missing.append(f"{name} v{version}")
        return missing

    def supports_two_phase(self) -> bool:
        """Whether the brokers advertise InitProducerId v6 (KIP-939's two-phase commit)."""
        found = self.api_versions().get(22)
        return found is not None and found[1] >= _TWO_PHASE_VERSION

    def brokers(self) -> dict[int, tuple[str, int]]:
        self._retrying("Metadata", lambda: self.cluster.refresh(()))
        return dict(self.cluster.brokers)

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partitions of each topic now (0: the topic does not exist)."""
        names = sorted(set(topics))
        self._retrying("Metadata", lambda: self.cluster.refresh(names))
        return {t: self.cluster.partition_count(t) for t in names}

    def broker_config(self, name: str) -> str | None:
        """A broker's value of configuration ``name`` (DescribeConfigs), None if unknown."""
        from kio.schema.describe_configs.v4.request import (
            DescribeConfigsRequest,
            DescribeConfigsResource,
        )
        from kio.static.primitive import i8

        brokers = self.brokers()
        if not brokers:
            return None
        broker_id = min(brokers)
        request = DescribeConfigsRequest(
            resources=(
                DescribeConfigsResource(
                    resource_type=i8(4), resource_name=str(broker_id), configuration_keys=(name,)
                ),
            ),
            include_synonyms=False,
            include_documentation=False,
        )

        def attempt() -> str | None:
            response = self.cluster.send(brokers[broker_id], request)
            for result in response.results:
                if int(result.error_code) != 0:
                    return None
                for entry in result.configs:
                    if entry.name == name:
                        return None if entry.value is None else str(entry.value)
            return None

        result: str | None = self._retrying(f"DescribeConfigs({name})", attempt)
        return result

    # --- transactions ----------------------------------------------------------------------

    def describe_many(self, transactional_ids: Iterable[str]) -> dict[str, TransactionState]:
        """The coordinators' view of each id (one DescribeTransactions per coordinator)."""
        from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
        from kio.schema.types import TransactionalId

        pending = sorted(set(transactional_ids))
        out: dict[str, TransactionState] = {}

        def attempt() -> None:
            by_coordinator: dict[tuple[str, int], list[str]] = {}
            for txn_id in pending:
                if txn_id in out:
                    continue
                address = self.cluster.coordinator(TRANSACTION, txn_id)
                by_coordinator.setdefault(address, []).append(txn_id)
            for address, ids in by_coordinator.items():
                try:
                    response = self.cluster.send(
                        address,
                        DescribeTransactionsRequest(
                            transactional_ids=tuple(TransactionalId(i) for i in ids)
                        ),
                    )
                except ConnectionError:
                    for txn_id in ids:
                        self.cluster.forget_coordinator(TRANSACTION, txn_id)
                    raise
                retry: Retriable | None = None
                for state in response.transaction_states:
                    txn_id = str(state.transactional_id)
                    code = int(state.error_code)
                    if code == 105:  # TRANSACTIONAL_ID_NOT_FOUND
                        out[txn_id] = TransactionState(txn_id, "", -1, -1, 0, frozenset())
                        continue
                    try:
                        self._check(f"DescribeTransactions({txn_id})", code, TRANSACTION, txn_id)
                    except Retriable as exc:
                        retry = exc
                        continue
                    out[txn_id] = TransactionState(
                        txn_id,
                        str(state.transaction_state),
                        int(state.producer_id),
                        int(state.producer_epoch),
                        int(state.transaction_timeout.total_seconds() * 1000),
                        frozenset(
                            (str(t.topic), int(p)) for t in state.topics for p in t.partitions
                        ),
                    )
                if retry is not None:
                    raise retry

        self._retrying("DescribeTransactions", attempt)
        return out

    def describe(self, transactional_id: str) -> TransactionState:
        return self.describe_many([transactional_id])[transactional_id]

    def list_transactions(
        self, keep: Callable[[str], bool], states: Iterable[str] = ("Ongoing",)
    ) -> list[str]:
        """Ids in ``states`` (every state when empty) for which ``keep(id)``, from every
        broker the cluster lists. A retry asks for the brokers again: a broker that died
        drops out of the listing once the cluster stops listing it (its transactions move to
        a new coordinator, which lists them), instead of being retried until the timeout."""
        from kio.schema.list_transactions.v0.request import ListTransactionsRequest

        request = ListTransactionsRequest(state_filters=tuple(states))

        def attempt() -> list[str]:
            found: set[str] = set()
            self.cluster.refresh(())
            for address in list(self.cluster.brokers.values()):
                response = self.cluster.send(address, request)
                self._check("ListTransactions", int(response.error_code), TRANSACTION, "")
                for state in response.transaction_states:
                    if keep(str(state.transactional_id)):
                        found.add(str(state.transactional_id))
            return sorted(found)

        result: list[str] = self._retrying("ListTransactions", attempt)
        return result

    def list_ongoing(self, prefix: str) -> list[str]:
        """Ids starting with ``prefix`` whose transaction is open (a tool's view; the sink
        itself matches its own ids exactly)."""
        return self.list_transactions(lambda txn_id: txn_id.startswith(prefix))

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

    def take_over(self, transactional_id: str) -> Takeover:
        """InitProducerId v6 with ``Enable2Pc`` and ``KeepPreparedTxn`` (KIP-939): the id's
        open transaction is kept (not aborted) and no longer times out; the epoch is bumped,
        so the producer that wrote it is fenced, and the new pair owns the transaction."""
        from kio.schema.init_producer_id.v6.request import InitProducerIdRequest
        from kio.schema.types import TransactionalId
        from kio.static.primitive import i32Timedelta

        response = self._txn_request(
            f"InitProducerId({transactional_id}, keepPreparedTxn)",
            transactional_id,
            InitProducerIdRequest(
                transactional_id=TransactionalId(transactional_id),
                transaction_timeout=i32Timedelta.parse(
                    datetime.timedelta(milliseconds=MAX_TIMEOUT_MS)
                ),
                enable2_pc=True,
                keep_prepared_txn=True,
            ),
        )
        return Takeover(
            OpenTransaction(
                transactional_id, int(response.producer_id), int(response.producer_epoch)
            ),
            int(response.ongoing_txn_producer_id),
            int(response.ongoing_txn_producer_epoch),
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

    def add_offsets_to_txn(self, txn: OpenTransaction, group: str) -> None:
        """AddOffsetsToTxn: ``group``'s ``__consumer_offsets`` partition joins ``txn`` (a
        fenced producer gets PRODUCER_FENCED here)."""
        from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
        from kio.schema.types import GroupId, ProducerId, TransactionalId
        from kio.static.primitive import i16

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

    def txn_offset_commit(
        self,
        txn: OpenTransaction,
        group: str,
        offsets: Mapping[str, Mapping[int, int]],
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """TxnOffsetCommit: ``offsets`` (topic -> partition -> next offset, each with its
        ``metadata`` string) become ``group``'s committed offsets when ``txn`` commits (after
        :meth:`add_offsets_to_txn`)."""
        from kio.schema.txn_offset_commit.v3.request import (
            TxnOffsetCommitRequest,
            TxnOffsetCommitRequestPartition,
            TxnOffsetCommitRequestTopic,
        )
        from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
        from kio.static.primitive import i16, i32, i64

        if not any(offsets.values()):
            return
        notes = metadata or {}
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
                            committed_metadata=notes.get((topic, p)),
                        )
                        for p, o in sorted(parts.items())
                    ),
                )
                for topic, parts in sorted(offsets.items())
                if parts
            ),
        )
        what = f"TxnOffsetCommit({txn.transactional_id}, {group})"

        def attempt() -> None:
            response = self.cluster.coordinator_request(GROUP, group, request)
            for topic in response.topics:
                for part in topic.partitions:
                    self._check(what, int(part.error_code), GROUP, group)

        self._retrying(what, attempt)

    def add_offsets(
        self,
        txn: OpenTransaction,
        group: str,
        offsets: Mapping[str, Mapping[int, int]],
        metadata: Mapping[tuple[str, int], str] | None = None,
    ) -> None:
        """AddOffsetsToTxn then TxnOffsetCommit (see both)."""
        self.add_offsets_to_txn(txn, group)
        self.txn_offset_commit(txn, group, offsets, metadata)

    def fence(self, transactional_ids: Iterable[str], timeout_ms: int) -> None:
        """Abort the open transactions of ``transactional_ids`` and fence their producers."""
        for txn_id in transactional_ids:
            self.init_producer(txn_id, timeout_ms)
