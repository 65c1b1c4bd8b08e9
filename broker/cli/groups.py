"""``millrace groups list|describe|reset-offsets|delete``: consumer group administration with
the option names and output of Kafka's ``kafka-consumer-groups.sh``, over the Kafka admin
protocol (confluent-kafka's ``AdminClient``: ListGroups, DescribeGroups, OffsetFetch,
OffsetCommit, DeleteGroups) plus a plain ``Consumer`` that never joins a group, for log
start/end offsets (ListOffsets) and ``offsets_for_times``.

Usage::

    millrace groups list [--state [S,S]]
    millrace groups describe (--group G ... | --all-groups) [--offsets | --members [--verbose]
        | --state]
    millrace groups reset-offsets (--group G ... | --all-groups)
        (--topic T[:P,P] ... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --shift-by N
         | --to-datetime YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm] | --by-duration PnDTnHnMnS)
        [--dry-run | --execute]
    millrace groups delete (--group G ... | --all-groups)

Output (stdout) follows ``kafka-consumer-groups.sh``:

* ``list``: one group id a line; with ``--state`` a ``GROUP STATE`` table, filtered by the
  comma-separated states given (case-insensitive), if any.
* ``describe`` (``--offsets``, the default)::

      GROUP  TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST  CLIENT-ID

  one row per partition assigned to a member (members with more partitions first), then one
  per partition with a committed offset but no owner (``-`` in the member columns).
  CURRENT-OFFSET is the committed offset, LOG-END-OFFSET the high watermark, LAG their
  difference; ``-`` when unknown. ``--members`` prints
  ``GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID #PARTITIONS [ASSIGNMENT]``
  (ASSIGNMENT with ``--verbose``: ``topic(0,1),other(2)``) and ``--state`` prints
  ``GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS``. An empty group gets
  "Consumer group 'G' has no active members." and a rebalancing one
  "Warning: Consumer group 'G' is rebalancing." on stderr, as Kafka does; a group that
  does not exist is an error.
* ``reset-offsets`` prints the plan ``GROUP TOPIC PARTITION NEW-OFFSET``; it only commits
  it with ``--execute`` (``--dry-run``, the default, does not). As in Kafka, the group must
  be inactive (Empty, or Dead = unknown), requested offsets are clamped to
  [log start offset, log end offset], ``--to-datetime``/``--by-duration`` fall back to the
  log end offset for partitions without a record that new, ``--to-current`` to the log end
  offset for partitions without a committed offset, and ``--shift-by`` needs a committed
  offset. ``--all-topics`` resets the partitions the group has committed offsets for.
* ``delete``: "Deletion of requested consumer groups ('G') was successful.", or Kafka's
  list of the groups that could not be deleted and why (e.g. a non-empty group).

The formatting and the reset planning are pure functions (``format_*``, ``offset_rows``,
``plan_reset``) tested without a cluster. Bootstrap servers come from ``--bootstrap-server``,
``--dir`` (``cluster.json``) or ``$MILLRACE_BOOTSTRAP`` (``broker.cli.topics``). Errors: one
line on stderr naming the group or option, exit code 1; bad usage exits 2 (argparse).
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.cli.topics import (
    CliError,
    add_connection_options,
    client_config,
    kafka_error_text,
)
from broker.types import TopicPartition

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

_PROG = "millrace groups"
MISSING = "-"

# Kafka's ConsumerGroupState names, by confluent-kafka's ConsumerGroupState enum value names.
STATE_NAMES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}
REBALANCING_STATES = frozenset({"PreparingRebalance", "CompletingRebalance", "Assigning"})
INACTIVE_STATES = frozenset({"Empty", "Dead"})


def state_name(state: object) -> str:
    """Kafka's name of a group state (a confluent-kafka enum, its name, or a string)."""
    name = getattr(state, "name", None)
    text = str(name) if name is not None else str(state)
    return STATE_NAMES.get(text.upper(), text)


def parse_states(text: str) -> set[str]:
    """``--state`` of ``list``: comma-separated state names (any case) -> Kafka's names."""
    by_lower = {v.lower(): v for v in STATE_NAMES.values()}
    out: set[str] = set()
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        known = by_lower.get(item.lower())
        if known is None:
            raise CliError(
                f"--state {text}: State must be one of: "
                + ", ".join(v for v in STATE_NAMES.values() if v != "Unknown")
            )
        out.add(known)
    return out


# --- values --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberView:
    """One group member as DescribeGroups reports it."""

    consumer_id: str
    host: str
    client_id: str
    assignment: tuple[TopicPartition, ...] = ()
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupView:
    """One group as DescribeGroups reports it; ``coordinator`` is ``host:port (id)``."""

    group_id: str
    state: str
    coordinator: str = MISSING
    assignment_strategy: str = ""
    members: tuple[MemberView, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """One row of ``describe --offsets``; None prints as ``-``."""

    group: str
    topic: str | None
    partition: int | None
    current_offset: int | None
    log_end_offset: int | None
    consumer_id: str = MISSING
    host: str = MISSING
    client_id: str = MISSING

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.current_offset


def error_text(err: object) -> str:
    """One line for a confluent-kafka KafkaException or KafkaError."""
    if isinstance(err, BaseException):
        return kafka_error_text(err)
    describe, name = getattr(err, "str", None), getattr(err, "name", None)
    if callable(describe) and callable(name):
        return f"{describe()} ({name()})"
    return str(err)


def _cell(value: object) -> str:
    return MISSING if value is None else str(value)


# --- describe: rows and formatting ---------------------------------------------------------


def offset_rows(
    group: GroupView,
    committed: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
) -> list[OffsetRow]:
    """The rows of ``describe --offsets`` as Kafka compiles them: partitions assigned to a
    member (members with the most partitions first, each member's sorted), then partitions
    with a committed offset that no member owns."""
    rows: list[OffsetRow] = []
    assigned: set[TopicPartition] = set()
    members = sorted((m for m in group.members if m.assignment), key=lambda m: -len(m.assignment))
    for member in members:
        for tp in sorted(member.assignment):
            assigned.add(tp)
            rows.append(
                OffsetRow(
                    group.group_id,
                    tp.topic,
                    tp.partition,
                    committed.get(tp),
                    log_end.get(tp),
                    member.consumer_id,
                    member.host,
                    member.client_id,
                )
            )
    for tp in sorted(set(committed) - assigned):
        rows.append(
            OffsetRow(group.group_id, tp.topic, tp.partition, committed[tp], log_end.get(tp))
        )
    return rows


def state_notice(group: str, state: str, rows: int) -> tuple[str | None, bool]:
    """Kafka's ``shouldPrintMemberState``: the note to print on stderr (if any) and whether
    to print the table. A Dead group raises CliError (it does not exist)."""
    if state == "Dead":
        raise CliError(f"Consumer group '{group}' does not exist.")
    note: str | None = None
    if state == "Empty":
        note = f"Consumer group '{group}' has no active members."
    elif state in REBALANCING_STATES:
        note = f"Warning: Consumer group '{group}' is rebalancing."
    return note, rows > 0


def format_offsets(rows: Sequence[OffsetRow]) -> str:
    """The ``describe --offsets`` table (with Kafka's leading blank line)."""
    group_w = max([15] + [len(r.group) for r in rows])
    topic_w = max([15] + [len(_cell(r.topic)) for r in rows])
    consumer_w = max([15] + [len(r.consumer_id) for r in rows])
    host_w = max([15] + [len(r.host) for r in rows])

    def line(*cells: object) -> str:
        g, t, p, cur, leo, lag, cid, host, client = (_cell(c) for c in cells)
        return (
            f"{g:<{group_w}} {t:<{topic_w}} {p:<10} {cur:<15} {leo:<15} {lag:<15} "
            f"{cid:<{consumer_w}} {host:<{host_w}} {client}"
        ).rstrip()

    out = [
        "",
        line(
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ),
    ]
    for r in rows:
        out.append(
            line(
                r.group,
                r.topic,
                r.partition,
                r.current_offset,
                r.log_end_offset,
                r.lag,
                r.consumer_id,
                r.host,
                r.client_id,
            )
        )
    return "\n".join(out) + "\n"


def format_assignment(assignment: Iterable[TopicPartition]) -> str:
    """``--verbose`` ASSIGNMENT: ``topic(0,1),other(2)`` sorted by topic, or ``-``."""
    by_topic: dict[str, list[int]] = {}
    for tp in assignment:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if not by_topic:
        return MISSING
    return ",".join(
        f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by_topic.items())
    )


def format_members(group: GroupView, verbose: bool) -> str:
    """The ``describe --members`` table; GROUP-INSTANCE-ID appears when any member has
    one (static membership)."""
    members = group.members
    with_instance = any(m.group_instance_id for m in members)
    group_w = max(15, len(group.group_id))
    consumer_w = max([15] + [len(m.consumer_id) for m in members])
    instance_w = max([17] + [len(m.group_instance_id or MISSING) for m in members])
    host_w = max([15] + [len(m.host) for m in members])
    client_w = max([15] + [len(m.client_id) for m in members])

    def line(g: str, cid: str, inst: str, host: str, client: str, n: str, extra: str) -> str:
        cells = [f"{g:<{group_w}}", f"{cid:<{consumer_w}}"]
        if with_instance:
            cells.append(f"{inst:<{instance_w}}")
        cells += [f"{host:<{host_w}}", f"{client:<{client_w}}", f"{n:<15}"]
        return (" ".join(cells) + " " + (extra if verbose else "")).rstrip()

    out = [
        "",
        line(
            "GROUP",
            "CONSUMER-ID",
            "GROUP-INSTANCE-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "ASSIGNMENT",
        ),
    ]
    for m in members:
        out.append(
            line(
                group.group_id,
                m.consumer_id,
                m.group_instance_id or MISSING,
                m.host,
                m.client_id,
                str(len(m.assignment)),
                format_assignment(m.assignment),
            )
        )
    return "\n".join(out) + "\n"


def format_state(group: GroupView) -> str:
    """The ``describe --state`` table."""
    coord_w = max(25, len(group.coordinator))
    group_w = max(coord_w, len(group.group_id))
    strategy = group.assignment_strategy or ""

    def line(*cells: str) -> str:
        g, coord, strat, state, n = cells
        return f"{g:<{group_w}} {coord:<{coord_w}} {strat:<20} {state:<15} {n}".rstrip()

    return (
        "\n".join(
            [
                "",
                line("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
                line(
                    group.group_id,
                    group.coordinator,
                    strategy,
                    group.state,
                    str(len(group.members)),
                ),
            ]
        )
        + "\n"
    )


def format_group_states(pairs: Sequence[tuple[str, str]]) -> str:
    """``list --state``: the ``GROUP STATE`` table."""
    width = max([15] + [len(g) for g, _ in pairs])
    lines = [f"{'GROUP':<{width}} STATE"] + [f"{g:<{width}} {s}" for g, s in pairs]
    return "\n".join(lines) + "\n"


# --- reset-offsets: parsing and planning ---------------------------------------------------

RESET_KINDS = ("earliest", "latest", "current", "offset", "shift", "datetime", "duration")


@dataclass(frozen=True, slots=True)
class ResetSpec:
    """What to reset to: ``kind`` (one of RESET_KINDS) and its value (the offset, the shift,
    or the timestamp in ms for ``datetime``/``duration``)."""

    kind: str
    value: int = 0

    def needs_times(self) -> bool:
        return self.kind in ("datetime", "duration")


@dataclass(frozen=True, slots=True)
class ResetPlan:
    """New offsets per partition, and Kafka's warnings (clamping, empty partitions)."""

    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """``--topic``'s ``t`` (every partition) or ``t:0,1`` -> (topic, partitions or None)."""
    topic, sep, parts = text.partition(":")
    topic = topic.strip()
    if not topic:
        raise CliError(f"--topic {text!r}: no topic name")
    if not sep:
        return topic, None
    try:
        partitions = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError as exc:
        raise CliError(f"--topic {text!r}: partitions must be integers (t:0,1,2)") from exc
    if not partitions:
        raise CliError(f"--topic {text!r}: no partitions after ':'")
    if partitions[0] < 0:
        raise CliError(f"--topic {text!r}: partitions must not be negative")
    return topic, partitions


def parse_datetime_ms(text: str) -> int:
    """``--to-datetime``: ISO-8601 ``YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm|+hhmm]`` -> epoch ms.
    Without a zone the local time zone applies (as in Kafka)."""
    if "T" not in text:
        raise CliError(
            f"--to-datetime {text}: Error parsing timestamp. It does not contain a 'T' "
            "according to ISO8601 format"
        )
    candidate = text.strip()
    if candidate.endswith(("Z", "z")):
        candidate = candidate[:-1] + "+00:00"
    try:
        dt = datetime.datetime.fromisoformat(candidate)
    except ValueError as exc:
        raise CliError(
            f"--to-datetime {text}: expected YYYY-MM-DDTHH:mm:SS.sss with an optional "
            "zone (Z, +hh:mm)"
        ) from exc
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time zone
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (dt - epoch) // datetime.timedelta(milliseconds=1)


_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """``--by-duration``: ISO-8601 ``PnDTnHnMnS`` (e.g. ``PT15M``, ``P1DT2H``) -> ms."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groupdict().values()) or text.strip().upper().endswith("T"):
        raise CliError(f"--by-duration {text}: expected an ISO-8601 duration PnDTnHnMnS")
    d, h, m = (int(match.group(k) or 0) for k in "dhm")
    s = float(match.group("s") or 0)
    return round(((d * 24 + h) * 60 + m) * 60_000 + s * 1000)


def select_partitions(
    specs: Sequence[tuple[str, list[int] | None]],
    topic_partitions: Mapping[str, int],
) -> list[TopicPartition]:
    """The partitions ``--topic`` specs name, given each existing topic's partition count;
    an unknown topic or partition raises CliError."""
    out: set[TopicPartition] = set()
    for topic, partitions in specs:
        count = topic_partitions.get(topic)
        if count is None:
            raise CliError(f"--topic {topic}: topic '{topic}' does not exist")
        if partitions is None:
            out.update(TopicPartition(topic, p) for p in range(count))
            continue
        for p in partitions:
            if p >= count:
                raise CliError(
                    f"--topic {topic}:{p}: topic '{topic}' has {count} partition(s), "
                    f"no partition {p}"
                )
            out.add(TopicPartition(topic, p))
    return sorted(out)


def plan_reset(
    spec: ResetSpec,
    partitions: Iterable[TopicPartition],
    *,
    committed: Mapping[TopicPartition, int],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int | None] | None = None,
) -> ResetPlan:
    """The new offset of each partition, computed as kafka-consumer-groups.sh does:
    earliest/latest are the log start/end offsets; ``offset`` and ``shift`` (committed +
    N) are clamped to [log start, log end] with a warning; ``current`` keeps the committed
    offset (log end without one); ``datetime``/``duration`` take the offset for the
    timestamp (``by_time``; None or negative: no record that new, so the log end offset
    with a warning). A partition without known log offsets raises CliError, as does
    ``shift`` without a committed offset."""
    plan = ResetPlan()
    times = by_time or {}
    for tp in sorted(set(partitions)):
        start, end = log_start.get(tp), log_end.get(tp)
        if start is None or end is None:
            raise CliError(f"cannot find the log start and end offsets of partition {tp}")
        if spec.kind == "earliest":
            new = start
        elif spec.kind == "latest":
            new = end
        elif spec.kind == "current":
            new = committed.get(tp, end)
        elif spec.kind in ("offset", "shift"):
            if spec.kind == "shift":
                current = committed.get(tp)
                if current is None:
                    raise CliError(
                        f"Cannot shift offset for partition {tp} since there is no current "
                        "committed offset"
                    )
                requested = current + spec.value
            else:
                requested = spec.value
            new = requested
            if requested > end:
                plan.warnings.append(
                    f"New offset ({requested}) is higher than latest offset for topic "
                    f"partition {tp}. Value will be set to {end}"
                )
                new = end
            elif requested < start:
                plan.warnings.append(
                    f"New offset ({requested}) is lower than earliest offset for topic "
                    f"partition {tp}. Value will be set to {start}"
                )
                new = start
        elif spec.kind in ("datetime", "duration"):
            found = times.get(tp)
            if found is None or found < 0:
                plan.warnings.append(
                    f"Partition {tp.partition} from topic {tp.topic} is empty. "
                    "Falling back to latest known offset."
                )
                new = end
            else:
                new = min(max(found, start), end)
        else:
            raise ValueError(f"unknown reset kind {spec.kind!r}")
        plan.offsets[tp] = new
    return plan


def format_reset_plan(group: str, offsets: Mapping[TopicPartition, int]) -> str:
    """Kafka's ``GROUP TOPIC PARTITION NEW-OFFSET`` table (empty string for no partitions)."""
    if not offsets:
        return ""

    def line(*cells: object) -> str:
        g, t, p, o = (str(c) for c in cells)
        return f"{g:<30} {t:<30} {p:<10} {o:<15}".rstrip()

    out = ["", line("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")]
    out += [line(group, tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())]
    return "\n".join(out) + "\n"


def format_delete_result(deleted: Sequence[str], failed: Mapping[str, str]) -> str:
    """Kafka's report of ``delete``: success line, or the failed groups then the others."""

    def quoted(groups: Iterable[str]) -> str:
        return ", ".join(f"'{g}'" for g in groups)

    if not failed:
        return f"Deletion of requested consumer groups ({quoted(deleted)}) was successful.\n"
    lines = ["Error: Deletion of some consumer groups failed:"]
    lines += [f"* Group '{g}' could not be deleted due to: {e}" for g, e in failed.items()]
    if deleted:
        lines += ["", f"These other groups were deleted successfully: {quoted(deleted)}"]
    return "\n".join(lines) + "\n"


# --- argument parsing ----------------------------------------------------------------------


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _add_group_selection(p: argparse.ArgumentParser, verb: str) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--group",
        action="append",
        metavar="G",
        help=f"consumer group to {verb} (repeatable)",
    )
    which.add_argument("--all-groups", action="store_true", help=f"{verb} every group")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "groups",
        help="list, describe, reset offsets of and delete consumer groups "
        "(like kafka-consumer-groups.sh)",
        description="Consumer group administration with kafka-consumer-groups.sh options.",
    )
    actions = p.add_subparsers(dest="groups_command", metavar="ACTION", required=True)

    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common)
    common.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="request timeout (default 30)",
    )

    lst = actions.add_parser("list", parents=[common], help="list consumer group ids")
    lst.add_argument(
        "--state",
        nargs="?",
        const="",
        metavar="S[,S]",
        help="print each group's state; with states (e.g. Stable,Empty) only those groups",
    )
    lst.set_defaults(func=run_list, _parser=lst)

    describe = actions.add_parser("describe", parents=[common], help="describe consumer groups")
    _add_group_selection(describe, "describe")
    view = describe.add_mutually_exclusive_group()
    view.add_argument(
        "--offsets",
        action="store_true",
        help="committed offset, log end offset and lag per partition (the default)",
    )
    view.add_argument("--members", action="store_true", help="the group's members")
    view.add_argument(
        "--state", action="store_true", help="coordinator, assignment strategy, state"
    )
    describe.add_argument(
        "--verbose", action="store_true", help="(with --members) each member's partitions"
    )
    describe.set_defaults(func=run_describe, _parser=describe)

    reset = actions.add_parser(
        "reset-offsets",
        parents=[common],
        help="reset the committed offsets of an inactive group (plan unless --execute)",
    )
    _add_group_selection(reset, "reset")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,P]",
        help="topic (all partitions) or topic:0,1 (repeatable)",
    )
    scope.add_argument(
        "--all-topics",
        action="store_true",
        help="every partition the group has a committed offset for",
    )
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start offset")
    to.add_argument("--to-latest", action="store_true", help="the log end offset")
    to.add_argument("--to-current", action="store_true", help="the committed offset")
    to.add_argument("--to-offset", type=_int, metavar="N", help="offset N")
    to.add_argument(
        "--shift-by", type=_int, metavar="N", help="committed offset + N (N may be < 0)"
    )
    to.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first offset with a timestamp at or after this (zone: Z or +hh:mm; "
        "default local)",
    )
    to.add_argument(
        "--by-duration",
        metavar="PnDTnHnMnS",
        help="the first offset with a timestamp at or after now minus this duration",
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.set_defaults(func=run_reset_offsets, _parser=reset)

    delete = actions.add_parser(
        "delete", parents=[common], help="delete consumer groups (and their offsets)"
    )
    _add_group_selection(delete, "delete")
    delete.set_defaults(func=run_delete, _parser=delete)


def reset_spec(args: argparse.Namespace, now_ms: Callable[[], int]) -> ResetSpec:
    """The ResetSpec of parsed ``reset-offsets`` arguments."""
    if args.to_earliest:
        return ResetSpec("earliest")
    if args.to_latest:
        return ResetSpec("latest")
    if args.to_current:
        return ResetSpec("current")
    if args.to_offset is not None:
        return ResetSpec("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetSpec("shift", args.shift_by)
    if args.to_datetime is not None:
        return ResetSpec("datetime", parse_datetime_ms(args.to_datetime))
    if args.by_duration is not None:
        return ResetSpec("duration", now_ms() - parse_duration_ms(args.by_duration))
    raise CliError("reset-offsets needs a scenario (--to-earliest, --to-offset, ...)")


# --- cluster access ------------------------------------------------------------------------


def _fail(message: str) -> int:
    sys.stderr.write(f"{_PROG}: {message}\n")
    return 1


def _guard(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Turn CliError into a one-line message on stderr and exit code 1."""

    def wrapper(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except CliError as exc:
            return _fail(str(exc))

    wrapper.__doc__ = func.__doc__
    return wrapper


class GroupsClient:
    """The cluster calls of ``millrace groups``: an AdminClient, and a Consumer (created on
    first use, never subscribed, read_uncommitted) for watermarks and offsets_for_times."""

    def __init__(self, args: argparse.Namespace) -> None:
        from confluent_kafka.admin import AdminClient

        self.args = args
        self.timeout = float(args.timeout)
        self.admin: AdminClient = AdminClient(client_config(args))
        self._consumer: Consumer | None = None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    @property
    def consumer(self) -> Consumer:
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer(
                client_config(
                    self.args,
                    {
                        "group.id": "millrace-groups-tool",  # never joined nor committed
                        "enable.auto.commit": "false",
                        "isolation.level": "read_uncommitted",
                    },
                )
            )
        return self._consumer

    def list_groups(self) -> list[tuple[str, str]]:
        """(group id, Kafka state name) of every group, sorted."""
        from confluent_kafka import KafkaException

        try:
            result = self.admin.list_consumer_groups(request_timeout=self.timeout).result()
        except KafkaException as exc:
            raise CliError(f"cannot list consumer groups: {kafka_error_text(exc)}") from exc
        errors = list(getattr(result, "errors", None) or [])
        if errors and not result.valid:
            raise CliError(f"cannot list consumer groups: {error_text(errors[0])}")
        return sorted((g.group_id, state_name(g.state)) for g in result.valid)

    def describe(self, groups: Sequence[str]) -> list[GroupView]:
        from confluent_kafka import KafkaException

        futures = self.admin.describe_consumer_groups(list(groups), request_timeout=self.timeout)
        views: list[GroupView] = []
        for group in groups:
            try:
                desc = futures[group].result()
            except KafkaException as exc:
                raise CliError(
                    f"cannot describe consumer group '{group}': {kafka_error_text(exc)}"
                ) from exc
            node = desc.coordinator
            coordinator = (
                f"{node.host}:{node.port} ({node.id_string})" if node is not None else MISSING
            )
            members = tuple(
                MemberView(
                    str(m.member_id),
                    str(m.host),
                    str(m.client_id),
                    tuple(
                        sorted(
                            TopicPartition(tp.topic, tp.partition)
                            for tp in (m.assignment.topic_partitions if m.assignment else [])
                        )
                    ),
                    m.group_instance_id or None,
                )
                for m in desc.members
            )
            views.append(
                GroupView(
                    group,
                    state_name(desc.state),
                    coordinator,
                    str(desc.partition_assignor or ""),
                    members,
                )
            )
        return views

    def committed(self, group: str) -> dict[TopicPartition, int]:
        """The group's committed offsets (partitions without one are left out)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

        futures = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=self.timeout
        )
        try:
            result = futures[group].result()
        except KafkaException as exc:
            raise CliError(
                f"cannot fetch the committed offsets of group '{group}': {kafka_error_text(exc)}"
            ) from exc
        out: dict[TopicPartition, int] = {}
        for tp in result.topic_partitions or []:
            if tp.error is None and tp.offset >= 0:
                out[TopicPartition(tp.topic, tp.partition)] = int(tp.offset)
        return out

    def watermarks(
        self, partitions: Iterable[TopicPartition], *, strict: bool
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """(log start offsets, log end offsets); an unreachable partition is left out, or
        raises CliError when ``strict``."""
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        low: dict[TopicPartition, int] = {}
        high: dict[TopicPartition, int] = {}
        for tp in sorted(set(partitions)):
            try:
                lo, hi = self.consumer.get_watermark_offsets(
                    CkTopicPartition(tp.topic, tp.partition), timeout=self.timeout, cached=False
                )
            except KafkaException as exc:
                if strict:
                    raise CliError(
                        f"cannot get the log offsets of partition {tp}: {kafka_error_text(exc)}"
                    ) from exc
                continue
            low[tp], high[tp] = int(lo), int(hi)
        return low, high

    def offsets_for_times(
        self, partitions: Iterable[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int | None]:
        from confluent_kafka import KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        request = [CkTopicPartition(tp.topic, tp.partition, timestamp_ms) for tp in partitions]
        if not request:
            return {}
        try:
            answer = self.consumer.offsets_for_times(request, timeout=self.timeout)
        except KafkaException as exc:
            raise CliError(f"cannot look up offsets by timestamp: {kafka_error_text(exc)}") from exc
        out: dict[TopicPartition, int | None] = {}
        for ck in answer:
            tp = TopicPartition(ck.topic, ck.partition)
            if ck.error is not None:
                raise CliError(
                    f"cannot look up the offset by timestamp of partition {tp}: "
                    f"{error_text(ck.error)}"
                )
            out[tp] = int(ck.offset) if ck.offset >= 0 else None
        return out

    def topic_partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        from confluent_kafka import KafkaException

        try:
            metadata = self.admin.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise CliError(f"cannot list topics: {kafka_error_text(exc)}") from exc
        out: dict[str, int] = {}
        for name in topics:
            topic = metadata.topics.get(name)
            if topic is not None and topic.error is None:
                out[name] = len(topic.partitions)
        return out

    def alter_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
        from confluent_kafka import TopicPartition as CkTopicPartition

        request = ConsumerGroupTopicPartitions(
            group,
            [CkTopicPartition(tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())],
        )
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout)
        try:
            result = futures[group].result()
        except KafkaException as exc:
            raise CliError(
                f"cannot reset the offsets of group '{group}': {kafka_error_text(exc)}"
            ) from exc
        for ck in result.topic_partitions or []:
            if ck.error is not None:
                raise CliError(
                    f"cannot reset the offset of group '{group}' for partition "
                    f"{ck.topic}-{ck.partition}: {error_text(ck.error)}"
                )

    def delete(self, groups: Sequence[str]) -> tuple[list[str], dict[str, str]]:
        """(deleted groups, {failed group: reason})."""
        from confluent_kafka import KafkaException

        futures = self.admin.delete_consumer_groups(list(groups), request_timeout=self.timeout)
        deleted: list[str] = []
        failed: dict[str, str] = {}
        for group in groups:
            try:
                futures[group].result()
            except KafkaException as exc:
                failed[group] = kafka_error_text(exc)
                continue
            deleted.append(group)
        return deleted, failed


def _selected_groups(args: argparse.Namespace, client: GroupsClient) -> list[str]:
    if args.all_groups:
        return [g for g, _ in client.list_groups()]
    return list(dict.fromkeys(args.group))  # de-duplicated, in the given order


# --- actions -------------------------------------------------------------------------------


@_guard
def run_list(args: argparse.Namespace) -> int:
    """Print group ids, one a line (``--state``: a GROUP STATE table, optionally filtered)."""
    states = parse_states(args.state) if args.state else set()
    client = GroupsClient(args)
    groups = client.list_groups()
    if args.state is None:
        sys.stdout.write("".join(g + "\n" for g, _ in groups))
        return 0
    shown = [(g, s) for g, s in groups if not states or s in states]
    sys.stdout.write(format_group_states(shown))
    return 0


@_guard
def run_describe(args: argparse.Namespace) -> int:
    """Describe groups: offsets and lag (default), members, or state."""
    parser: argparse.ArgumentParser = args._parser
    if args.verbose and not args.members:
        parser.error("--verbose can only be used with --members")
    client = GroupsClient(args)
    try:
        groups = _selected_groups(args, client)
        failed = 0
        for view in client.describe(groups):
            try:
                failed += _describe_one(args, client, view)
            except CliError as exc:
                _fail(str(exc))
                failed += 1
        return 1 if failed else 0
    finally:
        client.close()


def _describe_one(args: argparse.Namespace, client: GroupsClient, view: GroupView) -> int:
    if args.state:
        note, _ = state_notice(view.group_id, view.state, 1)
        if note:
            sys.stderr.write(f"\n{note}\n")
        sys.stdout.write(format_state(view))
        return 0
    if args.members:
        note, show = state_notice(view.group_id, view.state, len(view.members))
        if note:
            sys.stderr.write(f"\n{note}\n")
        if show:
            sys.stdout.write(format_members(view, args.verbose))
        return 0
    committed = client.committed(view.group_id)
    partitions = set(committed) | {tp for m in view.members for tp in m.assignment}
    _low, log_end = client.watermarks(partitions, strict=False)
    rows = offset_rows(view, committed, log_end)
    note, show = state_notice(view.group_id, view.state, len(rows))
    if note:
        sys.stderr.write(f"\n{note}\n")
    if show:
        sys.stdout.write(format_offsets(rows))
    return 0


def _now_ms() -> int:
    return int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)


@_guard
def run_reset_offsets(args: argparse.Namespace) -> int:
    """Plan (and with --execute commit) new offsets for inactive groups."""
    spec = reset_spec(args, _now_ms)
    specs = [parse_topic_spec(t) for t in args.topic] if args.topic else []
    if not args.execute and not args.dry_run:
        sys.stderr.write(
            "WARN: No action will be performed as the --execute option is missing. "
            "Add --execute to reset the offsets (or --dry-run to only print the plan).\n"
        )
    client = GroupsClient(args)
    try:
        groups = _selected_groups(args, client)
        views = {v.group_id: v for v in client.describe(groups)}
        selected: list[TopicPartition] = []
        if specs:
            counts = client.topic_partition_counts({t for t, _ in specs})
            selected = select_partitions(specs, counts)
        failed = 0
        for group in groups:
            state = views[group].state
            if state not in INACTIVE_STATES:
                _fail(
                    f"Assignments can only be reset if the group '{group}' is inactive, but "
                    f"the current state is {state}."
                )
                failed += 1
                continue
            committed = client.committed(group)
            partitions = selected if specs else sorted(committed)
            low, high = client.watermarks(partitions, strict=True)
            by_time = (
                client.offsets_for_times(partitions, spec.value) if spec.needs_times() else None
            )
            plan = plan_reset(
                spec,
                partitions,
                committed=committed,
                log_start=low,
                log_end=high,
                by_time=by_time,
            )
            for warning in plan.warnings:
                sys.stderr.write(f"WARN: {warning}\n")
            if args.execute and plan.offsets:
                client.alter_offsets(group, plan.offsets)
            sys.stdout.write(format_reset_plan(group, plan.offsets))
        return 1 if failed else 0
    finally:
        client.close()


@_guard
def run_delete(args: argparse.Namespace) -> int:
    """Delete groups (they must be empty)."""
    client = GroupsClient(args)
    groups = _selected_groups(args, client)
    if not groups:
        raise CliError("no consumer groups to delete")
    deleted, failed = client.delete(groups)
    sys.stdout.write(format_delete_result(deleted, failed))
    return 1 if failed else 0
