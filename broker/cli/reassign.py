"""``millrace reassign``: partition reassignment with the options, JSON format and messages of
Kafka's ``kafka-reassign-partitions.sh``, over the Kafka protocol (Metadata,
AlterPartitionReassignments, ListPartitionReassignments).

Actions (exactly one)::

    --generate --topics-to-move-json-file F --broker-list 1,2,3 [--disable-rack-aware]
    --execute  --reassignment-json-file F [--additional]
    --verify   --reassignment-json-file F
    --cancel   --reassignment-json-file F
    --list

``--generate`` prints the current assignment of the topics in ``F``
(``{"version":1,"topics":[{"topic":"t"}]}``) and a proposal spreading them over the broker
list (rack-aware when the brokers have racks). ``--execute`` prints the current assignment
to keep for a rollback and starts the reassignment; it refuses while another reassignment is
in progress unless ``--additional``. ``--verify`` prints the state of each partition of the
file and exits 0 only when every one is complete. ``--cancel`` cancels the file's active
reassignments. ``--list`` shows the reassignments in progress.

Requests that the controller must answer go to the active controller, found through
Metadata's ``controller_id``; a NOT_CONTROLLER answer or an unreachable controller (e.g.
during controller failover) is retried a few times with fresh metadata.

Bootstrap servers: ``--bootstrap-server``, else ``--dir``'s ``cluster.json``, else
``$MILLRACE_BOOTSTRAP``, else ``127.0.0.1:9092`` (the connection options of
``broker.cli.common``). TLS and SASL: ``--command-config``, else ``--dir``'s
``client_config`` (:func:`broker.cli.client_settings.wire_security`), on every connection.

Errors: one line on stderr naming the option or partition, exit code 1 (``common.guard``);
bad usage exits 2 (argparse). The formatting functions are pure (decoded kio responses in,
text out) so they are unit-tested without a network.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.cli.client_settings import wire_security
from broker.cli.common import (
    CliError,
    add_connection_options,
    bootstrap_servers,
    guard,
    ids_text,
    parse_bootstrap,
    read_text_file,
)
from broker.protocol.api_keys import ApiKey
from broker.types import TopicPartition

if TYPE_CHECKING:
    from kafka_security.client_security import ClientSecurity

_PROG = "millrace reassign"
METADATA_KEY, METADATA_VERSION = ApiKey.METADATA, 12
ALTER_KEY, ALTER_VERSION = ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0
LIST_KEY, LIST_VERSION = ApiKey.LIST_PARTITION_REASSIGNMENTS, 0
NOT_CONTROLLER = 41  # ErrorCode.not_controller

Assignment = dict[TopicPartition, list[int]]
Ongoing = dict[TopicPartition, tuple[list[int], list[int], list[int]]]
Requester = Callable[..., Any]


# --- talking to the cluster ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerView:
    """One live broker from a Metadata response."""

    broker_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a Metadata response says: live brokers, the controller and every partition's
    replica set (during a reassignment: the original plus the adding replicas)."""

    controller_id: int
    brokers: Mapping[int, BrokerView]
    replicas: Mapping[TopicPartition, list[int]]

    def topics(self) -> set[str]:
        return {tp.topic for tp in self.replicas}

    def assignment_of(self, topics: Iterable[str]) -> Assignment:
        wanted = set(topics)
        return {tp: list(r) for tp, r in sorted(self.replicas.items()) if tp.topic in wanted}


def cluster_view(response: Any) -> ClusterView:
    """A :class:`ClusterView` from a decoded Metadata response (topics with an error are
    left out)."""
    brokers = {
        int(b.node_id): BrokerView(int(b.node_id), str(b.host), int(b.port), b.rack)
        for b in response.brokers
    }
    replicas: dict[TopicPartition, list[int]] = {}
    for topic in response.topics:
        if int(topic.error_code) != 0 or topic.name is None:
            continue
        for p in topic.partitions:
            replicas[TopicPartition(str(topic.name), int(p.partition_index))] = [
                int(r) for r in p.replica_nodes
            ]
    return ClusterView(int(getattr(response, "controller_id", -1)), brokers, replicas)


def _top_level_error(response: Any) -> int:
    return int(getattr(response, "error_code", 0))


class ClusterClient:
    """Admin requests over the Kafka protocol, one connection per request (``request_sync``).

    Metadata goes to the first reachable bootstrap server; controller requests go to the
    active controller and are retried (``attempts`` times, ``backoff_s`` apart, with fresh
    metadata) when the answer's top-level error is NOT_CONTROLLER, no controller is known,
    or the controller cannot be reached. Not thread-safe; one per command.
    """

    def __init__(
        self,
        bootstrap: str,
        timeout_s: float,
        *,
        requester: Requester | None = None,
        sleep: Callable[[float], None] = time.sleep,
        attempts: int = 5,
        backoff_s: float = 1.0,
        security: ClientSecurity | None = None,
    ) -> None:
        """``security``: TLS and SASL of every connection (None: PLAINTEXT)."""
        self.servers = parse_bootstrap(bootstrap)
        self.security = security
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self._requester = requester
        self._sleep = sleep
        self.attempts = attempts
        self.backoff_s = backoff_s

    def send(self, host: str, port: int, api_key: int, version: int, body: Any) -> Any:
        """One request to the broker at ``host:port``; returns the decoded response."""
        return self._send(host, port, api_key, version, body)

    def _send(self, host: str, port: int, api_key: int, version: int, body: Any) -> Any:
        requester = self._requester
        if requester is None:
            from broker.network.client import request_sync

            return request_sync(
                host,
                port,
                api_key,
                version,
                body,
                timeout_s=self.timeout_s,
                security=self.security,
            )
        return requester(host, port, api_key, version, body, timeout_s=self.timeout_s)

    def metadata(self) -> ClusterView:
        """Metadata for all topics from the first bootstrap server that answers."""
        from broker.protocol import registry

        body = registry.build(
            registry.request_class(METADATA_KEY, METADATA_VERSION),
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
        last: BaseException | None = None
        for host, port in self.servers:
            try:
                return cluster_view(self._send(host, port, METADATA_KEY, METADATA_VERSION, body))
            except (ConnectionError, TimeoutError, OSError) as exc:
                last = exc
        raise CliError(f"cannot reach any broker of --bootstrap-server {self.bootstrap}: {last}")

    def to_controller(self, api_key: int, version: int, body: Any) -> Any:
        """Send ``body`` to the active controller and return its decoded response."""
        problem = "no controller is known"
        for attempt in range(self.attempts):
            if attempt:
                self._sleep(self.backoff_s)
            view = self.metadata()
            broker = view.brokers.get(view.controller_id)
            if broker is None:
                problem = "no controller is known"
                continue
            try:
                response = self._send(broker.host, broker.port, api_key, version, body)
            except (ConnectionError, TimeoutError, OSError) as exc:
                problem = f"controller {broker.broker_id} unreachable: {exc}"
                continue
            if _top_level_error(response) == NOT_CONTROLLER:
                problem = f"broker {broker.broker_id} is no longer the controller"
                continue
            return response
        raise CliError(
            f"cannot reach the active controller after {self.attempts} attempts: {problem}"
        )


# --- requests and responses ----------------------------------------------------------------


def alter_request(targets: Mapping[TopicPartition, Sequence[int] | None]) -> Any:
    """An AlterPartitionReassignments request body (None target = cancel)."""
    from broker.protocol import registry

    cls = registry.request_class(ALTER_KEY, ALTER_VERSION)
    topic_cls = registry.nested(cls, "ReassignableTopic")
    part_cls = registry.nested(cls, "ReassignablePartition")
    by_topic: dict[str, list[Any]] = {}
    for tp in sorted(targets):
        replicas = targets[tp]
        by_topic.setdefault(tp.topic, []).append(
            registry.build(
                part_cls,
                partition_index=tp.partition,
                replicas=None if replicas is None else tuple(int(r) for r in replicas),
            )
        )
    return registry.build(
        cls,
        topics=tuple(
            registry.build(topic_cls, name=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


def list_request(partitions: Iterable[TopicPartition] | None) -> Any:
    """A ListPartitionReassignments request body (None = every partition)."""
    from broker.protocol import registry

    cls = registry.request_class(LIST_KEY, LIST_VERSION)
    if partitions is None:
        return registry.build(cls, topics=None)
    topic_cls = registry.nested(cls, "ListPartitionReassignmentsTopics")
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return registry.build(
        cls,
        topics=tuple(
            registry.build(topic_cls, name=name, partition_indexes=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


def _error_name(code: int) -> str:
    from broker.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


def error_text(code: int, message: str | None) -> str:
    """A partition error as one line: the broker's message, else the error's name."""
    return message if message else _error_name(code)


def _check_top_level(response: Any, what: str) -> None:
    code = _top_level_error(response)
    if code != 0:
        raise CliError(f"{what}: {error_text(code, getattr(response, 'error_message', None))}")


def alter_errors(response: Any) -> dict[TopicPartition, str]:
    """The failed partitions of a decoded AlterPartitionReassignments response; a top-level
    error raises CliError."""
    _check_top_level(response, "AlterPartitionReassignments failed")
    errors: dict[TopicPartition, str] = {}
    for topic in response.responses:
        for p in topic.partitions:
            if int(p.error_code) != 0:
                tp = TopicPartition(str(topic.name), int(p.partition_index))
                errors[tp] = error_text(int(p.error_code), p.error_message)
    return errors


def ongoing_reassignments(response: Any) -> Ongoing:
    """The reassignments in progress of a decoded ListPartitionReassignments response
    (replicas, adding, removing); a top-level error raises CliError."""
    _check_top_level(response, "ListPartitionReassignments failed")
    out: Ongoing = {}
    for topic in response.topics:
        for p in topic.partitions:
            out[TopicPartition(str(topic.name), int(p.partition_index))] = (
                [int(r) for r in p.replicas],
                [int(r) for r in p.adding_replicas],
                [int(r) for r in p.removing_replicas],
            )
    return out


# --- pure formatting -----------------------------------------------------------------------


def _json(mapping: Mapping[TopicPartition, Sequence[int]]) -> str:
    from broker.controller.reassignment import format_reassignment_json

    return format_reassignment_json({tp: list(r) for tp, r in mapping.items()})


def _partition_list(partitions: Iterable[TopicPartition], sep: str = ",") -> str:
    return sep.join(str(tp) for tp in sorted(partitions))


def format_generate(current: Assignment, proposed: Assignment) -> str:
    """The output of ``--generate``."""
    return (
        f"Current partition replica assignment\n{_json(current)}\n\n"
        f"Proposed partition reassignment configuration\n{_json(proposed)}\n"
    )


def format_rollback(current: Assignment) -> str:
    """The first part of ``--execute``'s output: the assignment to restore on rollback."""
    return (
        f"Current partition replica assignment\n\n{_json(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback\n"
    )


def format_started(partitions: Iterable[TopicPartition]) -> str:
    parts = sorted(partitions)
    plural = "" if len(parts) == 1 else "s"
    return f"Successfully started partition reassignment{plural} for {_partition_list(parts)}\n"


def format_partition_errors(heading: str, errors: Mapping[TopicPartition, str]) -> str:
    """``Error reassigning partition(s):`` and one ``t-0: message`` line per partition."""
    lines = [heading] + [f"{tp}: {errors[tp]}" for tp in sorted(errors)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's reassignment state for ``--verify``."""

    current: list[int]
    target: list[int]
    done: bool


def reassignment_states(
    targets: Assignment, ongoing: Ongoing, current: Mapping[TopicPartition, Sequence[int]]
) -> dict[TopicPartition, PartitionState]:
    """Each target partition's state: in progress when the controller lists it, else done
    with its current replicas from Metadata. A partition in neither raises CliError."""
    out: dict[TopicPartition, PartitionState] = {}
    for tp in sorted(targets):
        if tp in ongoing:
            out[tp] = PartitionState(list(ongoing[tp][0]), list(targets[tp]), False)
        elif tp in current:
            out[tp] = PartitionState(list(current[tp]), list(targets[tp]), True)
        else:
            raise CliError(f"Unable to find partition: {tp}")
    return out


def format_verify(states: Mapping[TopicPartition, PartitionState]) -> tuple[str, bool]:
    """``--verify``'s output and whether every reassignment is complete."""
    lines = ["Status of partition reassignment:"]
    complete = True
    for tp in sorted(states):
        state = states[tp]
        if not state.done:
            complete = False
            lines.append(f"Reassignment of partition {tp} is still in progress.")
        elif state.current == state.target:
            lines.append(f"Reassignment of partition {tp} is completed.")
        else:
            complete = False
            lines.append(
                f"There is no active reassignment of partition {tp}, but replica set is "
                f"{state.current} rather than {state.target}."
            )
    return "\n".join(lines) + "\n", complete


def format_list(ongoing: Ongoing) -> str:
    """``--list``'s output."""
    if not ongoing:
        return "No partition reassignments found.\n"
    lines = ["Current partition reassignments:"]
    for tp in sorted(ongoing):
        replicas, adding, removing = ongoing[tp]
        lines.append(
            f"{tp}: replicas: {ids_text(replicas)}. adding: {ids_text(adding)}. "
            f"removing: {ids_text(removing)}."
        )
    return "\n".join(lines) + "\n"


def format_cancelled(partitions: Iterable[TopicPartition]) -> str:
    parts = sorted(partitions)
    if not parts:
        return "None of the specified partition reassignments are active.\n"
    return f"Successfully cancelled partition reassignment(s) for: {_partition_list(parts)}\n"


# --- argument parsing ----------------------------------------------------------------------


def parse_broker_list(text: str) -> list[int]:
    """``"1,2,3"`` -> ``[1, 2, 3]``; raises CliError naming ``--broker-list``."""
    ids: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        try:
            broker = int(item)
        except ValueError:
            raise CliError(
                f"--broker-list {text!r}: {item!r} is not a broker id (expected e.g. 1,2,3)"
            ) from None
        if broker < 0:
            raise CliError(f"--broker-list {text!r}: broker id {broker} is negative")
        if broker in ids:
            raise CliError(f"--broker-list {text!r}: broker {broker} is listed more than once")
        ids.append(broker)
    return ids


_ACTION_OPTIONS = {
    "topics_to_move_json_file": ("--topics-to-move-json-file", {"generate"}),
    "broker_list": ("--broker-list", {"generate"}),
    "disable_rack_aware": ("--disable-rack-aware", {"generate"}),
    "reassignment_json_file": ("--reassignment-json-file", {"execute", "verify", "cancel"}),
    "additional": ("--additional", {"execute"}),
}
_REQUIRED = {
    "generate": ("topics_to_move_json_file", "broker_list"),
    "execute": ("reassignment_json_file",),
    "verify": ("reassignment_json_file",),
    "cancel": ("reassignment_json_file",),
    "list": (),
}


def action_of(args: argparse.Namespace) -> str:
    """The chosen action; raises CliError (reported as a usage error) when an option does not
    belong to it or a required one is missing."""
    action = next(a for a in _REQUIRED if getattr(args, a, False))
    for dest in _REQUIRED[action]:
        if not getattr(args, dest, None):
            raise CliError(f"--{action} needs {_ACTION_OPTIONS[dest][0]}")
    for dest, (option, actions) in _ACTION_OPTIONS.items():
        if getattr(args, dest, None) and action not in actions:
            raise CliError(
                f"{option} can only be used with " + " or ".join(f"--{a}" for a in sorted(actions))
            )
    return action


def build_parser_into(p: argparse.ArgumentParser) -> None:
    """Add ``millrace reassign``'s options to ``p``."""
    add_connection_options(p, timeout=True)
    actions = p.add_mutually_exclusive_group(required=True)
    actions.add_argument(
        "--generate", action="store_true", help="propose an assignment of topics over brokers"
    )
    actions.add_argument("--execute", action="store_true", help="start the reassignment in F")
    actions.add_argument(
        "--verify", action="store_true", help="check whether the reassignment in F is complete"
    )
    actions.add_argument("--cancel", action="store_true", help="cancel the reassignment in F")
    actions.add_argument("--list", action="store_true", help="list reassignments in progress")
    p.add_argument(
        "--topics-to-move-json-file",
        metavar="F",
        help='(--generate) topics to move: {"version":1,"topics":[{"topic":"t"}]}',
    )
    p.add_argument(
        "--broker-list", metavar="1,2,3", help="(--generate) brokers to place the replicas on"
    )
    p.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="(--generate) ignore broker racks",
    )
    p.add_argument(
        "--reassignment-json-file",
        metavar="F",
        help="(--execute/--verify/--cancel) Kafka's reassignment JSON",
    )
    p.add_argument(
        "--additional",
        action="store_true",
        help="(--execute) start even though other reassignments are in progress",
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "reassign",
        help="move partition replicas between brokers (like kafka-reassign-partitions.sh)",
        description="Partition reassignment with kafka-reassign-partitions.sh options.",
    )
    build_parser_into(p)
    p.set_defaults(func=run, _parser=p)


# --- actions -------------------------------------------------------------------------------


def _parse_file(path: str, option: str, parse: Callable[[str], Any]) -> Any:
    text = read_text_file(path, option)
    try:
        return parse(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"{option} {path}: {exc}") from exc


def read_reassignment_file(path: str) -> Assignment:
    from broker.controller.reassignment import parse_reassignment_json

    targets: Assignment = _parse_file(path, "--reassignment-json-file", parse_reassignment_json)
    if not targets:
        raise CliError(f"--reassignment-json-file {path}: the partition list is empty")
    return targets


@guard(_PROG)
def run(args: argparse.Namespace) -> int:
    """Entry point of ``millrace reassign``."""
    parser: argparse.ArgumentParser = args._parser
    try:
        action = action_of(args)
    except CliError as exc:
        parser.error(str(exc))
    client = ClusterClient(bootstrap_servers(args), args.timeout, security=wire_security(args))
    runner = {
        "generate": _generate,
        "execute": _execute,
        "verify": _verify,
        "cancel": _cancel,
        "list": _list,
    }[action]
    return runner(args, client)


def generate_proposal(
    view: ClusterView, topics: Sequence[str], broker_ids: Sequence[int], rack_aware: bool
) -> tuple[Assignment, Assignment]:
    """The current assignment of ``topics`` and a proposal over ``broker_ids``."""
    from broker.controller.reassignment import generate_reassignment
    from broker.protocol.errors import KafkaError

    missing = sorted(set(topics) - view.topics())
    if missing:
        raise CliError(f"--topics-to-move-json-file: topic {missing[0]} not found")
    unknown = sorted(set(broker_ids) - set(view.brokers))
    if unknown:
        raise CliError(f"--broker-list: unknown broker id(s) {ids_text(unknown)}")
    racks: dict[int, str] | None = None
    if rack_aware:
        known = {b: view.brokers[b].rack for b in broker_ids}
        with_rack = {b: r for b, r in known.items() if r is not None}
        if with_rack and len(with_rack) != len(known):
            raise CliError(
                "Not all brokers have rack information. Add --disable-rack-aware in command "
                "line to make replica assignment without rack information."
            )
        racks = with_rack or None
    current = view.assignment_of(topics)
    try:
        proposed = generate_reassignment(current, list(topics), list(broker_ids), racks)
    except (ValueError, KafkaError) as exc:
        raise CliError(f"cannot generate a reassignment: {exc}") from exc
    return current, proposed


def _generate(args: argparse.Namespace, client: ClusterClient) -> int:
    from broker.controller.reassignment import parse_topics_to_move_json

    topics: list[str] = _parse_file(
        args.topics_to_move_json_file, "--topics-to-move-json-file", parse_topics_to_move_json
    )
    if not topics:
        raise CliError(f"--topics-to-move-json-file {args.topics_to_move_json_file}: no topics")
    brokers = parse_broker_list(args.broker_list)
    current, proposed = generate_proposal(
        client.metadata(), topics, brokers, not args.disable_rack_aware
    )
    sys.stdout.write(format_generate(current, proposed))
    return 0


def check_targets(view: ClusterView, targets: Assignment) -> None:
    """Every partition must exist and every replica be a live broker."""
    for tp in sorted(targets):
        if tp not in view.replicas:
            raise CliError(f"--reassignment-json-file: Unable to find partition: {tp}")
    unknown = sorted({b for r in targets.values() for b in r} - set(view.brokers))
    if unknown:
        raise CliError(f"--reassignment-json-file: unknown broker id(s) {ids_text(unknown)}")


def _execute(args: argparse.Namespace, client: ClusterClient) -> int:
    targets = read_reassignment_file(args.reassignment_json_file)
    view = client.metadata()
    check_targets(view, targets)
    if not args.additional:
        ongoing = ongoing_reassignments(
            client.to_controller(LIST_KEY, LIST_VERSION, list_request(None))
        )
        if ongoing:
            raise CliError(
                "Cannot execute because there is an existing partition assignment. Use "
                "--additional to override this and create a new partition assignment in "
                "addition to the existing one."
            )
    current = {tp: list(view.replicas[tp]) for tp in sorted(targets)}
    sys.stdout.write(format_rollback(current))
    sys.stdout.flush()
    response = client.to_controller(ALTER_KEY, ALTER_VERSION, alter_request(targets))
    errors = alter_errors(response)
    if errors:
        plural = "" if len(errors) == 1 else "s"
        sys.stderr.write(format_partition_errors(f"Error reassigning partition{plural}:", errors))
        return 1
    sys.stdout.write(format_started(targets))
    return 0


def _verify(args: argparse.Namespace, client: ClusterClient) -> int:
    targets = read_reassignment_file(args.reassignment_json_file)
    ongoing = ongoing_reassignments(
        client.to_controller(LIST_KEY, LIST_VERSION, list_request(targets))
    )
    view = client.metadata()
    text, complete = format_verify(reassignment_states(targets, ongoing, view.replicas))
    sys.stdout.write(text)
    return 0 if complete else 1


def _cancel(args: argparse.Namespace, client: ClusterClient) -> int:
    targets = read_reassignment_file(args.reassignment_json_file)
    ongoing = ongoing_reassignments(
        client.to_controller(LIST_KEY, LIST_VERSION, list_request(targets))
    )
    active = sorted(tp for tp in targets if tp in ongoing)
    if active:
        cancel: dict[TopicPartition, Sequence[int] | None] = {tp: None for tp in active}
        errors = alter_errors(client.to_controller(ALTER_KEY, ALTER_VERSION, alter_request(cancel)))
        if errors:
            plural = "" if len(errors) == 1 else "s"
            sys.stderr.write(
                format_partition_errors(
                    f"Error cancelling partition reassignment{plural} for:", errors
                )
            )
            return 1
    sys.stdout.write(format_cancelled(active))
    return 0


def _list(args: argparse.Namespace, client: ClusterClient) -> int:
    ongoing = ongoing_reassignments(
        client.to_controller(LIST_KEY, LIST_VERSION, list_request(None))
    )
    sys.stdout.write(format_list(ongoing))
    return 0
