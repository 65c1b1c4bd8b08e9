"""Unit and property tests for broker.coordinator.group.group (the classic group state machine,
with its state in group_metadata and its members and protocol vote in member).

Each error path of JoinGroup, SyncGroup, Heartbeat, LeaveGroup and offset-commit validation is
exercised against Kafka 3.9's classic coordinator semantics; a Hypothesis state machine drives
random sequences of requests and timeouts through a model coordinator and checks invariants.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.coordinator.group.group import Group
from broker.coordinator.group.group_metadata import (
    VALID_PREVIOUS_STATES,
    GroupConfig,
    GroupDescription,
    GroupState,
    IllegalGroupTransition,
)
from broker.coordinator.group.member import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    UNKNOWN_MEMBER_ID,
    Member,
    _java_string_hash,
    select_protocol,
)
from broker.coordinator.group.results import (
    Completions,
    JoinMember,
    JoinResult,
    LeaveMemberResult,
    MemberIdentity,
    Pending,
    SyncResult,
)
from broker.protocol.errors import ErrorCode

pytestmark = pytest.mark.unit

E = ErrorCode
SESSION = 10_000
REBALANCE = 30_000
CONFIG = GroupConfig(
    min_session_timeout_ms=6_000,
    max_session_timeout_ms=300_000,
    max_size=100,
    initial_rebalance_delay_ms=0,
)
RANGE = (("range", b"range-md"),)
RR = (("roundrobin", b"rr-md"),)


def new_group(config: GroupConfig = CONFIG, now: int = 0) -> Group:
    return Group("g", config, now)


def join(
    g: Group,
    member_id: str = UNKNOWN_MEMBER_ID,
    *,
    instance: str | None = None,
    protocols: Sequence[tuple[str, bytes]] = RANGE,
    now: int = 0,
    require_known: bool = False,
    client_id: str = "client",
    session: int = SESSION,
    rebalance: int = REBALANCE,
    protocol_type: str = "consumer",
    skip: bool = False,
) -> JoinResult | Pending:
    return g.join(
        member_id=member_id,
        group_instance_id=instance,
        client_id=client_id,
        client_host="/127.0.0.1",
        rebalance_timeout_ms=rebalance,
        session_timeout_ms=session,
        protocol_type=protocol_type,
        protocols=protocols,
        now_ms=now,
        require_known_member_id=require_known,
        supports_skip_assignment=skip,
    )


def pending(outcome: JoinResult | Pending | SyncResult) -> Pending:
    assert isinstance(outcome, Pending), outcome
    return outcome


def result(outcome: JoinResult | Pending) -> JoinResult:
    assert isinstance(outcome, JoinResult), outcome
    return outcome


def sync_result(outcome: SyncResult | Pending) -> SyncResult:
    assert isinstance(outcome, SyncResult), outcome
    return outcome


def mem(g: Group, member_id: str) -> Member:
    member = g.member(member_id)
    assert member is not None, member_id
    return member


def sync(
    g: Group,
    member_id: str,
    generation: int | None = None,
    *,
    instance: str | None = None,
    assignments: dict[str, bytes] | None = None,
    now: int = 0,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
) -> SyncResult | Pending:
    return g.sync(
        member_id=member_id,
        generation_id=g.generation_id if generation is None else generation,
        group_instance_id=instance,
        now_ms=now,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=assignments,
    )


def heartbeat(
    g: Group,
    member_id: str,
    generation: int | None = None,
    *,
    instance: str | None = None,
    now: int = 0,
) -> ErrorCode:
    return g.heartbeat(
        member_id=member_id,
        generation_id=g.generation_id if generation is None else generation,
        group_instance_id=instance,
        now_ms=now,
    )


def stable_group(
    n: int = 2, *, instances: Sequence[str | None] | None = None, now: int = 0
) -> tuple[Group, list[str]]:
    """A Stable group of ``n`` members (member i gets assignment b"a<i>")."""
    g = new_group(now=now)
    ids = []
    for i in range(n):
        instance = instances[i] if instances else None
        ids.append(pending(join(g, instance=instance, now=now, client_id=f"c{i}")).member_id)
    assert g.join_can_complete(now)
    done = g.complete_join(now)
    assert set(done.joins) == set(ids)
    for mid in ids:
        if not g.is_leader(mid):
            pending(sync(g, mid, now=now))
    leader = g.leader_id
    assert leader is not None
    p = pending(sync(g, leader, assignments={m: f"a{i}".encode() for i, m in enumerate(ids)}))
    assert p.store is not None
    done = g.complete_sync(p.store.generation_id, p.store.assignments, now)
    assert set(done.syncs) == set(ids)
    assert g.state is GroupState.STABLE
    return g, ids


# ---------------------------------------------------------------------------------------------
# States and transitions


KAFKA_PREVIOUS = {
    "PreparingRebalance": {"Stable", "CompletingRebalance", "Empty"},
    "CompletingRebalance": {"PreparingRebalance"},
    "Stable": {"CompletingRebalance"},
    "Dead": {"Stable", "PreparingRebalance", "CompletingRebalance", "Empty", "Dead"},
    "Empty": {"PreparingRebalance"},
}


def test_state_names_are_kafkas() -> None:
    assert [s.value for s in GroupState] == [
        "Empty",
        "PreparingRebalance",
        "CompletingRebalance",
        "Stable",
        "Dead",
    ]


def test_valid_previous_states_table() -> None:
    assert {t.value: {s.value for s in prev} for t, prev in VALID_PREVIOUS_STATES.items()} == (
        KAFKA_PREVIOUS
    )


@pytest.mark.parametrize(("source", "target"), list(itertools.product(GroupState, GroupState)))
def test_transition_to_enforces_table(source: GroupState, target: GroupState) -> None:
    g = new_group()
    g.state = source
    if source.value in KAFKA_PREVIOUS[target.value]:
        g.transition_to(target, 42)
        assert g.state is target
        assert g.state_timestamp_ms == 42
    else:
        with pytest.raises(IllegalGroupTransition):
            g.transition_to(target, 42)
        assert g.state is source


def test_new_group_is_empty_generation_zero() -> None:
    g = new_group(now=7)
    assert g.state is GroupState.EMPTY
    assert g.generation_id == 0
    assert g.state_timestamp_ms == 7
    assert g.size == 0 and g.leader_id is None and g.protocol_type is None


def test_group_config_defaults_are_kafkas() -> None:
    c = GroupConfig()
    assert (c.min_session_timeout_ms, c.max_session_timeout_ms) == (6_000, 1_800_000)
    assert c.max_size == 2**31 - 1
    assert c.initial_rebalance_delay_ms == 3_000


# ---------------------------------------------------------------------------------------------
# Protocol selection


def test_java_string_hash_matches_java() -> None:
    assert _java_string_hash("hello") == 99162322
    assert _java_string_hash("Aa") == _java_string_hash("BB") == 2112
    assert _java_string_hash("") == 0
    assert _java_string_hash("range") == 108280125


@pytest.mark.parametrize(
    ("preferences", "expected"),
    [
        # The Java consumer's default list since 3.0: range first, cooperative-sticky second.
        ([["range", "cooperative-sticky"]] * 3, "range"),
        ([["cooperative-sticky", "range"]] * 2, "cooperative-sticky"),
        ([["roundrobin"], ["roundrobin"]], "roundrobin"),
        # Majority vote.
        ([["roundrobin", "range"]] * 2 + [["range", "roundrobin"]], "roundrobin"),
        ([["cooperative-sticky", "range"], ["range", "cooperative-sticky"], ["range"]], "range"),
        # Only protocols every member supports are candidates.
        ([["roundrobin", "range"], ["range"]], "range"),
        ([["cooperative-sticky", "roundrobin", "range"], ["roundrobin", "range"]], "roundrobin"),
        # Ties: first maximum in Java HashMap order (sticky < range < roundrobin < coop-sticky).
        ([["range", "roundrobin"], ["roundrobin", "range"]], "range"),
        ([["roundrobin", "range"], ["range", "roundrobin"]], "range"),
        ([["cooperative-sticky", "range"], ["range", "cooperative-sticky"]], "range"),
        (
            [["roundrobin", "cooperative-sticky"], ["cooperative-sticky", "roundrobin"]],
            "roundrobin",
        ),
        ([["sticky", "range"], ["range", "sticky"]], "sticky"),
    ],
)
def test_select_protocol(preferences: list[list[str]], expected: str) -> None:
    assert select_protocol(preferences) == expected


def test_select_protocol_rejects_empty_or_disjoint() -> None:
    with pytest.raises(ValueError):
        select_protocol([])
    with pytest.raises(ValueError):
        select_protocol([["range"], ["roundrobin"]])


def test_group_selects_protocol_at_join_completion() -> None:
    g = new_group()
    a = pending(join(g, protocols=[("roundrobin", b"1"), ("range", b"2")])).member_id
    pending(join(g, protocols=[("range", b"3"), ("roundrobin", b"4")]))
    pending(join(g, protocols=[("roundrobin", b"5"), ("range", b"6")]))
    done = g.complete_join(0)
    assert g.protocol_name == "roundrobin"
    leader = done.joins[a]
    assert leader.protocol_name == "roundrobin"
    assert [m.metadata for m in leader.members] == [b"1", b"4", b"5"]


# ---------------------------------------------------------------------------------------------
# JoinGroup


def test_member_ids_follow_kafkas_format() -> None:
    g = new_group()
    dyn = pending(join(g, client_id="consumer-1")).member_id
    assert dyn.startswith("consumer-1-")
    uuid.UUID(dyn.removeprefix("consumer-1-"))
    static = pending(join(g, instance="inst-7", client_id="ignored")).member_id
    assert static.startswith("inst-7-")
    uuid.UUID(static.removeprefix("inst-7-"))
    assert g.static_member_id("inst-7") == static


def test_first_join_starts_rebalance_and_completes_generation_one() -> None:
    g = new_group()
    p = pending(join(g, now=5))
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.protocol_type == "consumer"
    assert g.leader_id == p.member_id
    assert mem(g, p.member_id).awaiting_join
    assert g.join_can_complete(5)
    done = g.complete_join(5)
    r = done.joins[p.member_id]
    assert r == JoinResult(
        E.none,
        p.member_id,
        1,
        "consumer",
        "range",
        p.member_id,
        False,
        (JoinMember(p.member_id, None, b"range-md"),),
    )
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.generation_id == 1
    assert g.pending_sync_member_ids == {p.member_id}
    assert g.sync_deadline_ms == 5 + REBALANCE


def test_leader_gets_all_members_followers_get_none() -> None:
    g = new_group()
    a = pending(join(g, protocols=[("range", b"A")])).member_id
    b = pending(join(g, protocols=[("range", b"B")], instance="i-b")).member_id
    done = g.complete_join(0)
    assert done.joins[a].members == (JoinMember(a, None, b"A"), JoinMember(b, "i-b", b"B"))
    assert done.joins[b].members == ()
    assert done.joins[a].leader_id == done.joins[b].leader_id == a
    assert done.joins[b].generation_id == 1


def test_member_id_required_kip_394() -> None:
    g = new_group()
    r = result(join(g, require_known=True, client_id="rdkafka", now=0))
    assert r.error is E.member_id_required
    assert r.member_id.startswith("rdkafka-")
    assert g.state is GroupState.EMPTY and g.size == 0
    assert g.pending_member_ids == {r.member_id}
    p = pending(join(g, r.member_id, require_known=True, now=10))
    assert p.member_id == r.member_id
    assert g.pending_member_ids == frozenset()
    assert g.state is GroupState.PREPARING_REBALANCE


def test_pending_member_blocks_join_completion_until_it_rejoins_or_expires() -> None:
    g, (a, b) = stable_group(2)
    r = result(join(g, require_known=True, now=100, session=7_000))
    assert r.error is E.member_id_required
    assert g.state is GroupState.STABLE  # the pending member does not trigger a rebalance
    pending(join(g, a, now=100))  # the leader rejoins: rebalance
    pending(join(g, b, now=100))
    assert not g.join_can_complete(100)  # waits for the pending member
    assert g.expired_members(7_099) == ()
    assert g.expired_members(7_100) == (r.member_id,)
    assert g.remove_member(r.member_id, 7_100)
    assert g.join_can_complete(7_100)


def test_pending_member_rejoin_is_added() -> None:
    g, (a, b) = stable_group(2)
    r = result(join(g, require_known=True))
    pending(join(g, a))
    pending(join(g, b))
    pending(join(g, r.member_id))
    assert g.join_can_complete(0)
    done = g.complete_join(0)
    assert set(done.joins) == {a, b, r.member_id}
    assert g.generation_id == 2


def test_pending_member_with_instance_id_is_a_server_error() -> None:
    g = new_group()
    r = result(join(g, require_known=True))
    assert result(join(g, r.member_id, instance="x")).error is E.unknown_server_error


def test_without_require_known_member_id_new_member_is_added_directly() -> None:
    g = new_group()
    p = pending(join(g, require_known=False))
    assert g.has_member(p.member_id)


def test_static_member_never_gets_member_id_required() -> None:
    g = new_group()
    pending(join(g, instance="i", require_known=True))


def test_unknown_member_id() -> None:
    g = new_group()
    assert result(join(g, "nobody")) == JoinResult(E.unknown_member_id, "nobody")
    g, _ = stable_group(1)
    assert result(join(g, "nobody")).error is E.unknown_member_id


def test_static_join_with_unknown_instance_is_unknown_member() -> None:
    g, (a,) = stable_group(1)
    assert result(join(g, a, instance="never-seen")).error is E.unknown_member_id


@pytest.mark.parametrize("session", [5_999, 300_001, 0, -1])
def test_invalid_session_timeout(session: int) -> None:
    g = new_group()
    assert result(join(g, session=session)) == JoinResult(E.invalid_session_timeout, "")
    g2, (a, _) = stable_group(2)
    assert result(join(g2, a, session=session)).error is E.invalid_session_timeout
    assert g2.state is GroupState.STABLE


@pytest.mark.parametrize("session", [6_000, 300_000])
def test_session_timeout_bounds_are_inclusive(session: int) -> None:
    pending(join(new_group(), session=session))


def test_inconsistent_group_protocol() -> None:
    g = new_group()
    assert result(join(g, protocol_type="")).error is E.inconsistent_group_protocol
    assert result(join(g, protocols=[])).error is E.inconsistent_group_protocol
    g, (_a, b) = stable_group(2)
    r = result(join(g, protocol_type="connect"))
    assert r == JoinResult(E.inconsistent_group_protocol, UNKNOWN_MEMBER_ID)
    assert result(join(g, protocols=RR)).error is E.inconsistent_group_protocol
    # A known member switching to a protocol nobody else supports (Kafka counts its old list).
    r = result(join(g, b, protocols=RR))
    assert r == JoinResult(E.inconsistent_group_protocol, b)
    assert g.state is GroupState.STABLE


def test_new_member_with_common_protocol_is_accepted() -> None:
    g, _ = stable_group(2)
    pending(join(g, protocols=[("roundrobin", b""), ("range", b"x")]))
    assert g.state is GroupState.PREPARING_REBALANCE


def test_group_max_size_reached() -> None:
    config = GroupConfig(6_000, 300_000, max_size=2, initial_rebalance_delay_ms=0)
    g = new_group(config)
    a = pending(join(g)).member_id
    pending(join(g))
    assert result(join(g)) == JoinResult(E.group_max_size_reached, UNKNOWN_MEMBER_ID)
    g.complete_join(0)
    # CompletingRebalance/Stable: group size counts; existing members are accepted.
    assert result(join(g)).error is E.group_max_size_reached
    assert isinstance(join(g, a), JoinResult)  # same metadata: current generation returned
    assert g.size == 2


def test_group_max_size_in_preparing_rebalance_counts_awaiting_members() -> None:
    g = new_group()
    ids = [pending(join(g)).member_id for _ in range(2)]
    g.complete_join(0)
    # group.max.size lowered below the membership: members that rejoin first are kept, a
    # member that has not rejoined yet is shed once the awaiting count reaches the limit.
    g.config = GroupConfig(6_000, 300_000, max_size=1, initial_rebalance_delay_ms=0)
    pending(join(g, ids[0], protocols=[("range", b"changed")]))
    assert g.state is GroupState.PREPARING_REBALANCE
    r = result(join(g, ids[1]))
    assert r == JoinResult(E.group_max_size_reached, UNKNOWN_MEMBER_ID)
    assert not g.has_member(ids[1])
    assert g.join_can_complete(0)


def test_join_in_completing_rebalance_with_same_metadata_returns_current_generation() -> None:
    g = new_group()
    a = pending(join(g)).member_id
    b = pending(join(g)).member_id
    g.complete_join(0)
    ra = result(join(g, a))
    assert ra.error is E.none and ra.generation_id == 1 and ra.leader_id == a
    assert [m.member_id for m in ra.members] == [a, b]
    rb = result(join(g, b))
    assert rb.members == () and rb.protocol_name == "range"
    assert g.state is GroupState.COMPLETING_REBALANCE


def test_join_in_completing_rebalance_with_new_metadata_rebalances_and_resets_syncs() -> None:
    g = new_group()
    a = pending(join(g)).member_id
    b = pending(join(g)).member_id
    g.complete_join(0)
    pending(sync(g, b))
    pending(join(g, a, protocols=[("range", b"new")]))
    assert g.state is GroupState.PREPARING_REBALANCE
    done = g.drain_completions()
    assert done.syncs == {b: SyncResult(E.rebalance_in_progress)}
    assert g.pending_sync_member_ids == frozenset()


def test_follower_rejoin_in_stable_with_same_metadata_does_not_rebalance() -> None:
    g, (a, b) = stable_group(2)
    r = result(join(g, b))
    assert r == JoinResult(E.none, b, 1, "consumer", "range", a)
    assert g.state is GroupState.STABLE


def test_leader_rejoin_in_stable_rebalances() -> None:
    g, (a, _b) = stable_group(2)
    pending(join(g, a))
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.join_deadline_ms == REBALANCE


def test_follower_with_changed_metadata_rebalances() -> None:
    g, (_a, b) = stable_group(2)
    pending(join(g, b, protocols=[("range", b"other")]))
    assert g.state is GroupState.PREPARING_REBALANCE
    assert mem(g, b).protocols == (("range", b"other"),)


def test_join_in_empty_group_with_old_member_id_is_unknown_member() -> None:
    g, (a,) = stable_group(1)
    g.leave([MemberIdentity(a)], 0)
    g.complete_join(0)
    assert g.state is GroupState.EMPTY
    assert result(join(g, a)).error is E.unknown_member_id


def test_join_of_dead_group() -> None:
    g = new_group()
    assert g.delete(0) is E.none
    assert result(join(g)) == JoinResult(E.coordinator_not_available, "")
    assert result(join(g, "m")) == JoinResult(E.coordinator_not_available, "m")


# ---------------------------------------------------------------------------------------------
# Join completion, rebalance timeout, leader election


def test_join_waits_for_all_known_members() -> None:
    g, (a, b) = stable_group(2)
    pending(join(g, a, now=1_000))
    assert not g.join_can_complete(1_000)
    assert g.join_deadline_ms == 1_000 + REBALANCE
    pending(join(g, b, now=2_000))
    assert g.join_can_complete(2_000)


def test_rebalance_timeout_drops_dynamic_members_that_did_not_rejoin() -> None:
    g, (a, b, c) = stable_group(3)
    pending(join(g, b, now=0, protocols=[("range", b"b2")]))
    pending(join(g, c, now=0))
    assert not g.join_can_complete(REBALANCE - 1)
    assert g.join_can_complete(REBALANCE)
    done = g.complete_join(REBALANCE)
    assert set(done.joins) == {b, c}
    assert not g.has_member(a)
    # The old leader a did not rejoin: the first rejoined member leads.
    assert g.leader_id == b
    assert done.joins[b].members == (JoinMember(b, None, b"b2"), JoinMember(c, None, b"range-md"))
    assert g.generation_id == 2


def test_rebalance_timeout_is_the_largest_member_timeout() -> None:
    g = new_group()
    pending(join(g, rebalance=1_000))
    pending(join(g, rebalance=9_000))
    g.complete_join(0)
    assert g.rebalance_timeout_ms == 9_000
    assert g.sync_deadline_ms == 9_000


def test_static_members_that_did_not_rejoin_are_kept() -> None:
    g, (s, d) = stable_group(2, instances=["inst", None])
    pending(join(g, d, protocols=[("range", b"x")]))
    done = g.complete_join(REBALANCE)
    assert g.has_member(s)  # kept, even without a JoinGroup
    assert set(done.joins) == {d}
    assert g.leader_id == d
    assert g.pending_sync_member_ids == {s, d}


def test_only_unrejoined_static_members_extend_the_join_phase() -> None:
    g, (s1, s2) = stable_group(2, instances=["i1", "i2"])
    g.leave([MemberIdentity(s2, "i2")], 0)
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.join_can_complete(REBALANCE)
    done = g.complete_join(REBALANCE)
    assert not done
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.generation_id == 1
    assert g.join_deadline_ms == 2 * REBALANCE
    # Session expiry finally removes it and the group becomes Empty.
    assert g.expired_members(REBALANCE) == (s1,)
    g.remove_member(s1, REBALANCE)
    assert g.join_can_complete(REBALANCE)
    done = g.complete_join(REBALANCE)
    assert done.persist
    assert g.state is GroupState.EMPTY and g.generation_id == 2


def test_last_member_leaving_makes_group_empty() -> None:
    g, (a,) = stable_group(1)
    res = g.leave([MemberIdentity(a)], 50)
    assert res.error is E.none and res.members == (LeaveMemberResult(a, None, E.none),)
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.join_can_complete(50)
    done = g.complete_join(50)
    assert done == Completions({}, {}, True)
    assert g.state is GroupState.EMPTY
    assert g.generation_id == 2
    assert g.protocol_name is None and g.leader_id is None
    assert g.state_timestamp_ms == 50


def test_complete_join_outside_preparing_rebalance_raises() -> None:
    g = new_group()
    with pytest.raises(IllegalGroupTransition):
        g.complete_join(0)


def test_initial_rebalance_delay_is_extended_while_new_members_arrive() -> None:
    config = GroupConfig(6_000, 300_000, 100, initial_rebalance_delay_ms=3_000)
    g = new_group(config)
    pending(join(g, now=0, rebalance=10_000))
    assert g.in_initial_delay
    assert g.join_deadline_ms == 3_000
    assert not g.join_can_complete(2_999)
    pending(join(g, now=1_000, rebalance=10_000))  # new member during the first window
    assert not g.join_can_complete(1_000)  # even though everyone has joined
    assert not g.join_can_complete(3_000)  # extended by one more delay
    assert g.join_deadline_ms == 6_000
    assert g.join_can_complete(6_000)
    assert not g.in_initial_delay
    g.complete_join(6_000)
    assert g.size == 2


def test_initial_delay_never_exceeds_rebalance_timeout() -> None:
    config = GroupConfig(6_000, 300_000, 100, initial_rebalance_delay_ms=3_000)
    g = new_group(config)
    pending(join(g, now=0, rebalance=4_000))
    pending(join(g, now=100, rebalance=4_000))
    assert not g.join_can_complete(3_000)
    # Remaining was 1000: the next window is min(3000, 1000) and the one after is 0.
    assert g.join_deadline_ms == 4_000
    pending(join(g, now=3_500, rebalance=4_000))
    assert g.join_can_complete(4_000)


def test_initial_delay_is_not_extended_for_an_older_generation() -> None:
    config = GroupConfig(6_000, 300_000, 100, initial_rebalance_delay_ms=3_000)
    g, (a,) = stable_group(1)
    g.config = config
    g.leave([MemberIdentity(a)], 0)
    g.complete_join(0)
    assert g.state is GroupState.EMPTY and g.generation_id == 2
    pending(join(g, now=10))
    pending(join(g, now=20))
    assert g.join_can_complete(3_010)


# ---------------------------------------------------------------------------------------------
# SyncGroup


def test_sync_completes_all_members_and_fills_missing_assignments() -> None:
    g = new_group()
    a = pending(join(g)).member_id
    b = pending(join(g)).member_id
    c = pending(join(g)).member_id
    g.complete_join(0)
    assert pending(sync(g, b, now=5)) == Pending(b)
    p = pending(sync(g, a, assignments={a: b"A", b: b"B", "stranger": b"S"}, now=6))
    assert p.store is not None
    assert p.store.generation_id == 1
    assert dict(p.store.assignments) == {a: b"A", b: b"B", c: b""}
    assert g.state is GroupState.COMPLETING_REBALANCE  # not before the store completes
    done = g.complete_sync(1, p.store.assignments, 7)
    assert g.state is GroupState.STABLE
    assert done.syncs == {
        a: SyncResult(E.none, "consumer", "range", b"A"),
        b: SyncResult(E.none, "consumer", "range", b"B"),
    }
    assert mem(g, c).assignment == b""
    assert g.pending_sync_member_ids == {c}
    # c syncs late, in Stable: it gets its (empty) assignment at once.
    assert sync_result(sync(g, c, now=8)) == SyncResult(E.none, "consumer", "range", b"")
    assert g.pending_sync_member_ids == frozenset()
    assert g.sync_deadline_ms is None


def test_sync_in_stable_returns_current_assignment_and_refreshes_session() -> None:
    g, (_a, b) = stable_group(2)
    assert sync_result(sync(g, b, now=999)) == SyncResult(E.none, "consumer", "range", b"a1")
    assert mem(g, b).last_heartbeat_ms == 999


def test_sync_errors() -> None:
    g, (a, b) = stable_group(2, instances=[None, "ib"])
    assert sync_result(sync(g, a, 0)).error is E.illegal_generation
    assert sync_result(sync(g, a, 2)).error is E.illegal_generation
    assert sync_result(sync(g, "nobody")).error is E.unknown_member_id
    assert sync_result(sync(g, a, instance="ib")).error is E.fenced_instance_id
    assert sync_result(sync(g, b, instance="unknown-inst")).error is E.unknown_member_id
    assert sync_result(sync(g, a, protocol_type="connect")).error is E.inconsistent_group_protocol
    assert sync_result(sync(g, a, protocol_name="roundrobin")).error is (
        E.inconsistent_group_protocol
    )
    assert sync_result(sync(g, a, protocol_type="consumer", protocol_name="range")).error is E.none
    pending(join(g, a))
    assert sync_result(sync(g, b, instance="ib")) == SyncResult(E.rebalance_in_progress)
    g.unload(0)
    assert sync_result(sync(g, a)).error is E.coordinator_not_available


def test_sync_in_empty_group_is_unknown_member() -> None:
    g = new_group()
    assert sync_result(sync(g, "x", 0)).error is E.unknown_member_id


def test_complete_sync_error_propagates_and_rebalances() -> None:
    g = new_group()
    a = pending(join(g)).member_id
    b = pending(join(g)).member_id
    g.complete_join(0)
    pending(sync(g, b))
    p = pending(sync(g, a, assignments={a: b"A", b: b"B"}))
    assert p.store is not None
    done = g.complete_sync(1, p.store.assignments, 10, E.coordinator_not_available)
    assert done.syncs == {
        a: SyncResult(E.coordinator_not_available),
        b: SyncResult(E.coordinator_not_available),
    }
    assert g.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in g.members)


def test_complete_sync_for_a_stale_generation_is_ignored() -> None:
    g = new_group()
    a = pending(join(g)).member_id
    b = pending(join(g)).member_id
    g.complete_join(0)
    p = pending(sync(g, a, assignments={a: b"A", b: b"B"}))
    assert p.store is not None
    pending(join(g, b, protocols=[("range", b"changed")]))  # new rebalance meanwhile
    assert g.drain_completions().syncs == {a: SyncResult(E.rebalance_in_progress)}
    assert not g.complete_sync(1, p.store.assignments, 5)
    assert g.state is GroupState.PREPARING_REBALANCE


def test_members_that_do_not_sync_in_time_are_removed() -> None:
    g = new_group()
    a = pending(join(g, rebalance=5_000)).member_id
    b = pending(join(g, rebalance=5_000)).member_id
    g.complete_join(0)
    p = pending(sync(g, a, assignments={a: b"A", b: b"B"}))
    assert p.store is not None
    g.complete_sync(1, p.store.assignments, 1)
    assert g.sync_deadline_ms == 5_000
    assert g.expire_pending_sync(4_999) == ()
    assert g.expire_pending_sync(5_000) == (b,)
    assert not g.has_member(b)
    assert g.state is GroupState.PREPARING_REBALANCE


def test_pending_sync_expiry_in_completing_rebalance_resets_parked_syncs() -> None:
    g = new_group()
    a = pending(join(g)).member_id
    b = pending(join(g)).member_id
    g.complete_join(0)
    pending(sync(g, b))
    assert g.expire_pending_sync(REBALANCE) == (a,)
    assert g.drain_completions().syncs == {b: SyncResult(E.rebalance_in_progress)}
    assert g.leader_id == b


# ---------------------------------------------------------------------------------------------
# Heartbeat


def test_heartbeat_paths() -> None:
    g, (a, b) = stable_group(2, instances=[None, "ib"])
    assert heartbeat(g, a, now=100) is E.none
    assert mem(g, a).last_heartbeat_ms == 100
    assert heartbeat(g, "nobody") is E.unknown_member_id
    assert heartbeat(g, a, 0) is E.illegal_generation
    assert heartbeat(g, a, instance="ib") is E.fenced_instance_id
    assert heartbeat(g, b, instance="other") is E.unknown_member_id
    pending(join(g, a))
    assert heartbeat(g, b, instance="ib", now=200) is E.rebalance_in_progress
    assert mem(g, b).last_heartbeat_ms == 200
    pending(join(g, b, instance="ib"))
    g.complete_join(300)
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert heartbeat(g, a, 1) is E.illegal_generation
    assert heartbeat(g, a, now=400) is E.none
    assert mem(g, a).last_heartbeat_ms == 400
    g.unload(500)
    assert heartbeat(g, a) is E.coordinator_not_available


def test_heartbeat_in_empty_group() -> None:
    g = new_group()
    assert heartbeat(g, "x") is E.unknown_member_id


# ---------------------------------------------------------------------------------------------
# LeaveGroup and removal


def test_leave_batch() -> None:
    g, (a, _b, c) = stable_group(3, instances=[None, "ib", "ic"])
    res = g.leave(
        [
            MemberIdentity(a),
            MemberIdentity("", "ib"),  # administrative removal by instance id
            MemberIdentity("", "nobody"),
            MemberIdentity("ghost"),
            MemberIdentity(a),  # already gone
            MemberIdentity("wrong-id", "ic"),
        ],
        10,
    )
    assert res.error is E.none
    assert [m.error for m in res.members] == [
        E.none,
        E.none,
        E.unknown_member_id,
        E.unknown_member_id,
        E.unknown_member_id,
        E.fenced_instance_id,
    ]
    assert res.members[1] == LeaveMemberResult("", "ib", E.none)
    assert [m.member_id for m in g.members] == [c]
    assert g.static_member_id("ib") is None
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.leader_id == c


def test_leave_of_pending_member() -> None:
    g = new_group()
    r = result(join(g, require_known=True))
    res = g.leave([MemberIdentity(r.member_id)], 0)
    assert res.members[0].error is E.none
    assert g.pending_member_ids == frozenset()
    assert g.state is GroupState.EMPTY


def test_leave_of_dead_group() -> None:
    g = new_group()
    g.delete(0)
    assert g.leave([MemberIdentity("a")], 0).error is E.coordinator_not_available


def test_leave_during_rebalance_answers_parked_join() -> None:
    g, (a, b) = stable_group(2)
    pending(join(g, a))
    pending(join(g, b))
    # b's join is parked but it leaves anyway (e.g. the consumer closes).
    g.leave([MemberIdentity(b)], 0)
    assert g.drain_completions().joins == {b: JoinResult(E.unknown_member_id, UNKNOWN_MEMBER_ID)}
    assert g.join_can_complete(0)
    done = g.complete_join(0)
    assert set(done.joins) == {a}


def test_remove_member_in_completing_rebalance_resets_syncs() -> None:
    g = new_group()
    pending(join(g))
    b = pending(join(g)).member_id
    c = pending(join(g)).member_id
    g.complete_join(0)
    pending(sync(g, b))
    pending(sync(g, c))
    g.drain_completions()
    assert g.remove_member(c, 1)
    done = g.drain_completions()
    assert done.syncs == {
        b: SyncResult(E.rebalance_in_progress),
        c: SyncResult(E.unknown_member_id),
    }
    assert g.state is GroupState.PREPARING_REBALANCE
    assert not g.remove_member(c, 1)


# ---------------------------------------------------------------------------------------------
# Session expiry


def test_expired_members_by_session_timeout() -> None:
    g, (a, b) = stable_group(2, now=1_000)
    assert g.next_deadline_ms() == 1_000 + SESSION
    heartbeat(g, a, now=5_000)
    assert g.expired_members(1_000 + SESSION - 1) == ()
    assert g.expired_members(1_000 + SESSION) == (b,)
    assert g.expired_members(5_000 + SESSION) == (a, b)
    g.remove_member(b, 1_000 + SESSION)
    assert g.state is GroupState.PREPARING_REBALANCE


def test_members_with_parked_requests_do_not_expire() -> None:
    g, (a, b) = stable_group(2)
    pending(join(g, a))
    assert g.expired_members(10 * SESSION) == (b,)  # b did not rejoin: it expires
    g.complete_join(REBALANCE)  # (b dropped as not rejoined)
    assert g.members[0].member_id == a
    pending(sync(g, a, assignments={a: b"x"}))
    assert g.expired_members(100 * SESSION) == ()


def test_new_member_expires_after_five_minutes_if_its_join_stays_parked() -> None:
    g, (a,) = stable_group(1)
    heartbeat(g, a, now=0)
    p = pending(join(g, now=0, rebalance=10 * NEW_MEMBER_JOIN_TIMEOUT_MS))
    # The leader a never rejoins; its session expires first.
    assert g.expired_members(SESSION) == (a,)
    g.remove_member(a, SESSION)
    assert g.join_can_complete(SESSION)  # the new member alone has joined
    done = g.complete_join(SESSION)
    assert set(done.joins) == {p.member_id}
    # A long-lived member that does not rejoin keeps the new member's join parked.
    g2 = new_group(GroupConfig(6_000, 1_800_000, 100, initial_rebalance_delay_ms=0))
    a2 = pending(join(g2, now=0, session=600_000, rebalance=900_000)).member_id
    g2.complete_join(0)
    pending(sync(g2, a2, assignments={a2: b"x"}))
    g2.complete_sync(1, {a2: b"x"}, 0)
    p2 = pending(join(g2, now=0))
    assert g2.state is GroupState.PREPARING_REBALANCE
    assert g2.expired_members(NEW_MEMBER_JOIN_TIMEOUT_MS - 1) == ()
    assert g2.expired_members(NEW_MEMBER_JOIN_TIMEOUT_MS) == (p2.member_id,)
    g2.remove_member(p2.member_id, NEW_MEMBER_JOIN_TIMEOUT_MS)
    assert g2.drain_completions().joins == {
        p2.member_id: JoinResult(E.unknown_member_id, UNKNOWN_MEMBER_ID)
    }


def test_join_completion_resets_session() -> None:
    g = new_group()
    a = pending(join(g, now=0)).member_id
    g.complete_join(7_000)
    assert mem(g, a).last_heartbeat_ms == 7_000
    assert not mem(g, a).is_new


# ---------------------------------------------------------------------------------------------
# Static membership


def test_static_rejoin_in_stable_without_protocol_change_does_not_rebalance() -> None:
    g, (a, b) = stable_group(2, instances=["ia", "ib"])
    r = result(join(g, instance="ib", now=50))
    assert r.error is E.none
    assert r.member_id != b and r.member_id.startswith("ib-")
    assert (r.generation_id, r.protocol_name, r.leader_id, r.members) == (1, "range", a, ())
    assert g.state is GroupState.STABLE and g.generation_id == 1
    assert g.static_member_id("ib") == r.member_id
    assert mem(g, r.member_id).assignment == b"a1"
    assert g.drain_completions().persist
    # The old member id is fenced everywhere.
    assert heartbeat(g, b, instance="ib") is E.fenced_instance_id
    assert sync_result(sync(g, b, instance="ib")).error is E.fenced_instance_id
    assert result(join(g, b, instance="ib")).error is E.fenced_instance_id
    assert g.validate_offset_commit(b, 1, "ib") is E.fenced_instance_id
    assert g.leave([MemberIdentity(b, "ib")], 0).members[0].error is E.fenced_instance_id
    # The new one works.
    assert sync_result(sync(g, r.member_id, instance="ib")).assignment == b"a1"
    assert heartbeat(g, r.member_id, instance="ib") is E.none


def test_static_leader_rejoin_before_v9_returns_old_leader_id() -> None:
    g, (a, _b) = stable_group(2, instances=["ia", "ib"])
    r = result(join(g, instance="ia"))
    assert r.leader_id == a  # the old id: the new incarnation does not think it leads
    assert g.leader_id == r.member_id
    assert r.members == () and not r.skip_assignment


def test_static_leader_rejoin_v9_skips_assignment() -> None:
    g, (_a, b) = stable_group(2, instances=["ia", "ib"])
    r = result(join(g, instance="ia", skip=True))
    assert r.leader_id == r.member_id == g.leader_id
    assert r.skip_assignment
    assert [m.member_id for m in r.members] == [b, r.member_id]
    follower = result(join(g, instance="ib", skip=True))
    assert not follower.skip_assignment and follower.members == ()


def test_static_rejoin_that_changes_protocol_selection_rebalances() -> None:
    g, (a, b) = stable_group(2, instances=["ia", "ib"])
    # Both members now prefer roundrobin: the vote would change.
    pending(join(g, a, instance="ia", protocols=[("roundrobin", b""), ("range", b"")]))
    # (a is the leader: its rejoin rebalances anyway; finish it.)
    pending(join(g, b, instance="ib"))
    g.complete_join(0)
    assert g.protocol_name == "range"  # tie: range wins
    p = pending(sync(g, a, instance="ia", assignments={}))
    assert p.store is not None
    g.complete_sync(p.store.generation_id, p.store.assignments, 0)
    new = pending(join(g, instance="ib", protocols=[("roundrobin", b""), ("range", b"")]))
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.static_member_id("ib") == new.member_id


def test_static_rejoin_in_completing_rebalance_rebalances_and_fences_old_sync() -> None:
    g = new_group()
    a = pending(join(g, instance="ia")).member_id
    b = pending(join(g, instance="ib")).member_id
    g.complete_join(0)
    pending(sync(g, b, instance="ib"))
    new_b = pending(join(g, instance="ib")).member_id
    assert g.state is GroupState.PREPARING_REBALANCE
    done = g.drain_completions()
    assert done.syncs == {b: SyncResult(E.fenced_instance_id)}
    assert g.static_member_id("ib") == new_b
    assert not g.has_member(b) and g.has_member(a)


def test_static_rejoin_in_preparing_rebalance_fences_old_parked_join() -> None:
    g, (a, b) = stable_group(2, instances=["ia", "ib"])
    pending(join(g, a, instance="ia"))
    pending(join(g, b, instance="ib"))
    new_b = pending(join(g, instance="ib")).member_id
    assert g.drain_completions().joins == {b: JoinResult(E.fenced_instance_id, b)}
    assert g.join_can_complete(0)
    done = g.complete_join(0)
    assert set(done.joins) == {a, new_b}


def test_static_new_instance_is_added_and_rebalances() -> None:
    g, _ = stable_group(1)
    p = pending(join(g, instance="fresh"))
    assert mem(g, p.member_id).is_static
    assert g.state is GroupState.PREPARING_REBALANCE


def test_static_leader_replacement_keeps_leadership() -> None:
    g, (a, _b) = stable_group(2, instances=["ia", "ib"])
    pending(join(g, a, instance="ia"))
    new_a = pending(join(g, instance="ia")).member_id
    assert g.leader_id == new_a


# ---------------------------------------------------------------------------------------------
# Offset commit validation


def test_offset_commit_simple_consumer_on_empty_group() -> None:
    g = new_group()
    assert g.validate_offset_commit("", -1, None) is E.none
    assert g.validate_offset_commit("anything", -1, None) is E.none
    assert g.validate_offset_commit("", 0, None) is E.unknown_member_id
    assert g.validate_offset_commit("", -1, "inst", transactional=True) is E.none


def test_offset_commit_on_active_group() -> None:
    g, (a, b) = stable_group(2, instances=[None, "ib"])
    assert g.validate_offset_commit(a, 1, None, now_ms=77) is E.none
    assert mem(g, a).last_heartbeat_ms == 77
    assert g.validate_offset_commit("", -1, None) is E.unknown_member_id
    assert g.validate_offset_commit("", -1, None, transactional=True) is E.none
    assert g.validate_offset_commit(a, -1, None) is E.illegal_generation
    assert g.validate_offset_commit(a, 0, None) is E.illegal_generation
    assert g.validate_offset_commit("ghost", 1, None) is E.unknown_member_id
    assert g.validate_offset_commit(a, 1, "ib") is E.fenced_instance_id
    assert g.validate_offset_commit(b, 1, "other") is E.unknown_member_id
    assert g.validate_offset_commit(b, 1, "ib", transactional=True) is E.none
    pending(join(g, a))
    # PreparingRebalance: commits still allowed (the heartbeat tells about the rebalance).
    assert g.validate_offset_commit(b, 1, "ib") is E.none
    pending(join(g, b, instance="ib"))
    g.complete_join(0)
    assert g.validate_offset_commit(a, 1, None) is E.illegal_generation
    assert g.validate_offset_commit(a, 2, None) is E.rebalance_in_progress
    assert g.validate_offset_commit(a, 2, None, transactional=True) is E.none
    g.unload(0)
    assert g.validate_offset_commit(a, 2, None) is E.coordinator_not_available


# ---------------------------------------------------------------------------------------------
# Describe, list, delete, unload, load


def test_describe_stable_and_rebalancing() -> None:
    g, (a, b) = stable_group(2, instances=[None, "ib"])
    d = g.describe()
    assert (d.group_id, d.state, d.protocol_type, d.protocol) == (
        "g",
        "Stable",
        "consumer",
        "range",
    )
    assert [
        (m.member_id, m.group_instance_id, m.client_id, m.metadata, m.assignment) for m in d.members
    ] == [
        (a, None, "c0", b"range-md", b"a0"),
        (b, "ib", "c1", b"range-md", b"a1"),
    ]
    assert d.members[0].client_host == "/127.0.0.1"
    pending(join(g, a))
    d = g.describe()
    assert (d.state, d.protocol) == ("PreparingRebalance", "")
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)
    assert new_group().describe() == GroupDescription("g", "Empty", "", "", ())
    assert GroupDescription.dead("x") == GroupDescription("x", "Dead", "", "", ())


def test_overview_and_state_filter() -> None:
    g, _ = stable_group(1)
    o = g.overview()
    assert (o.group_id, o.protocol_type, o.state, o.group_type) == (
        "g",
        "consumer",
        "Stable",
        "classic",
    )
    assert g.in_states([])
    assert g.in_states(["stable"]) and g.in_states(["STABLE", "empty"])
    assert not g.in_states(["Empty"])


def test_delete() -> None:
    g, _ = stable_group(1)
    assert g.delete(0) is E.non_empty_group
    e = new_group()
    assert e.delete(5) is E.none
    assert e.state is GroupState.DEAD
    assert e.delete(6) is E.group_id_not_found


def test_unload_answers_parked_requests_with_not_coordinator() -> None:
    g, (a, _b) = stable_group(2)
    pending(join(g, a))
    done = g.unload(0)
    assert done.joins == {a: JoinResult(E.not_coordinator, a)}
    assert g.state is GroupState.DEAD
    assert g.expired_members(10**9) == ()
    g2 = new_group()
    x = pending(join(g2)).member_id
    g2.complete_join(0)
    pending(sync(g2, x, assignments={}))
    assert g2.unload(0).syncs == {x: SyncResult(E.not_coordinator)}


@dataclass(frozen=True)
class _Record:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


def test_load_stable_and_empty() -> None:
    records = [
        _Record("m1", None, "c1", "/h", REBALANCE, SESSION, b"sub1", b"as1"),
        _Record("m2", "i2", "c2", "/h", REBALANCE, SESSION, b"sub2", b"as2"),
    ]
    g = Group.load(
        "g",
        CONFIG,
        protocol_type="consumer",
        generation_id=4,
        protocol_name="range",
        leader_id="m1",
        state_timestamp_ms=123,
        members=records,
        now_ms=1_000,
    )
    assert g.state is GroupState.STABLE and g.generation_id == 4 and g.leader_id == "m1"
    assert g.state_timestamp_ms == 123
    assert g.static_member_id("i2") == "m2"
    assert g.describe().members[1].metadata == b"sub2"
    assert sync_result(sync(g, "m2", instance="i2", now=2_000)).assignment == b"as2"
    assert g.expired_members(1_000 + SESSION) == ("m1",)
    empty = Group.load(
        "e",
        CONFIG,
        protocol_type="consumer",
        generation_id=3,
        protocol_name=None,
        leader_id=None,
        state_timestamp_ms=None,
        members=[],
        now_ms=9,
    )
    assert empty.state is GroupState.EMPTY and empty.generation_id == 3
    assert empty.state_timestamp_ms == 9
    assert empty.validate_offset_commit("", -1, None) is E.none


def test_load_over_capacity_rebalances() -> None:
    records = [_Record(f"m{i}", None, "c", "/h", REBALANCE, SESSION, b"", b"") for i in range(3)]
    g = Group.load(
        "g",
        GroupConfig(6_000, 300_000, max_size=2, initial_rebalance_delay_ms=0),
        protocol_type="consumer",
        generation_id=1,
        protocol_name="range",
        leader_id="m0",
        state_timestamp_ms=0,
        members=records,
        now_ms=0,
    )
    assert g.state is GroupState.PREPARING_REBALANCE


def test_next_deadline_covers_join_sync_and_pending_members() -> None:
    g = new_group()
    assert g.next_deadline_ms() is None
    r = result(join(g, require_known=True, now=0, session=8_000))
    assert g.next_deadline_ms() == 8_000
    pending(join(g, r.member_id, now=1_000, rebalance=5_000))
    # Initial delay 0: the join deadline is now; the new member's 5-minute timer is later.
    assert g.next_deadline_ms() == 1_000
    g.complete_join(2_000)
    assert g.sync_deadline_ms == 7_000
    assert g.next_deadline_ms() == 7_000


def test_current_member_metadata_needs_a_selected_protocol() -> None:
    g, _ = stable_group(1)
    pending(join(g, g.leader_id or ""))
    with pytest.raises(IllegalGroupTransition):
        g.current_member_metadata()
    assert "PreparingRebalance" in repr(g)


def test_load_with_unknown_leader_picks_first_member() -> None:
    g = Group.load(
        "g",
        CONFIG,
        protocol_type="consumer",
        generation_id=1,
        protocol_name="range",
        leader_id="gone",
        state_timestamp_ms=0,
        members=[_Record("m1", None, "c", "/h", REBALANCE, SESSION, b"", b"")],
        now_ms=0,
    )
    assert g.leader_id == "m1"


def test_select_protocol_with_many_protocols_uses_a_larger_table() -> None:
    names = [f"p{i}" for i in range(20)]
    # Each protocol gets one vote: the tie goes to the first in Java's 32-bucket order.
    winner = select_protocol([[name, *names] for name in names])
    assert winner in names
    assert select_protocol([names, list(reversed(names))]) in {"p0", "p19"}


# ---------------------------------------------------------------------------------------------
# Property: random request sequences keep the invariants


@dataclass
class _Client:
    instance: str | None
    protocols: tuple[tuple[str, bytes], ...]
    member_id: str = ""
    generation: int = -1
    members: tuple[JoinMember, ...] = ()


PROTOCOL_CHOICES = [
    (("range", b"r"), ("cooperative-sticky", b"c")),
    (("cooperative-sticky", b"c"), ("range", b"r")),
    (("roundrobin", b"o"), ("range", b"r")),
]


class GroupMachine(RuleBasedStateMachine):
    """A model coordinator drives one Group with random requests and timeouts."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.group = Group(
            "g", GroupConfig(6_000, 300_000, max_size=4, initial_rebalance_delay_ms=500), 0
        )
        self.clients: list[_Client] = []
        self.parked_joins: dict[str, _Client] = {}
        self.parked_syncs: dict[str, _Client] = {}
        self.stores: list[tuple[int, dict[str, bytes]]] = []
        self.max_generation = 0

    # -- plumbing -------------------------------------------------------------------------------

    def _route(self, done: Completions) -> None:
        for mid, res in done.joins.items():
            assert mid in self.parked_joins, (mid, res)
            client = self.parked_joins.pop(mid)
            self._apply_join(client, res)
        for mid, sres in done.syncs.items():
            assert mid in self.parked_syncs, (mid, sres)
            del self.parked_syncs[mid]
            if sres.error is E.none:
                assert sres.protocol_name == self.group.protocol_name

    def _apply_join(self, client: _Client, res: JoinResult) -> None:
        if res.error is E.none:
            client.member_id = res.member_id
            client.generation = res.generation_id
            client.members = res.members
        elif res.error is E.member_id_required:
            client.member_id = res.member_id
        elif res.error in (E.unknown_member_id, E.fenced_instance_id, E.group_max_size_reached):
            client.member_id = ""
            client.generation = -1

    def _settle(self) -> None:
        g = self.group
        self._route(g.drain_completions())
        for _ in range(5):
            if g.join_can_complete(self.now):
                self._route(g.complete_join(self.now))
            else:
                break

    # -- rules ----------------------------------------------------------------------------------

    @rule(
        protocols=st.sampled_from(PROTOCOL_CHOICES),
        instance=st.sampled_from([None, None, "s1", "s2"]),
    )
    def new_client(self, protocols: tuple[tuple[str, bytes], ...], instance: str | None) -> None:
        if len(self.clients) < 6:
            self.clients.append(_Client(instance, protocols))

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), require_known=st.booleans(), change=st.booleans())
    def join(self, data: st.DataObject, require_known: bool, change: bool) -> None:
        client = data.draw(st.sampled_from(self.clients))
        if change:
            client.protocols = data.draw(st.sampled_from(PROTOCOL_CHOICES))
        outcome = self.group.join(
            member_id=client.member_id,
            group_instance_id=client.instance,
            client_id="c",
            client_host="h",
            rebalance_timeout_ms=20_000,
            session_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=client.protocols,
            now_ms=self.now,
            require_known_member_id=require_known,
        )
        if isinstance(outcome, Pending):
            self.parked_joins[outcome.member_id] = client
            client.member_id = outcome.member_id
        else:
            self._apply_join(client, outcome)
        self._settle()

    @precondition(lambda self: self.clients)
    @rule()
    def everyone_joins(self) -> None:
        """Cooperative clients: every client (re)joins, then the initial delay passes."""
        for client in self.clients:
            if client.member_id in self.parked_joins:
                continue
            outcome = self.group.join(
                member_id=client.member_id,
                group_instance_id=client.instance,
                client_id="c",
                client_host="h",
                rebalance_timeout_ms=20_000,
                session_timeout_ms=10_000,
                protocol_type="consumer",
                protocols=client.protocols,
                now_ms=self.now,
                require_known_member_id=True,
            )
            if isinstance(outcome, Pending):
                self.parked_joins[outcome.member_id] = client
                client.member_id = outcome.member_id
            else:
                self._apply_join(client, outcome)
            self._route(self.group.drain_completions())
        self.now += 600
        self._settle()

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def sync(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(self.clients))
        assignments = {m.member_id: b"x-" + m.member_id.encode() for m in client.members}
        outcome = self.group.sync(
            member_id=client.member_id,
            generation_id=client.generation,
            group_instance_id=client.instance,
            now_ms=self.now,
            assignments=assignments,
        )
        if isinstance(outcome, Pending):
            self.parked_syncs[outcome.member_id] = client
            if outcome.store is not None:
                assert set(outcome.store.assignments) == {m.member_id for m in self.group.members}
                self.stores.append((outcome.store.generation_id, dict(outcome.store.assignments)))
        self._settle()

    @rule()
    def everyone_syncs(self) -> None:
        """Cooperative clients: every current member that has its join result syncs."""
        g = self.group
        for client in self.clients:
            if (
                g.has_member(client.member_id)
                and client.generation == g.generation_id
                and client.member_id not in self.parked_syncs
                and client.member_id not in self.parked_joins
            ):
                outcome = g.sync(
                    member_id=client.member_id,
                    generation_id=client.generation,
                    group_instance_id=client.instance,
                    now_ms=self.now,
                    assignments={m.member_id: b"x" for m in client.members},
                )
                if isinstance(outcome, Pending):
                    self.parked_syncs[outcome.member_id] = client
                    if outcome.store is not None:
                        store = outcome.store
                        self._route(
                            g.complete_sync(store.generation_id, store.assignments, self.now)
                        )
        self._settle()

    @precondition(lambda self: self.stores)
    @rule(fail=st.booleans())
    def store_done(self, fail: bool) -> None:
        generation, assignments = self.stores.pop(0)
        error = E.not_enough_replicas if fail else E.none
        self._route(self.group.complete_sync(generation, assignments, self.now, error))
        self._settle()

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(self.clients))
        self.group.heartbeat(
            member_id=client.member_id,
            generation_id=client.generation,
            group_instance_id=client.instance,
            now_ms=self.now,
        )
        self._settle()

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), by_instance=st.booleans())
    def leave(self, data: st.DataObject, by_instance: bool) -> None:
        client = data.draw(st.sampled_from(self.clients))
        identity = (
            MemberIdentity("", client.instance)
            if by_instance and client.instance
            else MemberIdentity(client.member_id, client.instance)
        )
        self.group.leave([identity], self.now)
        self._settle()

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        client = data.draw(st.sampled_from(self.clients))
        self.group.validate_offset_commit(
            client.member_id, client.generation, client.instance, now_ms=self.now
        )

    @rule(ms=st.sampled_from([1, 100, 500, 600, 1_000, 5_000, 11_000, 21_000, 300_000]))
    def advance_time(self, ms: int) -> None:
        self.now += ms
        g = self.group
        for member_id in g.expired_members(self.now):
            g.remove_member(member_id, self.now)
        g.expire_pending_sync(self.now)
        self._settle()

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def group_invariants(self) -> None:
        g = self.group
        assert g.state in GroupState and g.state is not GroupState.DEAD
        assert g.generation_id >= self.max_generation
        self.max_generation = g.generation_id
        member_ids = {m.member_id for m in g.members}
        if g.state is GroupState.EMPTY:
            assert not member_ids
        if member_ids:
            assert g.leader_id in member_ids
            assert g.protocol_type == "consumer"
        else:
            assert g.leader_id is None
            assert g.state in (GroupState.EMPTY, GroupState.PREPARING_REBALANCE)
        if g.state is GroupState.STABLE:
            assert g.protocol_name is not None
            for m in g.members:
                assert m.assignment, m
                m.metadata_for(g.protocol_name)
        if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert g.protocol_name is not None
            assert all(any(n == g.protocol_name for n, _ in m.protocols) for m in g.members)
            assert g.pending_sync_member_ids <= {m.member_id for m in g.members}
        for m in g.members:
            if m.awaiting_join:
                assert g.state is GroupState.PREPARING_REBALANCE
                assert m.member_id in self.parked_joins
            if m.awaiting_sync:
                assert g.state is GroupState.COMPLETING_REBALANCE
                assert m.member_id in self.parked_syncs
            if m.group_instance_id is not None:
                assert g.static_member_id(m.group_instance_id) == m.member_id
        assert not (g.pending_member_ids & member_ids)
        assert g.pending_sync_member_ids <= member_ids


TestGroupMachine = GroupMachine.TestCase
TestGroupMachine.settings = settings(
    max_examples=150,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupMachine = pytest.mark.property(TestGroupMachine)


def test_member_id_from_a_huge_instance_id_still_fits_a_kafka_string() -> None:
    """Found by the protocol fuzzer (issue 17): a 32,767-byte group.instance.id gave a
    32,804-byte member id, and the JoinGroup response could not be encoded."""
    g = new_group()
    r = result(join(g, require_known=True, client_id="x" * 32767, now=0))
    assert len(r.member_id.encode()) <= 32767
    assert r.member_id.startswith("x" * 100)
    p = pending(join(g, r.member_id, require_known=True, now=10))
    assert p.member_id == r.member_id
