"""``millrace elect-leaders``: preferred or unclean leader election with the options and
messages of Kafka's ``kafka-leader-election.sh``, over the ElectLeaders API (v2) sent to the
active controller (see ``broker.cli.reassign.ClusterClient``).

Usage::

    millrace elect-leaders [--bootstrap-server B | --dir D] [--command-config F]
        --election-type preferred|unclean
        (--all-topic-partitions | --topic T [--partition P] | --path-to-json-file F)

``F`` is Kafka's format: ``{"partitions": [{"topic": "t", "partition": 0}, ...]}``.
``--topic`` without ``--partition`` means every partition of the topic (from Metadata).

Output (stdout)::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: <message>

Exit code 1 when any partition failed for a reason other than ELECTION_NOT_NEEDED, or on
a failure to reach the cluster (one line on stderr); bad usage exits 2 (argparse).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.cli.client_settings import wire_security
from broker.cli.common import (
    CliError,
    add_connection_options,
    bootstrap_servers,
    fail,
    guard,
    read_text_file,
)
from broker.cli.reassign import ClusterClient, error_text
from broker.protocol.api_keys import ApiKey
from broker.types import TopicPartition

_PROG = "millrace elect-leaders"
ELECT_KEY, ELECT_VERSION = ApiKey.ELECT_LEADERS, 2
ELECTION_TYPES = {"PREFERRED": 0, "UNCLEAN": 1}
ELECTION_NOT_NEEDED = 84  # ErrorCode.election_not_needed


def election_type(text: str) -> int:
    """argparse type: ``preferred``/``unclean`` (any case) -> 0/1."""
    value = ELECTION_TYPES.get(text.strip().upper())
    if value is None:
        raise argparse.ArgumentTypeError(
            f"invalid election type {text!r} (choose preferred or unclean)"
        )
    return value


def election_name(value: int) -> str:
    return next((k for k, v in ELECTION_TYPES.items() if v == value), str(value))


def parse_partitions_json(text: str, source: str = "--path-to-json-file") -> list[TopicPartition]:
    """Kafka's election JSON ``{"partitions": [{"topic": "t", "partition": 0}]}`` -> the
    partitions; raises CliError naming ``source`` when malformed, empty or duplicated."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CliError(f"{source}: not valid JSON: {exc}") from exc
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise CliError(f'{source}: expected {{"partitions": [{{"topic": ..., "partition": ...}}]}}')
    out: list[TopicPartition] = []
    for i, entry in enumerate(entries):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not topic:
            raise CliError(f"{source}: partitions[{i}] has no topic name")
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise CliError(f"{source}: partitions[{i}] has no valid partition number")
        out.append(TopicPartition(topic, partition))
    if not out:
        raise CliError(f"{source}: the partition list is empty")
    duplicates = sorted({tp for tp in out if out.count(tp) > 1})
    if duplicates:
        raise CliError(
            f"{source}: Replica election data contains duplicate partitions: "
            + ", ".join(str(tp) for tp in duplicates)
        )
    return out


def elect_request(election: int, partitions: Iterable[TopicPartition] | None) -> Any:
    """An ElectLeaders v2 request body (None = every partition)."""
    from broker.protocol import registry

    cls = registry.request_class(ELECT_KEY, ELECT_VERSION)
    if partitions is None:
        return registry.build(cls, election_type=election, topic_partitions=None)
    topic_cls = registry.nested(cls, "TopicPartitions")
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(set(partitions)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return registry.build(
        cls,
        election_type=election,
        topic_partitions=tuple(
            registry.build(topic_cls, topic=name, partitions=tuple(parts))
            for name, parts in by_topic.items()
        ),
    )


@dataclass(frozen=True, slots=True)
class ElectionOutcome:
    """A decoded ElectLeaders response sorted into Kafka's three outcomes."""

    succeeded: list[TopicPartition] = field(default_factory=list)
    noop: list[TopicPartition] = field(default_factory=list)
    failed: dict[TopicPartition, str] = field(default_factory=dict)


def classify(response: Any) -> ElectionOutcome:
    """Sort a decoded ElectLeaders response; a top-level error raises CliError."""
    top = int(getattr(response, "error_code", 0))
    if top != 0:
        raise CliError(f"leader election failed: {error_text(top, None)}")
    outcome = ElectionOutcome()
    for topic in response.replica_election_results:
        for p in topic.partition_result:
            tp = TopicPartition(str(topic.topic), int(p.partition_id))
            code = int(p.error_code)
            if code == 0:
                outcome.succeeded.append(tp)
            elif code == ELECTION_NOT_NEEDED:
                outcome.noop.append(tp)
            else:
                outcome.failed[tp] = error_text(code, p.error_message)
    outcome.succeeded.sort()
    outcome.noop.sort()
    return outcome


def format_outcome(election: int, outcome: ElectionOutcome) -> str:
    """The lines kafka-leader-election.sh prints for ``outcome``."""
    name = election_name(election)
    lines: list[str] = []
    if outcome.succeeded:
        lines.append(
            f"Successfully completed leader election ({name}) for partitions "
            + ", ".join(str(tp) for tp in outcome.succeeded)
        )
    if outcome.noop:
        lines.append(
            "Valid replica already elected for partitions "
            + ", ".join(str(tp) for tp in outcome.noop)
        )
    for tp in sorted(outcome.failed):
        lines.append(
            f"Error completing leader election ({name}) for partition: {tp}: {outcome.failed[tp]}"
        )
    return "".join(line + "\n" for line in lines)


def check_selection(args: argparse.Namespace) -> None:
    """Raise CliError (a usage error) for option combinations Kafka's tool refuses."""
    if args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic")
    if args.partition is not None and args.partition < 0:
        raise CliError(f"--partition {args.partition}: must not be negative")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "elect-leaders",
        help="elect preferred (or unclean) leaders (like kafka-leader-election.sh)",
        description="Leader election with kafka-leader-election.sh options.",
    )
    build_parser_into(p)
    p.set_defaults(func=run, _parser=p)


def build_parser_into(p: argparse.ArgumentParser) -> None:
    """Add ``millrace elect-leaders``' options to ``p``."""
    add_connection_options(p, timeout=True)
    p.add_argument(
        "--election-type",
        type=election_type,
        required=True,
        metavar="preferred|unclean",
        help="preferred: move leadership to the first replica; unclean: elect any live "
        "replica when no in-sync one is left",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--all-topic-partitions", action="store_true", help="elect for every partition"
    )
    which.add_argument("--topic", metavar="T", help="elect for this topic's partitions")
    which.add_argument(
        "--path-to-json-file",
        metavar="F",
        help='partitions as {"partitions": [{"topic": "t", "partition": 0}]}',
    )
    p.add_argument("--partition", type=int, metavar="P", help="(with --topic) only this partition")


def _partitions(args: argparse.Namespace, client: ClusterClient) -> list[TopicPartition] | None:
    if args.all_topic_partitions:
        return None
    if args.path_to_json_file:
        text = read_text_file(args.path_to_json_file, "--path-to-json-file")
        return parse_partitions_json(text, f"--path-to-json-file {args.path_to_json_file}")
    if args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    found = sorted(tp for tp in client.metadata().replicas if tp.topic == args.topic)
    if not found:
        raise CliError(f"--topic {args.topic}: topic not found")
    return found


@guard(_PROG)
def run(args: argparse.Namespace) -> int:
    """Entry point of ``millrace elect-leaders``."""
    parser: argparse.ArgumentParser = args._parser
    try:
        check_selection(args)
    except CliError as exc:
        parser.error(str(exc))
    client = ClusterClient(bootstrap_servers(args), args.timeout, security=wire_security(args))
    partitions = _partitions(args, client)
    response = client.to_controller(
        ELECT_KEY, ELECT_VERSION, elect_request(args.election_type, partitions)
    )
    outcome = classify(response)
    sys.stdout.write(format_outcome(args.election_type, outcome))
    if outcome.failed:
        return fail(_PROG, f"{len(outcome.failed)} replica(s) could not be elected")
    return 0
