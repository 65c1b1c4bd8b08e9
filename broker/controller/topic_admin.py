"""Topic administration rules as pure functions: replica assignment, request validation.
The controller applies them; they are unit-tested without ZooKeeper. (Two rules live floors
down, since more than the controller applies them: legal topic names and their errors,
``validate_topic_name``, in :mod:`broker.topic_names`, which the ZooKeeper client and the
Metadata handler use too; the rule for topic config overrides, ``validate_configs``, in
:mod:`broker.metadata.topic_configs`, since every broker applies it to AlterConfigs.)

Replica assignment follows Kafka's ``AdminUtils.assignReplicasToBrokers``. Rack-unaware: the
first replica of partition ``p`` is broker ``(p + start) % n`` of the sorted live brokers, and
the followers are placed by a shift that grows every ``n`` partitions, so leaders and
followers spread evenly. Rack-aware (every broker has a rack): the same walk over a
*rack-alternated* broker list (racks sorted by name, each rack's brokers sorted by id, taken
one per rack in turn), with followers skipping a broker whose rack already holds a replica
until every rack holds one, and skipping a broker already holding one until every broker
does. So replicas land on distinct racks when the replication factor is at most the number
of racks, and every rack gets one otherwise. The start index and initial shift are random
unless given (tests pass them).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from broker.protocol.errors import ErrorCode, KafkaError


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class RackAwareAssignmentError(KafkaError):
    """Some brokers have a rack and some do not (Kafka's AdminOperationException, which a
    CreateTopics response reports as UNKNOWN_SERVER_ERROR)."""

    code = ErrorCode.unknown_server_error


# The most partitions one CreateTopics / CreatePartitions may ask for (KRaft Kafka's
# ReplicationControlManager.MAX_PARTITIONS_PER_BATCH): a request of a few bytes asking for
# 2**31-1 partitions must not make the controller build an assignment that size.
MAX_PARTITIONS_PER_REQUEST = 10_000


def assign_replicas(
    brokers: Sequence[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    start_index: int | None = None,
    replica_shift: int | None = None,
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Kafka's replica assignment over ``brokers``: partition id -> replica list, leader first.

    ``racks`` maps broker id to rack (a broker missing from it has no rack). If no broker
    has a rack the assignment is rack-unaware; if every broker has one it is rack-aware; a
    mix raises :class:`RackAwareAssignmentError`. ``start_index`` and ``replica_shift`` fix
    the otherwise random first position and follower shift. Partitions are numbered from
    ``start_partition`` (for added partitions).
    """
    if num_partitions <= 0:
        raise InvalidPartitionsError("number of partitions must be larger than 0")
    if num_partitions > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidPartitionsError(
            f"excessively large number of partitions per request: {num_partitions} "
            f"(at most {MAX_PARTITIONS_PER_REQUEST})"
        )
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("replication factor must be larger than 0")
    n = len(brokers)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} larger than available brokers {n}"
        )
    rack_of = {b: racks.get(b) for b in brokers} if racks is not None else {}
    with_rack = [b for b, r in rack_of.items() if r is not None]
    if with_rack and len(with_rack) != len(rack_of):
        missing = sorted(b for b, r in rack_of.items() if r is None)
        raise RackAwareAssignmentError(
            "Not all brokers have rack information for replica rack aware assignment "
            f"(brokers without a rack: {missing})"
        )
    first = random.randrange(n) if start_index is None else start_index
    shift = random.randrange(n) if replica_shift is None else replica_shift
    if with_rack:
        return _assign_rack_aware(
            {b: r for b, r in rack_of.items() if r is not None},
            num_partitions,
            replication_factor,
            start_partition,
            first,
            shift,
        )
    ids = sorted(brokers)
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first_index = (partition + first) % n
        replicas = [ids[first_index]]
        for j in range(replication_factor - 1):
            replicas.append(ids[_replica_index(first_index, shift, j, n)])
        out[partition] = replicas
        partition += 1
    return out


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers ordered one rack at a time: racks sorted by name, each rack's brokers by id.

    ``{0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}`` gives
    ``[0, 3, 1, 5, 4, 2]`` (Kafka's ``getRackAlternatedBrokerList``)."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    columns = [sorted(by_rack[rack]) for rack in sorted(by_rack)]
    depth = max((len(c) for c in columns), default=0)
    return [c[i] for i in range(depth) for c in columns if i < len(c)]


def _assign_rack_aware(
    racks: Mapping[int, str],
    num_partitions: int,
    replication_factor: int,
    start_partition: int,
    first: int,
    shift: int,
) -> dict[int, list[int]]:
    """Kafka's rack-aware assignment (every broker in ``racks`` has a rack)."""
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    partition = max(0, start_partition)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first_index = (partition + first) % n
        leader = arranged[first_index]
        replicas = [leader]
        racks_used = {racks[leader]}
        brokers_used = {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first_index, shift * num_racks, k, n)]
                rack = racks[broker]
                k += 1
                # a broker on a rack that already has a replica is skipped while some rack has
                # none; a broker that already has a replica is skipped while some broker has none
                rack_ok = rack not in racks_used or len(racks_used) == num_racks
                broker_ok = broker not in brokers_used or len(brokers_used) == n
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    brokers_used.add(broker)
                    break
        out[partition] = replicas
        partition += 1
    return out


def _replica_index(first_index: int, shift: int, replica: int, n: int) -> int:
    return (first_index + 1 + (shift + replica) % (n - 1)) % n


def validate_assignment(
    assignment: dict[int, list[int]], live_brokers: list[int], start_partition: int = 0
) -> None:
    """A manual assignment: consecutive partitions, one replication factor, no duplicate or
    unknown brokers."""
    if not assignment:
        raise InvalidReplicaAssignmentError("replica assignment is empty")
    if len(assignment) > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidPartitionsError(
            f"excessively large number of partitions per request: {len(assignment)} "
            f"(at most {MAX_PARTITIONS_PER_REQUEST})"
        )
    expected = list(range(start_partition, start_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise InvalidReplicaAssignmentError("partitions in the assignment must be consecutive")
    factors = {len(r) for r in assignment.values()}
    if len(factors) != 1 or 0 in factors:
        raise InvalidReplicaAssignmentError(
            "every partition needs the same, non-zero, number of replicas"
        )
    live = set(live_brokers)
    for p, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"partition {p} lists a broker twice")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise InvalidReplicaAssignmentError(f"partition {p} names unknown brokers {unknown}")
