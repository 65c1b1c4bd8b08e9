"""Partition leader election rules, as pure functions the controller applies.

Theory of operation (Kafka 3.9, ``PartitionLeaderElectionAlgorithms`` and ``Election``): every
rule walks the partition's replica list in *assignment order*, so the first replica (the
preferred replica) wins whenever it qualifies and leadership is predictable. The four rules
differ only in which replicas qualify and in the ISR they write with the new leader:

* offline (new or offline partition): the first live replica in the ISR; the ISR written is the
  old ISR without dead brokers. With ``unclean.leader.election.enable`` and no live in-sync
  replica, the first live replica in the assignment leads alone (ISR = just the leader) and the
  result is marked unclean (committed data may be lost).
* reassignment: the first live in-sync replica of the *target* replica list; ISR unchanged.
* preferred replica: the first replica of the assignment if it is live and in sync, else none;
  ISR unchanged.
* controlled shutdown: the first live in-sync replica that is not on a broker shutting down;
  the ISR written drops the shutting-down brokers.

When no replica qualifies, ``ElectionResult.leader`` is ``None`` and the ISR is returned
unchanged: the controller writes nothing and the partition keeps (or stays without) its leader.

All functions are pure and thread-safe; ``live`` and ``shutting_down`` may be any collection
(sets are fastest).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

__all__ = [
    "ElectionResult",
    "controlled_shutdown_leader",
    "offline_partition_leader",
    "preferred_replica_leader",
    "reassign_partition_leader",
]


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """The outcome of one leader election.

    ``leader`` is ``None`` when no replica is eligible; ``isr`` is the ISR to write together
    with the new leader (the unchanged ISR when there is no leader). ``unclean`` is true when
    the leader was taken from outside the ISR (unclean leader election).
    """

    leader: int | None
    isr: tuple[int, ...]
    unclean: bool = False

    @property
    def elected(self) -> bool:
        """Whether a leader was chosen."""
        return self.leader is not None


def _first(
    replicas: Sequence[int],
    live: Collection[int],
    isr: Collection[int],
    excluded: Collection[int] = (),
) -> int | None:
    """The first replica, in order, that is live, in ``isr`` and not in ``excluded``."""
    for replica in replicas:
        if replica in live and replica in isr and replica not in excluded:
            return replica
    return None


def offline_partition_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    *,
    unclean_enabled: bool,
) -> ElectionResult:
    """Elect a leader for a new or offline partition.

    The first replica in ``assignment`` order that is live and in ``isr`` leads, and the new
    ISR is ``isr`` restricted to live brokers (order kept). Otherwise, if ``unclean_enabled``,
    the first live replica of ``assignment`` leads with ISR ``(leader,)`` and ``unclean=True``.
    Otherwise there is no leader and the ISR is returned unchanged.
    """
    live_set = frozenset(live)
    isr_set = frozenset(isr)
    leader = _first(assignment, live_set, isr_set)
    if leader is not None:
        return ElectionResult(leader, tuple(r for r in isr if r in live_set))
    if unclean_enabled:
        for replica in assignment:
            if replica in live_set:
                return ElectionResult(replica, (replica,), unclean=True)
    return ElectionResult(None, tuple(isr))


def reassign_partition_leader(
    target_replicas: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> ElectionResult:
    """Elect a leader for a partition being reassigned: the first replica of
    ``target_replicas`` that is live and in ``isr``. The ISR is unchanged."""
    leader = _first(target_replicas, frozenset(live), frozenset(isr))
    return ElectionResult(leader, tuple(isr))


def preferred_replica_leader(
    assignment: Sequence[int], isr: Sequence[int], live: Collection[int]
) -> ElectionResult:
    """Elect the preferred replica (``assignment[0]``) if it is live and in ``isr``, else no
    leader. The ISR is unchanged."""
    leader = _first(assignment[:1], frozenset(live), frozenset(isr))
    return ElectionResult(leader, tuple(isr))


def controlled_shutdown_leader(
    assignment: Sequence[int],
    isr: Sequence[int],
    live: Collection[int],
    shutting_down: Collection[int],
) -> ElectionResult:
    """Move leadership off brokers that are shutting down.

    The first replica in ``assignment`` order that is live, in ``isr`` and not in
    ``shutting_down`` leads; the new ISR is ``isr`` without the shutting-down brokers (order
    kept). Without an eligible replica there is no leader and the ISR is returned unchanged
    (Kafka writes nothing; the old leader keeps the partition until it stops).
    """
    down = frozenset(shutting_down)
    leader = _first(assignment, frozenset(live), frozenset(isr), down)
    if leader is None:
        return ElectionResult(None, tuple(isr))
    return ElectionResult(leader, tuple(r for r in isr if r not in down))
