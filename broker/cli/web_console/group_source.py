"""Consumer groups for the console: the list with states, one group's members and lag, and
resetting a group's offsets (``--allow-writes``), with the calls and the reset plan of
``millrace groups`` (:class:`broker.cli.groups_client.GroupsClient`,
:func:`broker.cli.groups_reset.plan_reset`), so the console computes exactly what
``kafka-consumer-groups.sh --reset-offsets`` would.

Lag of a partition = log end offset (high watermark, ListOffsets latest) - committed offset.
Concurrency: each call makes its own GroupsClient (an AdminClient) and closes it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from broker.cli.common import CliError
from broker.cli.groups_client import GroupsClient
from broker.cli.groups_output import INACTIVE_STATES, GroupView
from broker.cli.groups_reset import ResetPlan, ResetSpec, plan_reset
from broker.cli.web_console.cluster_source import ClusterSource, ConsoleError
from broker.cli.web_console.messages import parse_integer, parse_timestamp
from broker.types import TopicPartition

RESET_KINDS = ("earliest", "latest", "offset", "timestamp")


@dataclass(frozen=True, slots=True)
class LagRow:
    tp: TopicPartition
    committed: int | None
    end: int | None
    owner: str | None  # the member's client id

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None:
            return None
        return max(self.end - self.committed, 0)


@dataclass(frozen=True, slots=True)
class GroupDetail:
    view: GroupView
    rows: tuple[LagRow, ...]
    errors: tuple[str, ...]

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.rows)

    @property
    def empty(self) -> bool:
        return self.view.state in INACTIVE_STATES


@contextmanager
def _client(source: ClusterSource) -> Iterator[GroupsClient]:
    args = argparse.Namespace(**vars(source.args))
    args.timeout = source.timeout_s
    try:
        client = GroupsClient(args)
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc
    try:
        yield client
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc
    finally:
        client.close()


def list_groups(source: ClusterSource) -> list[tuple[str, str]]:
    with _client(source) as client:
        return client.list_groups()


def group_lags(source: ClusterSource) -> dict[str, int]:
    """Each group's total lag (for the sampler)."""
    with _client(source) as client:
        committed = {g: client.committed(g) for g, _state in client.list_groups()}
    ends, _errors = source.offsets({tp for c in committed.values() for tp in c}, "latest")
    return {
        g: sum(max(ends[tp] - off, 0) for tp, off in c.items() if tp in ends)
        for g, c in committed.items()
    }


def describe_group(source: ClusterSource, group: str) -> GroupDetail:
    with _client(source) as client:
        known = dict(client.list_groups())
        if group not in known:
            raise ConsoleError(f"consumer group '{group}' does not exist")
        (view,) = client.describe([group])
        committed = client.committed(group)
    owners = {tp: m.client_id for m in view.members for tp in m.assignment}
    partitions = set(committed) | set(owners)
    ends, errors = source.offsets(partitions, "latest")
    rows = tuple(
        LagRow(tp, committed.get(tp), ends.get(tp), owners.get(tp)) for tp in sorted(partitions)
    )
    return GroupDetail(view, rows, tuple(f"{tp}: {e}" for tp, e in sorted(errors.items())))


def reset_spec(kind: str, value: str) -> ResetSpec:
    """The form's scenario: earliest, latest, an offset or a timestamp."""
    if kind == "earliest":
        return ResetSpec("earliest")
    if kind == "latest":
        return ResetSpec("latest")
    if kind == "offset":
        return ResetSpec("offset", parse_integer(value, "offset"))
    if kind == "timestamp":
        return ResetSpec("datetime", parse_timestamp(value))
    raise ConsoleError(f"reset to {kind!r}: one of {', '.join(RESET_KINDS)}")


def plan_group_reset(
    source: ClusterSource, group: str, spec: ResetSpec, topic: str | None
) -> tuple[GroupDetail, ResetPlan]:
    """The new offsets of the group's partitions (of ``topic`` only, if given), as
    ``kafka-consumer-groups.sh --reset-offsets`` computes them; the group must be Empty."""
    detail = describe_group(source, group)
    if not detail.empty:
        raise ConsoleError(
            f"consumer group '{group}' is {detail.view.state}: offsets can only be reset "
            "when the group is inactive (Empty), stop its consumers first"
        )
    partitions = [r.tp for r in detail.rows if topic is None or r.tp.topic == topic]
    if not partitions:
        raise ConsoleError(f"consumer group '{group}' has no committed offsets to reset")
    starts, errors = source.offsets(partitions, "earliest")
    ends, end_errors = source.offsets(partitions, "latest")
    errors.update(end_errors)
    if errors:
        tp, problem = sorted(errors.items())[0]
        raise ConsoleError(f"cannot read the log offsets of {tp}: {problem}")
    by_time: dict[TopicPartition, int | None] | None = None
    if spec.needs_times():
        with _client(source) as client:
            by_time = client.offsets_for_times(partitions, spec.value)
    committed = {r.tp: r.committed for r in detail.rows if r.committed is not None}
    try:
        plan = plan_reset(
            spec,
            partitions,
            committed=committed,
            log_start=starts,
            log_end=ends,
            by_time=by_time,
        )
    except CliError as exc:
        raise ConsoleError(str(exc)) from exc
    return detail, plan


def execute_reset(source: ClusterSource, group: str, offsets: Mapping[TopicPartition, int]) -> None:
    """Commit ``offsets`` for the (still Empty) group."""
    detail = describe_group(source, group)
    if not detail.empty:
        raise ConsoleError(
            f"consumer group '{group}' is {detail.view.state} now: offsets not reset"
        )
    with _client(source) as client:
        client.alter_offsets(group, offsets)
