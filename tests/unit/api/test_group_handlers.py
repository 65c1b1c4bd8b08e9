"""Group and offset API handlers (broker/api/groups.py, broker/api/offsets.py,
broker/api/find_coordinator.py) against a fake group coordinator.

Every request goes through the real :class:`Dispatcher` as a frame encoded by kafka-python
(an independent implementation of the protocol), at every advertised version; the response
is decoded twice, by kio (the broker's own schemas) and by kafka-python, so the bytes are
valid on the wire. Assertions cover the per-version shapes and what the coordinator is told.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest
from kio.serial import entity_reader

from broker.api import groups, offsets
from broker.api.context import RequestContext
from broker.api.dispatcher import HANDLERS, Dispatcher
from broker.coordinator.group.group_metadata import (
    GroupDescription,
    GroupOverview,
    MemberDescription,
)
from broker.coordinator.group.results import (
    JoinMember,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    MemberIdentity,
    SyncResult,
)
from broker.protocol import registry
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import RequestHeader
from broker.protocol.response import ConnectionInfo
from broker.request_metrics import NOOP_RECORDER
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition
E = ErrorCode
MIN_INT32 = -(2**31)


# --- fakes ---------------------------------------------------------------------------------


DEFAULT_JOIN = JoinResult(
    E.none,
    "m-1",
    3,
    "consumer",
    "range",
    "m-1",
    False,
    (JoinMember("m-1", "i-1", b"meta-1"), JoinMember("m-2", None, b"meta-2")),
)
DEFAULT_SYNC = SyncResult(E.none, "consumer", "range", b"assignment-1")


@dataclass
class FakeCoordinator:
    """Implements the GroupCoordinator interface the handlers use; records every call."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    find: tuple[ErrorCode, int, str, int] = (E.none, 2, "broker2.local", 9093)
    join: JoinResult = field(default_factory=lambda: DEFAULT_JOIN)
    sync: SyncResult = field(default_factory=lambda: DEFAULT_SYNC)
    heartbeat_error: ErrorCode = E.none
    leave: LeaveResult | None = None
    commit_errors: dict[TopicPartition, ErrorCode] = field(default_factory=dict)
    committed: dict[str, dict[TopicPartition, tuple[int, int, str]]] = field(default_factory=dict)
    group_errors: dict[str, ErrorCode] = field(default_factory=dict)
    overviews: list[GroupOverview] = field(default_factory=list)
    list_error: ErrorCode = E.none
    descriptions: dict[str, GroupDescription] = field(default_factory=dict)
    delete_results: dict[str, ErrorCode] = field(default_factory=dict)
    delete_offsets_error: ErrorCode = E.none

    async def find_coordinator(self, key: str) -> tuple[ErrorCode, int, str, int]:
        self.calls.append(("find", key))
        return self.find

    async def join_group(self, group_id: str, **kwargs: Any) -> JoinResult:
        self.calls.append(("join", {"group_id": group_id, **kwargs}))
        return self.join

    async def sync_group(self, group_id: str, **kwargs: Any) -> SyncResult:
        self.calls.append(("sync", {"group_id": group_id, **kwargs}))
        return self.sync

    async def heartbeat(self, group_id: str, **kwargs: Any) -> ErrorCode:
        self.calls.append(("heartbeat", {"group_id": group_id, **kwargs}))
        return self.heartbeat_error

    async def leave_group(self, group_id: str, members: list[MemberIdentity]) -> LeaveResult:
        self.calls.append(("leave", (group_id, members)))
        if self.leave is not None:
            return self.leave
        return LeaveResult(
            E.none,
            tuple(LeaveMemberResult(m.member_id, m.group_instance_id, E.none) for m in members),
        )

    async def commit_offsets(self, group_id: str, **kwargs: Any) -> dict[TopicPartition, ErrorCode]:
        self.calls.append(("commit", {"group_id": group_id, **kwargs}))
        return {tp: self.commit_errors.get(tp, E.none) for tp in kwargs["offsets"]}

    async def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None, require_stable: bool = False
    ) -> tuple[ErrorCode, dict[TopicPartition, tuple[int, int, str, ErrorCode]]]:
        self.calls.append(("fetch", (group_id, partitions)))
        error = self.group_errors.get(group_id, E.none)
        if error is not E.none:
            return error, {}
        committed = self.committed.get(group_id, {})
        wanted = sorted(committed) if partitions is None else partitions
        return E.none, {
            tp: (*committed[tp], E.none) if tp in committed else (-1, -1, "", E.none)
            for tp in wanted
        }

    def list_groups(self, states: list[str] | None) -> tuple[ErrorCode, list[GroupOverview]]:
        self.calls.append(("list", states))
        wanted = {s.lower() for s in states or ()}
        return self.list_error, [
            g for g in self.overviews if not wanted or g.state.lower() in wanted
        ]

    def describe_group(self, group_id: str) -> tuple[ErrorCode, GroupDescription]:
        self.calls.append(("describe", group_id))
        error = self.group_errors.get(group_id, E.none)
        return error, self.descriptions.get(group_id, GroupDescription.dead(group_id))

    async def delete_groups(self, group_ids: list[str]) -> dict[str, ErrorCode]:
        self.calls.append(("delete", group_ids))
        return {g: self.delete_results.get(g, E.group_id_not_found) for g in group_ids}

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        self.calls.append(("delete_offsets", (group_id, partitions)))
        if self.delete_offsets_error is not E.none:
            return self.delete_offsets_error, {}
        return E.none, dict.fromkeys(partitions, E.none)

    def only(self, name: str) -> Any:
        """The argument of the single call named ``name``."""
        found = [args for n, args in self.calls if n == name]
        assert len(found) == 1, self.calls
        return found[0]


class FakeMetadata:
    def __init__(self, topics: set[str]) -> None:
        self.topics = topics

    def topic(self, name: str) -> object | None:
        return object() if name in self.topics else None

    def broker(self, broker_id: int) -> object | None:
        return None  # the coordinator's own address is answered


@pytest.fixture
def coordinator() -> FakeCoordinator:
    return FakeCoordinator()


@dataclass
class Reply:
    kio: Any  # decoded by kio
    kp: Any  # decoded by kafka-python


def send(
    coordinator: FakeCoordinator,
    request: Any,
    version: int,
    topics: frozenset[str] = frozenset({"t"}),
) -> Reply:
    """Encode ``request`` with kafka-python, dispatch it, decode the answer both ways."""
    request.with_header(correlation_id=42, client_id="kp-client")
    frame = bytes(request.encode(version=version, header=True))
    services = SimpleNamespace(
        group_coordinator=coordinator,
        txn_coordinator=FakeTxnCoordinator(),
        metadata=FakeMetadata(set(topics)),
        authorizer=None,
        quotas=None,
        metrics=NOOP_RECORDER,
    )
    dispatcher = Dispatcher(cast(Any, services))
    conn = ConnectionInfo("127.0.0.1:50123", "PLAINTEXT", 1)
    response = asyncio.run(dispatcher(conn, frame))
    assert response is not None
    data = b"".join(bytes(c) for c in response.chunks)  # type: ignore[arg-type]
    assert len(data) == response.size
    api_key = request.API_KEY
    pos = 4 + (1 if registry.response_uses_flexible_header(api_key, version) else 0)
    assert int.from_bytes(data[:4], "big") == 42
    cls = registry.response_class(api_key, version)
    value, size = entity_reader(cls)(data, pos)
    assert pos + size == len(data)
    kp_cls = _kp_response_class(request)
    kp_value = kp_cls.decode(data, version=version, header=True)
    return Reply(value, kp_value)


def _kp_response_class(request: Any) -> Any:
    module = __import__(type(request).__module__, fromlist=["_"])
    return getattr(module, type(request).__name__.split("_v")[0].replace("Request", "Response"))


def versions(api_key: int) -> Iterator[int]:
    _name, lo, hi = registry.SUPPORTED_APIS[api_key]
    return iter(range(lo, hi + 1))


# --- registry --------------------------------------------------------------------------------


def test_advertised_ranges_and_handlers() -> None:
    expected = {
        8: ("OffsetCommit", 2, 8),
        9: ("OffsetFetch", 1, 8),
        10: ("FindCoordinator", 0, 4),
        11: ("JoinGroup", 0, 9),
        12: ("Heartbeat", 0, 4),
        13: ("LeaveGroup", 0, 5),
        14: ("SyncGroup", 0, 5),
        15: ("DescribeGroups", 0, 5),
        16: ("ListGroups", 0, 5),
        42: ("DeleteGroups", 0, 2),
        47: ("OffsetDelete", 0, 0),
    }
    for key, entry in expected.items():
        assert registry.SUPPORTED_APIS[key] == entry
        assert key in HANDLERS
        for v in range(entry[1], entry[2] + 1):  # kio has every advertised schema
            registry.request_class(key, v)
            registry.response_class(key, v)


# --- FindCoordinator -------------------------------------------------------------------------


def find_request(key_type: int = 0, keys: tuple[str, ...] = ("g1",)) -> Any:
    return FindCoordinatorRequest(key=keys[0], key_type=key_type, coordinator_keys=list(keys))


@pytest.mark.parametrize("version", list(versions(10)))
def test_find_coordinator_group(coordinator: FakeCoordinator, version: int) -> None:
    r = send(coordinator, find_request(), version).kio
    if version >= 4:
        (c,) = r.coordinators
        assert (c.key, c.error_code, c.node_id, c.host, c.port) == (
            "g1",
            E.none,
            2,
            "broker2.local",
            9093,
        )
    else:
        assert (r.error_code, r.node_id, r.host, r.port) == (E.none, 2, "broker2.local", 9093)
    assert coordinator.only("find") == "g1"


def test_find_coordinator_batch_v4(coordinator: FakeCoordinator) -> None:
    r = send(coordinator, find_request(keys=("a", "b", "")), 4).kio
    assert [c.key for c in r.coordinators] == ["a", "b", ""]
    assert [k for n, k in coordinator.calls if n == "find"] == ["a", "b", ""]


@pytest.mark.parametrize("version", [0, 2, 4])
def test_find_coordinator_not_available(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.find = (E.coordinator_not_available, -1, "", -1)
    r = send(coordinator, find_request(), version).kio
    entry = r.coordinators[0] if version >= 4 else r
    assert (entry.error_code, entry.node_id, entry.host, entry.port) == (
        E.coordinator_not_available,
        -1,
        "",
        -1,
    )


class FakeTxnCoordinator:
    """Answers FindCoordinator for transactional ids: broker 3 coordinates ``txn-a``."""

    async def find_coordinator(self, key: str) -> tuple[ErrorCode, int, str, int]:
        if key == "txn-a":
            return E.none, 3, "broker3.local", 9094
        return E.coordinator_not_available, -1, "", -1


@pytest.mark.parametrize("version", [1, 3, 4])
def test_find_coordinator_unknown_key_type(coordinator: FakeCoordinator, version: int) -> None:
    r = send(coordinator, find_request(key_type=7), version).kio
    entry = r.coordinators[0] if version >= 4 else r
    assert (entry.error_code, entry.node_id, entry.port) == (E.invalid_request, -1, -1)
    assert entry.error_message
    assert coordinator.calls == []


@pytest.mark.parametrize("version", [1, 3, 4])
def test_find_coordinator_for_transactional_ids(coordinator: FakeCoordinator, version: int) -> None:
    r = send(coordinator, find_request(key_type=1, keys=("txn-a",)), version).kio
    entry = r.coordinators[0] if version >= 4 else r
    assert (entry.error_code, entry.node_id, entry.port) == (E.none, 3, 9094)
    r = send(coordinator, find_request(key_type=1, keys=("txn-b",)), version).kio
    entry = r.coordinators[0] if version >= 4 else r
    assert (entry.error_code, entry.node_id) == (E.coordinator_not_available, -1)
    assert coordinator.calls == []  # the group coordinator is not asked


# --- JoinGroup -----------------------------------------------------------------------------


def join_request(group_id: str = "g1", member_id: str = "") -> Any:
    return JoinGroupRequest(
        group_id=group_id,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
        member_id=member_id,
        group_instance_id="i-1",
        protocol_type="consumer",
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"r"),
            JoinGroupRequest.JoinGroupRequestProtocol(name="roundrobin", metadata=b"rr"),
        ],
        reason="test",
    )


@pytest.mark.parametrize("version", list(versions(11)))
def test_join_group_versions(coordinator: FakeCoordinator, version: int) -> None:
    reply = send(coordinator, join_request(), version)
    r = reply.kio
    call = coordinator.only("join")
    assert call == {
        "group_id": "g1",
        "member_id": "",
        "group_instance_id": "i-1" if version >= 5 else None,
        "client_id": "kp-client",
        "client_host": "/127.0.0.1",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 60_000 if version >= 1 else 10_000,
        "protocol_type": "consumer",
        "protocols": [("range", b"r"), ("roundrobin", b"rr")],
        "require_known_member_id": version >= 4,
        "supports_skip_assignment": version >= 9,
    }
    assert (r.error_code, r.generation_id, r.protocol_name, r.leader, r.member_id) == (
        E.none,
        3,
        "range",
        "m-1",
        "m-1",
    )
    assert [(m.member_id, m.metadata) for m in r.members] == [
        ("m-1", b"meta-1"),
        ("m-2", b"meta-2"),
    ]
    if version >= 5:
        assert [m.group_instance_id for m in r.members] == ["i-1", None]
    if version >= 7:
        assert r.protocol_type == "consumer"
    if version >= 9:
        assert r.skip_assignment is False
    assert reply.kp.member_id == "m-1"


@pytest.mark.parametrize("version", [0, 4, 6, 7, 9])
def test_join_group_error_has_no_protocol(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.join = JoinResult(E.member_id_required, "fresh-id")
    r = send(coordinator, join_request(), version).kio
    assert (r.error_code, r.member_id, r.generation_id, r.leader, r.members) == (
        E.member_id_required,
        "fresh-id",
        -1,
        "",
        (),
    )
    # Before v7 protocol_name is a non-nullable string: "" (Kafka's JoinGroupResponse).
    assert r.protocol_name == ("" if version < 7 else None)


def test_join_group_skip_assignment_v9(coordinator: FakeCoordinator) -> None:
    coordinator.join = JoinResult(E.none, "m-1", 4, "consumer", "range", "m-1", True, ())
    r = send(coordinator, join_request(member_id="m-1"), 9).kio
    assert r.skip_assignment is True
    assert r.generation_id == 4


@pytest.mark.parametrize(
    ("request_", "version"),
    [
        (join_request(group_id=""), 0),
        (join_request(group_id=""), 9),
        (SyncGroupRequest(group_id="", generation_id=1, member_id="m", assignments=[]), 0),
        (SyncGroupRequest(group_id="", generation_id=1, member_id="m", assignments=[]), 4),
        (HeartbeatRequest(group_id="", generation_id=1, member_id="m"), 0),
        (HeartbeatRequest(group_id="", generation_id=1, member_id="m"), 4),
        (LeaveGroupRequest(group_id="", member_id="m", members=[]), 1),
        (LeaveGroupRequest(group_id="", member_id="m", members=[]), 5),
    ],
)
def test_empty_group_id_is_invalid(
    coordinator: FakeCoordinator, request_: Any, version: int
) -> None:
    r = send(coordinator, request_, version).kio
    assert r.error_code == E.invalid_group_id
    assert coordinator.calls == []


# --- SyncGroup -----------------------------------------------------------------------------


def sync_request(**overrides: Any) -> Any:
    fields: dict[str, Any] = {
        "group_id": "g1",
        "generation_id": 3,
        "member_id": "m-1",
        "group_instance_id": "i-1",
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [
            SyncGroupRequest.SyncGroupRequestAssignment(member_id="m-1", assignment=b"a1"),
            SyncGroupRequest.SyncGroupRequestAssignment(member_id="m-2", assignment=b"a2"),
        ],
    }
    fields.update(overrides)
    return SyncGroupRequest(**fields)


@pytest.mark.parametrize("version", list(versions(14)))
def test_sync_group_versions(coordinator: FakeCoordinator, version: int) -> None:
    r = send(coordinator, sync_request(), version).kio
    assert coordinator.only("sync") == {
        "group_id": "g1",
        "member_id": "m-1",
        "generation_id": 3,
        "group_instance_id": "i-1" if version >= 3 else None,
        "protocol_type": "consumer" if version >= 5 else None,
        "protocol_name": "range" if version >= 5 else None,
        "assignments": {"m-1": b"a1", "m-2": b"a2"},
    }
    assert (r.error_code, r.assignment) == (E.none, b"assignment-1")
    if version >= 5:
        assert (r.protocol_type, r.protocol_name) == ("consumer", "range")


def test_sync_group_v5_requires_protocol_type_and_name(coordinator: FakeCoordinator) -> None:
    cls = registry.request_class(14, 5)
    request = registry.build(
        cls,
        group_id="g1",
        generation_id=3,
        member_id="m-1",
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name=None,
        assignments=(),
    )
    ctx = RequestContext(
        RequestHeader(14, 5, 1, "c"),
        ConnectionInfo("127.0.0.1:1", "PLAINTEXT", 1),
        cast(Any, SimpleNamespace(group_coordinator=coordinator)),
    )
    r = asyncio.run(groups.handle_sync_group(ctx, request))
    assert r.error_code == E.inconsistent_group_protocol
    assert coordinator.calls == []


def test_sync_group_error(coordinator: FakeCoordinator) -> None:
    coordinator.sync = SyncResult(E.rebalance_in_progress)
    r = send(coordinator, sync_request(), 5).kio
    assert (r.error_code, r.assignment, r.protocol_type, r.protocol_name) == (
        E.rebalance_in_progress,
        b"",
        None,
        None,
    )


# --- Heartbeat -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", list(versions(12)))
def test_heartbeat_versions(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.heartbeat_error = E.rebalance_in_progress
    request = HeartbeatRequest(
        group_id="g1", generation_id=3, member_id="m-1", group_instance_id="i-1"
    )
    r = send(coordinator, request, version).kio
    assert r.error_code == E.rebalance_in_progress
    assert coordinator.only("heartbeat") == {
        "group_id": "g1",
        "member_id": "m-1",
        "generation_id": 3,
        "group_instance_id": "i-1" if version >= 3 else None,
    }


# --- LeaveGroup ----------------------------------------------------------------------------


def leave_request() -> Any:
    return LeaveGroupRequest(
        group_id="g1",
        member_id="m-1",
        members=[
            LeaveGroupRequest.MemberIdentity(member_id="m-1", group_instance_id=None),
            LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="i-2"),
        ],
    )


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_group_single_member(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.leave = LeaveResult(E.none, (LeaveMemberResult("m-1", None, E.unknown_member_id),))
    r = send(coordinator, leave_request(), version).kio
    assert r.error_code == E.unknown_member_id  # the member's error becomes the answer
    assert coordinator.only("leave") == ("g1", [MemberIdentity("m-1")])


@pytest.mark.parametrize("version", [0, 3])
def test_leave_group_top_level_error(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.leave = LeaveResult(E.not_coordinator)
    r = send(coordinator, leave_request(), version).kio
    assert r.error_code == E.not_coordinator
    if version >= 3:
        assert r.members == ()


@pytest.mark.parametrize("version", [3, 4, 5])
def test_leave_group_batch(coordinator: FakeCoordinator, version: int) -> None:
    r = send(coordinator, leave_request(), version).kio
    assert coordinator.only("leave") == (
        "g1",
        [MemberIdentity("m-1", None), MemberIdentity("", "i-2")],
    )
    assert r.error_code == E.none
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in r.members] == [
        ("m-1", None, E.none),
        ("", "i-2", E.none),
    ]


# --- ListGroups ----------------------------------------------------------------------------


OVERVIEWS = [
    GroupOverview("a", "consumer", "Stable"),
    GroupOverview("b", "consumer", "Empty"),
    GroupOverview("c", "connect", "PreparingRebalance"),
]


@pytest.mark.parametrize("version", list(versions(16)))
def test_list_groups_versions(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.overviews = OVERVIEWS
    coordinator.list_error = E.coordinator_load_in_progress
    r = send(coordinator, ListGroupsRequest(states_filter=[], types_filter=[]), version).kio
    assert r.error_code == E.coordinator_load_in_progress
    assert [(g.group_id, g.protocol_type) for g in r.groups] == [
        ("a", "consumer"),
        ("b", "consumer"),
        ("c", "connect"),
    ]
    if version >= 4:
        assert [g.group_state for g in r.groups] == ["Stable", "Empty", "PreparingRebalance"]
    if version >= 5:
        assert {g.group_type for g in r.groups} == {"classic"}
    assert coordinator.only("list") is None


def test_list_groups_state_filter_v4(coordinator: FakeCoordinator) -> None:
    coordinator.overviews = OVERVIEWS
    r = send(coordinator, ListGroupsRequest(states_filter=["Stable", "empty"]), 4).kio
    assert [g.group_id for g in r.groups] == ["a", "b"]
    assert coordinator.only("list") == ["Stable", "empty"]


@pytest.mark.parametrize(("types", "expected"), [(["Classic"], 3), (["consumer"], 0), ([], 3)])
def test_list_groups_type_filter_v5(
    coordinator: FakeCoordinator, types: list[str], expected: int
) -> None:
    coordinator.overviews = OVERVIEWS
    r = send(coordinator, ListGroupsRequest(states_filter=[], types_filter=types), 5).kio
    assert len(r.groups) == expected


# --- DescribeGroups ------------------------------------------------------------------------


STABLE = GroupDescription(
    "g1",
    "Stable",
    "consumer",
    "range",
    (
        MemberDescription("m-1", "i-1", "client-1", "/10.0.0.1", b"sub-1", b"assign-1"),
        MemberDescription("m-2", None, "client-2", "/10.0.0.2", b"sub-2", b"assign-2"),
    ),
)


@pytest.mark.parametrize("version", list(versions(15)))
def test_describe_groups_versions(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.descriptions = {"g1": STABLE}
    coordinator.group_errors = {"elsewhere": E.not_coordinator}
    request = DescribeGroupsRequest(
        groups=["g1", "unknown", "elsewhere"], include_authorized_operations=False
    )
    r = send(coordinator, request, version).kio
    g1, unknown, elsewhere = r.groups
    assert (g1.error_code, g1.group_id, g1.group_state, g1.protocol_type, g1.protocol_data) == (
        E.none,
        "g1",
        "Stable",
        "consumer",
        "range",
    )
    assert [
        (m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
        for m in g1.members
    ] == [
        ("m-1", "client-1", "/10.0.0.1", b"sub-1", b"assign-1"),
        ("m-2", "client-2", "/10.0.0.2", b"sub-2", b"assign-2"),
    ]
    if version >= 4:
        assert [m.group_instance_id for m in g1.members] == ["i-1", None]
    # A group the coordinator does not know is Dead, without an error (Kafka, v0-5).
    assert (unknown.error_code, unknown.group_state, unknown.members) == (E.none, "Dead", ())
    # A group this broker does not coordinate: the error, unknown state.
    assert (elsewhere.error_code, elsewhere.group_state, elsewhere.protocol_type) == (
        E.not_coordinator,
        "",
        "",
    )
    if version >= 3:
        assert {g.authorized_operations for g in r.groups} == {MIN_INT32}


@pytest.mark.parametrize("version", [3, 5])
def test_describe_groups_authorized_operations(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.descriptions = {"g1": STABLE}
    request = DescribeGroupsRequest(groups=["g1"], include_authorized_operations=True)
    (g1,) = send(coordinator, request, version).kio.groups
    assert g1.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE


# --- DeleteGroups --------------------------------------------------------------------------


@pytest.mark.parametrize("version", list(versions(42)))
def test_delete_groups_versions(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.delete_results = {"a": E.none, "b": E.non_empty_group}
    request = DeleteGroupsRequest(groups_names=["a", "b", "a", "c"])
    r = send(coordinator, request, version).kio
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("a", E.none),
        ("b", E.non_empty_group),
        ("c", E.group_id_not_found),
    ]
    assert coordinator.only("delete") == ["a", "b", "c"]


# --- OffsetCommit --------------------------------------------------------------------------


def commit_request() -> Any:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic.OffsetCommitRequestPartition
    return OffsetCommitRequest(
        group_id="g1",
        generation_id_or_member_epoch=3,
        member_id="m-1",
        group_instance_id="i-1",
        retention_time_ms=86_400_000,
        topics=[
            topic(
                name="t",
                partitions=[
                    part(
                        partition_index=0,
                        committed_offset=10,
                        committed_leader_epoch=5,
                        committed_metadata="meta-0",
                    ),
                    part(
                        partition_index=1,
                        committed_offset=20,
                        committed_leader_epoch=5,
                        committed_metadata=None,
                    ),
                ],
            ),
            topic(
                name="missing",
                partitions=[part(partition_index=0, committed_offset=1, committed_metadata="")],
            ),
        ],
    )


@pytest.mark.parametrize("version", list(versions(8)))
def test_offset_commit_versions(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.commit_errors = {TP("t", 1): E.offset_metadata_too_large}
    r = send(coordinator, commit_request(), version).kio
    epoch = 5 if version >= 6 else -1
    assert coordinator.only("commit") == {
        "group_id": "g1",
        "member_id": "m-1",
        "generation_id": 3,
        "group_instance_id": "i-1" if version >= 7 else None,
        "offsets": {TP("t", 0): (10, epoch, "meta-0"), TP("t", 1): (20, epoch, None)},
    }
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics
    ] == [
        ("t", [(0, E.none), (1, E.offset_metadata_too_large)]),
        ("missing", [(0, E.unknown_topic_or_partition)]),
    ]


def test_offset_commit_only_unknown_topics_skips_coordinator(
    coordinator: FakeCoordinator,
) -> None:
    r = send(coordinator, commit_request(), 8, topics=frozenset()).kio
    assert {p.error_code for t in r.topics for p in t.partitions} == {E.unknown_topic_or_partition}
    assert coordinator.calls == []


# --- OffsetFetch ---------------------------------------------------------------------------


def fetch_request(
    topics: list[tuple[str, list[int]]] | None, groups: tuple[str, ...] = ("g1",)
) -> Any:
    t = OffsetFetchRequest.OffsetFetchRequestTopic
    g = OffsetFetchRequest.OffsetFetchRequestGroup
    gt = g.OffsetFetchRequestTopics
    return OffsetFetchRequest(
        group_id=groups[0],
        topics=None if topics is None else [t(name=n, partition_indexes=p) for n, p in topics],
        groups=[
            g(
                group_id=gid,
                topics=None
                if topics is None
                else [gt(name=n, partition_indexes=p) for n, p in topics],
            )
            for gid in groups
        ],
        require_stable=True,
    )


def fetched(topics: Any) -> list[tuple[str, int, int, int, str | None, ErrorCode]]:
    return [
        (
            t.name,
            p.partition_index,
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.metadata,
            p.error_code,
        )
        for t in topics
        for p in t.partitions
    ]


@pytest.mark.parametrize("version", list(versions(9)))
def test_offset_fetch_versions(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.committed = {"g1": {TP("t", 0): (10, 5, "meta-0")}}
    r = send(coordinator, fetch_request([("t", [0, 1]), ("u", [2])]), version).kio
    epoch = 5 if version >= 5 else -1
    expected = [
        ("t", 0, 10, epoch, "meta-0", E.none),
        ("t", 1, -1, -1, "", E.none),
        ("u", 2, -1, -1, "", E.none),
    ]
    if version >= 8:
        (group,) = r.groups
        assert (group.group_id, group.error_code) == ("g1", E.none)
        assert fetched(group.topics) == expected
    else:
        assert fetched(r.topics) == expected
        if version >= 2:
            assert r.error_code == E.none
    assert coordinator.only("fetch") == ("g1", [TP("t", 0), TP("t", 1), TP("u", 2)])


@pytest.mark.parametrize("version", [2, 5, 7, 8])
def test_offset_fetch_all_partitions(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.committed = {"g1": {TP("t", 1): (11, 2, ""), TP("t", 0): (10, 2, "x")}}
    r = send(coordinator, fetch_request(None), version).kio
    topics = r.groups[0].topics if version >= 8 else r.topics
    assert [(n, p, o) for n, p, o, *_ in fetched(topics)] == [("t", 0, 10), ("t", 1, 11)]
    assert coordinator.only("fetch") == ("g1", None)


def test_offset_fetch_v1_error_goes_into_partitions(coordinator: FakeCoordinator) -> None:
    coordinator.group_errors = {"g1": E.coordinator_load_in_progress}
    r = send(coordinator, fetch_request([("t", [0, 1])]), 1).kio
    assert fetched(r.topics) == [
        ("t", 0, -1, -1, "", E.coordinator_load_in_progress),
        ("t", 1, -1, -1, "", E.coordinator_load_in_progress),
    ]


@pytest.mark.parametrize("version", [2, 6, 7])
def test_offset_fetch_top_level_error(coordinator: FakeCoordinator, version: int) -> None:
    coordinator.group_errors = {"g1": E.not_coordinator}
    r = send(coordinator, fetch_request([("t", [0])]), version).kio
    assert (r.error_code, r.topics) == (E.not_coordinator, ())


def test_offset_fetch_v8_batches_groups(coordinator: FakeCoordinator) -> None:
    coordinator.committed = {"a": {TP("t", 0): (7, 1, "")}, "b": {TP("t", 0): (9, 1, "m")}}
    coordinator.group_errors = {"c": E.not_coordinator}
    reply = send(coordinator, fetch_request([("t", [0])], groups=("a", "b", "c")), 8)
    r = reply.kio
    assert [(g.group_id, g.error_code) for g in r.groups] == [
        ("a", E.none),
        ("b", E.none),
        ("c", E.not_coordinator),
    ]
    assert [fetched(g.topics) for g in r.groups] == [
        [("t", 0, 7, 1, "", E.none)],
        [("t", 0, 9, 1, "m", E.none)],
        [],
    ]
    assert [g.group_id for g in reply.kp.groups] == ["a", "b", "c"]


# --- OffsetDelete --------------------------------------------------------------------------


def delete_offsets_request() -> Any:
    topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    part = topic.OffsetDeleteRequestPartition
    return OffsetDeleteRequest(
        group_id="g1",
        topics=[
            topic(name="t", partitions=[part(partition_index=0), part(partition_index=1)]),
            topic(name="missing", partitions=[part(partition_index=0)]),
        ],
    )


def test_offset_delete(coordinator: FakeCoordinator) -> None:
    r = send(coordinator, delete_offsets_request(), 0).kio
    assert r.error_code == E.none
    assert [
        (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics
    ] == [
        ("t", [(0, E.none), (1, E.none)]),
        ("missing", [(0, E.unknown_topic_or_partition)]),
    ]
    assert coordinator.only("delete_offsets") == ("g1", [TP("t", 0), TP("t", 1)])


def test_offset_delete_group_error(coordinator: FakeCoordinator) -> None:
    coordinator.delete_offsets_error = E.group_id_not_found
    r = send(coordinator, delete_offsets_request(), 0).kio
    assert r.error_code == E.group_id_not_found
    assert [(t.name, [p.error_code for p in t.partitions]) for t in r.topics] == [
        ("missing", [E.unknown_topic_or_partition])
    ]


def test_handler_modules_export_what_the_dispatcher_uses() -> None:
    assert HANDLERS[8] is offsets.handle_offset_commit
    assert HANDLERS[11] is groups.handle_join_group
