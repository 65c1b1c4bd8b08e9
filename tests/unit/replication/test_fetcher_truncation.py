"""Follower truncation on a leader change (broker/replication/fetcher.py,
``LeaderFetcher._apply_truncation``; KIP-101 and KIP-279).

A follower asks the leader where its latest epoch ends (OffsetsForLeaderEpoch); the leader
answers from its epoch cache. These tests build the follower's and the leader's logs as real
:class:`Log` objects (their epoch caches are the real ``LeaderEpochFileCache``), answer
with the leader cache's ``end_offset_for``, and check what the follower's log keeps. No
network: the fetcher is only constructed, never run.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.clock import ManualClock
from broker.log.log import Log
from broker.protocol import records
from broker.replication.fetcher import FetcherConfig, FetchState, LeaderFetcher
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
TP = TopicPartition("orders", 0)
UNDEFINED = -1

Batch = tuple[int, int, bytes]  # (leader epoch, record count, value tag)


class LogSink:
    """The FollowerSink of the fetcher, over one real follower log (as the replica manager's
    ``truncate_follower`` does: a truncation at or past the log end removes no record, only
    epoch entries starting at the log end; ``truncations`` lists those that cut records)."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.truncations: list[int] = []

    def follower_fetch_position(self, tp: TopicPartition) -> tuple[int, int, int] | None:
        assert tp == TP
        log = self.log
        return log.log_end_offset, log.log_start_offset, log.leader_epoch_cache.latest_epoch

    def follower_end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        return self.log.leader_epoch_cache.end_offset_for(epoch)

    def truncate_follower(self, tp: TopicPartition, offset: int, *, fully: bool = False) -> None:
        assert not fully
        if offset < self.log.log_end_offset:
            self.truncations.append(offset)
        self.log.truncate_to(offset)

    def append_as_follower(
        self, tp: TopicPartition, records_bytes: bytes, leader_hw: int, leader_log_start: int
    ) -> None:
        raise AssertionError("no fetching in these tests")


def _open(directory: Path, name: str) -> Log:
    config = dataclasses.replace(LogConfig(), file_delete_delay_ms=0)
    return Log.open(directory / name / "orders-0", config, clock=ManualClock(NOW))


def _write(log: Log, batches: list[Batch]) -> None:
    """Append batches stamped with the given leader epochs (the cache learns each epoch)."""
    for epoch, n, tag in batches:
        buf = bytearray(
            records.encode_batch(
                [records.SimpleRecord(tag + b"-%d" % i, None, NOW) for i in range(n)]
            )
        )
        log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=epoch)


def _build(directory: Path, name: str, batches: list[Batch], new_epoch: int | None = None) -> Log:
    log = _open(directory, name)
    _write(log, batches)
    if new_epoch is not None:  # a leader's current epoch starts at its log end (make_leader)
        log.leader_epoch_cache.assign(new_epoch, log.log_end_offset)
    return log


def _fetcher(sink: LogSink) -> LeaderFetcher:
    return LeaderFetcher(2, "127.0.0.1", 1, sink, FetcherConfig(broker_id=1))


def _ask(leader: Log, requested_epoch: int) -> tuple[int, int]:
    """The leader's OffsetsForLeaderEpoch answer."""
    return leader.leader_epoch_cache.end_offset_for(requested_epoch)


def _round(fetcher: LeaderFetcher, sink: LogSink, state: FetchState, leader: Log) -> None:
    """One OffsetsForLeaderEpoch exchange, as ``LeaderFetcher._truncate`` does it."""
    requested = sink.log.leader_epoch_cache.latest_epoch
    if requested == UNDEFINED:
        state.needs_truncation = False
        return
    epoch, end = _ask(leader, requested)
    fetcher._apply_truncation(TP, state, requested, epoch, end)


def _resolve(sink: LogSink, leader: Log, leader_epoch: int, max_rounds: int = 20) -> int:
    """Exchange until truncation completes; the number of rounds it took."""
    fetcher = _fetcher(sink)
    state = FetchState(leader_epoch)
    for rounds in range(1, max_rounds + 1):
        _round(fetcher, sink, state, leader)
        if not state.needs_truncation:
            return rounds
    raise AssertionError(f"truncation did not complete in {max_rounds} rounds")


def _headers(log: Log) -> list[tuple[int, int, int, int]]:
    return [
        (h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc)
        for h in log.batches_from(log.log_start_offset)
    ]


# --- KIP-101: the leader knows the follower's latest epoch --------------------------------------


def test_leader_knows_the_epoch_follower_truncates_to_its_end_there(tmp_path: Path) -> None:
    common: list[Batch] = [(0, 3, b"a"), (1, 2, b"b")]  # 0..2 in epoch 0, 3..4 in epoch 1
    follower = _build(tmp_path, "f", [*common, (1, 3, b"f")])  # 5..7 never replicated
    leader = _build(tmp_path, "l", [*common, (2, 4, b"l")], new_epoch=3)
    assert _ask(leader, 1) == (1, 5)
    sink = LogSink(follower)
    state = FetchState(3)
    _fetcher(sink)._apply_truncation(TP, state, 1, 1, 5)
    assert follower.log_end_offset == 5
    assert not state.needs_truncation
    assert follower.leader_epoch_cache.entries == [(0, 0), (1, 3)]
    assert _headers(follower) == _headers(leader)[:2]


def test_leader_end_beyond_the_follower_log_truncates_nothing(tmp_path: Path) -> None:
    follower = _build(tmp_path, "f", [(0, 3, b"a"), (1, 2, b"b")])
    leader = _build(tmp_path, "l", [(0, 3, b"a"), (1, 2, b"b"), (1, 4, b"c")], new_epoch=2)
    sink = LogSink(follower)
    assert _resolve(sink, leader, 2) == 1
    assert sink.truncations == []
    assert follower.log_end_offset == 5


def test_extra_unreplicated_data_at_the_same_epoch_is_cut_at_the_leader_end(
    tmp_path: Path,
) -> None:
    # the follower has more of epoch 0 than the new leader ever got
    follower = _build(tmp_path, "f", [(0, 4, b"a"), (0, 3, b"x"), (0, 3, b"y")])
    leader = _build(tmp_path, "l", [(0, 4, b"a")], new_epoch=1)
    assert _ask(leader, 0) == (0, 4)
    sink = LogSink(follower)
    assert _resolve(sink, leader, 1) == 1
    assert sink.truncations == [4]
    assert follower.log_end_offset == 4
    assert follower.leader_epoch_cache.entries == [(0, 0)]


def test_extra_data_at_the_same_epoch_when_the_leader_wrote_a_newer_epoch(tmp_path: Path) -> None:
    follower = _build(tmp_path, "f", [(0, 4, b"a"), (0, 6, b"x")])
    leader = _build(tmp_path, "l", [(0, 4, b"a"), (1, 2, b"l")], new_epoch=2)
    sink = LogSink(follower)
    _resolve(sink, leader, 2)
    assert follower.log_end_offset == 4
    assert _headers(follower) == _headers(leader)[:1]


def test_follower_epoch_the_leader_never_had_is_truncated_in_one_round(tmp_path: Path) -> None:
    """The classic KIP-101 case: the follower briefly led epoch 1 and wrote data nobody
    replicated; the leader answers with its largest epoch below (0) and where it ends."""
    follower = _build(tmp_path, "f", [(0, 5, b"a"), (1, 3, b"f")])
    leader = _build(tmp_path, "l", [(0, 5, b"a"), (2, 5, b"l")], new_epoch=3)
    assert _ask(leader, 1) == (0, 5)
    sink = LogSink(follower)
    assert _resolve(sink, leader, 3) == 1
    assert follower.log_end_offset == 5
    assert follower.leader_epoch_cache.entries == [(0, 0)]


# --- KIP-279: the leader answers with an epoch the follower does not have -------------------------


def test_leader_answers_an_epoch_unknown_to_the_follower_truncate_and_ask_again(
    tmp_path: Path,
) -> None:
    common: list[Batch] = [(0, 5, b"a")]
    follower = _build(tmp_path, "f", [*common, (2, 5, b"f")])  # 5..9 in epoch 2
    leader = _build(tmp_path, "l", [*common, (1, 3, b"l"), (3, 4, b"m")], new_epoch=4)
    sink = LogSink(follower)
    fetcher = _fetcher(sink)
    state = FetchState(4)

    assert _ask(leader, 2) == (1, 8)  # largest leader epoch <= 2, and its end
    fetcher._apply_truncation(TP, state, 2, 1, 8)
    # the follower has no epoch 1: it cuts back to the end of its epoch below (0 ends at 5)
    assert follower.log_end_offset == 5
    assert follower.leader_epoch_cache.latest_epoch == 0
    assert state.needs_truncation  # and must ask again, with epoch 0

    assert _ask(leader, 0) == (0, 5)
    fetcher._apply_truncation(TP, state, 0, 0, 5)
    assert not state.needs_truncation
    assert follower.log_end_offset == 5
    assert _headers(follower) == _headers(leader)[:1]


def test_kip_279_over_several_epochs(tmp_path: Path) -> None:
    common: list[Batch] = [(0, 2, b"a"), (1, 2, b"b")]
    follower = _build(tmp_path, "f", [*common, (3, 2, b"f"), (5, 2, b"g")])
    leader = _build(tmp_path, "l", [*common, (2, 2, b"l"), (4, 2, b"m")], new_epoch=6)
    sink = LogSink(follower)
    rounds = _resolve(sink, leader, 6)
    assert rounds >= 2
    assert follower.log_end_offset == 4
    assert follower.leader_epoch_cache.entries == [(0, 0), (1, 2)]
    assert _headers(follower) == _headers(leader)[:2]


# --- UNDEFINED answers and agreeing logs -----------------------------------------------------------


def test_undefined_answer_keeps_the_follower_log(tmp_path: Path) -> None:
    """(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET): the leader cannot tell (no epoch cache, or
    our epoch is above its epochs). Kafka then keeps the fetch offset (the follower's log
    end) and lets the fetch path sort it out; truncation is complete."""
    follower = _build(tmp_path, "f", [(0, 3, b"a"), (1, 2, b"b")])
    sink = LogSink(follower)
    state = FetchState(2)
    _fetcher(sink)._apply_truncation(TP, state, 1, UNDEFINED, UNDEFINED)
    assert not state.needs_truncation
    assert sink.truncations == []
    assert follower.log_end_offset == 5


def test_undefined_epoch_with_an_end_offset_truncates_to_it(tmp_path: Path) -> None:
    """An answer with no epoch but an end offset (pre-KIP-279 leaders): truncate to
    min(that offset, own log end)."""
    follower = _build(tmp_path, "f", [(0, 3, b"a"), (0, 1, b"b"), (0, 2, b"c")])
    sink = LogSink(follower)
    state = FetchState(1)
    _fetcher(sink)._apply_truncation(TP, state, 0, UNDEFINED, 4)
    assert not state.needs_truncation
    assert follower.log_end_offset == 4
    state = FetchState(1)
    _fetcher(sink)._apply_truncation(TP, state, 0, UNDEFINED, 100)
    assert follower.log_end_offset == 4


def test_no_truncation_when_the_logs_agree(tmp_path: Path) -> None:
    batches: list[Batch] = [(0, 3, b"a"), (2, 2, b"b"), (2, 1, b"c")]
    follower = _build(tmp_path, "f", batches)
    leader = _build(tmp_path, "l", batches, new_epoch=3)
    before = (_headers(follower), follower.leader_epoch_cache.entries, follower.size_in_bytes)
    sink = LogSink(follower)
    assert _resolve(sink, leader, 3) == 1
    assert sink.truncations == []
    after = (_headers(follower), follower.leader_epoch_cache.entries, follower.size_in_bytes)
    assert after == before


def test_follower_behind_in_the_same_epoch_keeps_everything(tmp_path: Path) -> None:
    follower = _build(tmp_path, "f", [(0, 3, b"a")])
    leader = _build(tmp_path, "l", [(0, 3, b"a"), (0, 4, b"b")], new_epoch=1)
    sink = LogSink(follower)
    _resolve(sink, leader, 1)
    assert sink.truncations == []
    assert follower.log_end_offset == 3


def test_partition_gone_from_the_sink_is_left_alone(tmp_path: Path) -> None:
    class GoneSink(LogSink):
        def follower_fetch_position(self, tp: TopicPartition) -> tuple[int, int, int] | None:
            return None

    follower = _build(tmp_path, "f", [(0, 3, b"a")])
    sink = GoneSink(follower)
    _fetcher(sink)._apply_truncation(TP, FetchState(1), 0, 0, 1)
    assert follower.log_end_offset == 3


# --- property: truncation stops exactly at the divergence point ----------------------------------


@st.composite
def _histories(draw: st.DrawFn) -> tuple[list[Batch], list[Batch], list[Batch], int]:
    """A shared prefix, then what only the leader has and what only the follower has.

    Each leader epoch had one leader, so data written in one epoch is the same on every
    replica up to where each stopped: after the prefix, at most one side continues the
    prefix's last epoch, and the later epochs are split between the sides. The leader's
    current epoch is the newest of all."""
    sizes = st.integers(1, 3)
    prefix_epochs = sorted(draw(st.lists(st.integers(0, 3), max_size=4)))
    prefix: list[Batch] = [(e, draw(sizes), b"p%d" % i) for i, e in enumerate(prefix_epochs)]
    last = prefix_epochs[-1] if prefix_epochs else -1
    leader_only: list[Batch] = []
    follower_only: list[Batch] = []
    if prefix:
        continuing = draw(st.sampled_from(["none", "leader", "follower"]))
        if continuing == "leader":
            leader_only += [
                (last, draw(sizes), b"lc%d" % i) for i in range(draw(st.integers(1, 2)))
            ]
        elif continuing == "follower":
            follower_only += [
                (last, draw(sizes), b"fc%d" % i) for i in range(draw(st.integers(1, 2)))
            ]
    middle = draw(st.lists(st.sampled_from(["leader", "follower"]), max_size=5))
    for offset, side in enumerate(middle, start=1):
        epoch = last + offset
        n_batches = draw(st.integers(0, 2))
        target = leader_only if side == "leader" else follower_only
        target += [
            (epoch, draw(sizes), b"%s%d-%d" % (side[:1].encode(), epoch, i))
            for i in range(n_batches)
        ]
    current = last + len(middle) + 1
    leader_only += [(current, draw(sizes), b"cur%d" % i) for i in range(draw(st.integers(0, 2)))]
    return prefix, leader_only, follower_only, current


@settings(max_examples=150, deadline=None)
@given(_histories())
@pytest.mark.property
def test_truncation_stops_exactly_where_the_logs_diverge(
    history: tuple[list[Batch], list[Batch], list[Batch], int],
) -> None:
    prefix, leader_only, follower_only, current = history
    with tempfile.TemporaryDirectory() as d:
        directory = Path(d)
        leader = _build(directory, "l", prefix + leader_only, new_epoch=current)
        follower = _build(directory, "f", prefix + follower_only)
        common_end = sum(n for _, n, _ in prefix)
        sink = LogSink(follower)
        _resolve(sink, leader, current)
        # nothing the leader does not have survives, and nothing it has is thrown away
        assert follower.log_end_offset == common_end
        assert _headers(follower) == _headers(leader)[: len(prefix)]
        assert follower.leader_epoch_cache.entries == [
            entry for entry in leader.leader_epoch_cache.entries if entry[1] < common_end
        ]
        follower.close()
        leader.close()
