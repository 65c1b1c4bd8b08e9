"""The output of ``millrace groups list|describe|delete``, as ``kafka-consumer-groups.sh``
prints it: what DescribeGroups and ListGroups report (:class:`GroupView`,
:class:`MemberView`, Kafka's state names), the rows of ``describe --offsets`` with their
lag, Kafka's notes for empty and rebalancing groups, and the tables.

Pure functions over frozen values (no cluster, no I/O): the command (``broker.cli.groups``)
writes what they return. Tables are laid out by ``broker.cli.common.format_table`` with
Kafka's column widths (``-`` for an unknown value).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from broker.cli.common import MISSING, CliError, Column, format_table
from broker.types import TopicPartition

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
    columns = (
        Column("GROUP", 15, fit=True),
        Column("TOPIC", 15, fit=True),
        Column("PARTITION", 10),
        Column("CURRENT-OFFSET", 15),
        Column("LOG-END-OFFSET", 15),
        Column("LAG", 15),
        Column("CONSUMER-ID", 15, fit=True),
        Column("HOST", 15, fit=True),
        Column("CLIENT-ID"),
    )
    lines = format_table(
        columns,
        (
            (
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
            for r in rows
        ),
    )
    return "\n".join(["", *lines]) + "\n"


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
    one (static membership), ASSIGNMENT with ``verbose``."""
    members = group.members
    with_instance = any(m.group_instance_id for m in members)
    columns = [Column("GROUP", max(15, len(group.group_id))), Column("CONSUMER-ID", 15, fit=True)]
    if with_instance:
        columns.append(Column("GROUP-INSTANCE-ID", 17, fit=True))
    columns += [
        Column("HOST", 15, fit=True),
        Column("CLIENT-ID", 15, fit=True),
        Column("#PARTITIONS", 15),
    ]
    if verbose:
        columns.append(Column("ASSIGNMENT"))
    rows = []
    for m in members:
        row = [group.group_id, m.consumer_id]
        if with_instance:
            row.append(m.group_instance_id or MISSING)
        row += [m.host, m.client_id, str(len(m.assignment))]
        if verbose:
            row.append(format_assignment(m.assignment))
        rows.append(row)
    return "\n".join(["", *format_table(columns, rows)]) + "\n"


def format_state(group: GroupView) -> str:
    """The ``describe --state`` table."""
    coord_w = max(25, len(group.coordinator))
    columns = (
        Column("GROUP", max(coord_w, len(group.group_id))),
        Column("COORDINATOR (ID)", coord_w),
        Column("ASSIGNMENT-STRATEGY", 20),
        Column("STATE", 15),
        Column("#MEMBERS"),
    )
    row = (
        group.group_id,
        group.coordinator,
        group.assignment_strategy or "",
        group.state,
        str(len(group.members)),
    )
    return "\n".join(["", *format_table(columns, [row])]) + "\n"


def format_group_states(pairs: Sequence[tuple[str, str]]) -> str:
    """``list --state``: the ``GROUP STATE`` table."""
    lines = format_table((Column("GROUP", 15, fit=True), Column("STATE")), pairs)
    return "\n".join(lines) + "\n"


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
