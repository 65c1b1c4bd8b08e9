"""Topic administration rules as pure functions: legal names, replica assignment, request
validation. The controller applies them; they are unit-tested without ZooKeeper.

Replica assignment follows Kafka's rack-unaware algorithm: the first replica of partition
``p`` is broker ``(p + start) % n`` of the sorted live brokers, and the followers are placed
by a shift that grows every ``n`` partitions, so leaders and followers spread evenly. The
start index and initial shift are random unless given (tests pass them).
"""

from __future__ import annotations

import random
import re

from broker.config import ConfigError, parse_topic_overrides
from broker.protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class InvalidTopicError(KafkaError):
    code = ErrorCode.invalid_topic_exception


class TopicExistsError(KafkaError):
    code = ErrorCode.topic_already_exists


class InvalidPartitionsError(KafkaError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(KafkaError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(KafkaError):
    code = ErrorCode.invalid_replica_assignment


class InvalidConfigError(KafkaError):
    code = ErrorCode.invalid_config


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )


def validate_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate topic config overrides; a null value means "use the default"."""
    clean = {k: v for k, v in configs.items() if v is not None}
    try:
        parse_topic_overrides(clean)
    except ConfigError as exc:
        raise InvalidConfigError(str(exc)) from exc
    return clean


def assign_replicas(
    brokers: list[int],
    num_partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    start_index: int | None = None,
    replica_shift: int | None = None,
) -> dict[int, list[int]]:
    """Kafka's rack-unaware replica assignment over ``brokers``."""
    if num_partitions <= 0:
        raise InvalidPartitionsError("number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise InvalidReplicationFactorError("replication factor must be larger than 0")
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} larger than available brokers {n}"
        )
    first = random.randrange(n) if start_index is None else start_index
    shift = random.randrange(n) if replica_shift is None else replica_shift
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


def _replica_index(first_index: int, shift: int, replica: int, n: int) -> int:
    return (first_index + 1 + (shift + replica) % (n - 1)) % n


def validate_assignment(
    assignment: dict[int, list[int]], live_brokers: list[int], start_partition: int = 0
) -> None:
    """A manual assignment: consecutive partitions, one replication factor, no duplicate or
    unknown brokers."""
    if not assignment:
        raise InvalidReplicaAssignmentError("replica assignment is empty")
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
