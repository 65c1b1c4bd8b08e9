"""The follower fetcher in an incremental fetch session (broker/replication/fetcher.py with
broker/replication/fetch_sessions.py): what each Fetch request carries, and how session
errors, lost responses and partitions that moved mid-fetch start a new session. The leader is
scripted (a fake connection answering with response-shaped objects); no network."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from broker.protocol.errors import ErrorCode
from broker.replication.fetcher import FetcherConfig, LeaderFetcher
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

A, B, C = (TopicPartition("t", i) for i in range(3))


class Sink:
    def __init__(self, *tps: TopicPartition) -> None:
        self.leo = dict.fromkeys(tps, 0)
        self.appended: list[tuple[TopicPartition, int]] = []

    def follower_fetch_position(self, tp: TopicPartition) -> tuple[int, int, int] | None:
        return (self.leo[tp], 0, -1) if tp in self.leo else None

    def follower_end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        return -1, -1

    def truncate_follower(self, tp: TopicPartition, offset: int, *, fully: bool = False) -> None:
        self.leo[tp] = offset

    def append_as_follower(
        self, tp: TopicPartition, records: bytes, leader_hw: int, leader_log_start: int
    ) -> None:
        self.appended.append((tp, leader_hw))


class ScriptedLeader:
    """Records each Fetch request; answers with the next scripted response."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.responses: list[Any] = []

    async def request(self, key: int, version: int, request: Any) -> Any:
        self.requests.append(request)
        reply = self.responses.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply


def response(session_id: int, *parts: tuple[TopicPartition, int], error: int = 0) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for tp, hw in parts:
        by_topic.setdefault(tp.topic, []).append(
            SimpleNamespace(
                partition_index=tp.partition,
                error_code=0,
                high_watermark=hw,
                log_start_offset=0,
                records=b"",
            )
        )
    return SimpleNamespace(
        error_code=error,
        session_id=session_id,
        responses=[SimpleNamespace(topic=t, partitions=ps) for t, ps in by_topic.items()],
    )


def sent(request: Any) -> tuple[int, int, list[tuple[int, int]], list[int]]:
    """(session id, epoch, [(partition, fetch offset)], [forgotten partitions])."""
    return (
        int(request.session_id),
        int(request.session_epoch),
        [(int(p.partition), int(p.fetch_offset)) for t in request.topics for p in t.partitions],
        [int(p) for t in request.forgotten_topics_data for p in t.partitions],
    )


def fetcher(sink: Sink, *tps: TopicPartition) -> LeaderFetcher:
    f = LeaderFetcher(1, "127.0.0.1", 9, sink, FetcherConfig(broker_id=2))  # type: ignore[arg-type]
    for tp in tps:
        f.add(tp, 0)
        f.partitions[tp].needs_truncation = False
    return f


def test_requests_carry_only_what_changed() -> None:
    async def run() -> None:
        sink = Sink(A, B, C)
        f = fetcher(sink, A, B, C)
        leader = ScriptedLeader()
        leader.responses = [
            response(9, (A, 0), (B, 0), (C, 0)),
            response(9),
            response(9, (B, 4)),
            response(9),
        ]
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        sink.leo[A] = 3  # appended meanwhile
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        f.remove(C)
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        assert [sent(r) for r in leader.requests] == [
            (0, 0, [(0, 0), (1, 0), (2, 0)], []),
            (9, 1, [], []),
            (9, 2, [(0, 3)], []),
            (9, 3, [], [2]),
        ]
        assert (B, 4) in sink.appended

    asyncio.run(run())


def test_session_errors_lost_responses_and_moved_partitions_start_a_new_session() -> None:
    async def run() -> None:
        sink = Sink(A, B)
        f = fetcher(sink, A, B)
        leader = ScriptedLeader()
        leader.responses = [
            response(9, (A, 0), (B, 0)),
            response(0, error=int(ErrorCode.fetch_session_id_not_found)),
            response(11, (A, 0), (B, 0)),
            ConnectionResetError("gone"),
            response(12, (A, 0), (B, 0)),
        ]
        for _ in range(3):
            await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        with pytest.raises(ConnectionResetError):
            await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        assert [sent(r)[:3] for r in leader.requests] == [
            (0, 0, [(0, 0), (1, 0)]),
            (9, 1, []),
            (0, 0, [(0, 0), (1, 0)]),  # the session was gone: a full request, no session
            (11, 1, []),
            (11, 0, [(0, 0), (1, 0)]),  # no answer: close session 11, open a new one
        ]

        # B's fetch position moves while a fetch is in flight: its answer is dropped, and
        # with it whatever the leader told about B, so the next request is full again
        async def moving(key: int, version: int, request: Any) -> Any:
            leader.requests.append(request)
            sink.leo[B] = 7
            return response(12, (B, 9))

        leader.request = moving  # type: ignore[method-assign]
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        leader.request = ScriptedLeader.request.__get__(leader)  # type: ignore[method-assign]
        leader.responses = [response(13, (A, 0), (B, 9))]
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        assert sent(leader.requests[-2])[:2] == (12, 1)
        assert sent(leader.requests[-1])[:3] == (12, 0, [(0, 0), (1, 7)])
        assert sink.appended[-1] == (B, 9)

    asyncio.run(run())


def test_a_diverging_epoch_from_a_kafka_leader_starts_a_truncation() -> None:
    """A Kafka leader answers a follower whose last fetched epoch it disagrees with by a
    ``diverging_epoch`` and no records (KIP-595): the follower appends nothing and finds
    the divergence with OffsetsForLeaderEpoch before it fetches that partition again."""

    async def run() -> None:
        sink = Sink(A, B)
        f = fetcher(sink, A, B)
        leader = ScriptedLeader()
        reply = response(9, (A, 5), (B, 5))
        diverged = reply.responses[0].partitions[0]
        diverged.diverging_epoch = SimpleNamespace(epoch=1, end_offset=3)
        reply.responses[0].partitions[1].diverging_epoch = SimpleNamespace(epoch=-1, end_offset=-1)
        leader.responses = [reply]
        await f._fetch(leader, dict(f.partitions))  # type: ignore[arg-type]
        assert sink.appended == [(B, 5)]
        assert f.partitions[A].needs_truncation and not f.partitions[B].needs_truncation

    asyncio.run(run())
