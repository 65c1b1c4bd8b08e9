"""Leader election rules (broker/controller/election.py), checked exhaustively over small
clusters against the rules' defining properties, plus Hypothesis for larger ones."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain, combinations, permutations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.controller.election import (
    ElectionResult,
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
    reassign_partition_leader,
)

pytestmark = pytest.mark.unit

UNIVERSE = (1, 2, 3, 4)


def subsets(items: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """Every subset of ``items``, keeping ``items``' order."""
    return chain.from_iterable(combinations(items, k) for k in range(len(items) + 1))


def assignments(max_len: int = 4) -> Iterator[tuple[int, ...]]:
    """Every ordered replica list of 1..max_len distinct brokers of UNIVERSE."""
    for k in range(1, max_len + 1):
        yield from permutations(UNIVERSE, k)


def isrs(assignment: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """ISR candidates: every subset of the assignment in assignment order and reversed, and
    one that also names a broker outside the assignment."""
    for s in subsets(assignment):
        yield s
        if len(s) > 1:
            yield tuple(reversed(s))
    outsider = next((b for b in (*UNIVERSE, 5) if b not in assignment), 5)
    yield (outsider, *assignment)


# --------------------------------------------------------------------------- offline


@pytest.mark.parametrize("unclean", [False, True])
def test_offline_election_exhaustive(unclean: bool) -> None:
    cases = 0
    for assignment in assignments():
        for isr in isrs(assignment):
            for live in subsets((*UNIVERSE, 5)):
                live_set = set(live)
                result = offline_partition_leader(
                    assignment, isr, live_set, unclean_enabled=unclean
                )
                cases += 1
                clean = [r for r in assignment if r in live_set and r in isr]
                any_live = [r for r in assignment if r in live_set]
                if clean:
                    # the first live in-sync replica in assignment order; dead brokers leave the ISR
                    assert result == ElectionResult(
                        clean[0], tuple(r for r in isr if r in live_set), unclean=False
                    )
                    assert result.leader in assignment and result.leader in live_set
                    assert result.leader in result.isr
                    assert set(result.isr) <= live_set
                    if assignment[0] in live_set and assignment[0] in isr:
                        assert result.leader == assignment[0]  # preferred when possible
                elif unclean and any_live:
                    assert result == ElectionResult(any_live[0], (any_live[0],), unclean=True)
                    assert result.leader not in isr
                else:
                    assert result == ElectionResult(None, tuple(isr), unclean=False)
                    assert not result.elected
    assert cases > 10_000


def test_offline_election_examples() -> None:
    # leader 1 died; 2 is the next live in-sync replica
    assert offline_partition_leader([1, 2, 3], [1, 2, 3], {2, 3}, unclean_enabled=False) == (
        ElectionResult(2, (2, 3))
    )
    # ISR order is kept, assignment order decides the leader
    assert offline_partition_leader([1, 2, 3], [3, 2], {2, 3}, unclean_enabled=False) == (
        ElectionResult(2, (3, 2))
    )
    # only out-of-sync replicas alive
    assert offline_partition_leader([1, 2, 3], [1], {2, 3}, unclean_enabled=False) == (
        ElectionResult(None, (1,))
    )
    assert offline_partition_leader([1, 2, 3], [1], {3, 2}, unclean_enabled=True) == (
        ElectionResult(2, (2,), unclean=True)
    )
    # nothing alive: no leader even with unclean election
    assert offline_partition_leader([1, 2], [1, 2], set(), unclean_enabled=True) == (
        ElectionResult(None, (1, 2))
    )
    # a new partition: the ISR is all live replicas, the first leads
    assert offline_partition_leader([3, 1, 2], [3, 1, 2], [1, 2, 3], unclean_enabled=False) == (
        ElectionResult(3, (3, 1, 2))
    )


def test_live_may_be_any_collection() -> None:
    for live in ([2, 3], (2, 3), {2, 3}, frozenset({2, 3}), {2: "a", 3: "b"}.keys()):
        assert offline_partition_leader([1, 2, 3], [1, 2, 3], live, unclean_enabled=False) == (
            ElectionResult(2, (2, 3))
        )


# ----------------------------------------------------------------------- reassignment


def test_reassign_election_exhaustive() -> None:
    for target in assignments():
        for isr in isrs(target):
            for live in subsets((*UNIVERSE, 5)):
                result = reassign_partition_leader(target, isr, set(live))
                ok = [r for r in target if r in live and r in isr]
                assert result.isr == tuple(isr)
                assert not result.unclean
                assert result.leader == (ok[0] if ok else None)
                if result.leader is not None:
                    assert result.leader in target and result.leader in live
                    assert result.leader in isr


def test_reassign_election_uses_target_order() -> None:
    # original replicas [1, 2], target [3, 2]: 3 is in sync, so it leads
    assert reassign_partition_leader([3, 2], [1, 2, 3], {1, 2, 3}) == ElectionResult(3, (1, 2, 3))
    # 3 not yet in sync: 2 leads; 1 (not in target) never does
    assert reassign_partition_leader([3, 2], [1, 2], {1, 2, 3}) == ElectionResult(2, (1, 2))
    assert reassign_partition_leader([3], [1, 2], {1, 2, 3}) == ElectionResult(None, (1, 2))


# --------------------------------------------------------------------------- preferred


def test_preferred_election_exhaustive() -> None:
    for assignment in assignments():
        for isr in isrs(assignment):
            for live in subsets((*UNIVERSE, 5)):
                result = preferred_replica_leader(assignment, isr, frozenset(live))
                preferred = assignment[0]
                expected = preferred if preferred in live and preferred in isr else None
                assert result == ElectionResult(expected, tuple(isr))


def test_preferred_election_examples() -> None:
    assert preferred_replica_leader([1, 2], [2, 1], {1, 2}) == ElectionResult(1, (2, 1))
    assert preferred_replica_leader([1, 2], [2], {1, 2}) == ElectionResult(None, (2,))
    assert preferred_replica_leader([1, 2], [1, 2], {2}) == ElectionResult(None, (1, 2))
    assert preferred_replica_leader([], [1], {1}) == ElectionResult(None, (1,))


# ------------------------------------------------------------------ controlled shutdown


def test_controlled_shutdown_election_exhaustive() -> None:
    cases = 0
    for assignment in assignments(3):
        for isr in isrs(assignment):
            for live in subsets(UNIVERSE):
                for down in subsets(UNIVERSE):
                    result = controlled_shutdown_leader(assignment, isr, set(live), set(down))
                    cases += 1
                    ok = [r for r in assignment if r in live and r in isr and r not in down]
                    assert not result.unclean
                    if ok:
                        assert result.leader == ok[0]
                        assert result.leader not in down  # never a shutting-down broker
                        assert result.leader in live and result.leader in isr
                        assert result.isr == tuple(r for r in isr if r not in down)
                        assert result.leader in result.isr
                    else:
                        assert result == ElectionResult(None, tuple(isr))
    assert cases > 10_000


def test_controlled_shutdown_examples() -> None:
    # broker 1 (the leader) shuts down; 2 takes over and 1 leaves the ISR
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1}) == ElectionResult(
        2, (2, 3)
    )
    # a follower shutting down leaves the ISR too
    assert controlled_shutdown_leader([1, 2, 3], [1, 2, 3], {1, 2, 3}, {1, 2}) == (
        ElectionResult(3, (3,))
    )
    # the only in-sync replica is shutting down: no move, ISR untouched
    assert controlled_shutdown_leader([1, 2], [1], {1, 2}, {1}) == ElectionResult(None, (1,))


# ---------------------------------------------------------------------------- property

brokers = st.integers(min_value=0, max_value=30)
replica_lists = st.lists(brokers, min_size=1, max_size=8, unique=True)


@pytest.mark.property
@settings(max_examples=300, deadline=None)
@given(
    assignment=replica_lists,
    isr=st.lists(brokers, max_size=8, unique=True),
    live=st.frozensets(brokers),
    down=st.frozensets(brokers),
    unclean=st.booleans(),
)
def test_election_invariants(
    assignment: list[int],
    isr: list[int],
    live: frozenset[int],
    down: frozenset[int],
    unclean: bool,
) -> None:
    offline = offline_partition_leader(assignment, isr, live, unclean_enabled=unclean)
    if offline.leader is not None:
        assert offline.leader in assignment and offline.leader in live
        assert offline.leader in offline.isr
        assert offline.unclean == (offline.leader not in isr)
        assert set(offline.isr) <= live
        # nobody earlier in the assignment was eligible
        earlier = assignment[: assignment.index(offline.leader)]
        assert not any(r in live and (r in isr or offline.unclean) for r in earlier)
    else:
        assert offline.isr == tuple(isr)
        assert not any(r in live and r in isr for r in assignment)
        assert not (unclean and any(r in live for r in assignment))

    clean_leader = offline_partition_leader(assignment, isr, live, unclean_enabled=False).leader
    assert reassign_partition_leader(assignment, isr, live).leader == clean_leader
    assert controlled_shutdown_leader(assignment, isr, live, ()).leader == clean_leader
    preferred = preferred_replica_leader(assignment, isr, live).leader
    assert preferred is None or preferred == clean_leader == assignment[0]

    shutdown = controlled_shutdown_leader(assignment, isr, live, down)
    if shutdown.leader is not None:
        assert shutdown.leader not in down
        assert not set(shutdown.isr) & down
