"""Recovery from segment files damaged between a SIGKILL and a restart, on a 3-broker cluster
(issue 17: "recovery truncates a torn tail and rebuilds indexes; nothing acknowledged with
acks=all and min ISR 2 is ever lost"), with real broker processes and real clients.

Broker 1 holds every partition of a RF=3 topic (``min.insync.replicas`` 2, small segments,
recovery points checkpointed every second). An idempotent acks=all producer writes to it, the
replicas agree, broker 1's recovery-point checkpoint covers its rolled segments, and broker
1 is SIGKILLed. Then, with the broker down, its files are damaged, one kind per partition:

* partition 0, torn tail: the active segment's ``.log`` is cut in the middle of its last batch;
* partition 1, bit rot: bytes are flipped inside a batch in the middle of the active segment
  (its CRC no longer matches);
* partition 2, indexes: the ``.index`` and ``.timeindex`` of the first (flushed, trusted)
  segment are deleted and those of the second are garbled.

(Damage to a flushed segment's ``.log`` below the recovery point is not looked for at
start-up, as in Kafka; these tests damage ``.log`` files only after the recovery point.)

Expected, as Kafka: the broker starts; recovery (from the recovery point) truncates partition
0 and 1 at the first invalid batch (nothing after it is kept) and rebuilds the indexes of
partition 2 (identical to the other replicas' indexes); the follower re-fetches what it lost
from the new leader and holds the same batches as the others; every acknowledged record is
still readable, also with broker 1 leading again (reads and ListOffsets by timestamp through
the rebuilt indexes).

The ``long`` variant (``make fault``) repeats seeded rounds of random damage (a cut or flipped
bytes in the active segment, deleted or garbled indexes of recent segments, on the partitions
of a random broker) under the same checks.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, ElectionType, TopicPartition

from broker.protocol import records as rec
from tests.harness.acked_producer import AckedProducer

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.fault, pytest.mark.timeout(300)]

BROKERS = [1, 2, 3]
PROPS: dict[str, object] = {
    "zookeeper.session.timeout.ms": "6000",
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "controlled.shutdown.retry.backoff.ms": "500",
    # rolled segments are flushed within a second and the recovery point checkpointed every
    # second, so recovery trusts the rolled segments and re-validates the active one
    "log.flush.offset.checkpoint.interval.ms": "1000",
    "auto.leader.rebalance.enable": "false",
}
TOPIC_CONFIG = {"segment.bytes": "65536"}
PRODUCER = {"batch.size": 16384}  # a batch must fit a segment (RECORD_LIST_TOO_LARGE)


# --- the damage ------------------------------------------------------------------------------


def batches_of(segment: Path) -> list[rec.BatchHeader]:
    return list(rec.iter_batches(segment.read_bytes()))


def cut_mid_batch(segment: Path, index: int) -> int:
    """Truncate ``segment`` in the middle of its batch number ``index``; returns the
    position of that batch (where recovery must cut)."""
    header = batches_of(segment)[index]
    with segment.open("r+b") as f:
        f.truncate(header.position + header.size // 2)
    return header.position


def flip_bytes_in_batch(segment: Path, index: int) -> int:
    """Flip bytes in the records of batch number ``index`` of ``segment`` (its CRC no longer
    matches); returns the position of that batch."""
    header = batches_of(segment)[index]
    data = bytearray(segment.read_bytes())
    middle = header.position + header.size - header.size // 3
    for i in range(middle, middle + 8):
        data[i] ^= 0x5A
    segment.write_bytes(bytes(data))
    return header.position


def garble(path: Path) -> None:
    """Make an index file fail its sanity check (a size that is not whole entries)."""
    path.write_bytes(path.read_bytes()[:-8] + b"\xff\x00\xff")


def recovery_point(c: Cluster, broker_id: int, topic: str, partition: int) -> int:
    """The broker's recovery-point checkpoint entry for the partition (-1 if absent)."""
    path = c.log_dirs(broker_id)[0] / "recovery-point-offset-checkpoint"
    if not path.exists():
        return -1
    for line in path.read_text().splitlines()[2:]:
        t, p, offset = line.split()
        if (t, int(p)) == (topic, partition):
            return int(offset)
    return -1


# --- helpers ---------------------------------------------------------------------------------


def setup_topic(c: Cluster, topic: str, partitions: int, leader: int) -> None:
    assignment = [[leader, *[b for b in BROKERS if b != leader]] for _ in range(partitions)]
    c.create_topic(topic, config=TOPIC_CONFIG, replica_assignment=assignment)
    c.wait_isr_complete(topic, 60, brokers=BROKERS)


def settle(c: Cluster, topic: str, partitions: int, broker_id: int) -> None:
    """Until the replicas agree and ``broker_id``'s recovery point covers each partition's
    rolled segments (so recovery trusts them)."""
    for p in range(partitions):
        c.wait_replicas_identical(topic, p, BROKERS, 90)

    def covered() -> bool:
        for p in range(partitions):
            active = c.segment_files(topic, p, broker_id)[-1]
            if recovery_point(c, broker_id, topic, p) < int(active.stem):
                return False
        return True

    c.wait_for(covered, 30, f"broker {broker_id}'s recovery points cover its rolled segments")


def elect_preferred(c: Cluster, topic: str, partitions: int) -> None:
    futures = c.admin().client.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(partitions)]
    )
    results = futures.result(timeout=90)
    failed = {tp.partition: e for tp, e in results.items() if e is not None and e.code() != 84}
    assert not failed, f"preferred election failed: {failed}"  # 84: ELECTION_NOT_NEEDED


def truncations(c: Cluster, broker_id: int, since: int) -> dict[str, tuple[int, str]]:
    """``segment path -> (position, reason)`` of the recovery truncations in the broker's
    output after byte ``since``."""
    text = Path(c.broker(broker_id)["out"]).read_text(errors="replace")[since:]
    found = {}
    for line in text.splitlines():
        try:
            msg = json.loads(line).get("msg", "")
        except ValueError:
            continue
        m = re.match(r"segment (\S+): truncating \d+ bytes at position (\d+) \((.*)\)$", msg)
        if m:
            found[m.group(1)] = (int(m.group(2)), m.group(3))
    return found


def output_size(c: Cluster, broker_id: int) -> int:
    return Path(c.broker(broker_id)["out"]).stat().st_size


def check_after_restart(
    c: Cluster, topic: str, partitions: int, producer: AckedProducer, preferred: int
) -> None:
    """The restarted broker rejoins every ISR with identical logs; everything acknowledged
    is served, with the preferred leader (``preferred``) leading again."""
    c.wait_isr_complete(topic, 120, brokers=BROKERS)
    for p in range(partitions):
        c.wait_replicas_identical(topic, p, BROKERS, 90)
    elect_preferred(c, topic, partitions)
    c.wait_for(
        lambda: all(v[0] == preferred for v in c.describe(topic).values()),
        60,
        f"broker {preferred} leading {topic} again",
    )
    producer.check_served(c)


# --- tests -----------------------------------------------------------------------------------


@pytest.mark.long  # make fault: 14 s of make test's budget (issue 30)
def test_torn_tail_bit_rot_and_broken_indexes_are_recovered(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    c = cluster_factory(PROPS, brokers=3)
    setup_topic(c, topic_name, 3, leader=1)
    producer = AckedProducer(c, topic_name, 3, extra=PRODUCER)
    producer.produce(1200)  # ~400 KB per partition: 6-7 segments each
    settle(c, topic_name, 3, broker_id=1)
    segs = {p: c.segment_files(topic_name, p, 1) for p in range(3)}
    assert all(len(s) >= 3 for s in segs.values()), f"setup: segments {segs}"

    assert all(len(batches_of(s[-1])) >= 2 for s in segs.values()), "setup: active segments"
    c.stop_broker(hard=True, broker_id=1)
    torn_at = cut_mid_batch(segs[0][-1], -1)
    rot_at = flip_bytes_in_batch(segs[1][-1], len(batches_of(segs[1][-1])) // 2)
    first, second = segs[2][0], segs[2][1]
    first.with_suffix(".index").unlink()
    first.with_suffix(".timeindex").unlink()
    garble(second.with_suffix(".index"))
    garble(second.with_suffix(".timeindex"))
    since = output_size(c, 1)
    c.start_broker(1)

    # recovery cut each damaged segment at its first invalid batch, and only there
    cut = truncations(c, 1, since)
    assert cut.get(str(segs[0][-1]), (None, ""))[0] == torn_at, cut
    assert cut.get(str(segs[1][-1])) == (rot_at, "CRC mismatch"), cut
    assert not any(str(s) in cut for s in segs[2]), cut
    out = Path(c.broker(1)["out"]).read_text(errors="replace")[since:]
    assert f"segment {first}: index missing" in out
    assert f"segment {second}: index file" in out or f"segment {second}: time index" in out

    check_after_restart(c, topic_name, 3, producer, preferred=1)
    # the rebuilt indexes are the ones the other replicas built while appending
    for seg in (first, second):
        for suffix in (".index", ".timeindex"):
            mine = seg.with_suffix(suffix).read_bytes()
            theirs = c.log_dir(topic_name, 2, broker_id=2) / seg.with_suffix(suffix).name
            assert mine == theirs.read_bytes(), f"rebuilt {seg.name} {suffix} differs"
    # ListOffsets by timestamp goes through the rebuilt time index of broker 1 (leader)
    served = c.consume(topic_name, [2])[2]
    ts = served[len(served) // 3].timestamp()[1]
    expected = next(m.offset() for m in served if m.timestamp()[1] >= ts)
    consumer = Consumer(c.conf({"group.id": f"ts-{topic_name}"}))
    try:
        [answer] = consumer.offsets_for_times([TopicPartition(topic_name, 2, ts)], timeout=30)
    finally:
        consumer.close()
    assert answer.offset == expected, f"offset for timestamp {ts}: {answer.offset} != {expected}"


@pytest.mark.long
def test_seeded_rounds_of_random_damage(
    cluster_factory: Callable[..., Cluster], topic_name: str
) -> None:
    rounds = 6
    rng = random.Random(1717)
    c = cluster_factory(PROPS, brokers=3)
    partitions = 4
    setup_topic(c, topic_name, partitions, leader=1)
    producer = AckedProducer(c, topic_name, partitions, extra=PRODUCER)
    for r in range(rounds):
        victim = rng.choice(BROKERS)
        elect_preferred(c, topic_name, partitions)
        producer.produce(800)
        settle(c, topic_name, partitions, broker_id=victim)
        c.stop_broker(hard=True, broker_id=victim)
        done: list[str] = []
        for p in range(partitions):
            segs = c.segment_files(topic_name, p, victim)
            active = segs[-1]  # after the recovery point: re-validated at start-up
            n = len(batches_of(active))
            kind = rng.choice(["cut", "flip", "indexes", "none"])
            if kind == "cut" and n:
                cut_mid_batch(active, rng.randrange(n))
            elif kind == "flip" and n:
                flip_bytes_in_batch(active, rng.randrange(n))
            elif kind == "indexes":
                seg = rng.choice(segs[-3:])  # trusted rolled segments too
                for suffix in (".index", ".timeindex"):
                    path = seg.with_suffix(suffix)
                    if path.exists() and rng.random() < 0.5:
                        path.unlink()
                    elif path.exists() and path.stat().st_size >= 8:
                        garble(path)
            done.append(f"p{p}:{kind}")
        c.start_broker(victim)
        try:
            check_after_restart(c, topic_name, partitions, producer, preferred=1)
        except AssertionError as exc:
            raise AssertionError(f"round {r}, broker {victim}, damage {done}: {exc}") from exc
        time.sleep(0.1)
