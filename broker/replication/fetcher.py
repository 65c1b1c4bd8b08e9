"""Follower fetchers: replicate partitions from their leaders with the Fetch API.

Theory of operation (checklist section 12; Kafka's ``ReplicaFetcherThread``, KIP-101/279)
-----------------------------------------------------------------------------------------
One :class:`LeaderFetcher` task per source broker fetches every partition this broker
follows from that leader in one Fetch request (``replica_id`` = this broker, read up to the
leader's log end, ``replica.fetch.wait.max.ms`` long poll), in an incremental fetch session
(KIP-227, :mod:`broker.replication.fetch_sessions`): after the first, full request, a request
names only the partitions whose fetch position changed and the response only the partitions
with news, so idle partitions cost (almost) nothing on the wire. Before a partition's first fetch
after a leader change it is *truncated*: the fetcher asks the leader (OffsetsForLeaderEpoch,
with this replica's latest epoch) where that epoch ends on the leader, and truncates its
own log to the smaller of that offset and its own end of the epoch. When the leader does not
know the follower's epoch it answers with its largest epoch below, the follower truncates to
its own end of that epoch and asks again (KIP-279), so divergent tails are removed on every
epoch change and never by the high watermark alone (KIP-101).

Fetched batches (offsets and leader epochs assigned by the leader) are appended with
:meth:`FollowerSink.append_as_follower`, which also moves the follower's high watermark to
min(its log end, the leader's high watermark). Partition errors from the leader (not leader,
fenced or unknown epoch) park the partition for ``replica.fetch.backoff.ms`` until the
controller's next LeaderAndIsr says what changed; connection errors back off and retry. A
partition whose own append or truncation fails is handled alone: invalid records are retried
after the backoff, any other error (a storage error: its log directory went offline) stops
fetching it until a LeaderAndIsr adds it again; the other partitions are not affected.

Concurrency: event loop thread only. The manager owns one task per leader; tasks are
cancelled and awaited on removal and on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.offset_for_leader_epoch.v4 import request as ofle_req
from kio.static.primitive import i8, i32, i32Timedelta, i64

from broker.network.client import BrokerConnection
from broker.protocol.api_keys import ApiKey
from broker.protocol.errors import ErrorCode, KafkaError
from broker.protocol.records import CorruptRecordError, InvalidRecordError
from broker.replication.fetch_sessions import (
    FetchPlan,
    FetchSessionHandler,
    PartitionFetchState,
)
from broker.types import TopicPartition

log = logging.getLogger(__name__)

FETCH_KEY, FETCH_VERSION = ApiKey.FETCH, 12
OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION = ApiKey.OFFSET_FOR_LEADER_EPOCH, 4
UNDEFINED_EPOCH = -1


class FollowerSink(Protocol):
    """What the fetcher needs from the replica manager."""

    def follower_fetch_position(self, tp: TopicPartition) -> tuple[int, int, int] | None:
        """(log end offset, log start offset, latest epoch in the epoch cache) or None."""

    def follower_end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        """This replica's (epoch, end offset) for ``epoch`` (its own epoch cache)."""

    def truncate_follower(self, tp: TopicPartition, offset: int, *, fully: bool = False) -> None:
        """Truncate to ``offset`` (or start an empty log at it when ``fully``)."""

    def append_as_follower(
        self, tp: TopicPartition, records: bytes | memoryview, leader_hw: int, leader_log_start: int
    ) -> None:
        """Append fetched records and update the follower high watermark."""


@dataclass(slots=True)
class FetchState:
    leader_epoch: int
    needs_truncation: bool = True
    delayed_until: float = 0.0


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    broker_id: int
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    backoff_ms: int = 1000
    request_timeout_ms: int = 30_000
    security: Any = None
    """The inter-broker listener's client security (a ``ClientSecurity``; None: plaintext)."""


class LeaderFetcher:
    """Fetches every followed partition whose leader is one broker."""

    def __init__(
        self, leader_id: int, host: str, port: int, sink: FollowerSink, config: FetcherConfig
    ) -> None:
        self.leader_id = leader_id
        self.host = host
        self.port = port
        self.sink = sink
        self.config = config
        self.partitions: dict[TopicPartition, FetchState] = {}
        self._wakeup = asyncio.Event()
        self._conn: BrokerConnection | None = None
        self._moved = False
        self.session = FetchSessionHandler()
        """This follower's incremental fetch session with the leader (KIP-227)."""
        self.task: asyncio.Task[None] | None = None

    def add(self, tp: TopicPartition, leader_epoch: int) -> None:
        self.partitions[tp] = FetchState(leader_epoch)
        self._wakeup.set()

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    def move_to(self, host: str, port: int) -> None:
        """The leader now listens elsewhere: reconnect before the next request."""
        self.host, self.port = host, port
        self._moved = True
        self._wakeup.set()

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    # --- the loop ----------------------------------------------------------------------

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = self.config.backoff_ms / 1000.0
        while True:
            now = loop.time()
            ready = {tp: s for tp, s in self.partitions.items() if s.delayed_until <= now}
            if not ready:
                self._wakeup.clear()
                delays = [s.delayed_until - now for s in self.partitions.values()]
                timeout = min(delays) if delays else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
                continue
            try:
                conn = await self._connection()
                truncating = {tp: s for tp, s in ready.items() if s.needs_truncation}
                if truncating:
                    await self._truncate(conn, truncating)
                    continue
                await self._fetch(conn, ready)
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.info(
                    "fetcher for leader %d at %s:%d: %s; retrying",
                    self.leader_id,
                    self.host,
                    self.port,
                    exc or type(exc).__name__,
                )
                await self._drop_connection()
                await asyncio.sleep(backoff)

    async def _connection(self) -> BrokerConnection:
        if self._conn is None or not self._conn.connected or self._moved:
            self._moved = False
            await self._drop_connection()
            conn = BrokerConnection(
                self.host,
                self.port,
                client_id=f"broker-{self.config.broker_id}-fetcher-{self.leader_id}",
                request_timeout_s=(self.config.request_timeout_ms + self.config.max_wait_ms)
                / 1000.0,
                security=self.config.security,
            )
            await conn.connect()
            self._conn = conn
        return self._conn

    async def _drop_connection(self) -> None:
        self.session.handle_error()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                await conn.close()

    def _delay(self, tp: TopicPartition, ms: int) -> None:
        state = self.partitions.get(tp)
        if state is not None:
            state.delayed_until = asyncio.get_running_loop().time() + ms / 1000.0

    # --- truncation (OffsetsForLeaderEpoch) ------------------------------------------------

    async def _truncate(
        self, conn: BrokerConnection, states: dict[TopicPartition, FetchState]
    ) -> None:
        asked: dict[TopicPartition, tuple[int, int]] = {}
        by_topic: dict[str, list[Any]] = {}
        for tp, state in states.items():
            position = self.sink.follower_fetch_position(tp)
            if position is None:
                self.partitions.pop(tp, None)
                continue
            _leo, _start, latest_epoch = position
            if latest_epoch == UNDEFINED_EPOCH:
                # nothing to compare: an empty log, or one written before leader epochs
                state.needs_truncation = False
                continue
            asked[tp] = (latest_epoch, state.leader_epoch)
            by_topic.setdefault(tp.topic, []).append(
                ofle_req.OffsetForLeaderPartition(
                    partition=i32(tp.partition),
                    current_leader_epoch=i32(state.leader_epoch),
                    leader_epoch=i32(latest_epoch),
                )
            )
        if not by_topic:
            return
        request = ofle_req.OffsetForLeaderEpochRequest(
            replica_id=i32(self.config.broker_id),  # type: ignore[arg-type]
            topics=tuple(
                ofle_req.OffsetForLeaderTopic(topic=t, partitions=tuple(ps))  # type: ignore[arg-type]
                for t, ps in by_topic.items()
            ),
        )
        response = await conn.request(
            OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION, request
        )
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(str(topic.topic), int(p.partition))
                current = self.partitions.get(tp)
                if current is None or tp not in asked or current.leader_epoch != asked[tp][1]:
                    continue
                error = ErrorCode(int(p.error_code))
                if error != ErrorCode.none:
                    self._on_partition_error(tp, error)
                    continue
                try:
                    self._apply_truncation(
                        tp, current, asked[tp][0], int(p.leader_epoch), int(p.end_offset)
                    )
                except Exception as exc:  # noqa: BLE001 - one partition must not stop the rest
                    self._on_processing_error(tp, int(p.end_offset), exc)

    def _apply_truncation(
        self,
        tp: TopicPartition,
        state: FetchState,
        requested_epoch: int,
        leader_epoch: int,
        leader_end_offset: int,
    ) -> None:
        position = self.sink.follower_fetch_position(tp)
        if position is None:
            return
        leo = position[0]
        if leader_epoch == UNDEFINED_EPOCH or leader_end_offset < 0:
            # The leader has no epoch at or below ours: everything we have is divergent
            # beyond what the leader holds; truncate to the leader's answer when known.
            target = leo if leader_end_offset < 0 else min(leader_end_offset, leo)
            self.sink.truncate_follower(tp, target)
            state.needs_truncation = False
            return
        own_epoch, own_end = self.sink.follower_end_offset_for(tp, leader_epoch)
        if own_end < 0:
            own_end = leo
        if own_epoch != leader_epoch:
            # KIP-279: we do not have the leader's epoch; cut our tail back to the end of
            # our largest epoch below it and ask again with that epoch.
            self.sink.truncate_follower(tp, min(own_end, leo))
            new_position = self.sink.follower_fetch_position(tp)
            if new_position is None or new_position[2] in (UNDEFINED_EPOCH, requested_epoch):
                state.needs_truncation = False
            return
        self.sink.truncate_follower(tp, min(own_end, leader_end_offset, leo))
        state.needs_truncation = False

    # --- fetching ------------------------------------------------------------------------

    async def _fetch(
        self, conn: BrokerConnection, states: dict[TopicPartition, FetchState]
    ) -> None:
        wanted = self._fetch_positions(states)
        if not wanted:
            return
        request = self._fetch_request(self.session.build(wanted), wanted)
        try:
            response = await conn.request(FETCH_KEY, FETCH_VERSION, request)
        except BaseException:
            self.session.handle_error()
            raise
        error = ErrorCode(int(response.error_code))
        self.session.handle_response(error, int(response.session_id))
        if error != ErrorCode.none:
            log.info("fetch from leader %d: %s; starting a new session", self.leader_id, error.name)
            return
        discarded = False
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(str(topic.topic), int(p.partition_index))
                if not self._on_fetched(tp, p, wanted.get(tp)):
                    discarded = True
        if discarded:
            # What the leader told us about that partition (e.g. its high watermark) is lost
            # and an incremental session would not repeat it: start a new session.
            self.session.handle_error()

    def _fetch_positions(
        self, states: dict[TopicPartition, FetchState]
    ) -> dict[TopicPartition, PartitionFetchState]:
        """Where each partition is fetched from (a partition without a log is dropped)."""
        wanted: dict[TopicPartition, PartitionFetchState] = {}
        for tp, state in states.items():
            position = self.sink.follower_fetch_position(tp)
            if position is None:
                self.partitions.pop(tp, None)
                continue
            leo, log_start, latest_epoch = position
            wanted[tp] = PartitionFetchState(
                leo, log_start, state.leader_epoch, latest_epoch, self.config.partition_max_bytes
            )
        return wanted

    def _fetch_request(
        self, plan: FetchPlan, wanted: dict[TopicPartition, PartitionFetchState]
    ) -> fetch_req.FetchRequest:
        """The Fetch request of the session's ``plan``: the partitions it sends, the ones it
        forgets."""
        by_topic: dict[str, list[Any]] = {}
        for tp in plan.send:
            w = wanted[tp]
            by_topic.setdefault(tp.topic, []).append(
                fetch_req.FetchPartition(
                    partition=i32(tp.partition),
                    current_leader_epoch=i32(w.current_leader_epoch),
                    fetch_offset=i64(w.fetch_offset),
                    last_fetched_epoch=i32(w.last_fetched_epoch),
                    log_start_offset=i64(w.log_start_offset),
                    partition_max_bytes=i32(w.max_bytes),
                )
            )
        forget: dict[str, list[i32]] = {}
        for tp in plan.forget:
            forget.setdefault(tp.topic, []).append(i32(tp.partition))
        return fetch_req.FetchRequest(
            replica_id=i32(self.config.broker_id),  # type: ignore[arg-type]
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=self.config.max_wait_ms)),
            min_bytes=i32(self.config.min_bytes),
            max_bytes=i32(self.config.max_bytes),
            isolation_level=i8(0),
            session_id=i32(plan.session_id),
            session_epoch=i32(plan.epoch),
            topics=tuple(
                fetch_req.FetchTopic(topic=t, partitions=tuple(ps))  # type: ignore[arg-type]
                for t, ps in by_topic.items()
            ),
            forgotten_topics_data=tuple(
                fetch_req.ForgottenTopic(topic=t, partitions=tuple(ps))  # type: ignore[arg-type]
                for t, ps in forget.items()
            ),
        )

    def _on_fetched(self, tp: TopicPartition, p: Any, sent: PartitionFetchState | None) -> bool:
        """Handle one partition of a Fetch response (``p``; ``sent``: what was asked for it).
        False: discarded, the partition moved while the fetch was in flight."""
        current = self.partitions.get(tp)
        position = self.sink.follower_fetch_position(tp)
        if (
            current is None
            or sent is None
            or current.leader_epoch != sent.current_leader_epoch
            or position is None
            or position[0] != sent.fetch_offset
        ):
            return False
        error = ErrorCode(int(p.error_code))
        diverging = getattr(p, "diverging_epoch", None)
        if error == ErrorCode.none and diverging is not None and int(diverging.epoch) >= 0:
            # the leader's log leaves ours (KIP-595, a Kafka leader checks the last
            # fetched epoch): find the divergence with OffsetsForLeaderEpoch
            log.info(
                "%s: leader %d reports divergence at epoch %d, offset %d",
                tp,
                self.leader_id,
                int(diverging.epoch),
                int(diverging.end_offset),
            )
            current.needs_truncation = True
            return True
        try:
            if error == ErrorCode.none:
                self.sink.append_as_follower(
                    tp,
                    p.records if p.records is not None else b"",
                    int(p.high_watermark),
                    int(p.log_start_offset),
                )
            elif error == ErrorCode.offset_out_of_range:
                self._on_out_of_range(tp, current, sent.fetch_offset, int(p.log_start_offset))
            else:
                self._on_partition_error(tp, error)
        except Exception as exc:  # noqa: BLE001 - one partition must not stop the rest
            self._on_processing_error(tp, sent.fetch_offset, exc)
        return True

    def _on_out_of_range(
        self, tp: TopicPartition, state: FetchState, fetch_offset: int, leader_log_start: int
    ) -> None:
        if leader_log_start >= 0 and fetch_offset < leader_log_start:
            log.info(
                "%s: fetch offset %d below the leader's log start %d; restarting there",
                tp,
                fetch_offset,
                leader_log_start,
            )
            self.sink.truncate_follower(tp, leader_log_start, fully=True)
        else:
            # our log end is past the leader's: find the divergence again
            state.needs_truncation = True
            self._delay(tp, 100)

    def _on_processing_error(self, tp: TopicPartition, offset: int, exc: Exception) -> None:
        """Appending or truncating one partition failed (Kafka's ``processFetchRequest``):
        invalid records from the leader are retried after the backoff; anything else (a
        storage error: the log's directory went offline) stops fetching the partition until
        the controller's next LeaderAndIsr adds it again. The other partitions go on."""
        if isinstance(exc, CorruptRecordError | InvalidRecordError):
            log.error("found invalid records during fetch for %s at offset %d: %s", tp, offset, exc)
            self._delay(tp, self.config.backoff_ms)
            return
        log.error(
            "error while processing data for %s at offset %d from leader %d; no longer "
            "fetching it: %s",
            tp,
            offset,
            self.leader_id,
            exc,
            exc_info=not isinstance(exc, KafkaError),
        )
        self.partitions.pop(tp, None)

    def _on_partition_error(self, tp: TopicPartition, error: ErrorCode) -> None:
        log.debug("fetch of %s from leader %d: %s", tp, self.leader_id, error.name)
        if error == ErrorCode.unknown_leader_epoch:
            self._delay(tp, 100)  # the leader has not heard of this epoch yet
        else:
            self._delay(tp, self.config.backoff_ms)


class ReplicaFetcherManager:
    """Which leader each followed partition is fetched from; one fetcher per leader."""

    def __init__(self, sink: FollowerSink, config: FetcherConfig) -> None:
        self.sink = sink
        self.config = config
        self._fetchers: dict[int, LeaderFetcher] = {}
        self._leader_of: dict[TopicPartition, int] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def add_partition(
        self, tp: TopicPartition, leader_id: int, address: tuple[str, int], leader_epoch: int
    ) -> None:
        self.remove_partition(tp)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is not None and (fetcher.host, fetcher.port) != address:
            fetcher.move_to(*address)  # the leader restarted on another address
        if fetcher is None:
            fetcher = LeaderFetcher(leader_id, address[0], address[1], self.sink, self.config)
            fetcher.task = asyncio.get_running_loop().create_task(
                fetcher.run(), name=f"fetcher-{leader_id}"
            )
            self._fetchers[leader_id] = fetcher
        fetcher.add(tp, leader_epoch)
        self._leader_of[tp] = leader_id

    def remove_partition(self, tp: TopicPartition) -> None:
        leader = self._leader_of.pop(tp, None)
        if leader is None:
            return
        fetcher = self._fetchers.get(leader)
        if fetcher is not None:
            fetcher.remove(tp)

    def leader_of(self, tp: TopicPartition) -> int | None:
        return self._leader_of.get(tp)

    def fetching(self) -> dict[TopicPartition, int]:
        return dict(self._leader_of)

    def remove_idle_fetchers(self) -> int:
        """Stop the fetchers left without partitions (Kafka's shutdownIdleFetcherThreads),
        e.g. of a former leader; called after every batch of role changes. Returns how many
        were stopped (their connections close in the background)."""
        idle = [leader for leader, f in self._fetchers.items() if not f.partitions]
        loop = asyncio.get_running_loop()
        for leader_id in idle:
            fetcher = self._fetchers.pop(leader_id)
            task = loop.create_task(fetcher.close(), name=f"close-fetcher-{leader_id}")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return len(idle)

    @property
    def fetcher_count(self) -> int:
        return len(self._fetchers)

    async def shutdown(self) -> None:
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._leader_of.clear()
        for fetcher in fetchers:
            await fetcher.close()
        closing = list(self._closing)
        if closing:
            await asyncio.gather(*closing, return_exceptions=True)
