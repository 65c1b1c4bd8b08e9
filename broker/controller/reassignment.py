"""Partition reassignment and leader balance, as pure functions.

Theory of operation:

* :class:`ReplicaAssignment` is a partition's full assignment during a KIP-455 reassignment
  (the ``adding_replicas`` / ``removing_replicas`` of the topic znode and of
  ListPartitionReassignments). While reassigning, ``replicas`` is the union of the target and
  the original replicas, target first, so the target's first replica becomes the preferred
  leader as soon as the reassignment completes. Reassigning a partition that is already being
  reassigned starts again from the *original* replicas, so a cancelled or superseded
  reassignment never leaves stray replicas behind.
* The JSON helpers read and write the files of ``kafka-reassign-partitions.sh``
  (``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..],"log_dirs":[..]}]}``
  and the topics-to-move file ``{"topics":[{"topic":"t"}],"version":1}``) with the same
  validation and messages as Kafka 3.9's ``ReassignPartitionsCommand``.
* :func:`generate_reassignment` is ``--generate``: per topic, a fresh assignment of the
  topic's partition count and current replication factor over the given brokers.
* :func:`leader_imbalance` and :func:`partitions_to_rebalance` are the controller's automatic
  leader balance check (``auto.leader.rebalance.enable``,
  ``leader.imbalance.per.broker.percentage``).

Everything here is pure and thread-safe.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from broker.controller.topic_admin import assign_replicas
from broker.types import TopicPartition

__all__ = [
    "ANY_LOG_DIR",
    "ReplicaAssignment",
    "build_reassignment",
    "format_reassignment_json",
    "format_topics_to_move_json",
    "generate_reassignment",
    "leader_imbalance",
    "parse_reassignment_json",
    "parse_topics_to_move_json",
    "partitions_to_rebalance",
    "validate_target_replicas",
]

ANY_LOG_DIR = "any"
"""The ``log_dirs`` entry meaning "whichever log directory the broker chooses"."""

_VERSION = 1


def _distinct(items: Sequence[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(items))


def _minus(items: Sequence[int], removed: Collection[int]) -> tuple[int, ...]:
    gone = frozenset(removed)
    return tuple(i for i in items if i not in gone)


@dataclass(frozen=True, slots=True)
class ReplicaAssignment:
    """A partition's replicas, with the replicas being added and removed by a reassignment.

    ``replicas`` includes both ``adding`` and ``removing``; the partition is being reassigned
    when either is non-empty. Immutable; :meth:`reassign_to` returns a new value.
    """

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        """Whether a reassignment is in progress."""
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment completes: ``replicas`` minus ``removing``."""
        return _minus(self.replicas, self.removing)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment: ``replicas`` minus ``adding``."""
        return _minus(self.replicas, self.adding)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        """Start (or replace) a reassignment to ``target`` (KIP-455).

        ``replicas`` = distinct(target + original), ``adding`` = those not in the original
        replicas, ``removing`` = those not in ``target``. A target with the original brokers
        (in any order) is not a reassignment: the result has no adding or removing replicas,
        so reassigning to ``original_replicas`` cancels."""
        original = self.original_replicas
        full = _distinct([*target, *original])
        return ReplicaAssignment(full, _minus(full, original), _minus(full, target))

    def remove_replica(self, replica: int) -> ReplicaAssignment:
        """This assignment without ``replica`` anywhere."""
        return ReplicaAssignment(
            _minus(self.replicas, (replica,)),
            _minus(self.adding, (replica,)),
            _minus(self.removing, (replica,)),
        )


def build_reassignment(
    current: ReplicaAssignment, target: Sequence[int] | None
) -> ReplicaAssignment | None:
    """The assignment an AlterPartitionReassignments entry asks for, as Kafka's controller
    builds it: ``target`` None cancels (back to the original replicas) if a reassignment is
    in progress; None is returned when there is nothing to do (cancelling a partition that is
    not being reassigned: NO_REASSIGNMENT_IN_PROGRESS)."""
    if target is None:
        if not current.is_being_reassigned:
            return None
        return current.reassign_to(current.original_replicas)
    return current.reassign_to(target)


def validate_target_replicas(
    current: ReplicaAssignment, target: Sequence[int], live: Collection[int]
) -> str | None:
    """Why ``target`` is not an acceptable reassignment target (INVALID_REPLICA_ASSIGNMENT),
    or None if it is: empty, duplicate or negative ids, or new replicas on brokers that are
    not live (Kafka's ``KafkaController.validateReplicas``)."""
    if not target:
        return "Empty replica list specified in partition reassignment."
    if len(set(target)) != len(target):
        return f"Duplicate replica ids in partition reassignment replica list: {list(target)}"
    if any(r < 0 for r in target):
        return f"Invalid broker id in replica list: {list(target)}"
    adding = current.reassign_to(target).adding
    live_set = frozenset(live)
    if not all(r in live_set for r in adding):
        return (
            "Replica assignment has brokers that are not alive. Replica list: "
            f"{list(adding)}, live broker list: {sorted(live_set)}"
        )
    return None


# --------------------------------------------------------------------------- JSON files


def _load_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"The input string is not a valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("The input JSON must be an object")
    version = data.get("version", _VERSION)
    if version != _VERSION or isinstance(version, bool):
        raise ValueError(f"Not supported version field value {version!r}")
    return data


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _list_field(entry: Mapping[str, Any], name: str, where: str) -> list[Any]:
    value = entry.get(name)
    if not isinstance(value, list):
        raise ValueError(f"{where}: {name!r} must be a list, got {value!r}")
    return value


def parse_reassignment_json(text: str) -> dict[TopicPartition, list[int]]:
    """Parse a reassignment file (``--reassignment-json-file``) into partition -> replicas.

    Format: ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],
    "log_dirs":["any","any"]}]}``; ``version`` defaults to 1 and ``log_dirs`` is optional
    (any entry other than ``"any"`` names a directory, which Millrace does not move replicas
    between, so only its shape is checked). Raises ValueError naming the problem: invalid
    JSON, unsupported version, wrong types, an empty partition list, an empty replica list,
    a replicas/log_dirs length mismatch, a partition listed twice or a replica listed twice
    (checked in that order, like Kafka's ``--execute``).
    """
    data = _load_object(text)
    partitions = data.get("partitions", [])
    if not isinstance(partitions, list):
        raise ValueError(f"'partitions' must be a list, got {partitions!r}")
    entries = [_reassignment_entry(f"partitions[{i}]", entry) for i, entry in enumerate(partitions)]
    _check_reassignment_entries(entries)
    return dict(entries)


def _reassignment_entry(where: str, entry: object) -> tuple[TopicPartition, list[int]]:
    """One entry of a reassignment file's ``partitions`` (at ``where``): its partition and
    replicas, its shape checked."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object, got {entry!r}")
    topic = entry.get("topic")
    if not isinstance(topic, str):
        raise ValueError(f"{where}: 'topic' must be a string, got {topic!r}")
    partition = entry.get("partition")
    if not isinstance(partition, int) or isinstance(partition, bool) or partition < 0:
        raise ValueError(f"{where}: 'partition' must be a non-negative integer, got {partition!r}")
    tp = TopicPartition(topic, partition)
    replicas = _list_field(entry, "replicas", f"{where} ({tp})")
    if not all(_is_int(r) for r in replicas):
        raise ValueError(f"{where} ({tp}): 'replicas' must be integers, got {replicas!r}")
    if "log_dirs" in entry:
        log_dirs = _list_field(entry, "log_dirs", f"{where} ({tp})")
        if not all(isinstance(d, str) for d in log_dirs):
            raise ValueError(f"{where} ({tp}): 'log_dirs' must be strings, got {log_dirs!r}")
        if len(log_dirs) != len(replicas):
            raise ValueError(
                f"Size of replicas list {replicas} is different from size of log dirs "
                f"list {log_dirs} for partition {tp}"
            )
    return tp, list(replicas)


def _check_reassignment_entries(entries: list[tuple[TopicPartition, list[int]]]) -> None:
    """The checks of a reassignment file across its entries, in Kafka's order: not empty, no
    empty replica list, no partition listed twice, no replica listed twice."""
    if not entries:
        raise ValueError("Partition reassignment list cannot be empty")
    empty = [str(tp) for tp, replicas in entries if not replicas]
    if empty:
        raise ValueError(f"Partition replica list cannot be empty: {','.join(empty)}")
    counts = Counter(tp for tp, _ in entries)
    duplicate_partitions = sorted(tp for tp, n in counts.items() if n > 1)
    if duplicate_partitions:
        raise ValueError(
            "Partition reassignment contains duplicate topic partitions: "
            + ",".join(str(tp) for tp in duplicate_partitions)
        )
    problems = []
    for tp, replicas in entries:
        twice = sorted(r for r, n in Counter(replicas).items() if n > 1)
        if twice:
            problems.append(f"{tp} contains multiple entries for {','.join(map(str, twice))}")
    if problems:
        raise ValueError(
            "Partition replica lists may not contain duplicate entries: " + ". ".join(problems)
        )


def format_reassignment_json(assignment: Mapping[TopicPartition, Sequence[int]]) -> str:
    """Kafka's reassignment JSON for ``assignment``: compact, partitions sorted by topic then
    partition, every ``log_dirs`` entry ``"any"``."""
    partitions = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(assignment[tp]),
            "log_dirs": [ANY_LOG_DIR] * len(assignment[tp]),
        }
        for tp in sorted(assignment)
    ]
    return json.dumps({"version": _VERSION, "partitions": partitions}, separators=(",", ":"))


def parse_topics_to_move_json(text: str) -> list[str]:
    """Parse a topics-to-move file (``{"topics":[{"topic":"t"}],"version":1}``) into topic
    names, in file order. ``version`` defaults to 1; a missing ``topics`` is an empty list.
    Raises ValueError for invalid JSON, an unsupported version, wrong types or a topic
    listed twice."""
    data = _load_object(text)
    topics = data.get("topics", [])
    if not isinstance(topics, list):
        raise ValueError(f"'topics' must be a list, got {topics!r}")
    names: list[str] = []
    for i, entry in enumerate(topics):
        topic = entry.get("topic") if isinstance(entry, dict) else None
        if not isinstance(topic, str):
            raise ValueError(f"topics[{i}] must be an object with a string 'topic', got {entry!r}")
        names.append(topic)
    twice = sorted(t for t, n in Counter(names).items() if n > 1)
    if twice:
        raise ValueError(
            f"List of topics to reassign contains duplicate entries: {', '.join(twice)}"
        )
    return names


def format_topics_to_move_json(topics: Sequence[str]) -> str:
    """The topics-to-move JSON for ``topics`` (compact, in the given order)."""
    return json.dumps(
        {"topics": [{"topic": t} for t in topics], "version": _VERSION}, separators=(",", ":")
    )


def generate_reassignment(
    current: Mapping[TopicPartition, Sequence[int]],
    topics: Sequence[str],
    broker_ids: Sequence[int],
    racks: Mapping[int, str | None] | None = None,
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
) -> dict[TopicPartition, list[int]]:
    """A proposed assignment for ``topics`` over ``broker_ids`` (``--generate``).

    For each topic, :func:`assign_replicas` places the topic's partition count (partitions
    numbered 0..n-1) at its current replication factor (that of its lowest partition) over
    ``broker_ids``, rack-aware when ``racks`` gives every broker a rack. Raises ValueError for
    a duplicate broker id or a topic absent from ``current``, and the :mod:`topic_admin`
    errors for a replication factor larger than the broker count or partial rack
    information. ``start_index``/``replica_shift`` fix the random placement (for tests).
    """
    twice = sorted(b for b, n in Counter(broker_ids).items() if n > 1)
    if twice:
        raise ValueError(f"Broker list contains duplicate entries: {twice}")
    by_topic: dict[str, list[TopicPartition]] = {}
    for tp in current:
        by_topic.setdefault(tp.topic, []).append(tp)
    missing = [t for t in topics if t not in by_topic]
    if missing:
        raise ValueError(f"Topic {missing[0]} not found.")
    proposal: dict[TopicPartition, list[int]] = {}
    for topic in dict.fromkeys(topics):
        partitions = sorted(by_topic[topic])
        rf = len(current[partitions[0]])
        assigned = assign_replicas(
            broker_ids,
            len(partitions),
            rf,
            start_index=start_index,
            replica_shift=replica_shift,
            racks=racks,
        )
        for partition, replicas in assigned.items():
            proposal[TopicPartition(topic, partition)] = replicas
    return proposal


# ----------------------------------------------------------------------- leader balance


def leader_imbalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    leaders: Mapping[TopicPartition, int],
) -> dict[int, float]:
    """Each preferred broker's leader imbalance ratio.

    For every broker that is the preferred replica (``assignment[0]``) of some partition: the
    share of those partitions whose current leader is another broker. A partition with no
    known leader (absent from ``leaders``) counts in the denominator only, as in Kafka's
    ``checkAndTriggerAutoLeaderRebalance``; partitions with an empty assignment are ignored.
    """
    preferred_total: Counter[int] = Counter()
    not_preferred: Counter[int] = Counter()
    for tp, replicas in assignments.items():
        if not replicas:
            continue
        preferred = replicas[0]
        preferred_total[preferred] += 1
        leader = leaders.get(tp)
        if leader is not None and leader != preferred:
            not_preferred[preferred] += 1
    return {b: not_preferred[b] / total for b, total in sorted(preferred_total.items())}


def partitions_to_rebalance(
    assignments: Mapping[TopicPartition, Sequence[int]],
    leaders: Mapping[TopicPartition, int],
    live: Collection[int],
    threshold_percent: int,
    *,
    isrs: Mapping[TopicPartition, Sequence[int]] | None = None,
) -> list[TopicPartition]:
    """The partitions an automatic leader rebalance moves back to their preferred replica.

    A partition qualifies when its preferred broker's imbalance ratio exceeds
    ``threshold_percent / 100``, it has a known leader other than the preferred broker, and
    the preferred broker is live (and, if ``isrs`` is given, in the partition's ISR, as
    Kafka's ``canPreferredReplicaBeLeader`` requires). Sorted.
    """
    ratios = leader_imbalance(assignments, leaders)
    limit = threshold_percent / 100
    live_set = frozenset(live)
    out = []
    for tp, replicas in assignments.items():
        if not replicas:
            continue
        preferred = replicas[0]
        leader = leaders.get(tp)
        if leader is None or leader == preferred or ratios[preferred] <= limit:
            continue
        if preferred not in live_set:
            continue
        if isrs is not None and preferred not in isrs.get(tp, ()):
            continue
        out.append(tp)
    return sorted(out)
