"""``millrace topics create|list|describe|alter|delete``: topic administration with the option
names of Kafka's ``kafka-topics.sh``, over the Kafka admin protocol (confluent-kafka's
``AdminClient``), so it works against any Kafka-compatible cluster.

Output follows ``kafka-topics.sh``::

    Topic: t\tTopicId: <id>\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: k=v,...
    \tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1

``Configs`` lists the entries whose source is not the built-in default (as Kafka does);
``--topics-with-overrides`` shows only topics that have dynamic topic-level overrides
(``/config/topics/<topic>``). ``--under-replicated-partitions`` and
``--unavailable-partitions`` print only the matching partition lines. ``--topic`` accepts a
regular expression except for ``create``.

``alter`` goes beyond ``kafka-topics.sh`` (which delegates configs to ``kafka-configs.sh``):
``--partitions`` adds partitions, ``--config k=v`` sets and ``--delete-config k`` removes
topic overrides through IncrementalAlterConfigs.

The bootstrap servers come from ``--bootstrap-server``, else the ``bootstrap_servers`` of
``--dir D``'s ``cluster.json`` (written by ``millrace cluster up``), else the environment
variable ``MILLRACE_BOOTSTRAP``, else ``127.0.0.1:9092`` (the connection options of
``broker.cli.common``).

Errors: one line on stderr naming the topic or option, exit code 1 (``common.guard``); bad
usage exits 2 (argparse). One admin client per command, used from the command's thread.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.cli.client_settings import admin_client
from broker.cli.common import (
    CliError,
    add_connection_options,
    fail,
    guard,
    ids_text,
    kafka_error_code,
    kafka_error_text,
    parse_key_values,
    positive_int,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient, NewPartitions

_PROG = "millrace topics"


# --- argument parsing ----------------------------------------------------------------------


def parse_replica_assignment(text: str) -> list[list[int]]:
    """``"1:2,2:1"`` -> ``[[1, 2], [2, 1]]`` (partitions by comma, replicas by colon)."""
    result: list[list[int]] = []
    for i, part in enumerate(text.split(",")):
        try:
            replicas = [int(r) for r in part.split(":")]
        except ValueError as exc:
            raise CliError(
                f"--replica-assignment {text!r}: partition {i} has a non-integer broker id"
            ) from exc
        if len(set(replicas)) != len(replicas):
            raise CliError(
                f"--replica-assignment {text!r}: partition {i} lists a broker more than once"
            )
        if result and len(replicas) != len(result[0]):
            raise CliError(
                f"--replica-assignment {text!r}: partition {i} has {len(replicas)} replicas, "
                f"partition 0 has {len(result[0])}"
            )
        result.append(replicas)
    return result


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "topics",
        help="create, list, describe, alter and delete topics (like kafka-topics.sh)",
        description="Topic administration with kafka-topics.sh option names.",
    )
    actions = p.add_subparsers(dest="topics_command", metavar="ACTION", required=True)

    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common, timeout=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("--topic", required=True, help="topic to create")
    create.add_argument(
        "--partitions",
        type=positive_int,
        help="number of partitions (default: the broker's num.partitions)",
    )
    create.add_argument(
        "--replication-factor",
        type=positive_int,
        help="replicas per partition (default: default.replication.factor)",
    )
    create.add_argument(
        "--replica-assignment",
        metavar="B1:B2,B2:B1",
        help="explicit replicas per partition (partitions by ',', replicas by ':')",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config override (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="do nothing if the topic already exists"
    )
    create.set_defaults(func=run_create, _parser=create)

    lst = actions.add_parser("list", parents=[common], help="list topic names")
    lst.add_argument("--topic", help="only topics matching this regular expression")
    lst.add_argument("--exclude-internal", action="store_true", help="hide internal topics")
    lst.set_defaults(func=run_list, _parser=lst)

    describe = actions.add_parser("describe", parents=[common], help="describe topics")
    describe.add_argument("--topic", help="topic name or regular expression (default: all)")
    describe.add_argument("--if-exists", action="store_true", help="do nothing if no topic matches")
    describe.add_argument("--exclude-internal", action="store_true", help="hide internal topics")
    describe.add_argument(
        "--topics-with-overrides",
        action="store_true",
        help="only topics with topic-level config overrides",
    )
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replica set",
    )
    describe.add_argument(
        "--unavailable-partitions", action="store_true", help="only partitions without a leader"
    )
    describe.set_defaults(func=run_describe, _parser=describe)

    alter = actions.add_parser(
        "alter", parents=[common], help="add partitions or change topic configs"
    )
    alter.add_argument("--topic", required=True, help="topic name or regular expression")
    alter.add_argument("--partitions", type=positive_int, help="new total partition count")
    alter.add_argument(
        "--replica-assignment",
        metavar="B1:B2,B2:B1",
        help="replicas of all partitions; those of the new ones are used",
    )
    alter.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config override (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a topic config override (repeatable)",
    )
    alter.add_argument("--if-exists", action="store_true", help="do nothing if no topic matches")
    alter.set_defaults(func=run_alter, _parser=alter)

    delete = actions.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("--topic", required=True, help="topic name or regular expression")
    delete.add_argument("--if-exists", action="store_true", help="do nothing if no topic matches")
    delete.set_defaults(func=run_delete, _parser=delete)


# --- actions -------------------------------------------------------------------------------


def _topic_names(admin: AdminClient, timeout: float) -> list[str]:
    from confluent_kafka import KafkaException

    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise CliError(f"cannot list topics: {kafka_error_text(exc)}") from exc
    return sorted(metadata.topics)


def _is_internal(name: str) -> bool:
    return name.startswith("__")


def _matching(names: Sequence[str], pattern: str | None, exclude_internal: bool) -> list[str]:
    out = [n for n in names if not (exclude_internal and _is_internal(n))]
    if pattern is None:
        return out
    if pattern in out:
        return [pattern]
    try:
        regex = re.compile(pattern)
    except re.error:
        return []
    return [n for n in out if regex.fullmatch(n)]


@guard(_PROG)
def run_create(args: argparse.Namespace) -> int:
    """Create one topic."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    parser: argparse.ArgumentParser = args._parser
    if args.replica_assignment and (args.partitions or args.replication_factor):
        parser.error(
            "--replica-assignment cannot be used with --partitions or --replication-factor"
        )
    configs = parse_key_values(args.config, "--config")
    if args.replica_assignment:
        assignment = parse_replica_assignment(args.replica_assignment)
        new = NewTopic(
            args.topic,
            num_partitions=len(assignment),
            replica_assignment=assignment,
            config=configs,
        )
    else:
        new = NewTopic(
            args.topic,
            num_partitions=args.partitions or -1,
            replication_factor=args.replication_factor or -1,
            config=configs,
        )
    admin = admin_client(args)
    try:
        futures = admin.create_topics(
            [new], request_timeout=args.timeout, operation_timeout=args.timeout
        )
    except (ValueError, TypeError) as exc:
        raise CliError(f"cannot create topic '{args.topic}': {exc}") from exc
    try:
        futures[args.topic].result()
    except KafkaException as exc:
        if kafka_error_code(exc) == "TOPIC_ALREADY_EXISTS":
            if args.if_not_exists:
                return 0
            raise CliError(f"Topic '{args.topic}' already exists.") from exc
        raise CliError(f"cannot create topic '{args.topic}': {kafka_error_text(exc)}") from exc
    sys.stdout.write(f"Created topic {args.topic}.\n")
    return 0


@guard(_PROG)
def run_list(args: argparse.Namespace) -> int:
    """Print topic names, one a line, sorted."""
    admin = admin_client(args)
    for name in _matching(_topic_names(admin, args.timeout), args.topic, args.exclude_internal):
        sys.stdout.write(name + "\n")
    return 0


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition as shown by ``describe``."""

    partition: int
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicView:
    """One topic as shown by ``describe``."""

    name: str
    topic_id: str
    internal: bool
    partitions: tuple[PartitionView, ...]


def _uuid_text(uuid: object) -> str:
    """A topic id as Kafka prints it: URL-safe base64 without padding."""
    text = str(uuid) if uuid is not None else ""
    return text.replace("+", "-").replace("/", "_").rstrip("=") or "(unknown)"


def _describe_topics(admin: AdminClient, names: list[str], timeout: float) -> list[TopicView]:
    """Describe via DescribeTopics (topic ids), falling back to plain Metadata."""
    from confluent_kafka import KafkaException, TopicCollection

    views: dict[str, TopicView] = {}
    fallback = False
    try:
        futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
    except (KafkaException, ValueError, TypeError):
        futures, fallback = {}, True
    for name, future in futures.items():
        try:
            desc = future.result()
        except KafkaException as exc:
            if kafka_error_code(exc) == "UNKNOWN_TOPIC_OR_PART":
                continue  # deleted since it was listed
            fallback = True  # e.g. a broker without topic ids: use plain Metadata
            break
        parts = tuple(
            PartitionView(
                p.id,
                p.leader.id if p.leader is not None else -1,
                tuple(n.id for n in p.replicas),
                tuple(n.id for n in p.isr),
            )
            for p in sorted(desc.partitions, key=lambda p: p.id)
        )
        views[name] = TopicView(name, _uuid_text(desc.topic_id), bool(desc.is_internal), parts)
    if not fallback:
        return [views[n] for n in names if n in views]
    views.clear()
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise CliError(f"cannot describe topics: {kafka_error_text(exc)}") from exc
    for name in names:
        topic = metadata.topics.get(name)
        if topic is None:
            continue
        parts = tuple(
            PartitionView(p.id, p.leader, tuple(p.replicas), tuple(p.isrs))
            for p in sorted(topic.partitions.values(), key=lambda p: p.id)
        )
        views[name] = TopicView(name, "(unknown)", _is_internal(name), parts)
    return [views[n] for n in names if n in views]


def _describe_configs(
    admin: AdminClient, names: list[str], timeout: float
) -> dict[str, tuple[list[str], bool]]:
    """Per topic: the ``k=v`` entries not at their default, and whether any is a topic
    override."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    if not names:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, n) for n in names]
    out: dict[str, tuple[list[str], bool]] = {}
    futures = admin.describe_configs(resources, request_timeout=timeout)
    for resource, future in futures.items():
        try:
            entries = future.result()
        except KafkaException as exc:
            raise CliError(
                f"cannot describe configs of topic '{resource.name}': {kafka_error_text(exc)}"
            ) from exc
        shown: list[str] = []
        override = False
        for entry in entries.values():
            source = entry.source.value if isinstance(entry.source, ConfigSource) else entry.source
            if entry.is_default or source == ConfigSource.DEFAULT_CONFIG.value:
                continue
            value = "" if entry.is_sensitive or entry.value is None else entry.value
            shown.append(f"{entry.name}={value}")
            if source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
                override = True
        out[resource.name] = (shown, override)
    return out


def format_topic(view: TopicView, configs: Sequence[str]) -> str:
    """The ``Topic: ...`` header line of ``describe``."""
    rf = len(view.partitions[0].replicas) if view.partitions else 0
    return (
        f"Topic: {view.name}\tTopicId: {view.topic_id}\tPartitionCount: "
        f"{len(view.partitions)}\tReplicationFactor: {rf}\tConfigs: {','.join(configs)}"
    )


def format_partition(topic: str, part: PartitionView) -> str:
    """One partition line of ``describe``."""
    leader = "none" if part.leader < 0 else str(part.leader)
    return (
        f"\tTopic: {topic}\tPartition: {part.partition}\tLeader: {leader}\t"
        f"Replicas: {ids_text(part.replicas)}\tIsr: {ids_text(part.isr)}"
    )


@guard(_PROG)
def run_describe(args: argparse.Namespace) -> int:
    """Print topic and partition lines like kafka-topics.sh --describe."""
    admin = admin_client(args)
    names = _matching(_topic_names(admin, args.timeout), args.topic, args.exclude_internal)
    if not names:
        if args.if_exists or args.topic is None:
            return 0
        raise CliError(f"Topic '{args.topic}' does not exist as expected")
    views = _describe_topics(admin, names, args.timeout)
    partition_filter = args.under_replicated_partitions or args.unavailable_partitions
    configs = {} if partition_filter else _describe_configs(admin, names, args.timeout)
    out = sys.stdout
    for view in views:
        if not partition_filter:
            shown, override = configs.get(view.name, ([], False))
            if args.topics_with_overrides:
                if override:
                    out.write(format_topic(view, shown) + "\n")
                continue
            out.write(format_topic(view, shown) + "\n")
        for part in view.partitions:
            if args.under_replicated_partitions and len(part.isr) >= len(part.replicas):
                continue
            if args.unavailable_partitions and part.leader >= 0:
                continue
            out.write(format_partition(view.name, part) + "\n")
    return 0


@guard(_PROG)
def run_alter(args: argparse.Namespace) -> int:
    """Add partitions and/or set or delete topic config overrides."""
    parser: argparse.ArgumentParser = args._parser
    if not (args.partitions or args.config or args.delete_config):
        parser.error("alter needs --partitions, --config or --delete-config")
    if args.replica_assignment and not args.partitions:
        parser.error("--replica-assignment with alter needs --partitions")
    sets = parse_key_values(args.config, "--config")
    both = set(sets) & set(args.delete_config)
    if both:
        parser.error(f"--config and --delete-config both name {sorted(both)[0]}")
    assignment = (
        parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
    )
    admin = admin_client(args)
    names = _matching(_topic_names(admin, args.timeout), args.topic, False)
    if not names:
        if args.if_exists:
            return 0
        raise CliError(f"Topic '{args.topic}' does not exist as expected")
    if args.partitions:
        _add_partitions(admin, args, names, assignment)
    if sets or args.delete_config:
        _alter_configs(admin, args, names, sets)
    return 0


def _add_partitions(
    admin: AdminClient,
    args: argparse.Namespace,
    names: list[str],
    assignment: list[list[int]] | None,
) -> None:
    """Grow each topic to ``--partitions`` (the new ones placed by ``assignment``)."""
    from confluent_kafka import KafkaException

    views = {v.name: v for v in _describe_topics(admin, names, args.timeout)}
    requests = [_new_partitions(name, args.partitions, views, assignment) for name in names]
    try:
        futures = admin.create_partitions(
            requests, request_timeout=args.timeout, operation_timeout=args.timeout
        )
    except (ValueError, TypeError) as exc:
        raise CliError(f"cannot add partitions: {exc}") from exc
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            raise CliError(
                f"cannot add partitions to topic '{name}': {kafka_error_text(exc)}"
            ) from exc
        sys.stdout.write(f"Topic {name} now has {args.partitions} partitions.\n")


def _new_partitions(
    name: str,
    wanted: int,
    views: dict[str, TopicView],
    assignment: list[list[int]] | None,
) -> NewPartitions:
    """The request growing topic ``name`` to ``wanted`` partitions (refused unless it grows)."""
    from confluent_kafka.admin import NewPartitions

    current = len(views[name].partitions) if name in views else 0
    if wanted < current:
        raise CliError(
            f"--partitions {wanted}: topic '{name}' has {current} partitions "
            "and the number of partitions can only be increased"
        )
    if wanted == current:
        raise CliError(f"--partitions {wanted}: topic '{name}' already has {current} partitions")
    if assignment is None:
        return NewPartitions(name, wanted)
    if len(assignment) != wanted:
        raise CliError(
            f"--replica-assignment lists {len(assignment)} partitions, --partitions is {wanted}"
        )
    return NewPartitions(name, wanted, assignment[current:])


def _alter_configs(
    admin: AdminClient, args: argparse.Namespace, names: list[str], sets: dict[str, str]
) -> None:
    """Set ``sets`` and delete ``--delete-config`` on each topic."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    ops = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in sets.items()
    ] + [
        ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
        for k in args.delete_config
    ]
    resources = [
        ConfigResource(ResourceType.TOPIC, name, incremental_configs=ops) for name in names
    ]
    futures = admin.incremental_alter_configs(resources, request_timeout=args.timeout)
    for resource, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            raise CliError(
                f"cannot alter configs of topic '{resource.name}': {kafka_error_text(exc)}"
            ) from exc
        changes = [f"{k}={v}" for k, v in sets.items()] + [f"-{k}" for k in args.delete_config]
        sys.stdout.write(f"Altered configs of topic {resource.name}: {' '.join(changes)}\n")


@guard(_PROG)
def run_delete(args: argparse.Namespace) -> int:
    """Delete the matching topics."""
    from confluent_kafka import KafkaException

    admin = admin_client(args)
    names = _matching(_topic_names(admin, args.timeout), args.topic, False)
    if not names:
        if args.if_exists:
            return 0
        raise CliError(f"Topic '{args.topic}' does not exist as expected")
    futures = admin.delete_topics(
        names, request_timeout=args.timeout, operation_timeout=args.timeout
    )
    failed = 0
    for name, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            if kafka_error_code(exc) == "UNKNOWN_TOPIC_OR_PART" and args.if_exists:
                continue
            fail(_PROG, f"cannot delete topic '{name}': {kafka_error_text(exc)}")
            failed += 1
            continue
        sys.stdout.write(f"Deleted topic {name}.\n")
    return 1 if failed else 0
