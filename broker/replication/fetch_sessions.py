"""Incremental fetch sessions (KIP-227): the broker's session cache and the fetcher's side.

Why: a follower (or consumer) that fetches 1,000 partitions would otherwise send all 1,000 in
every request and get all 1,000 back, twice a second, even when nothing changes. In a session
the broker remembers the partitions and their fetch state; a request carries only what changed
(partitions added or whose fetch position moved, and partitions to forget), and the response
only the partitions with something to say.

Protocol (Fetch v7+, ``session_id`` / ``session_epoch`` in the request, ``session_id`` and a
top-level ``error_code`` in the response), as Kafka's ``FetchSession``/``FetchManager``:

* epoch 0 (INITIAL) is a *full* request: any session it names is closed, a new one is created
  when the cache has (or can make) room, and its id is answered (0 when none); the session's
  next epoch is 1. Epoch -1 (FINAL) is a full request that closes the named session and
  creates none (a sessionless fetch, as before v7).
* epoch > 0 is *incremental*: the named session must exist (else FETCH_SESSION_ID_NOT_FOUND)
  and expect exactly that epoch (else INVALID_FETCH_SESSION_EPOCH); the request's partitions
  are added to it or update its fetch state, ``forgotten_topics_data`` removes partitions,
  and the epoch moves on (wrapping from 2**31-1 to 1). A session left empty is closed and the
  fetch answered sessionless.
* An incremental response holds only the partitions that returned records, whose high
  watermark, last stable offset or log start offset moved since the session last sent them,
  or that have an error (after which the next response sends the partition again). A partition
  that returned records moves to the end of the session's order, so a response byte limit
  does not starve the partitions behind it.
* The cache holds ``max.incremental.fetch.session.cache.slots`` sessions (1,000). When full, a
  new session evicts a stale one (unused for ``min.incremental.fetch.session.eviction.ms``,
  2 minutes), else the least valuable one if the newcomer is worth more: followers' sessions
  before consumers', then more partitions before fewer; followers' sessions younger than the
  eviction time are never evicted, consumers' only by a more valuable newcomer. Sessions
  outlive connections (a client may reconnect and go on), as in Kafka.

:class:`FetchSessionHandler` is the fetching side (Kafka's client ``FetchSessionHandler``): it
turns "the partitions I want now, each with its fetch state" into what to send and to forget,
and follows the broker's answers (a broker that declines sessions leaves it sending full
requests; a session error or a lost connection starts a new session).

Concurrency: event loop thread only; no I/O here. A context is created when a request arrives
and answers that one request.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.protocol.errors import ErrorCode
from broker.replication.results import FetchRequestPartition, FetchResult
from broker.types import TopicPartition

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: 0 -> 1, ..., 2**31-1 -> 1 (never back to INITIAL)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= MAX_EPOCH else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: the fetch state the client last sent (``request``), and what
    the broker last answered for it (so unchanged partitions can be left out)."""

    request: FetchRequestPartition
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, result: FetchResult) -> bool:
        """Whether ``result`` goes into an incremental response; remembers what was sent."""
        respond = result.size > 0
        if result.error != ErrorCode.none or result.diverging_epoch is not None:
            self.high_watermark = -1  # send it again once the error is gone
            return True
        if result.high_watermark != self.high_watermark:
            self.high_watermark = result.high_watermark
            respond = True
        if result.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = result.last_stable_offset
            respond = True
        if result.log_start_offset != self.log_start_offset:
            self.log_start_offset = result.log_start_offset
            respond = True
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    created_ms: int
    last_used_ms: int
    epoch: int = 1
    partitions: OrderedDict[TopicPartition, CachedPartition] = field(default_factory=OrderedDict)

    def update(
        self, wanted: Iterable[FetchRequestPartition], forgotten: Iterable[TopicPartition]
    ) -> None:
        for req in wanted:
            cached = self.partitions.get(req.tp)
            if cached is None:
                self.partitions[req.tp] = CachedPartition(req)
            else:
                cached.request = req
        for tp in forgotten:
            self.partitions.pop(tp, None)


class FetchContext:
    """One fetch request's view of its session: which partitions to read, and which of the
    results to answer (and with which session id)."""

    def __init__(
        self,
        partitions: list[FetchRequestPartition],
        session: FetchSession | None = None,
        *,
        full: bool = True,
        error: ErrorCode = ErrorCode.none,
    ) -> None:
        self.partitions = partitions
        self.session = session
        self.full = full
        self.error = error

    @property
    def session_id(self) -> int:
        return INVALID_SESSION_ID if self.session is None else self.session.id

    def response(self, results: list[FetchResult]) -> list[FetchResult]:
        """The results to answer: all of them for a full fetch (remembered in the new session
        if there is one), the changed ones for an incremental fetch."""
        session = self.session
        if session is None:
            return results
        if self.full:
            for r in results:
                cached = session.partitions.get(r.tp)
                if cached is not None:
                    cached.must_respond(r)
            return results
        out = []
        for r in results:
            cached = session.partitions.get(r.tp)
            if cached is None or not cached.must_respond(r):
                continue
            out.append(r)
            if r.size > 0:
                session.partitions.move_to_end(r.tp)
        return out


class FetchSessionCache:
    """The broker's sessions, by id; see the module docstring for creation and eviction."""

    def __init__(
        self,
        max_sessions: int = 1000,
        eviction_ms: int = 120_000,
        rng: random.Random | None = None,
    ) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self._rng = rng or random.Random()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def new_context(
        self,
        session_id: int,
        epoch: int,
        wanted: list[FetchRequestPartition],
        forgotten: list[TopicPartition],
        *,
        privileged: bool,
        now_ms: int,
    ) -> FetchContext:
        """The context of a Fetch request with these session fields (v7+)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self._sessions.pop(session_id, None)
            if epoch == FINAL_EPOCH:
                return FetchContext(wanted)
            session = self._maybe_create(privileged, len(wanted), now_ms)
            if session is not None:
                session.update(wanted, ())
            return FetchContext(wanted, session)
        session = self._sessions.get(session_id)
        if session is None:
            return FetchContext([], error=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext([], error=ErrorCode.invalid_fetch_session_epoch)
        session.update(wanted, forgotten)
        if not session.partitions:
            del self._sessions[session.id]
            return FetchContext(wanted)
        session.last_used_ms = now_ms
        session.epoch = next_epoch(session.epoch)
        wanted = [c.request for c in session.partitions.values()]
        return FetchContext(wanted, session, full=False)

    def _maybe_create(self, privileged: bool, size: int, now_ms: int) -> FetchSession | None:
        if self.max_sessions <= 0:
            return None
        if len(self._sessions) >= self.max_sessions and not self._evict(privileged, size, now_ms):
            return None
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._rng.randint(1, 2**31 - 1)
        session = FetchSession(session_id, privileged, now_ms, now_ms)
        self._sessions[session_id] = session
        return session

    def _evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Make room for a new session of ``size`` partitions; False if none may go."""
        stale = min(self._sessions.values(), key=lambda s: s.last_used_ms)
        if now_ms - stale.last_used_ms > self.eviction_ms:
            del self._sessions[stale.id]
            return True
        candidates = [
            s
            for s in self._sessions.values()
            if not s.privileged or (privileged and now_ms - s.created_ms >= self.eviction_ms)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, len(s.partitions), s.id))
        if (privileged, size) <= (victim.privileged, len(victim.partitions)):
            return False
        del self._sessions[victim.id]
        return True


# --- the fetching side ---------------------------------------------------------------------


class PartitionFetchState(NamedTuple):
    """What a fetcher sends for one partition; a change means the partition is sent again.
    (A named tuple: one is built per partition per request, and compared.)"""

    fetch_offset: int
    log_start_offset: int
    current_leader_epoch: int
    last_fetched_epoch: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchPlan:
    """One request's session fields and partitions."""

    session_id: int
    epoch: int
    send: list[TopicPartition]
    forget: list[TopicPartition]

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """The fetcher's session with one broker: what each request must carry.

    Call :meth:`build` with every partition wanted now, send the plan, then
    :meth:`handle_response` with the response's top-level error and session id, or
    :meth:`handle_error` if no response came. Between ``build`` and the answer no other
    request may be built.
    """

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent: dict[TopicPartition, PartitionFetchState] = {}
        self._pending: dict[TopicPartition, PartitionFetchState] = {}
        self._pending_full = True

    def build(self, wanted: dict[TopicPartition, PartitionFetchState]) -> FetchPlan:
        self._pending = dict(wanted)
        self._pending_full = self.epoch == INITIAL_EPOCH
        if self._pending_full:
            return FetchPlan(self.session_id, INITIAL_EPOCH, list(wanted), [])
        send = [tp for tp, state in wanted.items() if self._sent.get(tp) != state]
        forget = [tp for tp in self._sent if tp not in wanted]
        return FetchPlan(self.session_id, self.epoch, send, forget)

    def handle_response(self, error: ErrorCode, session_id: int) -> None:
        if error != ErrorCode.none:
            if error == ErrorCode.fetch_session_id_not_found:
                self.session_id = INVALID_SESSION_ID
            self.epoch = INITIAL_EPOCH  # a full request next: closes the old session, opens one
            self._sent = {}
            return
        if session_id == INVALID_SESSION_ID:
            # no session (declined, or closed by the broker): full requests, asking again
            self.session_id, self.epoch, self._sent = INVALID_SESSION_ID, INITIAL_EPOCH, {}
            return
        if self._pending_full:
            self.session_id, self.epoch = session_id, 1
        else:
            self.epoch = next_epoch(self.epoch)
        self._sent = self._pending

    def handle_error(self) -> None:
        """The request got no answer: start over with a full request (closing the session)."""
        self.epoch = INITIAL_EPOCH
        self._sent = {}
