"""What the broker and its controller need from ZooKeeper, as a ``typing.Protocol``.

:class:`ZkOperations` lists Kafka's ZooKeeper operations (Kafka 3.9's ``KafkaZkClient``) that
the broker (``broker.server``), the controller (``broker.controller``) and the broker-side
topic-config manager (``broker.metadata.topic_configs``) use. Two implementations exist:
:class:`broker.zk.client.ZkClient` over a real ZooKeeper session (kazoo), and the
in-memory fake of the unit tests (``tests/fakes/zookeeper.py``). Code that only *uses*
ZooKeeper depends on this module, never on kazoo.

Besides the protocol this module holds the values and errors both implementations share: the
error hierarchy (:class:`ZkError` and its subclasses), the connection state
(:class:`ZkState`), a decoded znode with its version (:class:`Versioned`) and the handle a
watch returns (:class:`WatchHandle`). Topic-level errors (``TopicExistsError``,
``InvalidTopicError``) are the broker-wide ones of :mod:`broker.topic_names`.

Contract of every implementation: coroutines run on the caller's event loop; watch callbacks
and session callbacks run on that loop, never on another thread; a ``watch_*`` callback is
called once at registration with the current value and again after every change; writes
marked *conditional* succeed only at the expected znode version; a write fenced by the
controller epoch's znode version raises :class:`ControllerMovedError` once another controller
was elected.

Concurrency: values are immutable (``WatchHandle.cancel`` only sets a flag, on the loop).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Generic, NamedTuple, Protocol, TypeVar, runtime_checkable

from broker.types import TopicPartition
from broker.zk.znodes import (
    BrokerIdZNode,
    ConfigChangeNotificationZNode,
    PartitionState,
    TopicZNode,
)

T = TypeVar("T")

SessionCallback = Callable[[], Awaitable[None] | None]
"""Run on the event loop when the session is lost or a new one starts (sync or async)."""
StateCallback = Callable[["ZkState"], Awaitable[None] | None]
"""Run on the event loop on every connection-state change."""


# --------------------------------------------------------------------------- errors


class ZkError(Exception):
    """A ZooKeeper operation failed; the message names the path or the entity."""


class ZkConnectionError(ZkError):
    """ZooKeeper unreachable: cannot connect, or the connection stayed lost past the retry
    deadline, or the client is closed."""


class BrokerIdAlreadyRegisteredError(ZkError):
    """``/brokers/ids/<id>`` is held by another live session."""


class UnknownTopicError(ZkError):
    """The topic does not exist."""


class ControllerMovedError(ZkError):
    """A write fenced by the controller epoch failed: another controller was elected."""


# --------------------------------------------------------------------------- small values


class ZkState(enum.Enum):
    """The connection state, as seen on the event loop."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"  # connection lost, session may still be alive
    LOST = "LOST"  # session expired (ephemeral znodes gone) or connection closed
    CLOSED = "CLOSED"  # not started or closed by us


class Versioned(NamedTuple, Generic[T]):
    """A decoded znode with the znode's data version (for conditional updates)."""

    value: T
    zk_version: int


class VersionedAt(NamedTuple, Generic[T]):
    """A :class:`Versioned` znode with the zxid of its last write (``mzxid``; -1 when
    unknown), which orders it against other znodes' writes (partition states against broker
    registrations: ``broker_changes.restarted_since_last_write``)."""

    value: T
    zk_version: int
    modified_zxid: int = -1


class WatchHandle:
    """Returned by the ``watch_*`` methods; :meth:`cancel` stops further callbacks."""

    __slots__ = ("_cancelled", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled


# --------------------------------------------------------------------------- the protocol


@runtime_checkable
class ZkOperations(Protocol):
    """Kafka's ZooKeeper operations used by the broker, its controller and its topic configs.

    Semantics are those documented on :class:`broker.zk.client.ZkClient`.
    """

    # --- session
    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def on_session_lost(self, callback: SessionCallback) -> None: ...

    def on_reconnected(self, callback: SessionCallback) -> None: ...

    # --- bootstrap and brokers
    async def ensure_persistent_paths(self) -> None: ...

    async def get_or_create_cluster_id(self) -> str: ...

    async def generate_broker_id(self, reserved_max: int = ...) -> int: ...

    async def register_broker(self, znode: BrokerIdZNode, wait_s: float = 0.0) -> int: ...

    async def get_broker_ids(self) -> list[int]: ...

    async def get_broker(self, broker_id: int) -> BrokerIdZNode | None: ...

    async def get_broker_epoch(self, broker_id: int) -> int | None: ...

    async def watch_broker_ids(self, callback: Callable[[list[int]], None]) -> WatchHandle: ...

    async def allocate_producer_id_block(
        self, broker_id: int, block_size: int = ...
    ) -> tuple[int, int]: ...

    # --- controller election
    async def try_elect_controller(self, broker_id: int) -> int | None: ...

    async def get_controller(self) -> int | None: ...

    async def get_controller_epoch(self) -> Versioned[int] | None: ...

    async def watch_controller(self, callback: Callable[[int | None], None]) -> WatchHandle: ...

    async def get_controller_registration(self) -> tuple[int, int] | None: ...

    async def delete_dead_controller(self, broker_id: int, czxid: int) -> bool: ...

    async def resign_controller(self, broker_id: int) -> None: ...

    # --- topics and assignments
    async def create_topic(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        configs: Mapping[str, str] | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> uuid.UUID: ...

    async def get_topic(self, name: str) -> TopicZNode | None: ...

    async def get_topic_with_version(self, name: str) -> Versioned[TopicZNode] | None: ...

    async def get_all_topics(self) -> list[str]: ...

    async def watch_topics(self, callback: Callable[[list[str]], None]) -> WatchHandle: ...

    async def set_topic_assignment(
        self,
        name: str,
        assignment: Mapping[int, Sequence[int]],
        expected_version: int,
        *,
        adding_replicas: Mapping[int, Sequence[int]] | None = None,
        removing_replicas: Mapping[int, Sequence[int]] | None = None,
    ) -> int | None: ...

    # --- partition states
    async def create_partition_states(
        self,
        name: str,
        states: Mapping[int, PartitionState],
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> dict[int, int]: ...

    async def get_partition_state(
        self, name: str, partition: int
    ) -> VersionedAt[PartitionState] | None: ...

    async def get_partition_states(self, name: str) -> dict[int, VersionedAt[PartitionState]]: ...

    async def get_partition_states_of(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, VersionedAt[PartitionState]]: ...

    async def update_partition_state(
        self,
        name: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> int | None: ...

    async def update_partition_states(
        self,
        updates: Sequence[tuple[TopicPartition, PartitionState, int]],
        *,
        controller_epoch_zk_version: int | None = None,
    ) -> list[int | None]: ...

    # --- topic configs
    async def get_topic_config(self, name: str) -> dict[str, str]: ...

    async def set_topic_config(self, name: str, config: Mapping[str, str]) -> None: ...

    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> WatchHandle: ...

    async def get_config_change(self, name: str) -> ConfigChangeNotificationZNode | None: ...

    # --- deletion
    async def mark_topic_for_deletion(self, name: str) -> bool: ...

    async def get_topics_marked_for_deletion(self) -> list[str]: ...

    async def watch_topics_marked_for_deletion(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle: ...

    async def delete_topic_znodes(self, name: str) -> None: ...

    # --- ISR-change notifications
    async def add_isr_change_notification(self, partitions: Iterable[TopicPartition]) -> str: ...

    async def watch_isr_change_notifications(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle: ...

    async def get_isr_change_notifications(self) -> dict[str, frozenset[TopicPartition]]: ...

    async def delete_isr_change_notifications(self, names: Iterable[str]) -> None: ...

    # --- log-dir event notifications (KIP-112)
    async def propagate_log_dir_event(self, broker_id: int) -> str: ...

    async def watch_log_dir_event_notifications(
        self, callback: Callable[[list[str]], None]
    ) -> WatchHandle: ...

    async def get_log_dir_event_notifications(self) -> dict[str, int]: ...

    async def delete_log_dir_event_notifications(self, names: Iterable[str]) -> None: ...


__all__ = [
    "BrokerIdAlreadyRegisteredError",
    "ControllerMovedError",
    "SessionCallback",
    "StateCallback",
    "UnknownTopicError",
    "Versioned",
    "WatchHandle",
    "ZkConnectionError",
    "ZkError",
    "ZkOperations",
    "ZkState",
]
