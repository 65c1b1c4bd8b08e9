"""Log directory failure in the replication layer (KIP-112): the replica manager's handler
(broker/replication/replica_manager.py) takes the partitions of a failed directory offline and
answers KAFKA_STORAGE_ERROR for them, and the follower fetcher (broker/replication/fetcher.py)
drops a partition whose append fails without stopping the others.

Real logs in two directories under ``tmp_path``; the failure is injected by
tests/fakes/failing_disk.py; the follower fetchers are replaced by a recording fake.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.clock import ManualClock
from broker.config import BrokerConfig
from broker.log.errors import LogDirOfflineError
from broker.log.log_manager import LogManager
from broker.protocol import records
from broker.protocol.errors import ErrorCode, KafkaError
from broker.replication.fetcher import FetcherConfig, LeaderFetcher
from broker.replication.replica_manager import (
    FetchRequestPartition,
    PartitionStateSpec,
    ReplicaManager,
)
from broker.topic_config import LogConfig
from broker.types import TopicPartition
from tests.fakes.failing_disk import FailingDisk
from tests.unit.replication.test_replica_manager_roles import RecordingFetchers

pytestmark = pytest.mark.unit

NOW = 1_700_000_000_000
A0, B0, A1, C0 = (TopicPartition(t, p) for t, p in (("a", 0), ("b", 0), ("a", 1), ("c", 0)))
LEADERS = {2: ("127.0.0.1", 19092)}
CONFIG = LogConfig(file_delete_delay_ms=0)


class Broker:
    """Broker 1's replica manager over two log dirs, with the log-dir callbacks recorded."""

    def __init__(self, tmp_path: Path) -> None:
        self.dirs = [tmp_path / "d1", tmp_path / "d2"]
        self.clock = ManualClock(NOW)
        config = BrokerConfig({"broker.id": "1", "log.dirs": ",".join(map(str, self.dirs))})
        self.log_manager = LogManager(
            self.dirs, CONFIG, clock=self.clock, broker_id=1, cluster_id="c"
        )
        self.log_manager.startup(lambda _topic: CONFIG)
        self.events = 0
        self.halted: list[str] = []
        self.roles: list[tuple[TopicPartition, bool]] = []

        async def log_dir_event() -> None:
            self.events += 1

        self.rm = ReplicaManager(
            config,
            self.log_manager,
            clock=self.clock,
            broker_id=1,
            log_dir_event=log_dir_event,
            on_all_log_dirs_offline=self.halted.append,
        )
        self.fetchers = RecordingFetchers()
        self.rm.fetchers = self.fetchers  # type: ignore[assignment]
        self.rm.role_listeners.append(lambda tp, leader, _epoch: self.roles.append((tp, leader)))

    def apply(self, *specs: PartitionStateSpec) -> dict[TopicPartition, ErrorCode]:
        return self.rm.become_leader_or_follower(1, specs, LEADERS, lambda _topic: CONFIG)

    async def produce(self, tp: TopicPartition, acks: int = 1) -> ErrorCode:
        data = records.encode_batch([records.SimpleRecord(b"v", b"k", NOW) for _ in range(3)])
        result = await self.rm.append_records({tp: data}, required_acks=acks, timeout_ms=30_000)
        return result[tp].error

    async def fetch(self, tp: TopicPartition) -> ErrorCode:
        [result] = await self.rm.fetch(
            [FetchRequestPartition(tp, 0, 1 << 20)], max_wait_ms=0, min_bytes=1, max_bytes=1 << 20
        )
        return result.error


def spec(tp: TopicPartition, leader: int, replicas: tuple[int, ...], *, new: bool = True) -> Any:
    return PartitionStateSpec(tp, leader, 1, replicas, replicas, is_new=new)


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_failed_dir_takes_its_partitions_offline_and_the_broker_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        b = Broker(tmp_path)
        b.rm.start()
        try:
            results = b.apply(
                spec(A0, 1, (1, 2)),  # leader, waits for follower 2 with acks=all
                spec(B0, 1, (1,)),
                spec(A1, 2, (1, 2)),  # follower of broker 2
            )
            assert set(results.values()) == {ErrorCode.none}
            assert [b.log_manager.log_dir_of(tp) for tp in (A0, B0, A1)] == [
                b.dirs[0],
                b.dirs[1],
                b.dirs[0],
            ]
            waiting = asyncio.create_task(b.produce(A0, acks=-1))
            await settle()
            assert not waiting.done()  # follower 2 has not fetched it

            disk = FailingDisk(b.dirs[0], monkeypatch)
            disk.armed = True
            assert await b.produce(A0) == ErrorCode.kafka_storage_error
            await settle()
            disk.armed = False

            # the handler ran: d1's partitions are offline, the rest is served
            assert b.rm.offline_partitions == {A0, A1}
            assert set(b.rm.partitions) == {B0}
            assert b.events == 1 and b.halted == []
            assert await waiting == ErrorCode.kafka_storage_error
            assert A1 in b.fetchers.removed and A1 not in b.fetchers.following
            assert (A0, False) in b.roles and (A1, False) in b.roles
            assert b.log_manager.get_log(A0) is None
            for code in (
                await b.produce(A0),
                await b.fetch(A0),
                await b.fetch(A1),
                b.apply(spec(A0, 1, (1, 2)))[A0],
                b.rm.stop_replicas(1, [(A1, False)])[A1],
            ):
                assert code == ErrorCode.kafka_storage_error
            with pytest.raises(KafkaError) as listed:
                b.rm.list_offset(A0, -1)
            assert listed.value.code == ErrorCode.kafka_storage_error
            assert await b.produce(B0) == ErrorCode.none
            assert await b.fetch(B0) == ErrorCode.none

            # a partition that is not new may have its log in the offline dir: not created
            assert b.apply(spec(C0, 1, (1,), new=False)) == {C0: ErrorCode.kafka_storage_error}
            assert b.log_manager.get_log(C0) is None
            assert b.apply(spec(C0, 1, (1,), new=True)) == {C0: ErrorCode.none}
            assert b.log_manager.log_dir_of(C0) == b.dirs[1]

            b.rm.checkpoint_high_watermarks()  # skips the offline dir
            assert not (b.dirs[0] / "replication-offset-checkpoint").exists()
            assert (b.dirs[1] / "replication-offset-checkpoint").exists()
        finally:
            await b.rm.shutdown()
            b.log_manager.shutdown()

    asyncio.run(main())


def test_when_every_dir_fails_the_broker_is_told_to_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        b = Broker(tmp_path)
        b.rm.start()
        try:
            b.apply(spec(A0, 1, (1,)), spec(B0, 1, (1,)))
            disk = FailingDisk(tmp_path, monkeypatch)
            disk.armed = True
            assert await b.produce(A0) == ErrorCode.kafka_storage_error
            await settle()
            assert b.halted == [] and b.events == 1  # d2 is still online
            assert await b.produce(B0) == ErrorCode.kafka_storage_error
            await settle()
            assert b.events == 1
            assert len(b.halted) == 1 and "all log dirs" in b.halted[0]
            assert b.rm.partitions == {} and b.rm.offline_partitions == {A0, B0}
        finally:
            await b.rm.shutdown()
            b.log_manager.shutdown()

    asyncio.run(main())


# --- the follower fetcher ----------------------------------------------------------------


class FailingSink:
    """A FollowerSink whose appends to ``broken`` fail (a storage error, or invalid records)."""

    def __init__(self, broken: dict[TopicPartition, Exception], *tps: TopicPartition) -> None:
        self.broken = broken
        self.leo = dict.fromkeys(tps, 0)
        self.appended: list[TopicPartition] = []

    def follower_fetch_position(self, tp: TopicPartition) -> tuple[int, int, int] | None:
        return (self.leo[tp], 0, -1) if tp in self.leo else None

    def follower_end_offset_for(self, tp: TopicPartition, epoch: int) -> tuple[int, int]:
        return -1, -1

    def truncate_follower(self, tp: TopicPartition, offset: int, *, fully: bool = False) -> None:
        self.leo[tp] = offset

    def append_as_follower(
        self, tp: TopicPartition, records_bytes: bytes, leader_hw: int, leader_log_start: int
    ) -> None:
        if tp in self.broken:
            raise self.broken[tp]
        self.appended.append(tp)


class Leader:
    """Answers every Fetch with every partition asked for, no error."""

    async def request(self, key: int, version: int, request: Any) -> Any:
        return SimpleNamespace(
            error_code=0,
            session_id=0,
            responses=[
                SimpleNamespace(
                    topic=t.topic,
                    partitions=[
                        SimpleNamespace(
                            partition_index=int(p.partition),
                            error_code=0,
                            high_watermark=0,
                            log_start_offset=0,
                            records=b"",
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ],
        )


def test_the_fetcher_drops_a_partition_whose_append_fails_and_goes_on() -> None:
    async def main() -> None:
        sink = FailingSink(
            {
                A0: LogDirOfflineError("a-0 is in an offline log directory"),
                A1: records.CorruptRecordError("bad CRC from the leader"),
            },
            A0,
            A1,
            B0,
        )
        f = LeaderFetcher(2, "127.0.0.1", 9, sink, FetcherConfig(broker_id=1, backoff_ms=500))  # type: ignore[arg-type]
        for tp in (A0, A1, B0):
            f.add(tp, 0)
            f.partitions[tp].needs_truncation = False
        await f._fetch(Leader(), dict(f.partitions))  # type: ignore[arg-type]
        assert sink.appended == [B0]
        assert A0 not in f.partitions  # failed: until a LeaderAndIsr adds it again
        assert f.partitions[A1].delayed_until > 0  # invalid records: retried after backoff
        await f._fetch(Leader(), {B0: f.partitions[B0]})  # type: ignore[arg-type]
        assert sink.appended == [B0, B0]

    asyncio.run(main())
