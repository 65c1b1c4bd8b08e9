"""``millrace transactions``: Kafka's ``kafka-transactions.sh``, with its sub-commands, options
and output, over the Kafka protocol (so it works against Apache Kafka too)::

    millrace transactions [--bootstrap-server B | --dir D] [--command-config F] list [--duration-filter MS]
    millrace transactions ... describe --transactional-id ID
    millrace transactions ... describe-producers --topic T --partition P [--broker-id B]
    millrace transactions ... abort --topic T --partition P
        (--start-offset O | --producer-id PID --producer-epoch E --coordinator-epoch C)
    millrace transactions ... find-hanging (--broker-id B | --topic T [--partition P])
        [--max-transaction-timeout MINUTES]

Requests: ``list`` sends ListTransactions to every broker (each answers for the
transactions it coordinates); ``describe`` finds the coordinator (FindCoordinator with a
transaction key) and sends DescribeTransactions; ``describe-producers`` sends
DescribeProducers to the partition's leader (or ``--broker-id``); ``abort`` looks up the open
transaction that starts at ``--start-offset`` with DescribeProducers and writes an abort
marker with WriteTxnMarkers to the partition leader, as Kafka's admin client does;
``find-hanging`` lists open transactions (DescribeProducers) whose coordinator no longer
knows about the partition.

Output: Kafka's ``prettyPrintTable`` (each cell padded to its column's width, then a tab).
Errors: one line on stderr and exit code 1 (``Failed to ...: <reason>``); bad usage exits 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.cli.client_settings import wire_security
from broker.cli.common import CliError, add_connection_options, bootstrap_servers, guard
from broker.cli.reassign import ClusterClient
from broker.protocol.api_keys import ApiKey
from broker.types import TopicPartition

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

_PROG = "millrace transactions"
METADATA = (ApiKey.METADATA, 9)
FIND_COORDINATOR = (ApiKey.FIND_COORDINATOR, 3)
WRITE_TXN_MARKERS = (ApiKey.WRITE_TXN_MARKERS, 1)
DESCRIBE_PRODUCERS = (ApiKey.DESCRIBE_PRODUCERS, 0)
DESCRIBE_TRANSACTIONS = (ApiKey.DESCRIBE_TRANSACTIONS, 0)
LIST_TRANSACTIONS = (ApiKey.LIST_TRANSACTIONS, 1)
TRANSACTION_KEY_TYPE = 1

LIST_HEADERS = ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
DESCRIBE_HEADERS = [
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
]
PRODUCERS_HEADERS = [
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
]
HANGING_HEADERS = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
]


def pretty_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Kafka's ``ToolsUtils.prettyPrintTable``: every cell padded to its column's width and
    followed by a tab."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "".join(f"{cell:<{w}}\t" for cell, w in zip(cells, widths, strict=True))

    return [line(headers), *(line(r) for r in rows)]


def _error_name(code: int) -> str:
    from broker.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


@dataclass(frozen=True, slots=True)
class Cluster:
    """Brokers and partition leaders from one Metadata response."""

    brokers: dict[int, tuple[str, int]]
    leaders: dict[TopicPartition, int]
    replicas: dict[TopicPartition, tuple[int, ...]]


class TransactionsClient:
    """The requests of the sub-commands (one connection per request)."""

    def __init__(
        self, bootstrap: str, timeout_s: float, security: ClientSecurity | None = None
    ) -> None:
        self.client = ClusterClient(bootstrap, timeout_s, security=security)

    def send(self, broker: tuple[str, int], api: tuple[int, int], body: Any) -> Any:
        try:
            return self.client.send(broker[0], broker[1], api[0], api[1], body)
        except (ConnectionError, TimeoutError, OSError) as exc:
            raise CliError(f"cannot reach broker {broker[0]}:{broker[1]}: {exc}") from exc

    def cluster(self, topics: list[str] | None = None) -> Cluster:
        from broker.protocol import registry

        cls = registry.request_class(*METADATA)
        topic_cls = registry.nested(cls, "MetadataRequestTopic")
        body = registry.build(
            cls,
            topics=None
            if topics is None
            else tuple(registry.build(topic_cls, name=t) for t in topics),
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        last: BaseException | None = None
        for host, port in self.client.servers:
            try:
                response = self.client.send(host, port, *METADATA, body)
                break
            except (ConnectionError, TimeoutError, OSError) as exc:
                last = exc
        else:
            raise CliError(f"cannot reach any broker of --bootstrap-server: {last}")
        brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in response.brokers}
        leaders: dict[TopicPartition, int] = {}
        replicas: dict[TopicPartition, tuple[int, ...]] = {}
        for topic in response.topics:
            if topic.name is None:
                continue
            if int(topic.error_code) != 0 and topics is not None:
                raise CliError(f"topic {topic.name}: {_error_name(int(topic.error_code))}")
            for p in topic.partitions:
                tp = TopicPartition(str(topic.name), int(p.partition_index))
                leaders[tp] = int(p.leader_id)
                replicas[tp] = tuple(int(r) for r in p.replica_nodes)
        return Cluster(brokers, leaders, replicas)

    def coordinator(self, cluster: Cluster, transactional_id: str) -> tuple[int, tuple[str, int]]:
        from broker.protocol import registry

        body = registry.build(
            registry.request_class(*FIND_COORDINATOR),
            key=transactional_id,
            key_type=TRANSACTION_KEY_TYPE,
        )
        problem = "no answer"
        for _attempt in range(10):
            for address in cluster.brokers.values():
                response = self.send(address, FIND_COORDINATOR, body)
                code = int(response.error_code)
                if code == 0:
                    return int(response.node_id), (str(response.host), int(response.port))
                problem = _error_name(code)
                break
            time.sleep(0.5)
        raise CliError(f"cannot find the coordinator of {transactional_id!r}: {problem}")

    def describe_producers(
        self, cluster: Cluster, tp: TopicPartition, broker_id: int | None
    ) -> list[Any]:
        from broker.protocol import registry

        target = cluster.leaders.get(tp) if broker_id is None else broker_id
        if target is None or target < 0:
            raise CliError(f"partition {tp} has no leader")
        address = cluster.brokers.get(target)
        if address is None:
            raise CliError(f"broker {target} is not known")
        cls = registry.request_class(*DESCRIBE_PRODUCERS)
        topic_cls = registry.nested(cls, "TopicRequest")
        body = registry.build(
            cls,
            topics=(registry.build(topic_cls, name=tp.topic, partition_indexes=(tp.partition,)),),
        )
        response = self.send(address, DESCRIBE_PRODUCERS, body)
        for topic in response.topics:
            for part in topic.partitions:
                if int(part.error_code) != 0:
                    detail = part.error_message or _error_name(int(part.error_code))
                    raise CliError(detail)
                return list(part.active_producers)
        raise CliError("the broker did not answer for the partition")


# --- the sub-commands --------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace, txn: TransactionsClient) -> list[str]:
    from broker.protocol import registry

    cluster = txn.cluster([])
    body = registry.build(
        registry.request_class(*LIST_TRANSACTIONS),
        state_filters=(),
        producer_id_filters=(),
        duration_filter=-1 if args.duration_filter is None else args.duration_filter,
    )
    rows: list[list[str]] = []
    for broker_id, address in sorted(cluster.brokers.items()):
        response = txn.send(address, LIST_TRANSACTIONS, body)
        code = int(response.error_code)
        if code != 0:
            raise CliError(f"Failed to list transactions: {_error_name(code)} (broker {broker_id})")
        for state in response.transaction_states:
            rows.append(
                [
                    str(state.transactional_id),
                    str(broker_id),
                    str(int(state.producer_id)),
                    str(state.transaction_state),
                ]
            )
    return pretty_table(LIST_HEADERS, rows)


def cmd_describe(args: argparse.Namespace, txn: TransactionsClient) -> list[str]:
    from broker.protocol import registry

    cluster = txn.cluster([])
    node_id, address = txn.coordinator(cluster, args.transactional_id)
    body = registry.build(
        registry.request_class(*DESCRIBE_TRANSACTIONS),
        transactional_ids=(args.transactional_id,),
    )
    response = txn.send(address, DESCRIBE_TRANSACTIONS, body)
    (state,) = response.transaction_states
    code = int(state.error_code)
    if code != 0:
        raise CliError(
            f"Failed to describe transaction state of transactional-id "
            f"`{args.transactional_id}`: {_error_name(code)}"
        )
    start_ms = int(state.transaction_start_time.timestamp() * 1000)
    if start_ms >= 0:
        start, duration = str(start_ms), str(int(time.time() * 1000) - start_ms)
    else:
        start = duration = "None"
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    row = [
        str(node_id),
        args.transactional_id,
        str(int(state.producer_id)),
        str(int(state.producer_epoch)),
        str(state.transaction_state),
        str(int(state.transaction_timeout.total_seconds() * 1000)),
        start,
        duration,
        partitions,
    ]
    return pretty_table(DESCRIBE_HEADERS, [row])


def _producer_row(p: Any) -> list[str]:
    start = int(p.current_txn_start_offset)
    return [
        str(int(p.producer_id)),
        str(int(p.producer_epoch)),
        str(int(p.coordinator_epoch)),
        str(int(p.last_sequence)),
        str(int(p.last_timestamp)),
        str(start) if start >= 0 else "None",
    ]


def cmd_describe_producers(args: argparse.Namespace, txn: TransactionsClient) -> list[str]:
    tp = TopicPartition(args.topic, args.partition)
    cluster = txn.cluster([args.topic])
    try:
        producers = txn.describe_producers(cluster, tp, args.broker_id)
    except CliError as exc:
        where = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
        raise CliError(
            f"Failed to describe producers for partition {tp} on {where}: {exc}"
        ) from exc
    return pretty_table(PRODUCERS_HEADERS, [_producer_row(p) for p in producers])


def cmd_abort(args: argparse.Namespace, txn: TransactionsClient) -> list[str]:
    from kio.schema.write_txn_markers.v1.request import (
        WritableTxnMarker,
        WritableTxnMarkerTopic,
        WriteTxnMarkersRequest,
    )

    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise CliError(
            "The transaction to abort must be identified either with --start-offset (for "
            "brokers on 3.0 or above) or with --producer-id, --producer-epoch, and "
            "--coordinator-epoch (for older brokers)"
        )
    cluster = txn.cluster([args.topic])
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise CliError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CliError("Missing required argument --coordinator-epoch")
        pid, epoch, coordinator_epoch = (
            args.producer_id,
            args.producer_epoch,
            args.coordinator_epoch,
        )
    else:
        try:
            producers = txn.describe_producers(cluster, tp, None)
        except CliError as exc:
            raise CliError(f"Failed to validate producer state for partition {tp}: {exc}") from exc
        found = [p for p in producers if int(p.current_txn_start_offset) == args.start_offset]
        if not found:
            raise CliError(
                f"Could not find any open transactions starting at offset {args.start_offset}"
                f" on partition {tp}"
            )
        pid = int(found[0].producer_id)
        epoch = int(found[0].producer_epoch)
        coordinator_epoch = int(found[0].coordinator_epoch)
    coordinator_epoch = max(coordinator_epoch, 0)
    leader = cluster.leaders.get(tp, -1)
    address = cluster.brokers.get(leader)
    if address is None:
        raise CliError(f"Failed to abort transaction: partition {tp} has no leader")
    marker: Any = WritableTxnMarker
    body = WriteTxnMarkersRequest(
        markers=(
            marker(
                producer_id=pid,
                producer_epoch=epoch,
                transaction_result=False,
                topics=(WritableTxnMarkerTopic(name=tp.topic, partition_indexes=(tp.partition,)),),  # type: ignore[arg-type]
                coordinator_epoch=coordinator_epoch,
            ),
        )
    )
    response = txn.send(address, WRITE_TXN_MARKERS, body)
    for result in response.markers:
        for topic in result.topics:
            for part in topic.partitions:
                code = int(part.error_code)
                if code != 0:
                    raise CliError(
                        f"Failed to abort transaction AbortTransactionSpec(topicPartition={tp},"
                        f" producerId={pid}, producerEpoch={epoch}, coordinatorEpoch="
                        f"{coordinator_epoch}): {_error_name(code)}"
                    )
    return []


def cmd_find_hanging(args: argparse.Namespace, txn: TransactionsClient) -> list[str]:
    from broker.protocol import registry

    if args.topic is None and args.broker_id is None:
        raise CliError(
            "The `find-hanging` command requires either --topic or --broker-id to limit the "
            "scope of the search"
        )
    if args.partition is not None and args.topic is None:
        raise CliError("The --partition argument requires --topic to be provided")
    cluster = txn.cluster(None if args.topic is None else [args.topic])
    candidates = [
        tp
        for tp, replicas in sorted(cluster.replicas.items())
        if (args.topic is None or tp.topic == args.topic)
        and (args.partition is None or tp.partition == args.partition)
        and (args.broker_id is None or args.broker_id in replicas)
    ]
    now = int(time.time() * 1000)
    max_timeout_ms = args.max_transaction_timeout * 60_000
    open_txns: list[tuple[TopicPartition, Any]] = []
    for tp in candidates:
        for p in txn.describe_producers(cluster, tp, args.broker_id):
            if (
                int(p.current_txn_start_offset) >= 0
                and now - int(p.last_timestamp) >= max_timeout_ms
            ):
                open_txns.append((tp, p))
    hanging: list[tuple[TopicPartition, Any]] = []
    if open_txns:
        ids: dict[int, str] = {}
        list_body = registry.build(
            registry.request_class(*LIST_TRANSACTIONS),
            state_filters=(),
            producer_id_filters=tuple(sorted({int(p.producer_id) for _, p in open_txns})),
            duration_filter=-1,
        )
        for address in cluster.brokers.values():
            for state in txn.send(address, LIST_TRANSACTIONS, list_body).transaction_states:
                ids[int(state.producer_id)] = str(state.transactional_id)
        for tp, p in open_txns:
            transactional_id = ids.get(int(p.producer_id))
            if transactional_id is None:
                hanging.append((tp, p))
                continue
            _node, address = txn.coordinator(cluster, transactional_id)
            body = registry.build(
                registry.request_class(*DESCRIBE_TRANSACTIONS),
                transactional_ids=(transactional_id,),
            )
            (state,) = txn.send(address, DESCRIBE_TRANSACTIONS, body).transaction_states
            parts = {
                TopicPartition(str(t.topic), int(x)) for t in state.topics for x in t.partitions
            }
            if int(state.error_code) != 0 or tp not in parts:
                hanging.append((tp, p))
    rows = [
        [
            tp.topic,
            str(tp.partition),
            str(int(p.producer_id)),
            str(int(p.producer_epoch)),
            str(int(p.coordinator_epoch)),
            str(int(p.current_txn_start_offset)),
            str(int(p.last_timestamp)),
            str((now - int(p.last_timestamp)) // 60_000),
        ]
        for tp, p in hanging
    ]
    return pretty_table(HANGING_HEADERS, rows)


COMMANDS = {
    "list": cmd_list,
    "describe": cmd_describe,
    "describe-producers": cmd_describe_producers,
    "abort": cmd_abort,
    "find-hanging": cmd_find_hanging,
}


def run(args: argparse.Namespace) -> int:
    txn = TransactionsClient(bootstrap_servers(args), args.timeout, wire_security(args))
    for line in COMMANDS[args.action](args, txn):
        sys.stdout.write(line + "\n")
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "transactions",
        help="list, describe and abort transactions (kafka-transactions.sh)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_connection_options(parser, timeout=True)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = actions.add_parser("list", help="list transactions")
    p.add_argument(
        "--duration-filter",
        type=int,
        default=None,
        metavar="MS",
        help="only transactions running longer than this (ms)",
    )
    p = actions.add_parser("describe", help="describe the state of an active transactional-id")
    p.add_argument("--transactional-id", required=True, help="transactional id")
    p = actions.add_parser(
        "describe-producers", help="describe the states of active producers for a topic partition"
    )
    p.add_argument("--broker-id", type=int, default=None, help="describe the state on this replica")
    p.add_argument("--topic", required=True, help="topic name")
    p.add_argument("--partition", type=int, required=True, help="partition number")
    p = actions.add_parser("abort", help="abort a hanging transaction")
    p.add_argument("--topic", required=True, help="topic name")
    p.add_argument("--partition", type=int, required=True, help="partition number")
    p.add_argument("--start-offset", type=int, default=None, help="start offset of the transaction")
    p.add_argument("--producer-id", type=int, default=None, help="producer id")
    p.add_argument("--producer-epoch", type=int, default=None, help="producer epoch")
    p.add_argument("--coordinator-epoch", type=int, default=None, help="coordinator epoch")
    p = actions.add_parser("find-hanging", help="find hanging transactions")
    p.add_argument("--broker-id", type=int, default=None, help="broker to search")
    p.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        metavar="MINUTES",
        help="maximum transaction timeout in minutes (15 by default)",
    )
    p.add_argument("--topic", default=None, help="topic to search")
    p.add_argument("--partition", type=int, default=None, help="partition number")
    parser.set_defaults(func=guard(_PROG)(run))
