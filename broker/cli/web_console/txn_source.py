"""Transactions for the console, over the protocol clients of ``millrace transactions``
(Kafka's ``kafka-transactions.sh``; confluent-kafka has no API for them):

* :func:`list_transactions`: ListTransactions to every broker (each answers for the ids it
  coordinates), then DescribeTransactions of the open ones to the same broker (producer
  epoch, timeout, start time, partitions). An open transaction older than ``hanging_ms`` is
  flagged hanging. A broker that does not answer is reported, the others still listed.
* :func:`find_hanging`: ``kafka-transactions.sh find-hanging`` per broker (DescribeProducers
  of every partition it hosts: open transactions on a partition whose coordinator no longer
  knows about them), run on demand since it costs one request per partition.
* :func:`fence`: abort an open transaction its coordinator knows by InitProducerId for its
  transactional id (the coordinator aborts it and bumps the epoch, fencing its producer),
  the connector's :meth:`~spark_connector.kafka.transactions.TxnClient.fence`.
* :func:`abort_hanging`: ``kafka-transactions.sh abort --start-offset`` (WriteTxnMarkers to
  the partition leader) for a hanging transaction.

Concurrency: every call opens its own connections (one per request) and closes them.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from typing import Any

from broker.cli.client_settings import wire_security
from broker.cli.common import CliError, bootstrap_servers
from broker.cli.transactions import (
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    TransactionsClient,
    cmd_abort,
    cmd_find_hanging,
)
from broker.cli.web_console.cluster_source import ClusterSource, ConsoleError

OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


@dataclass(frozen=True, slots=True)
class Transaction:
    transactional_id: str
    coordinator: int
    producer_id: int
    producer_epoch: int | None
    state: str
    timeout_ms: int | None
    start_ms: int | None
    partitions: tuple[str, ...]

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    def duration_ms(self, now_ms: int) -> int | None:
        return None if self.start_ms is None else max(now_ms - self.start_ms, 0)


@dataclass(frozen=True, slots=True)
class TransactionList:
    transactions: tuple[Transaction, ...]
    errors: tuple[str, ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class HangingTransaction:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    minutes: int


def _client(source: ClusterSource) -> TransactionsClient:
    try:
        return TransactionsClient(
            bootstrap_servers(source.args), source.timeout_s, wire_security(source.args)
        )
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc


def _describe(txn: TransactionsClient, broker: tuple[str, int], ids: list[str]) -> dict[str, Any]:
    from broker.protocol import registry

    if not ids:
        return {}
    body = registry.build(
        registry.request_class(*DESCRIBE_TRANSACTIONS), transactional_ids=tuple(ids)
    )
    response = txn.send(broker, DESCRIBE_TRANSACTIONS, body)
    return {
        str(s.transactional_id): s for s in response.transaction_states if int(s.error_code) == 0
    }


def list_transactions(source: ClusterSource) -> TransactionList:
    """Every transactional id the coordinators know, the open ones described."""
    from broker.protocol import registry

    txn = _client(source)
    try:
        cluster = txn.cluster([])
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc
    body = registry.build(
        registry.request_class(*LIST_TRANSACTIONS),
        state_filters=(),
        producer_id_filters=(),
        duration_filter=-1,
    )
    found: list[Transaction] = []
    errors: list[str] = []
    for broker_id, address in sorted(cluster.brokers.items()):
        try:
            response = txn.send(address, LIST_TRANSACTIONS, body)
            code = int(response.error_code)
            if code != 0:
                errors.append(f"broker {broker_id}: ListTransactions error code {code}")
                continue
            states = list(response.transaction_states)
            described = _describe(
                txn,
                address,
                [
                    str(s.transactional_id)
                    for s in states
                    if str(s.transaction_state) in OPEN_STATES
                ],
            )
        except CliError as exc:
            errors.append(f"broker {broker_id}: {exc}")
            continue
        for s in states:
            tid = str(s.transactional_id)
            d = described.get(tid)
            start = None
            partitions: tuple[str, ...] = ()
            if d is not None:
                start_ms = int(d.transaction_start_time.timestamp() * 1000)
                start = start_ms if start_ms >= 0 else None
                partitions = tuple(f"{t.topic}-{p}" for t in d.topics for p in t.partitions)
            found.append(
                Transaction(
                    tid,
                    broker_id,
                    int(s.producer_id),
                    None if d is None else int(d.producer_epoch),
                    str(s.transaction_state),
                    None if d is None else int(d.transaction_timeout.total_seconds() * 1000),
                    start,
                    partitions,
                )
            )
    found.sort(key=lambda t: t.transactional_id)
    return TransactionList(tuple(found), tuple(errors), int(time.time() * 1000))


def fence(source: ClusterSource, transactional_id: str) -> None:
    """Abort the open transaction of ``transactional_id`` (see the module docstring)."""
    from spark_connector.kafka.transactions import TxnClient

    listed = list_transactions(source)
    match = [t for t in listed.transactions if t.transactional_id == transactional_id]
    if not match:
        raise ConsoleError(f"transactional id '{transactional_id}' is not known")
    if not match[0].open:
        raise ConsoleError(
            f"transaction of '{transactional_id}' is {match[0].state}: nothing to abort"
        )
    timeout_ms = match[0].timeout_ms or 60_000
    try:
        with TxnClient(
            bootstrap_servers(source.args),
            timeout_s=source.timeout_s * 2,
            client_id="millrace-console",
            security=wire_security(source.args),
        ) as client:
            client.fence([transactional_id], timeout_ms)
    except Exception as exc:
        raise ConsoleError(f"cannot abort the transaction of '{transactional_id}': {exc}") from exc


def find_hanging(
    source: ClusterSource, hanging_ms: int
) -> tuple[list[HangingTransaction], list[str]]:
    """``find-hanging`` on every broker (see the module docstring)."""
    txn = _client(source)
    try:
        cluster = txn.cluster([])
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc
    minutes = max(1, math.ceil(hanging_ms / 60_000))
    out: dict[tuple[str, int, int], HangingTransaction] = {}
    errors: list[str] = []
    for broker_id in sorted(cluster.brokers):
        args = argparse.Namespace(
            topic=None, partition=None, broker_id=broker_id, max_transaction_timeout=minutes
        )
        try:
            lines = cmd_find_hanging(args, txn)
        except CliError as exc:
            errors.append(f"broker {broker_id}: {exc}")
            continue
        for line in lines[1:]:
            cells = [c.strip() for c in line.split("\t")]
            h = HangingTransaction(cells[0], *(int(c) for c in cells[1:8]))
            out[(h.topic, h.partition, h.producer_id)] = h
    return sorted(out.values(), key=lambda h: (h.topic, h.partition)), errors


def abort_hanging(source: ClusterSource, topic: str, partition: int, start_offset: int) -> None:
    args = argparse.Namespace(
        topic=topic,
        partition=partition,
        start_offset=start_offset,
        producer_id=None,
        producer_epoch=None,
        coordinator_epoch=None,
    )
    try:
        cmd_abort(args, _client(source))
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc
