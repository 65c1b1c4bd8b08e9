"""One classic consumer group: a pure, synchronous model of Kafka's group state machine.

Theory of operation
===================
This module reimplements the semantics of Kafka 3.9's classic group coordinator
(``GroupCoordinator``/``GroupMetadata``/``MemberMetadata`` in ZooKeeper mode) for a single
group, without I/O, timers or asyncio. The async coordinator owns the sockets, the timers and
``__consumer_offsets``; it calls into a :class:`Group` and acts on what it returns.

The group's state and bookkeeping (states and transitions, members, deadlines, the outbox,
the DescribeGroups and ListGroups views) are
:class:`~broker.coordinator.group.group_metadata.GroupMetadata` (Kafka's ``GroupMetadata``);
:class:`Group` extends it with the handling of each request. Members and the protocol vote
are in :mod:`broker.coordinator.group.member`, the answers in
:mod:`broker.coordinator.group.results`.

States (``GroupState``) and the states each may be entered from (Kafka's
``validPreviousStates``; anything else raises :class:`IllegalGroupTransition`)::

    PreparingRebalance  <- Empty, Stable, CompletingRebalance
    CompletingRebalance <- PreparingRebalance
    Stable              <- CompletingRebalance
    Empty               <- PreparingRebalance
    Dead                <- any state

A rebalance has two phases.

*Join.* A JoinGroup from a new member (or a changed one, or the leader in Stable) moves the
group to PreparingRebalance and parks the request: :meth:`Group.join` returns
:class:`Pending`. Joins of dynamic members with an empty member id on JoinGroup v4+ first get
``MEMBER_ID_REQUIRED`` with a fresh id (KIP-394) and count as *pending members* that must
rejoin with it. The join phase may complete (:meth:`Group.join_can_complete`) once every
member and pending member has rejoined, or once the rebalance deadline
(:attr:`Group.join_deadline_ms`: the largest member rebalance timeout after the rebalance
began) has passed. A rebalance that starts from Empty first waits
``group.initial.rebalance.delay.ms``, extended by one more delay each time new members
arrived during the last window of a brand-new group, never past the rebalance timeout
(Kafka's ``InitialDelayedJoin``). :meth:`Group.complete_join` then drops the dynamic members
that did not rejoin, keeps or re-elects the leader, bumps the generation, selects the
protocol by vote (:func:`select_protocol`) and produces a :class:`JoinResult` for every
parked join; the leader's result lists every member's metadata for the chosen protocol.

*Sync.* Followers' SyncGroups are parked; the leader's carries the assignment.
:meth:`Group.sync` returns ``Pending(store=...)`` for the leader: the coordinator persists the
group (generation, members, assignment) and then calls :meth:`Group.complete_sync`, which
fills in every member's assignment, answers every parked sync and makes the group Stable
(or, on a store error, answers the error and starts a new rebalance). Members that have not
sent SyncGroup within the rebalance timeout after the join completed are removed
(:meth:`Group.expire_pending_sync`, deadline :attr:`Group.sync_deadline_ms`).

Liveness: each member's last heartbeat time (refreshed by Heartbeat, SyncGroup in Stable,
offset commits, and when its join or sync response is produced). :meth:`Group.expired_members`
lists members past ``session.timeout.ms`` (a member with a parked join or sync never expires;
a brand-new member whose first join is still parked expires after 5 minutes, Kafka's
``NewMemberJoinTimeoutMs``) and pending members past their session timeout; the coordinator
removes each with :meth:`Group.remove_member`.

Static membership (KIP-345): a member with ``group.instance.id`` that joins with an empty
member id while the instance id is known replaces the old member id; the old id is fenced
(``FENCED_INSTANCE_ID``, also delivered to its parked join or sync). In a Stable group whose
selected protocol would not change, the rejoin does not rebalance: it gets the current
generation back at once (JoinGroup v9+ ``SkipAssignment`` for the leader).

Deferred answers: a request answered with :class:`Pending` is answered later through the
*outbox*. Every call may complete parked requests of *other* members (a completed join, a
fenced static member, syncs reset by a new rebalance); :meth:`Group.drain_completions` returns
them as :class:`Completions`, keyed by the member id the parked request was made under
(:attr:`Pending.member_id`). ``Completions.persist`` asks the coordinator to write the group's
metadata record (a static member was replaced in a Stable group, or a generation ended
Empty). :meth:`Group.complete_join` and :meth:`Group.complete_sync` return the drained outbox.
Kafka drops a parked JoinGroup silently when the same member sends another one; the
coordinator should answer the superseded request itself (for example with
``REBALANCE_IN_PROGRESS``).

Deliberate differences from Kafka: a member removed while its SyncGroup is parked gets
``UNKNOWN_MEMBER_ID`` (Kafka leaves it to time out); the member order that decides the
first leader and vote order is join order (Kafka's is hash-map order of random ids).

Errors are data: every answer carries a :class:`~broker.protocol.errors.ErrorCode`; only a
programming error (an illegal transition) raises.

Concurrency: not thread-safe and never blocks. One event-loop task (the coordinator) owns a
group and calls it without awaiting in between, so every call is atomic; time is always
passed in as ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from broker.coordinator.group.group_metadata import (
    GroupMetadata,
    GroupState,
    IllegalGroupTransition,
)
from broker.coordinator.group.member import UNKNOWN_MEMBER_ID, Member, select_protocol
from broker.coordinator.group.results import (
    Completions,
    GroupAssignment,
    JoinResult,
    LeaveMemberResult,
    LeaveResult,
    MemberIdentity,
    Pending,
    SyncResult,
)
from broker.protocol.errors import ErrorCode

__all__ = ["Group"]

_SYNC_STATE_ERRORS = {
    GroupState.EMPTY: ErrorCode.unknown_member_id,
    GroupState.PREPARING_REBALANCE: ErrorCode.rebalance_in_progress,
}
"""A current member's SyncGroup in these states is refused with these errors."""


class Group(GroupMetadata):
    """One classic group: Kafka's group state machine driven by requests (JoinGroup,
    SyncGroup, Heartbeat, LeaveGroup, offset commits, deletion) and timers, over the state of
    :class:`~broker.coordinator.group.group_metadata.GroupMetadata` (see the module
    docstring).

    Concurrency: single-threaded; each call is atomic and never blocks.
    """

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(
        self,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        now_ms: int,
        require_known_member_id: bool = False,
        supports_skip_assignment: bool = False,
    ) -> JoinResult | Pending:
        """Handle a JoinGroup request.

        ``require_known_member_id`` is true for JoinGroup v4+ (KIP-394);
        ``supports_skip_assignment`` for v9+. On :class:`Pending` the coordinator parks the
        request under ``Pending.member_id`` and, whenever :meth:`join_can_complete` holds,
        calls :meth:`complete_join`.
        """
        protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        if not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        if not self._accepts_joining_member(member_id):
            self._remove(member_id)
            return JoinResult(ErrorCode.group_max_size_reached, UNKNOWN_MEMBER_ID)
        if self.state is GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not self.supports_protocols(protocol_type, (name for name, _ in protocols)):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        new = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            last_heartbeat_ms=now_ms,
        )
        if member_id == UNKNOWN_MEMBER_ID:
            return self._join_new_member(new, require_known_member_id, supports_skip_assignment)
        return self._join_current_member(new)

    def _join_new_member(
        self, new: Member, require_known_member_id: bool, supports_skip_assignment: bool
    ) -> JoinResult | Pending:
        now_ms = new.last_heartbeat_ms
        new.member_id = self._generate_member_id(new.client_id, new.group_instance_id)
        if new.group_instance_id is not None:
            old_member_id = self._static_members.get(new.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(old_member_id, new, supports_skip_assignment)
            return self._add_member_and_rebalance(new)
        if require_known_member_id:
            self._pending_members[new.member_id] = now_ms + new.session_timeout_ms
            return JoinResult(ErrorCode.member_id_required, new.member_id)
        return self._add_member_and_rebalance(new)

    def _join_current_member(self, new: Member) -> JoinResult | Pending:
        member_id = new.member_id
        if member_id in self._pending_members:
            if new.group_instance_id is not None:
                # Kafka raises IllegalStateException: a static member is never pending.
                return JoinResult(ErrorCode.unknown_server_error, member_id)
            return self._add_member_and_rebalance(new)
        error = self._validate_current_member(member_id, new.group_instance_id)
        if error is not ErrorCode.none:
            return JoinResult(error, member_id)
        return self._rejoin(self._members[member_id], new)

    def _rejoin(self, member: Member, new: Member) -> JoinResult | Pending:
        """A known member's JoinGroup: by the group's state, the current generation or a
        rebalance."""
        member_id = member.member_id
        state = self.state
        if state is GroupState.COMPLETING_REBALANCE and member.matches(new.protocols):
            # It probably lost the JoinGroup response: answer with the current generation.
            return JoinResult(
                ErrorCode.none,
                member_id,
                self.generation_id,
                self.protocol_type,
                self.protocol_name,
                self.leader_id or "",
                False,
                self.current_member_metadata() if self.is_leader(member_id) else (),
            )
        if (
            state is GroupState.STABLE
            and not self.is_leader(member_id)
            and member.matches(new.protocols)
        ):
            return JoinResult(
                ErrorCode.none,
                member_id,
                self.generation_id,
                self.protocol_type,
                self.protocol_name,
                self.leader_id or "",
            )
        if state in (
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            # Stable: the leader rejoins to trigger a rebalance (e.g. topic metadata changed),
            # or the member's protocols changed.
            return self._update_member_and_rebalance(member, new)
        return JoinResult(ErrorCode.unknown_member_id, member_id)  # Empty (or Dead)

    def _add_member_and_rebalance(self, new: Member) -> Pending:
        now_ms = new.last_heartbeat_ms
        new.is_new = True
        new.awaiting_join = True
        if self.state is GroupState.PREPARING_REBALANCE and self.generation_id == 0:
            self._new_member_added = True
        self._add(new)
        self._maybe_prepare_rebalance(now_ms)
        return Pending(new.member_id)

    def _update_member(self, member: Member, new: Member) -> None:
        member.protocols = new.protocols
        member.rebalance_timeout_ms = new.rebalance_timeout_ms
        member.session_timeout_ms = new.session_timeout_ms
        member.awaiting_join = True

    def _update_member_and_rebalance(self, member: Member, new: Member) -> Pending:
        self._update_member(member, new)
        self._maybe_prepare_rebalance(new.last_heartbeat_ms)
        return Pending(member.member_id)

    def _replace_static_member(
        self, old_member_id: str, new: Member, supports_skip_assignment: bool
    ) -> JoinResult | Pending:
        now_ms = new.last_heartbeat_ms
        instance_id = new.group_instance_id
        assert instance_id is not None
        previous_leader = self.leader_id or ""
        old = self._members.pop(old_member_id)
        # Fence the old incarnation's parked requests at once.
        self._deliver_join(old, JoinResult(ErrorCode.fenced_instance_id, old_member_id))
        self._deliver_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        self._pending_sync.discard(old_member_id)
        member = Member(
            member_id=new.member_id,
            group_instance_id=instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
            last_heartbeat_ms=now_ms,
        )
        self._members[member.member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = member.member_id
        self._static_members[instance_id] = member.member_id
        self._update_member(member, new)

        if self.state is GroupState.STABLE:
            next_protocol = select_protocol(
                [[name for name, _ in m.protocols] for m in self._members.values()]
            )
            if next_protocol == self.protocol_name:
                # No rebalance: persist the new member id and answer with the current generation.
                member.awaiting_join = False
                self._out_persist = True
                if supports_skip_assignment:
                    leader = self.is_leader(member.member_id)
                    return JoinResult(
                        ErrorCode.none,
                        member.member_id,
                        self.generation_id,
                        self.protocol_type,
                        self.protocol_name,
                        self.leader_id or "",
                        leader,
                        self.current_member_metadata() if leader else (),
                    )
                # Before v9 the old leader id is returned, so that a rejoining leader does not
                # run a pointless assignment that a Stable group would ignore.
                return JoinResult(
                    ErrorCode.none,
                    member.member_id,
                    self.generation_id,
                    self.protocol_type,
                    self.protocol_name,
                    previous_leader,
                )
            self._maybe_prepare_rebalance(now_ms)
        elif self.state is GroupState.COMPLETING_REBALANCE:
            # The leader may be assigning for the old member id: start over.
            self._prepare_rebalance(now_ms)
        return Pending(member.member_id)

    # -- completing the join phase --------------------------------------------------------------

    def _roll_initial_delay(self, now_ms: int) -> None:
        """Advance Kafka's InitialDelayedJoin chain up to ``now_ms``."""
        while (
            self._initial_delay is not None
            and self._join_deadline_ms is not None
            and now_ms >= self._join_deadline_ms
        ):
            delay, remaining = self._initial_delay
            if self._new_member_added and remaining != 0:
                self._new_member_added = False
                next_delay = min(self.config.initial_rebalance_delay_ms, remaining)
                self._initial_delay = (next_delay, max(remaining - delay, 0))
                self._join_deadline_ms += next_delay
            else:
                self._initial_delay = None  # the delay is over: the join completes now

    def join_can_complete(self, now_ms: int) -> bool:
        """Whether :meth:`complete_join` should run now.

        True in PreparingRebalance when every member and pending member has rejoined, or the
        join deadline has passed. During the initial rebalance delay only the deadline counts;
        this call advances the delay window (that is its only effect).
        """
        if self.state is not GroupState.PREPARING_REBALANCE:
            return False
        if self._initial_delay is not None:
            self._roll_initial_delay(now_ms)
            return self._initial_delay is None
        if self.has_all_members_joined():
            return True
        return self._join_deadline_ms is not None and now_ms >= self._join_deadline_ms

    def complete_join(self, now_ms: int) -> Completions:
        """End the join phase (Kafka's ``onCompleteJoin``) and return the drained outbox.

        Drops dynamic members that did not rejoin; if no remaining member rejoined (only
        static members that did not rejoin remain), the phase is extended by another rebalance
        timeout instead. Otherwise starts the next generation: CompletingRebalance with a
        :class:`JoinResult` for every parked join, or Empty (``persist`` set) with no members.
        """
        if self.state is not GroupState.PREPARING_REBALANCE:
            raise IllegalGroupTransition(
                f"cannot complete the join phase of a group in {self.state.value}"
            )
        self._initial_delay = None
        for member in [m for m in self._members.values() if not m.awaiting_join]:
            if not member.is_static:
                self._remove(member.member_id)
        if not self._elect_joined_leader() and self._members:
            self._join_deadline_ms = now_ms + self.rebalance_timeout_ms
            return self.drain_completions()
        self.generation_id += 1
        self._pending_sync.clear()
        if not self._members:
            self.protocol_name = None
            self._sync_deadline_ms = None
            self.transition_to(GroupState.EMPTY, now_ms)
            self._out_persist = True
            return self.drain_completions()
        self.protocol_name = select_protocol(
            [[name for name, _ in m.protocols] for m in self._members.values()]
        )
        self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        leader = self.leader_id or ""
        all_members = self.current_member_metadata()
        for member in self._members.values():
            result = JoinResult(
                ErrorCode.none,
                member.member_id,
                self.generation_id,
                self.protocol_type,
                self.protocol_name,
                leader,
                False,
                all_members if member.member_id == leader else (),
            )
            self._deliver_join(member, result)
            member.last_heartbeat_ms = now_ms
            member.is_new = False
            self._pending_sync.add(member.member_id)
        self._sync_deadline_ms = now_ms + self.rebalance_timeout_ms
        return self.drain_completions()

    def _elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did (False if none did)."""
        if self.leader_id is None:
            return False
        leader = self._members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self._members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- SyncGroup ------------------------------------------------------------------------------

    def sync(
        self,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        assignments: Mapping[str, bytes] | None = None,
    ) -> SyncResult | Pending:
        """Handle a SyncGroup request.

        In CompletingRebalance the request is parked; the leader's returns
        ``Pending(store=...)``: persist it, then call :meth:`complete_sync`. In Stable the
        member's current assignment is returned at once.
        """
        error = self._sync_error(
            member_id, generation_id, group_instance_id, protocol_type, protocol_name
        )
        if error is not ErrorCode.none:
            return SyncResult(error)
        member = self._members[member_id]
        if self.state is GroupState.STABLE:
            self._pending_sync.discard(member_id)
            member.last_heartbeat_ms = now_ms
            return SyncResult(
                ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment
            )
        # CompletingRebalance
        member.awaiting_sync = True
        self._pending_sync.discard(member_id)
        if not self.is_leader(member_id):
            return Pending(member_id)
        given = dict(assignments or {})
        full = {mid: bytes(given.get(mid, b"")) for mid in self._members}
        return Pending(member_id, GroupAssignment(self.generation_id, full))

    def _sync_error(
        self,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> ErrorCode:
        """Why a SyncGroup is refused (NONE: it is not): a dead group, an unknown member, an
        old generation, another protocol, or a group not completing nor done rebalancing."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
            protocol_name is not None and protocol_name != self.protocol_name
        ):
            return ErrorCode.inconsistent_group_protocol
        return _SYNC_STATE_ERRORS.get(self.state, ErrorCode.none)

    def complete_sync(
        self,
        generation_id: int,
        assignments: Mapping[str, bytes],
        now_ms: int,
        error: ErrorCode = ErrorCode.none,
    ) -> Completions:
        """The leader's assignment for ``generation_id`` was persisted (or failed with ``error``).

        If the group is still completing that generation: on success every member gets its
        assignment, every parked sync is answered and the group becomes Stable; on failure the
        parked syncs get ``error`` and a new rebalance starts. Returns the drained outbox.
        """
        if self.state is GroupState.COMPLETING_REBALANCE and generation_id == self.generation_id:
            if error is not ErrorCode.none:
                self._reset_and_propagate_assignment_error(error, now_ms)
                self._maybe_prepare_rebalance(now_ms)
            else:
                for member in self._members.values():
                    member.assignment = bytes(assignments.get(member.member_id, b""))
                for member in self._members.values():
                    self._deliver_sync(
                        member,
                        SyncResult(
                            ErrorCode.none,
                            self.protocol_type,
                            self.protocol_name,
                            member.assignment,
                        ),
                        now_ms,
                    )
                self.transition_to(GroupState.STABLE, now_ms)
        return self.drain_completions()

    def expire_pending_sync(self, now_ms: int) -> tuple[str, ...]:
        """Remove members that missed the SyncGroup deadline and rebalance (Kafka's DelayedSync).

        Returns the removed member ids; answers for other parked requests go to the outbox.
        """
        deadline = self.sync_deadline_ms
        if deadline is None or now_ms < deadline:
            return ()
        removed = tuple(m for m in self._members if m in self._pending_sync)
        for member_id in removed:
            member = self._remove(member_id)
            if member is not None:
                self._deliver_sync(member, SyncResult(ErrorCode.unknown_member_id))
        self._prepare_rebalance(now_ms)
        return removed

    # -- Heartbeat ------------------------------------------------------------------------------

    def heartbeat(
        self, *, member_id: str, generation_id: int, group_instance_id: str | None, now_ms: int
    ) -> ErrorCode:
        """Handle a Heartbeat: validate, refresh the member's session, report a rebalance."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_current_member(member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.illegal_generation
        if self.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        self._members[member_id].last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none  # Stable, or CompletingRebalance (heartbeats may start early)

    # -- LeaveGroup and removal -----------------------------------------------------------------

    def leave(self, members: Sequence[MemberIdentity], now_ms: int) -> LeaveResult:
        """Handle a LeaveGroup (v3+ batch; for v0-2 pass the single member id).

        A member given only by ``group_instance_id`` (empty member id) is removed by instance
        id, as administrative removal does.
        """
        if self.state is GroupState.DEAD:
            return LeaveResult(ErrorCode.coordinator_not_available)
        results: list[LeaveMemberResult] = []
        for identity in members:
            member_id = identity.member_id
            instance_id = identity.group_instance_id
            if member_id == UNKNOWN_MEMBER_ID:
                current = self._static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    error = ErrorCode.unknown_member_id
                else:
                    self.remove_member(current, now_ms)
                    error = ErrorCode.none
            elif member_id in self._pending_members:
                self._remove(member_id)
                error = ErrorCode.none
            else:
                error = self._validate_current_member(member_id, instance_id)
                if error is ErrorCode.none:
                    self.remove_member(member_id, now_ms)
            results.append(LeaveMemberResult(member_id, instance_id, error))
        return LeaveResult(ErrorCode.none, tuple(results))

    def remove_member(self, member_id: str, now_ms: int) -> bool:
        """Remove a member (left, or its session expired) or a pending member, and rebalance.

        A parked join of the member gets ``UNKNOWN_MEMBER_ID`` (with an empty member id, so the
        client rejoins afresh); a parked sync gets ``UNKNOWN_MEMBER_ID``. A Stable or
        CompletingRebalance group starts a rebalance; in PreparingRebalance the join phase may
        now be able to complete. Returns whether anything was removed.
        """
        if member_id in self._pending_members:
            self._remove(member_id)
            return True
        member = self._members.get(member_id)
        if member is None:
            return False
        self._deliver_join(member, JoinResult(ErrorCode.unknown_member_id, UNKNOWN_MEMBER_ID))
        self._deliver_sync(member, SyncResult(ErrorCode.unknown_member_id))
        self._remove(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(now_ms)
        return True

    def expired_members(self, now_ms: int) -> tuple[str, ...]:
        """Members and pending members whose session (or first-join timeout) has run out.

        Members with a parked join or sync never expire (Kafka counts a parked request as a
        heartbeat). The coordinator removes each with :meth:`remove_member`.
        """
        if self.state is GroupState.DEAD:
            return ()
        expired = [
            m.member_id
            for m in self._members.values()
            if (deadline := m.heartbeat_deadline_ms()) is not None and now_ms >= deadline
        ]
        expired.extend(mid for mid, deadline in self._pending_members.items() if now_ms >= deadline)
        return tuple(expired)

    # -- offsets --------------------------------------------------------------------------------

    def validate_offset_commit(
        self,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        *,
        transactional: bool = False,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """Whether an OffsetCommit (or TxnOffsetCommit) may be stored (Kafka's rules).

        Generation -1 from outside group management is accepted while the group is Empty;
        otherwise the member (and its instance id) must be current and the generation must
        match. A valid plain commit in CompletingRebalance gets REBALANCE_IN_PROGRESS. With
        ``now_ms``, a valid commit refreshes the member's session (Stable/PreparingRebalance),
        as Kafka does. (A commit for a group the coordinator does not know is accepted only
        with a negative generation, else ILLEGAL_GENERATION: the coordinator's check.)
        """
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.none
        error = self._committer_error(member_id, generation_id, group_instance_id, transactional)
        if error is not ErrorCode.none or transactional:
            return error
        if self.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        member = self._members.get(member_id)
        if now_ms is not None and member is not None:
            member.last_heartbeat_ms = now_ms
        return ErrorCode.none

    def _committer_error(
        self,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        transactional: bool,
    ) -> ErrorCode:
        """Why the committer may not commit (NONE: it may): a member (or a generation) not
        current, or, from outside group management, a group not Empty (but for a
        transactional commit)."""
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(member_id, group_instance_id)
            if error is not ErrorCode.none:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not transactional and self.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    # -- deletion and unloading -----------------------------------------------------------------

    def delete(self, now_ms: int) -> ErrorCode:
        """DeleteGroups: an Empty group becomes Dead (NONE); others are refused."""
        if self.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if self.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        self.transition_to(GroupState.DEAD, now_ms)
        return ErrorCode.none

    def unload(self, now_ms: int) -> Completions:
        """This broker stopped coordinating the group: Dead, parked requests get NOT_COORDINATOR."""
        self.transition_to(GroupState.DEAD, now_ms)
        for member in self._members.values():
            # Joins are parked only in PreparingRebalance, syncs only in CompletingRebalance.
            self._deliver_join(member, JoinResult(ErrorCode.not_coordinator, member.member_id))
            self._deliver_sync(member, SyncResult(ErrorCode.not_coordinator))
        self._pending_sync.clear()
        self._join_deadline_ms = None
        self._sync_deadline_ms = None
        return self.drain_completions()

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, state={self.state.value}, generation={self.generation_id}, "
            f"protocol={self.protocol_type}/{self.protocol_name}, leader={self.leader_id}, "
            f"members={list(self._members)})"
        )
