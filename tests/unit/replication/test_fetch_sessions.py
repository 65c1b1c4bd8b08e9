"""Incremental fetch sessions (KIP-227, broker/replication/fetch_sessions.py): the broker's
session cache (what a request reads, what its response carries, errors, eviction) and the
fetcher's session handler, and the two driven against each other."""

from __future__ import annotations

import io
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.file_records import FetchSlice
from broker.protocol.errors import ErrorCode
from broker.replication.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    MAX_EPOCH,
    FetchSessionCache,
    FetchSessionHandler,
    PartitionFetchState,
    next_epoch,
)
from broker.replication.replica_manager import FetchRequestPartition, FetchResult
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

A, B, C = (TopicPartition("t", i) for i in range(3))
NOW = 1_000_000


def req(tp: TopicPartition, offset: int = 0, max_bytes: int = 1 << 20) -> FetchRequestPartition:
    return FetchRequestPartition(tp, offset, max_bytes, 0)


def result(
    tp: TopicPartition,
    hw: int = 10,
    *,
    size: int = 0,
    log_start: int = 0,
    error: ErrorCode = ErrorCode.none,
) -> FetchResult:
    data = FetchSlice(io.BytesIO(), 0, size, 0, 0) if size else None
    return FetchResult(tp, error, hw, hw, log_start, data)


def open_session(cache: FetchSessionCache, *tps: TopicPartition, privileged: bool = True) -> int:
    ctx = cache.new_context(
        0, INITIAL_EPOCH, [req(tp) for tp in tps], [], privileged=privileged, now_ms=NOW
    )
    assert ctx.error == ErrorCode.none and ctx.full
    assert ctx.response([result(tp) for tp in tps]) == [result(tp) for tp in tps]
    return ctx.session_id


# --- the broker's cache ----------------------------------------------------------------


def test_a_full_request_opens_a_session_and_answers_everything() -> None:
    cache = FetchSessionCache()
    ctx = cache.new_context(0, INITIAL_EPOCH, [req(A), req(B)], [], privileged=True, now_ms=NOW)
    assert ctx.session_id != INVALID_SESSION_ID and len(cache) == 1
    assert [p.tp for p in ctx.partitions] == [A, B]
    results = [result(A), result(B)]
    assert ctx.response(results) == results


def test_an_incremental_request_reads_the_whole_session_and_answers_only_changes() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, A, B, C)
    ctx = cache.new_context(sid, 1, [], [], privileged=True, now_ms=NOW)
    assert ctx.error == ErrorCode.none and not ctx.full and ctx.session_id == sid
    assert [p.tp for p in ctx.partitions] == [A, B, C]
    # nothing changed: an empty response; B's high watermark moved: only B
    assert ctx.response([result(A), result(B), result(C)]) == []
    ctx = cache.new_context(sid, 2, [], [], privileged=True, now_ms=NOW)
    assert [r.tp for r in ctx.response([result(A), result(B, 11), result(C)])] == [B]
    # the same again: B is not repeated
    ctx = cache.new_context(sid, 3, [], [], privileged=True, now_ms=NOW)
    assert ctx.response([result(A), result(B, 11), result(C)]) == []


def test_records_log_start_and_errors_are_answered() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, A, B, C)
    ctx = cache.new_context(sid, 1, [], [], privileged=True, now_ms=NOW)
    out = ctx.response(
        [
            result(A, size=100),
            result(B, log_start=5),
            result(C, -1, error=ErrorCode.not_leader_or_follower),
        ]
    )
    assert [r.tp for r in out] == [A, B, C]
    # C recovers with the high watermark it had before the error: still answered once
    ctx = cache.new_context(sid, 2, [], [], privileged=True, now_ms=NOW)
    assert [r.tp for r in ctx.response([result(A), result(B, log_start=5), result(C)])] == [C]


def test_a_partition_with_records_moves_to_the_end_of_the_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, A, B, C)
    ctx = cache.new_context(sid, 1, [], [], privileged=True, now_ms=NOW)
    ctx.response([result(A, size=10), result(B), result(C)])
    ctx = cache.new_context(sid, 2, [], [], privileged=True, now_ms=NOW)
    assert [p.tp for p in ctx.partitions] == [B, C, A]


def test_request_partitions_update_the_session_and_forgotten_ones_leave_it() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, A, B)
    ctx = cache.new_context(sid, 1, [req(A, 7), req(C, 3)], [B], privileged=True, now_ms=NOW)
    assert {p.tp: p.fetch_offset for p in ctx.partitions} == {A: 7, C: 3}
    # C is new to the session: answered although "unchanged"
    assert [r.tp for r in ctx.response([result(A), result(C)])] == [C]


def test_forgetting_every_partition_closes_the_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, A)
    ctx = cache.new_context(sid, 1, [], [A], privileged=True, now_ms=NOW)
    assert ctx.session_id == INVALID_SESSION_ID and ctx.partitions == [] and len(cache) == 0


def test_session_errors() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, A)
    assert cache.new_context(sid + 1, 1, [], [], privileged=True, now_ms=NOW).error == (
        ErrorCode.fetch_session_id_not_found
    )
    assert cache.new_context(sid, 2, [], [], privileged=True, now_ms=NOW).error == (
        ErrorCode.invalid_fetch_session_epoch
    )
    # the session survives a wrong epoch; the right one still works
    assert cache.new_context(sid, 1, [], [], privileged=True, now_ms=NOW).error == ErrorCode.none


def test_final_epoch_closes_and_initial_epoch_replaces_a_session() -> None:
    cache = FetchSessionCache()
    sid = open_session(cache, A)
    ctx = cache.new_context(sid, FINAL_EPOCH, [req(B)], [], privileged=True, now_ms=NOW)
    assert ctx.session_id == INVALID_SESSION_ID and [p.tp for p in ctx.partitions] == [B]
    assert len(cache) == 0 and ctx.response([result(B)]) == [result(B)]
    sid = open_session(cache, A)
    ctx = cache.new_context(sid, INITIAL_EPOCH, [req(B)], [], privileged=True, now_ms=NOW)
    assert ctx.session_id not in (sid, INVALID_SESSION_ID) and len(cache) == 1
    assert cache.get(sid) is None


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


def test_a_cache_without_slots_declines_sessions() -> None:
    cache = FetchSessionCache(max_sessions=0)
    ctx = cache.new_context(0, INITIAL_EPOCH, [req(A)], [], privileged=True, now_ms=NOW)
    assert ctx.session_id == INVALID_SESSION_ID and [p.tp for p in ctx.partitions] == [A]


def test_eviction_order() -> None:
    cache = FetchSessionCache(max_sessions=2, eviction_ms=1000, rng=random.Random(1))

    def create(tps: int, privileged: bool, now: int) -> int:
        parts = [req(TopicPartition("e", i)) for i in range(tps)]
        return cache.new_context(
            0, INITIAL_EPOCH, parts, [], privileged=privileged, now_ms=now
        ).session_id

    consumer_small = create(1, False, NOW)
    follower = create(5, True, NOW)
    # full, nothing stale: a smaller consumer session is not worth more than either
    assert create(1, False, NOW + 10) == INVALID_SESSION_ID
    # a larger consumer session evicts the smaller consumer one, never the follower's
    consumer_big = create(3, False, NOW + 20)
    assert consumer_big != INVALID_SESSION_ID and cache.get(consumer_small) is None
    assert create(10, False, NOW + 30) != INVALID_SESSION_ID  # evicts consumer_big
    assert cache.get(follower) is not None and cache.get(consumer_big) is None
    # a follower evicts a consumer session even when that one is larger
    follower2 = create(1, True, NOW + 40)
    assert follower2 != INVALID_SESSION_ID and cache.get(follower) is not None
    # both followers are younger than the eviction time: nobody gets in
    assert create(100, True, NOW + 50) == INVALID_SESSION_ID
    # a session unused for longer than the eviction time goes first
    cache.new_context(follower2, 1, [], [], privileged=True, now_ms=NOW + 1500)
    assert create(1, False, NOW + 1500) != INVALID_SESSION_ID
    assert cache.get(follower) is None and cache.get(follower2) is not None


# --- the fetcher's handler -------------------------------------------------------------


def state(offset: int, epoch: int = 0) -> PartitionFetchState:
    return PartitionFetchState(offset, 0, epoch, 0, 1 << 20)


def test_handler_sends_everything_first_then_only_changes() -> None:
    h = FetchSessionHandler()
    plan = h.build({A: state(0), B: state(0)})
    assert plan.full and plan.session_id == 0 and plan.epoch == INITIAL_EPOCH
    assert plan.send == [A, B] and plan.forget == []
    h.handle_response(ErrorCode.none, 77)
    plan = h.build({A: state(5), B: state(0)})
    assert (plan.session_id, plan.epoch, plan.send, plan.forget) == (77, 1, [A], [])
    h.handle_response(ErrorCode.none, 77)
    plan = h.build({A: state(5), C: state(0)})
    assert (plan.epoch, plan.send, plan.forget) == (2, [C], [B])


def test_handler_starts_over_after_errors() -> None:
    h = FetchSessionHandler()
    h.build({A: state(0)})
    h.handle_response(ErrorCode.none, 77)
    h.build({A: state(0)})
    h.handle_response(ErrorCode.invalid_fetch_session_epoch, 0)
    plan = h.build({A: state(0)})  # closes 77 and asks for a new session
    assert (plan.session_id, plan.epoch, plan.send) == (77, INITIAL_EPOCH, [A])
    h.handle_response(ErrorCode.fetch_session_id_not_found, 0)
    plan = h.build({A: state(0)})
    assert (plan.session_id, plan.epoch, plan.send) == (0, INITIAL_EPOCH, [A])
    h.handle_response(ErrorCode.none, 0)  # the broker declines sessions: full requests
    assert h.build({A: state(1)}).full
    h.handle_response(ErrorCode.none, 78)
    h.build({A: state(1)})
    h.handle_error()  # no answer
    plan = h.build({A: state(1)})
    assert plan.full and plan.session_id == 78 and plan.send == [A]


fetch_states = st.dictionaries(
    st.sampled_from([TopicPartition("p", i) for i in range(8)]),
    st.builds(state, st.integers(0, 3), st.integers(0, 1)),
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(
    rounds=st.lists(
        st.tuples(fetch_states, st.sampled_from(["ok", "ok", "ok", "lost", "evicted"])), max_size=25
    )
)
def test_handler_and_cache_agree_on_every_partition_state(
    rounds: list[tuple[dict[TopicPartition, PartitionFetchState], str]],
) -> None:
    """Whatever the fetcher wants, and whatever goes wrong (lost responses, evicted sessions),
    the broker reads exactly the wanted partitions at exactly the wanted positions."""
    cache = FetchSessionCache(rng=random.Random(0))
    h = FetchSessionHandler()
    for i, (wanted, fate) in enumerate(rounds):
        plan = h.build(wanted)
        ctx = cache.new_context(
            plan.session_id,
            plan.epoch,
            [
                FetchRequestPartition(
                    tp, wanted[tp].fetch_offset, 1 << 20, wanted[tp].current_leader_epoch
                )
                for tp in plan.send
            ],
            plan.forget,
            privileged=True,
            now_ms=NOW + i,
        )
        if ctx.error != ErrorCode.none:
            h.handle_response(ctx.error, 0)
            continue
        assert {p.tp: (p.fetch_offset, p.current_leader_epoch) for p in ctx.partitions} == {
            tp: (s.fetch_offset, s.current_leader_epoch) for tp, s in wanted.items()
        }
        ctx.response([result(p.tp) for p in ctx.partitions])
        if fate == "lost":
            h.handle_error()
        else:
            if fate == "evicted" and ctx.session is not None:
                cache._sessions.pop(ctx.session.id)
            h.handle_response(ErrorCode.none, ctx.session_id)
