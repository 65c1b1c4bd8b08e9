"""The controller's events (Kafka's ``ControllerEvent`` kinds, ZooKeeper mode).

Everything the controller does runs as one of these events on its single event queue
(:mod:`broker.controller.event_manager`): ZooKeeper watches, session changes, the periodic
leader-imbalance check, and the requests of admin APIs and of brokers. Each kind is a frozen,
slotted dataclass holding only the event's arguments; the controller dispatches on the type.

Two families:

* :class:`ControllerEvent` subclasses are *notifications*: queued and forgotten (a watch fired,
  the session was lost). Failures are logged.
* :class:`ControllerRequest` ``[R]`` subclasses are awaited by a caller, who gets the handler's
  result of type ``R`` (or its exception) through a future.

Concurrency: values are immutable; create them anywhere on the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.metadata.cache import TopicInfo
from broker.protocol.errors import ErrorCode
from broker.types import TopicPartition

R = TypeVar("R")

PartitionResults = dict[TopicPartition, tuple[ErrorCode, str | None]]
"""Per-partition error code and message (ElectLeaders, AlterPartitionReassignments)."""
OngoingReassignments = dict[TopicPartition, tuple[list[int], list[int], list[int]]]
"""Per partition being reassigned: (replicas, adding, removing)."""


class ControllerEvent:
    """An event processed on the controller's queue (no result)."""

    __slots__ = ()


class ControllerRequest(ControllerEvent, Generic[R]):
    """An event whose caller awaits its result of type ``R``."""

    __slots__ = ()


# --------------------------------------------------------------------------- election


@dataclass(frozen=True, slots=True)
class Startup(ControllerRequest[None]):
    """Broker start-up: take part in the first controller election."""


@dataclass(frozen=True, slots=True)
class ControllerChange(ControllerEvent):
    """``/controller`` changed (created or deleted): elect if there is no controller, resign
    if another broker took over."""


@dataclass(frozen=True, slots=True)
class Reelect(ControllerEvent):
    """Run the election again: after a fenced write found another controller, or on a new
    ZooKeeper session."""


@dataclass(frozen=True, slots=True)
class SessionLost(ControllerEvent):
    """The ZooKeeper session expired: resign (leadership is no longer backed)."""


# --------------------------------------------------------------------------- watches


@dataclass(frozen=True, slots=True)
class BrokerChange(ControllerEvent):
    """``/brokers/ids`` changed: brokers started, failed or bounced."""


@dataclass(frozen=True, slots=True)
class BrokerUnreachable(ControllerEvent):
    """The liveness watch found the broker's process gone (its port refuses connections):
    fence it if its registration still has ``epoch`` (docs/failover.md)."""

    broker_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class BrokerReachable(ControllerEvent):
    """A fenced broker's port accepts connections again: start it again if its registration
    still has ``epoch`` (the death report was false)."""

    broker_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class ControllerUnreachable(ControllerEvent):
    """On a broker that is not the controller: the active controller's process is gone (its
    port refuses connections); ``czxid`` identifies its ``/controller`` znode."""

    broker_id: int
    czxid: int


@dataclass(frozen=True, slots=True)
class TopicChange(ControllerEvent):
    """``/brokers/topics`` changed: topics created directly in ZooKeeper."""


@dataclass(frozen=True, slots=True)
class TopicDeletionRequest(ControllerEvent):
    """``/admin/delete_topics`` changed: topics marked for deletion by a tool."""


@dataclass(frozen=True, slots=True)
class IsrChangeNotification(ControllerEvent):
    """``/isr_change_notification`` changed: leaders wrote new ISRs."""


@dataclass(frozen=True, slots=True)
class LogDirEventNotification(ControllerEvent):
    """``/log_dir_event_notification`` changed: a broker's log directory failed (KIP-112)."""


@dataclass(frozen=True, slots=True)
class LeaderAndIsrResponseReceived(ControllerEvent):
    """A broker answered a LeaderAndIsr request: ``errors`` per partition (the ones with
    KAFKA_STORAGE_ERROR are in an offline log directory); ``error`` is the top-level code."""

    broker_id: int
    error: ErrorCode
    errors: Mapping[TopicPartition, ErrorCode]


@dataclass(frozen=True, slots=True)
class LeaderImbalanceCheck(ControllerEvent):
    """The periodic ``auto.leader.rebalance.enable`` check."""


# --------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class CreateTopic(ControllerRequest[TopicInfo]):
    """CreateTopics (or internal-topic creation); ``configs`` are validated overrides."""

    name: str
    num_partitions: int
    replication_factor: int
    assignment: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] = field(default_factory=dict)
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitions(ControllerRequest[None]):
    """CreatePartitions: grow ``name`` to ``count`` partitions."""

    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class DeleteTopic(ControllerRequest[None]):
    """DeleteTopics: mark the topic for deletion and delete it."""

    name: str


@dataclass(frozen=True, slots=True)
class ElectLeaders(ControllerRequest[PartitionResults]):
    """ElectLeaders: ``election_type`` 0 preferred, 1 unclean; ``partitions`` None = all."""

    election_type: int
    partitions: Sequence[TopicPartition] | None = None


@dataclass(frozen=True, slots=True)
class AlterReassignments(ControllerRequest[PartitionResults]):
    """AlterPartitionReassignments: target replicas per partition (None cancels)."""

    targets: Mapping[TopicPartition, Sequence[int] | None]


@dataclass(frozen=True, slots=True)
class ListReassignments(ControllerRequest[OngoingReassignments]):
    """ListPartitionReassignments (``partitions`` None = all)."""

    partitions: Sequence[TopicPartition] | None = None


@dataclass(frozen=True, slots=True)
class ControlledShutdown(ControllerRequest[list[TopicPartition]]):
    """ControlledShutdown of ``broker_id`` (``broker_epoch`` -1: not checked)."""

    broker_id: int
    broker_epoch: int


__all__ = [
    "AlterReassignments",
    "BrokerChange",
    "BrokerReachable",
    "BrokerUnreachable",
    "ControlledShutdown",
    "ControllerChange",
    "ControllerEvent",
    "ControllerRequest",
    "ControllerUnreachable",
    "CreatePartitions",
    "CreateTopic",
    "DeleteTopic",
    "ElectLeaders",
    "IsrChangeNotification",
    "LeaderAndIsrResponseReceived",
    "LeaderImbalanceCheck",
    "ListReassignments",
    "LogDirEventNotification",
    "OngoingReassignments",
    "PartitionResults",
    "Reelect",
    "SessionLost",
    "Startup",
    "TopicChange",
    "TopicDeletionRequest",
]
