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

This module holds the options and the actions. The output formats are pure functions of
``broker.cli.groups_output``, the reset planning those of ``broker.cli.groups_reset`` (both
tested without a cluster), the cluster calls ``broker.cli.groups_client.GroupsClient``.
Bootstrap servers come from ``--bootstrap-server``, ``--dir`` (``cluster.json``) or
``$MILLRACE_BOOTSTRAP`` (``broker.cli.common``). Errors: one line on stderr naming the group
or option, exit code 1; bad usage exits 2 (argparse).
"""

from __future__ import annotations

import argparse
import datetime
import sys

from broker.cli.common import (
    CliError,
    add_connection_options,
    fail,
    guard,
    integer,
)
from broker.cli.groups_client import GroupsClient
from broker.cli.groups_output import (
    INACTIVE_STATES,
    GroupView,
    format_delete_result,
    format_group_states,
    format_members,
    format_offsets,
    format_state,
    offset_rows,
    parse_states,
    state_notice,
)
from broker.cli.groups_reset import (
    format_reset_plan,
    parse_topic_spec,
    plan_reset,
    reset_spec,
    select_partitions,
)
from broker.types import TopicPartition

_PROG = "millrace groups"


# --- argument parsing ----------------------------------------------------------------------


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
    add_connection_options(common, timeout=True)

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
    to.add_argument("--to-offset", type=integer, metavar="N", help="offset N")
    to.add_argument(
        "--shift-by", type=integer, metavar="N", help="committed offset + N (N may be < 0)"
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


def _selected_groups(args: argparse.Namespace, client: GroupsClient) -> list[str]:
    if args.all_groups:
        return [g for g, _ in client.list_groups()]
    return list(dict.fromkeys(args.group))  # de-duplicated, in the given order


# --- actions -------------------------------------------------------------------------------


@guard(_PROG)
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


@guard(_PROG)
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
                fail(_PROG, str(exc))
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


@guard(_PROG)
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
                fail(
                    _PROG,
                    f"Assignments can only be reset if the group '{group}' is inactive, but "
                    f"the current state is {state}.",
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


@guard(_PROG)
def run_delete(args: argparse.Namespace) -> int:
    """Delete groups (they must be empty)."""
    client = GroupsClient(args)
    groups = _selected_groups(args, client)
    if not groups:
        raise CliError("no consumer groups to delete")
    deleted, failed = client.delete(groups)
    sys.stdout.write(format_delete_result(deleted, failed))
    return 1 if failed else 0
