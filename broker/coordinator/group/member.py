"""Group members and the choice of a group's protocol (Kafka's ``MemberMetadata`` and
``GroupMetadata.selectProtocol``).

A :class:`Member` is one member's state inside its group: its ids (member id and, for a
static member (KIP-345), ``group.instance.id``), client, timeouts, protocols in preference
order with their metadata, assignment and liveness (last heartbeat; whether a JoinGroup or
SyncGroup of it is parked). :class:`LoadedMember` is a member as the group metadata record
of ``__consumer_offsets`` stores it, from which a group is rebuilt.

:func:`select_protocol` is Kafka's vote among the members' preference lists; ties go the way
a Java ``HashMap`` of the votes iterates (``String.hashCode`` buckets), reproduced here.

Concurrency: a :class:`Member` belongs to one group and is used only by the event-loop task
that owns the group; :func:`select_protocol` is a pure function.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "UNKNOWN_MEMBER_ID",
    "LoadedMember",
    "Member",
    "select_protocol",
]

UNKNOWN_MEMBER_ID: Final = ""
"""The member id a client sends before it has one (``JoinGroupRequest.UNKNOWN_MEMBER_ID``)."""

NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 5 * 60 * 1000
"""How long a brand-new member's first JoinGroup may stay parked (Kafka's constant)."""


class LoadedMember(Protocol):
    """A member as the group metadata record stores it (``offsets_topic.MemberRecord``)."""

    @property
    def member_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_host(self) -> str: ...
    @property
    def rebalance_timeout_ms(self) -> int: ...
    @property
    def session_timeout_ms(self) -> int: ...
    @property
    def subscription(self) -> bytes: ...
    @property
    def assignment(self) -> bytes: ...


# ---------------------------------------------------------------------------------------------
# Members


@dataclass(slots=True)
class Member:
    """A member's state. Owned by its :class:`~broker.coordinator.group.group.Group`: read it,
    never mutate it from outside.

    ``protocols`` is the member's (name, metadata) list in preference order.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    awaiting_join: bool = False
    awaiting_sync: bool = False
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata_for(self, protocol: str) -> bytes:
        """This member's metadata for ``protocol`` (KeyError if it does not support it)."""
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Whether ``protocols`` equals the stored list exactly (names, order and metadata)."""
        return tuple((name, bytes(md)) for name, md in protocols) == self.protocols

    def heartbeat_deadline_ms(self) -> int | None:
        """When this member expires if nothing refreshes it (None: it cannot expire now)."""
        if self.is_new:
            return self.last_heartbeat_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
        if self.awaiting_join or self.awaiting_sync:
            return None
        return self.last_heartbeat_ms + self.session_timeout_ms


# ---------------------------------------------------------------------------------------------
# Protocol selection


def _java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` as an unsigned 32-bit value (over UTF-16 code units)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def _java_hashmap_order(keys: Sequence[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` into which ``keys`` were inserted."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    position = {key: i for i, key in enumerate(keys)}
    return sorted(keys, key=lambda k: (bucket(k), position[k]))


def select_protocol(member_protocols: Sequence[Sequence[str]]) -> str:
    """The protocol a group with these members' preference lists uses (Kafka's vote).

    Candidates are the protocols every member supports. Each member votes for its most
    preferred candidate; the protocol with the most votes wins. Kafka counts votes in a Java
    ``HashMap`` and takes the first maximum in its iteration order; ties are broken the same
    way here (for example range beats roundrobin and cooperative-sticky, roundrobin beats
    cooperative-sticky).
    """
    if not member_protocols:
        raise ValueError("cannot select a protocol for a group without members")
    candidates = set(member_protocols[0])
    for names in member_protocols[1:]:
        candidates &= set(names)
    votes: dict[str, int] = {}
    for names in member_protocols:
        choice = next((name for name in names if name in candidates), None)
        if choice is None:
            raise ValueError("no protocol is supported by every member")
        votes[choice] = votes.get(choice, 0) + 1
    best = max(votes.values())
    return next(name for name in _java_hashmap_order(list(votes)) if votes[name] == best)
