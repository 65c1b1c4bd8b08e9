"""The leader and follower sides of one partition replica (broker/replication/partition.py):
the high watermark, ISR expansion and shrinking, leader epochs and min.insync.replicas.

Every test runs against a real :class:`Log` in ``tmp_path``; time is passed explicitly as
``now_ms`` (the partition never reads a clock).
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
from broker.protocol.errors import ErrorCode
from broker.replication.partition import NotEnoughReplicasError, NotLeaderError, Partition
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
TP = TopicPartition("orders", 0)
LAG_MS = 10_000


def _open_log(directory: Path, **cfg: object) -> Log:
    config = dataclasses.replace(LogConfig(), **cfg)  # type: ignore[arg-type]
    return Log.open(directory / "orders-0", config, clock=ManualClock(NOW))


def _batch(n: int) -> tuple[bytearray, list[records.BatchHeader]]:
    buf = bytearray(
        records.encode_batch([records.SimpleRecord(b"value-%d" % i, b"k", NOW) for i in range(n)])
    )
    return buf, list(records.iter_batches(buf))


def _append(p: Partition, n: int = 1, acks: int = 1) -> None:
    buf, headers = _batch(n)
    p.append_as_leader(buf, headers, acks)


def _leader(
    log: Log,
    *,
    replicas: tuple[int, ...] = (1, 2, 3),
    isr: tuple[int, ...] | None = None,
    epoch: int = 0,
    now_ms: int = 0,
) -> Partition:
    """Broker 1 as the leader of ``TP`` (made leader the way the replica manager does it)."""
    isr = replicas if isr is None else isr
    p = Partition(
        TP,
        log,
        broker_id=1,
        leader_id=-1,
        leader_epoch=epoch,
        replicas=replicas,
        isr=isr,
        now_ms=now_ms,
    )
    p.make_leader(epoch, replicas, isr, now_ms=now_ms)
    return p


# --- the high watermark --------------------------------------------------------------------


def test_hw_is_min_leo_over_the_isr(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path))
    _append(p, 10)
    assert p.log.log_end_offset == 10
    assert p.high_watermark == 0  # no follower has fetched yet
    p.update_follower_leo(2, 10)
    assert p.high_watermark == 0  # follower 3 (in the ISR) is still unknown
    p.update_follower_leo(3, 4)
    assert p.high_watermark == 4
    assert p.log.high_watermark == 4  # the log (retention) sees the same bound
    p.update_follower_leo(3, 7)
    assert p.high_watermark == 7
    p.update_follower_leo(3, 10)
    assert p.high_watermark == 10
    _append(p, 5)
    assert p.high_watermark == 10  # the followers have not fetched the new records


def test_hw_never_moves_backwards(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path))
    _append(p, 10)
    p.update_follower_leo(2, 8)
    p.update_follower_leo(3, 8)
    assert p.high_watermark == 8
    # a follower that restarted and fetches from an older offset does not pull the HW down
    p.update_follower_leo(3, 2)
    assert p.high_watermark == 8
    # neither does a committed ISR containing a follower below the HW
    p.commit_isr((1, 2, 3), zk_version=1)
    assert p.high_watermark == 8
    # nor a new leader epoch (followers' positions are forgotten)
    p.make_leader(1, (1, 2, 3), (1, 2, 3), zk_version=2)
    assert p.high_watermark == 8


def test_hw_follows_appends_with_a_single_replica_isr(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2), isr=(1,))
    _append(p, 3)
    assert p.high_watermark == 3
    assert p.offset_is_acked(3)
    _append(p, 2)
    assert p.high_watermark == 5
    assert p.read(0, 1 << 20, committed_only=True, min_one_batch=True).slice is not None


def test_follower_outside_the_isr_does_not_hold_the_hw_back(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2, 3), isr=(1, 2))
    _append(p, 10)
    p.update_follower_leo(3, 0)  # far behind, and not in the ISR
    p.update_follower_leo(2, 10)
    assert p.high_watermark == 10


def test_consumer_reads_stop_at_the_hw(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2), isr=(1, 2))
    _append(p, 1)
    _append(p, 1)
    p.update_follower_leo(2, 1)
    committed = p.read(0, 1 << 20, committed_only=True, min_one_batch=True)
    assert committed.high_watermark == 1
    assert committed.slice is not None and committed.slice.last_offset == 0
    everything = p.read(0, 1 << 20, committed_only=False, min_one_batch=True)
    assert everything.slice is not None and everything.slice.last_offset == 1
    assert everything.log_end_offset == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 4)),
            st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.floats(0, 1)),
            st.tuples(st.just("isr"), st.sampled_from([(1,), (1, 2), (1, 3), (1, 2, 3)])),
        ),
        max_size=40,
    )
)
@pytest.mark.property
def test_hw_is_monotonic_min_of_isr_leos(ops: list[tuple[object, ...]]) -> None:
    """Property: after any sequence of appends, follower fetches (never past the leader's
    log end, never backwards) and ISR changes, HW == max(previous HW, min LEO over the ISR),
    a follower that has not fetched yet counting as being at the HW."""
    with tempfile.TemporaryDirectory() as d:
        p = _leader(_open_log(Path(d)))
        leos: dict[int, int] = {}
        hw = 0
        for op in ops:
            if op[0] == "append":
                _append(p, int(op[1]))  # type: ignore[call-overload]
            elif op[0] == "fetch":
                replica = int(op[1])  # type: ignore[call-overload]
                low = leos.get(replica, 0)
                leo = low + round(float(op[2]) * (p.log.log_end_offset - low))  # type: ignore[arg-type]
                leos[replica] = leo
                p.update_follower_leo(replica, leo)
            else:
                isr = op[1]
                assert isinstance(isr, tuple)
                p.commit_isr(isr, p.zk_version + 1)
            bound = min(
                [p.log.log_end_offset] + [leos.get(r, hw) for r in p.isr if r != p.broker_id]
            )
            hw = max(hw, bound)
            assert p.high_watermark == hw
            assert p.high_watermark <= p.log.log_end_offset
        p.log.close()


# --- ISR expansion ----------------------------------------------------------------------------


def test_follower_joins_the_isr_only_at_the_hw_and_the_epoch_start(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2, 3), isr=(1, 3), epoch=0)
    _append(p, 5)  # offsets 0..4 in epoch 0
    p.update_follower_leo(3, 2)
    assert p.high_watermark == 2
    # a new epoch starts at the log end (5); the HW is still 2 (3's position is forgotten)
    p.make_leader(1, (1, 2, 3), (1, 3))
    assert p.high_watermark == 2
    assert p.log.leader_epoch_cache.latest_entry == (1, 5)
    _append(p, 3)  # offsets 5..7 in epoch 1

    p.update_follower_leo(2, 1)  # below the HW
    assert p.isr_to_expand() is None
    p.update_follower_leo(2, 3)  # at/above the HW, but before the start of epoch 1
    assert p.high_watermark == 2
    assert p.isr_to_expand() is None
    p.update_follower_leo(2, 5)  # reached both
    assert p.isr_to_expand() == (1, 3, 2)
    assert p.isr == (1, 3)  # only proposed: the committed ISR has not changed


def test_a_follower_proposed_for_the_isr_holds_the_hw_until_it_has_the_records(
    tmp_path: Path,
) -> None:
    """Kafka's maximal ISR. The fault harness found the bug: the HW counted only the
    committed ISR [1, 3], passed follower 2 while its expansion was being written, the
    expansion committed, the leader died and 2 was elected without acknowledged records."""
    p = _leader(_open_log(tmp_path), replicas=(1, 2, 3), isr=(1, 3))
    _append(p, 5)
    p.update_follower_leo(3, 5)
    p.update_follower_leo(2, 5)
    assert p.high_watermark == 5
    proposal = p.isr_to_expand()
    assert proposal == (1, 3, 2)
    p.pending_isr = proposal  # the write to ZooKeeper is in flight
    _append(p, 3, acks=-1)  # offsets 5..7
    p.update_follower_leo(3, 8)
    assert p.high_watermark == 5  # 2 is joining and has only 0..4
    assert not p.offset_is_acked(8)
    p.update_follower_leo(2, 8)
    assert p.high_watermark == 8
    p.commit_isr(proposal, zk_version=3)
    assert (p.isr, p.high_watermark) == ((1, 3, 2), 8)


def test_a_rejected_expansion_stops_holding_the_hw(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2, 3), isr=(1, 3))
    _append(p, 2)
    p.update_follower_leo(2, 2)
    p.pending_isr = p.isr_to_expand()
    _append(p, 2)
    p.update_follower_leo(3, 4)
    assert p.high_watermark == 2
    p.pending_isr = None  # the conditional write lost: the ISR stays (1, 3)
    p.update_follower_leo(3, 4)
    assert p.high_watermark == 4


def test_a_pending_shrink_still_counts_the_committed_isr(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), now_ms=0)
    _append(p, 4)
    p.update_follower_leo(2, 4, now_ms=1)
    p.update_follower_leo(3, 1, now_ms=1)
    p.pending_isr = p.isr_to_shrink(now_ms=LAG_MS + 1, max_lag_ms=LAG_MS)
    assert p.pending_isr == (1, 2)
    p.update_follower_leo(2, 4, now_ms=LAG_MS + 2)
    assert p.high_watermark == 1  # 3 still counts until the shrink is written
    p.commit_isr((1, 2), zk_version=1)
    assert p.high_watermark == 4


def test_no_expansion_when_every_replica_is_in_sync(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2), isr=(1, 2))
    _append(p, 2)
    p.update_follower_leo(2, 2)
    assert p.isr_to_expand() is None


# --- ISR shrinking ---------------------------------------------------------------------------


def test_shrink_removes_a_follower_that_has_not_caught_up_for_the_lag_time(
    tmp_path: Path,
) -> None:
    p = _leader(_open_log(tmp_path), now_ms=1_000)
    _append(p, 10)
    p.update_follower_leo(2, 10, now_ms=5_000)  # caught up at 5 s
    p.update_follower_leo(3, 5, now_ms=5_000)  # behind since it became leader at 1 s
    assert p.isr_to_shrink(now_ms=11_000, max_lag_ms=LAG_MS) is None  # exactly the lag: kept
    assert p.isr_to_shrink(now_ms=11_001, max_lag_ms=LAG_MS) == (1, 2)
    # follower 2 holds the leader's whole log: in sync however long ago it fetched (Kafka's
    # isCaughtUp), so only follower 3 goes
    assert p.isr_to_shrink(now_ms=15_001, max_lag_ms=LAG_MS) == (1, 2)
    assert p.isr == (1, 2, 3)  # proposals only


def test_shrink_keeps_a_follower_that_reached_the_previous_leader_leo(tmp_path: Path) -> None:
    """Kafka's lastCaughtUpTime: a follower that fetches at (or past) the leader's LEO of
    its previous fetch was caught up at the time of that previous fetch, even if the leader
    has appended meanwhile (a steady stream of produce never makes a healthy follower lag)."""
    p = _leader(_open_log(tmp_path), replicas=(1, 2), isr=(1, 2), now_ms=1_000)
    _append(p, 10)
    p.update_follower_leo(2, 5, now_ms=2_000)  # leader LEO was 10 at this fetch
    _append(p, 5)
    p.update_follower_leo(2, 10, now_ms=8_000)  # has all of it as of 2 s, not of now
    assert p.isr_to_shrink(now_ms=11_500, max_lag_ms=LAG_MS) is None
    assert p.isr_to_shrink(now_ms=12_001, max_lag_ms=LAG_MS) == (1,)


def test_a_follower_at_the_log_end_is_caught_up_now(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2), isr=(1, 2), now_ms=0)
    _append(p, 3)
    p.update_follower_leo(2, 3, now_ms=50_000)
    assert p.isr_to_shrink(now_ms=59_000, max_lag_ms=LAG_MS) is None


def test_shrink_keeps_a_follower_whose_leo_equals_the_leader_leo(tmp_path: Path) -> None:
    """Kafka's ``ReplicaState.isCaughtUp``: a follower is caught up when its LEO equals the
    leader's LEO *or* it caught up within replica.lag.time.max.ms. On an idle partition a
    follower holding everything is never out of sync, however long since its last fetch."""
    p = _leader(_open_log(tmp_path), replicas=(1, 2, 3), isr=(1, 2, 3), now_ms=0)
    _append(p, 3)
    p.update_follower_leo(2, 3, now_ms=1_000)
    p.update_follower_leo(3, 1, now_ms=1_000)
    assert p.isr_to_shrink(now_ms=1_000 + 5 * LAG_MS, max_lag_ms=LAG_MS) == (1, 2)


def test_leader_never_shrinks_itself_out(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2), isr=(1, 2), now_ms=0)
    _append(p, 3)
    assert p.isr_to_shrink(now_ms=10**9, max_lag_ms=LAG_MS) == (1,)


def test_only_one_pending_isr_change_at_a_time(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1, 2, 3), isr=(1, 2), now_ms=0)
    _append(p, 4)
    proposal = p.isr_to_shrink(now_ms=LAG_MS + 1, max_lag_ms=LAG_MS)
    assert proposal == (1,)
    p.pending_isr = proposal  # what the replica manager does while the write is in flight
    p.update_follower_leo(3, 4, now_ms=LAG_MS + 1)  # caught up: would be added
    assert p.isr_to_expand() is None
    assert p.isr_to_shrink(now_ms=10 * LAG_MS, max_lag_ms=LAG_MS) is None
    p.commit_isr(proposal, zk_version=7)
    assert p.pending_isr is None
    assert (p.isr, p.zk_version) == ((1,), 7)
    assert p.isr_to_expand() == (1, 3)  # the next change can be proposed now


def test_commit_isr_advances_the_hw_when_a_laggard_is_removed(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path))
    _append(p, 10)
    p.update_follower_leo(2, 10)
    p.update_follower_leo(3, 4)
    assert p.high_watermark == 4
    p.pending_isr = (1, 2)
    p.commit_isr((1, 2), zk_version=5)
    assert p.high_watermark == 10
    assert (p.isr, p.zk_version, p.pending_isr) == ((1, 2), 5, None)


# --- leader epochs and appends ---------------------------------------------------------------


def test_make_leader_assigns_the_new_epoch_at_the_log_end(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path), replicas=(1,), epoch=0)
    _append(p, 3)
    assert p.log.leader_epoch_cache.entries == [(0, 0)]
    p.make_leader(4, (1,), (1,))
    assert p.leader_epoch == 4
    assert p.log.leader_epoch_cache.entries == [(0, 0), (4, 3)]
    _append(p, 2)
    stamped = [h.partition_leader_epoch for h in p.log.batches_from(0)]
    assert stamped == [0, 4]
    assert p.log.leader_epoch_cache.end_offset_for(0) == (0, 3)
    assert p.log.leader_epoch_cache.end_offset_for(4) == (4, 5)


def test_acks_all_below_min_insync_replicas_is_refused_before_writing(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path, min_insync_replicas=2), replicas=(1, 2), isr=(1,), now_ms=0)
    _append(p, 2, acks=1)
    size = p.log.size_in_bytes
    with pytest.raises(NotEnoughReplicasError) as info:
        _append(p, 3, acks=-1)
    assert info.value.code == ErrorCode.not_enough_replicas
    assert p.log.log_end_offset == 2
    assert p.log.size_in_bytes == size
    assert p.high_watermark == 2
    _append(p, 1, acks=0)  # acks=0/1 do not need min.insync.replicas
    assert p.log.log_end_offset == 3


def test_min_insync_replicas_above_the_replica_count_counts_as_the_replicas(
    tmp_path: Path,
) -> None:
    """Kafka 3.9's effectiveMinIsr: min(min.insync.replicas, replicas). One replica with
    min.insync.replicas 3 takes acks=all; two replicas with only the leader in sync do not."""
    p = _leader(_open_log(tmp_path / "one", min_insync_replicas=3), replicas=(1,), isr=(1,))
    assert p.effective_min_isr() == 1
    _append(p, 2, acks=-1)
    assert p.log.log_end_offset == 2
    q = _leader(_open_log(tmp_path / "two", min_insync_replicas=3), replicas=(1, 2), isr=(1,))
    assert q.effective_min_isr() == 2
    with pytest.raises(NotEnoughReplicasError):
        _append(q, 1, acks=-1)


def test_acks_all_with_enough_in_sync_replicas_is_written(tmp_path: Path) -> None:
    p = _leader(_open_log(tmp_path, min_insync_replicas=2), replicas=(1, 2), isr=(1, 2))
    _append(p, 2, acks=-1)
    assert p.log.log_end_offset == 2
    assert p.high_watermark == 0
    assert not p.offset_is_acked(2)
    p.update_follower_leo(2, 2)
    assert p.offset_is_acked(2)


def test_a_follower_refuses_leader_appends(tmp_path: Path) -> None:
    p = Partition(
        TP,
        _open_log(tmp_path),
        broker_id=1,
        leader_id=2,
        leader_epoch=0,
        replicas=(1, 2),
        isr=(1, 2),
    )
    with pytest.raises(NotLeaderError):
        _append(p, 1)
    assert p.log.log_end_offset == 0


# --- the follower side -----------------------------------------------------------------------


def _follower_append(p: Partition, base_offset: int, n: int, epoch: int) -> None:
    buf = records.encode_batch(
        [records.SimpleRecord(b"v", None, NOW) for _ in range(n)],
        base_offset=base_offset,
        partition_leader_epoch=epoch,
    )
    p.log.append_as_follower(buf, list(records.iter_batches(buf)))


def test_follower_hw_is_min_of_own_leo_and_leader_hw(tmp_path: Path) -> None:
    p = Partition(
        TP,
        _open_log(tmp_path),
        broker_id=1,
        leader_id=2,
        leader_epoch=3,
        replicas=(1, 2),
        isr=(1, 2),
    )
    assert not p.is_leader
    _follower_append(p, 0, 5, epoch=3)
    p.update_follower_high_watermark(3)
    assert p.high_watermark == 3  # the leader's HW is below our log end
    p.update_follower_high_watermark(100)
    assert p.high_watermark == 5  # never above what we have
    assert p.log.high_watermark == 5
    _follower_append(p, 5, 2, epoch=3)
    assert p.high_watermark == 5  # appending alone does not move a follower's HW
    p.update_follower_high_watermark(7)
    assert p.high_watermark == 7
    assert p.log.leader_epoch_cache.entries == [(3, 0)]


def test_follower_truncation_pulls_the_hw_down_to_the_log_end(tmp_path: Path) -> None:
    p = Partition(
        TP,
        _open_log(tmp_path),
        broker_id=1,
        leader_id=2,
        leader_epoch=0,
        replicas=(1, 2),
        isr=(1, 2),
    )
    _follower_append(p, 0, 1, epoch=0)
    _follower_append(p, 1, 1, epoch=0)
    _follower_append(p, 2, 1, epoch=0)
    p.update_follower_high_watermark(3)
    p.truncate_to(1)
    assert p.log.log_end_offset == 1
    assert p.high_watermark == 1
