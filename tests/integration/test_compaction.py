"""Log compaction (Kafka's log cleaner) with real clients against real broker processes:

* Kafka's LogCompactionTester: 150,000 updates of 3,000 keys with random tombstones through
  confluent-kafka; after cleaning, a consumer from offset 0 sees the latest value of every
  live key once, in increasing offsets; after ``delete.retention.ms`` and another round, no
  deleted key at all; the partition shrank to about the live data;
* transactions on a compacted topic: committed and aborted transactions over the same keys,
  interleaved with plain writes; after cleaning read_committed sees the latest committed value
  of each key, and read_uncommitted no longer sees aborted data (the cleaner removed it);
* ``cleanup.policy`` changed live with the AdminClient (IncrementalAlterConfigs and
  AlterConfigs): delete -> compact starts compaction without a restart, compact -> delete
  stops it;
* a produce larger than ``segment.bytes`` is refused with RECORD_LIST_TOO_LARGE (librdkafka's
  default 1 MB batches on a topic with 64 KB segments) and succeeds with smaller batches;
* ``millrace dump-log`` and Kafka 3.9.1's own DumpLogSegments print a cleaned segment (an
  emptied batch, delete horizons, transaction markers, offset gaps) identically;
* Apache Kafka 3.9.1 started on the log directory of a stopped Millrace broker serves the
  compacted log with the same records and offsets, and cleans it further itself.

(Keyless records on a compacted topic: ``test_clients_confluent.py``.)
"""

from __future__ import annotations

import itertools
import random
import subprocess
import time
import warnings
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from broker.protocol.batch_rewrite import DELETE_HORIZON_MASK
from tests.harness.clients import KafkaAdmin, confluent_conf, confluent_consume, read_log_batches
from tests.harness.cluster import CLI, REPO, Cluster
from tests.harness.kafka_tools import (
    CONNECTING,
    Tool,
    kafka_tool_runner,
    ok,
    start_kafka_broker,
    stop_kafka_broker,
)
from tests.harness.ports import free_port
from tests.harness.waiting import wait_for

BROKER_SETTINGS = {
    "log.cleaner.backoff.ms": "300",
    "offsets.topic.num.partitions": "5",
    "transaction.state.log.num.partitions": "5",
}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.cluster_config(BROKER_SETTINGS),
]

CHECKPOINT = "cleaner-offset-checkpoint"
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "100000",
    "min.cleanable.dirty.ratio": "0.01",
}
# batches must fit in a segment (the broker refuses larger ones, as Kafka 3.9 does)
SMALL_BATCHES = {"linger.ms": 20, "batch.size": 16384}

Rec = tuple[int, bytes | None, bytes | None]
"""One record as a consumer sees it: (offset, key, value)."""


# --- producing ---------------------------------------------------------------------------


class Sent:
    """Delivery reports: the records delivered, as (offset, key, value), and the errors."""

    def __init__(self) -> None:
        self.records: list[Rec] = []
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.records.append((msg.offset(), msg.key(), msg.value()))

    def check(self) -> None:
        assert not self.errors, f"{len(self.errors)} deliveries failed, e.g. {self.errors[:3]}"


def _produce(
    producer: Producer, topic: str, key: bytes | None, value: bytes | None, sent: Sent
) -> None:
    """Queue one record for partition 0 (waiting while librdkafka's queue is full)."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, partition=0, on_delivery=sent)
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.05)


def _flush(producer: Producer, sent: Sent) -> None:
    """Wait for every delivery report; assert none failed."""
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records still queued after 60 s"
    sent.check()


def _base_offset(segment: Path) -> int:
    return int(segment.name.split(".", 1)[0])


def _roll(cluster: Cluster, producer: Producer, topic: str, tag: str, sent: Sent) -> None:
    """Write records with keys nobody else writes until the active segment starts after the
    first of them: everything written before is then in inactive (cleanable) segments, and
    the active segment holds no key written before."""
    first = len(sent.records)
    n = 0
    while True:
        for _ in range(1000):
            key = b"%s-%06d" % (tag.encode(), n)
            _produce(producer, topic, key, b"filler-" + key, sent)
            n += 1
        _flush(producer, sent)
        if _base_offset(cluster.active_segment(topic, 0)) > min(r[0] for r in sent.records[first:]):
            return
        assert n < 200_000, f"{topic}: the active segment never rolls"


# --- the cleaner's progress --------------------------------------------------------------


def _cleaner_checkpoint(log_dirs: Iterable[Path], topic: str) -> int | None:
    """The first dirty offset of ``topic``-0 in the cleaner-offset-checkpoint file (Kafka's
    offset-checkpoint format: version, count, then ``topic partition offset`` lines)."""
    for log_dir in log_dirs:
        path = log_dir / CHECKPOINT
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[2:]:
            name, partition, offset = line.rsplit(" ", 2)
            if name == topic and partition == "0":
                return int(offset)
    return None


def _wait_cleaned(cluster: Cluster, topic: str, after: int = -1, timeout_s: float = 90) -> int:
    """Until the cleaner has cleaned every inactive segment of ``topic``-0 (its checkpoint
    reached the base offset of the active segment, and moved past ``after``); returns the
    checkpoint."""

    def cleaned() -> int | None:
        done = _cleaner_checkpoint(cluster.log_dirs(), topic)
        active = _base_offset(cluster.active_segment(topic, 0))
        return done if done is not None and done >= active and done > after else None

    return int(wait_for(cleaned, timeout_s, f"{topic}-0: every inactive segment cleaned"))


def _log_bytes(cluster: Cluster, topic: str) -> tuple[int, int]:
    """(bytes of every .log segment of ``topic``-0, bytes of the active one)."""
    segments = cluster.segment_files(topic, 0)
    return sum(s.stat().st_size for s in segments), segments[-1].stat().st_size


# --- reading and checking ----------------------------------------------------------------


def _read(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list[Rec]:
    """Every record of ``topic``-0 from offset 0 up to the end, as a consumer sees it."""
    msgs = confluent_consume(bootstrap, topic, [0], 0, {"isolation.level": isolation}, 60)[0]
    return [(m.offset(), m.key(), m.value()) for m in msgs]


def _survivors(writes: Iterable[Rec]) -> list[Rec]:
    """The write with the highest offset of each key, in offset order: what a compacted log
    serves once every one of them was cleaned (and tombstones are still there)."""
    last: dict[bytes | None, Rec] = {}
    for rec in writes:
        if rec[1] not in last or rec[0] > last[rec[1]][0]:
            last[rec[1]] = rec
    return sorted(last.values())


def _latest(writes: Iterable[Rec]) -> dict[bytes, bytes | None]:
    """key -> value of the write with the highest offset."""
    return {k: v for _o, k, v in _survivors(writes) if k is not None}


def _assert_compacted(
    records: list[Rec], latest: dict[bytes, bytes | None], *, tombstones: bool
) -> None:
    """``records`` (a read from offset 0) hold each key once, in strictly increasing
    offsets, with the value ``latest`` gives it; keys whose latest value is a tombstone
    appear only as a tombstone, or (``tombstones`` False) not at all; no record lacks a key."""
    offsets = [o for o, _k, _v in records]
    assert all(a < b for a, b in itertools.pairwise(offsets)), "offsets not increasing"
    keyless = [r for r in records if r[1] is None]
    assert not keyless, f"{len(keyless)} records without a key, e.g. {keyless[:3]}"
    counts = Counter(k for _o, k, _v in records)
    twice = sorted(k for k, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} keys appear more than once, e.g. {twice[:5]}"
    seen = {k: v for _o, k, v in records if k is not None}
    live = {k: v for k, v in latest.items() if v is not None}
    missing = sorted(set(live) - set(seen))
    assert not missing, f"{len(missing)} live keys missing, e.g. {missing[:5]}"
    wrong = sorted(k for k in live if seen[k] != live[k])
    assert not wrong, (
        f"{len(wrong)} keys with a value that is not their latest, e.g. "
        f"{[(k, seen[k], live[k]) for k in wrong[:3]]}"
    )
    extra = sorted(k for k in set(seen) - set(live) if seen[k] is not None or k not in latest)
    assert not extra, f"{len(extra)} keys never written or deleted have a value: {extra[:5]}"
    deleted = sorted(k for k in seen if seen[k] is None)
    if not tombstones:
        assert not deleted, f"{len(deleted)} tombstones still served, e.g. {deleted[:5]}"


def _delete_horizon(cluster: Cluster, topic: str) -> int | None:
    """The latest delete horizon (KIP-534) stamped on a batch of ``topic``-0, if any."""
    horizons = [
        h.first_timestamp
        for _seg, h, _ok in read_log_batches(cluster.log_dir(topic, 0))
        if h.attributes & DELETE_HORIZON_MASK
    ]
    return max(horizons) if horizons else None


# --- 1. Kafka's LogCompactionTester ------------------------------------------------------

UPDATES = 150_000
KEYS = 3_000
DELETE_RETENTION_MS = 3_000


def test_compaction_keeps_the_latest_value_of_every_key(cluster: Cluster) -> None:
    topic = cluster.create_topic(
        "cmp-tester", config={**COMPACTED, "delete.retention.ms": str(DELETE_RETENTION_MS)}
    )
    producer = Producer(cluster.conf(SMALL_BATCHES))
    rnd = random.Random(534)
    sent = Sent()
    for i in range(UPDATES):
        key = b"key-%05d" % rnd.randrange(KEYS)
        _produce(producer, topic, key, None if rnd.random() < 0.1 else b"%09d" % i, sent)
    _flush(producer, sent)
    _roll(cluster, producer, topic, "fill-a", sent)
    _wait_cleaned(cluster, topic)
    out = Path(cluster.broker(1)["out"]).read_text(errors="replace")
    assert f"cleaned log {topic}-0 (dirty section = [0, " in out, "no cleaning round logged"

    records = _read(cluster.bootstrap, topic)
    latest = _latest(sent.records)
    _assert_compacted(records, latest, tombstones=True)
    assert set(records) <= set(sent.records), "records served at offsets they were not written at"
    deleted = sum(1 for v in latest.values() if v is None)
    assert 100 < deleted < 600, f"setup: {deleted} keys deleted"

    # the tombstones' delete horizon passes; a round after it removes them
    horizon = _delete_horizon(cluster, topic)
    assert horizon is not None, "no batch of the cleaned log carries a delete horizon"
    assert horizon <= time.time() * 1000 + DELETE_RETENTION_MS + 1000, horizon
    time.sleep(max(0.0, horizon / 1000 - time.time() + 0.1))
    before = _cleaner_checkpoint(cluster.log_dirs(), topic)
    assert before is not None
    _roll(cluster, producer, topic, "fill-b", sent)
    _wait_cleaned(cluster, topic, after=before)
    records = _read(cluster.bootstrap, topic)
    _assert_compacted(records, _latest(sent.records), tombstones=False)
    live = [r for r in _survivors(sent.records) if r[2] is not None]
    assert records == live, "not exactly the latest record of every live key"

    total, active = _log_bytes(cluster, topic)
    live_bytes = sum(len(k or b"") + len(v or b"") + 8 for _o, k, v in live)  # + framing
    produced = sum(len(k or b"") + len(v or b"") + 8 for _o, k, v in sent.records)
    assert total - active < 3 * live_bytes, (
        f"{topic}-0 holds {total} bytes ({active} in the active segment) for {len(live)} live "
        f"keys of {live_bytes} bytes ({produced} bytes were produced)"
    )


# --- 2. transactions ---------------------------------------------------------------------


def test_transactions_on_a_compacted_topic(cluster: Cluster) -> None:
    topic = cluster.create_topic("cmp-txn", config={**COMPACTED, "segment.bytes": "50000"})
    txn = Producer(cluster.conf({"transactional.id": "cmp-txn", "linger.ms": 5}))
    txn.init_transactions(60)
    plain = Producer(cluster.conf({**SMALL_BATCHES, "enable.idempotence": True}))
    rnd = random.Random(98)
    keys = [b"acct-%03d" % i for i in range(80)]
    sent = Sent()
    fates: dict[bytes, tuple[str, bytes]] = {}  # value -> (fate, key)

    def write(producer: Producer, fate: str, n: int, tombstones: bool = False) -> None:
        for _ in range(n):
            key = rnd.choice(keys)
            value = b"%s-%d" % (fate.encode(), len(fates))
            fates[value] = (fate, key)
            _produce(
                producer, topic, key, None if tombstones and rnd.random() < 0.2 else value, sent
            )
        _flush(producer, sent)

    for round_no in range(24):
        if round_no % 4 == 3:
            write(plain, "plain", 40, tombstones=True)
            continue
        fate = "commit" if rnd.random() < 0.5 else "abort"
        txn.begin_transaction()
        write(txn, fate, 30)
        write(plain, "plain", 10)  # a plain write inside the transaction's offsets
        write(txn, fate, 30)
        if fate == "commit":
            txn.commit_transaction(60)
        else:
            txn.abort_transaction(60)
    # an aborted transaction writing keys nothing else writes: only the aborted-data rule
    # of the cleaner removes these records (no later record of their keys supersedes them)
    txn.begin_transaction()
    for i in range(20):
        value = b"abort-ghost-%d" % i
        fates[value] = ("abort", b"ghost-%02d" % i)
        _produce(txn, topic, b"ghost-%02d" % i, value, sent)
    _flush(txn, sent)
    txn.abort_transaction(60)
    aborted = {v for v, (fate, _k) in fates.items() if fate == "abort"}
    assert {fate for fate, _k in fates.values()} == {"commit", "abort", "plain"}
    _roll(cluster, plain, topic, "fill", sent)
    _wait_cleaned(cluster, topic)

    # what a read_committed reader must see: the latest committed or plain write of each key
    committed_writes = [r for r in sent.records if r[2] is None or r[2] not in aborted]
    committed = _read(cluster.bootstrap, topic, "read_committed")
    _assert_compacted(committed, _latest(committed_writes), tombstones=True)
    assert committed == _survivors(committed_writes)
    # the cleaner removed the aborted data: read_uncommitted sees exactly the same records
    uncommitted = _read(cluster.bootstrap, topic, "read_uncommitted")
    leaked = sorted(v for _o, _k, v in uncommitted if v in aborted)
    assert not leaked, f"{len(leaked)} aborted records still in the cleaned log: {leaked[:5]}"
    assert uncommitted == committed


# --- 3. cleanup.policy changed live ------------------------------------------------------


def _alter_incrementally(cluster: Cluster, topic: str, configs: dict[str, str]) -> None:
    """IncrementalAlterConfigs: SET ``configs``, leave the others."""
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in cluster.admin().client.incremental_alter_configs([resource]).values():
        future.result(30)


def _alter_all(cluster: Cluster, topic: str, configs: dict[str, str]) -> None:
    """AlterConfigs: ``configs`` replace the topic's whole configuration (the API older
    clients and tools use; confluent-kafka deprecates it)."""
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config=configs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        futures = cluster.admin().client.alter_configs([resource])
    for future in futures.values():
        future.result(30)


def _write_updates(
    cluster: Cluster, topic: str, rounds: int, tag: str
) -> dict[bytes, bytes | None]:
    """``rounds`` updates of each of 40 keys (and, a topic with the delete policy accepting
    them, a record without a key in each round), then a roll; returns the latest values."""
    producer = Producer(cluster.conf(SMALL_BATCHES))
    sent = Sent()
    for r in range(rounds):
        for k in range(40):
            _produce(producer, topic, b"item-%02d" % k, b"%s-%d" % (tag.encode(), r), sent)
        _produce(producer, topic, None, b"keyless-%d" % r, sent)
    _flush(producer, sent)
    _roll(cluster, producer, topic, f"fill-{tag}", sent)
    return _latest(sent.records)


def test_cleanup_policy_changed_live(cluster: Cluster) -> None:
    by_delta = cluster.create_topic(
        "cmp-policy-incremental", config={**COMPACTED, "cleanup.policy": "delete"}
    )
    by_whole = cluster.create_topic(
        "cmp-policy-whole", config={**COMPACTED, "cleanup.policy": "delete"}
    )
    witness = cluster.create_topic("cmp-policy-witness", config=COMPACTED)
    witness_producer = Producer(cluster.conf(SMALL_BATCHES))
    witness_sent = Sent()
    witness_fills = itertools.count()

    def witness_rounds(n: int = 2) -> None:
        """``n`` cleaning rounds of the compacted witness topic, each started after new data:
        the cleaner has been looking for work in that time."""
        for _ in range(n):
            before = _cleaner_checkpoint(cluster.log_dirs(), witness) or -1
            _roll(cluster, witness_producer, witness, f"w{next(witness_fills)}", witness_sent)
            _wait_cleaned(cluster, witness, after=before)

    latest = {t: _write_updates(cluster, t, 150, "one") for t in (by_delta, by_whole)}
    ends = {t: _base_offset(cluster.active_segment(t, 0)) for t in latest}
    witness_rounds()
    for t in latest:
        offsets = [o for o, _k, _v in _read(cluster.bootstrap, t)]
        assert offsets[: ends[t]] == list(range(ends[t])), f"{t}: compacted under delete"
        assert _cleaner_checkpoint(cluster.log_dirs(), t) is None

    # delete -> compact, no restart (the cleaner drops the records without a key, as Kafka's)
    _alter_incrementally(cluster, by_delta, {"cleanup.policy": "compact"})
    _alter_all(cluster, by_whole, COMPACTED)
    for t, values in latest.items():
        _wait_cleaned(cluster, t)
        _assert_compacted(_read(cluster.bootstrap, t), values, tombstones=False)

    # compact -> delete: new duplicates stay
    _alter_all(cluster, by_delta, {**COMPACTED, "cleanup.policy": "delete"})
    _alter_incrementally(cluster, by_whole, {"cleanup.policy": "delete"})
    checkpoints = {t: _cleaner_checkpoint(cluster.log_dirs(), t) for t in latest}
    starts = {t: _read(cluster.bootstrap, t)[-1][0] + 1 for t in latest}
    for t in latest:
        _write_updates(cluster, t, 150, "two")
    witness_rounds()
    for t in latest:
        assert _cleaner_checkpoint(cluster.log_dirs(), t) == checkpoints[t], f"{t} was cleaned"
        offsets = [o for o, _k, _v in _read(cluster.bootstrap, t) if o >= starts[t]]
        end = _base_offset(cluster.active_segment(t, 0))
        assert offsets[: end - starts[t]] == list(range(starts[t], end)), (
            f"{t}: records written after the switch back to delete were removed"
        )


# --- 4. a batch larger than a segment ----------------------------------------------------


def test_a_batch_larger_than_a_segment_is_refused(cluster: Cluster) -> None:
    topic = cluster.create_topic("cmp-big-batches", config={"segment.bytes": "65536"})
    value = b"v" * 1000
    # librdkafka's defaults (batch.size 1000000, linger.ms 5): records produced this fast
    # leave in batches of hundreds of KB, each larger than a segment
    defaults = Producer(cluster.conf())
    sent = Sent()
    for i in range(2000):
        _produce(defaults, topic, b"a-%04d" % i, value, sent)
    assert defaults.flush(60) == 0
    codes = Counter(err.code() for err in sent.errors)
    assert set(codes) == {KafkaError.RECORD_LIST_TOO_LARGE}, codes
    assert codes[KafkaError.RECORD_LIST_TOO_LARGE] > 1000, codes
    # what was acknowledged is exactly what is stored; nothing else was appended
    assert _read(cluster.bootstrap, topic) == sorted(sent.records)

    small = Producer(cluster.conf({"batch.size": 16384}))
    sent = Sent()
    for i in range(2000):
        _produce(small, topic, b"b-%04d" % i, value, sent)
    _flush(small, sent)
    assert len(sent.records) == 2000
    segments = cluster.segment_files(topic, 0)
    assert len(segments) >= 25, f"{len(segments)} segments for 2 MB in 64 KB segments"
    assert all(s.stat().st_size <= 65536 for s in segments)
    assert _read(cluster.bootstrap, topic)[-2000:] == sorted(sent.records)


# --- 5. dump-log and Kafka's DumpLogSegments on a cleaned segment ------------------------


@pytest.fixture(scope="module")
def kafka_tool(tmp_path_factory: pytest.TempPathFactory) -> Tool:
    return kafka_tool_runner(tmp_path_factory.mktemp("kafka-dump-log"))


def _non_consecutive(stderr: str) -> list[str]:
    """The "Non-consecutive offsets" report of a dump's stderr."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Non-consecutive offsets in")]
    if not starts:
        return []
    block = lines[starts[0] :]
    end = next((i for i, line in enumerate(block[1:], 1) if not line.startswith("  ")), len(block))
    return block[:end]


def test_dump_log_and_kafka_read_a_cleaned_segment_alike(
    cluster: Cluster, kafka_tool: Tool
) -> None:
    topic = cluster.create_topic("cmp-dump", config={**COMPACTED, "segment.bytes": "50000"})
    # an idempotent producer's only batch, superseded: the cleaner keeps it empty
    idempotent = Producer(cluster.conf({"enable.idempotence": True, "linger.ms": 5}))
    sent = Sent()
    for i in range(10):
        _produce(idempotent, topic, b"k%d" % i, b"first-%d" % i, sent)
    _flush(idempotent, sent)
    plain = Producer(cluster.conf({**SMALL_BATCHES, "compression.type": "lz4"}))
    for i in range(10):
        _produce(plain, topic, b"k%d" % i, b"second-%d" % i, sent)
    _flush(plain, sent)
    for i in range(4):  # tombstones: kept with a delete horizon
        _produce(plain, topic, b"gone-%d" % i, b"doomed", sent)
        _produce(plain, topic, b"gone-%d" % i, None, sent)
    _flush(plain, sent)
    txn = Producer(cluster.conf({"transactional.id": "cmp-dump", "linger.ms": 5}))
    txn.init_transactions(60)
    for commit in (True, False, True):
        txn.begin_transaction()
        for i in range(6, 10):
            _produce(txn, topic, b"k%d" % i, b"txn-%s-%d" % (b"c" if commit else b"a", i), sent)
        _flush(txn, sent)
        txn.commit_transaction(60) if commit else txn.abort_transaction(60)
    for i in range(200):  # partly superseded compressed batches
        _produce(plain, topic, b"k%d" % (i % 12), b"third-%d" % i, sent)
    _flush(plain, sent)
    _roll(cluster, plain, topic, "fill", sent)
    _wait_cleaned(cluster, topic)

    segment = cluster.segment_files(topic, 0)[0]
    files = [
        str(segment),
        str(segment.with_suffix(".index")),
        str(segment.with_suffix(".timeindex")),
    ]
    args = ["--files", ",".join(files), "--print-data-log", "--deep-iteration"]
    ours = subprocess.run(
        [*CLI, "dump-log", *args], capture_output=True, text=True, timeout=60, check=False, cwd=REPO
    )
    assert ours.returncode == 0, ours.stderr
    theirs = kafka_tool("kafka.tools.DumpLogSegments", *args)
    out = ok(theirs)
    batches = [line for line in out.splitlines() if line.startswith("baseOffset:")]
    assert any(" count: 0 " in b for b in batches), "no emptied batch in the cleaned segment"
    assert any("deleteHorizonMs: OptionalLong[" in b for b in batches), "no delete horizon"
    assert any("isControl: true" in b for b in batches), "no transaction marker"
    assert any("compresscodec: lz4" in b for b in batches)
    assert all(b.endswith(" isvalid: true") for b in batches), "Kafka finds a bad CRC"
    assert ours.stdout == out
    gaps = _non_consecutive(theirs.stderr)
    assert gaps, "Kafka reports no gap in a compacted segment"
    assert _non_consecutive(ours.stderr) == gaps
    assert "Mismatches" not in theirs.stderr, theirs.stderr


# --- 6. Apache Kafka loads a log Millrace compacted --------------------------------------


def test_kafka_serves_and_cleans_a_log_millrace_compacted(
    cluster_factory: Any, tmp_path: Path
) -> None:
    millrace = cluster_factory(BROKER_SETTINGS)
    topic = millrace.create_topic("cmp-to-kafka", config={**COMPACTED, "segment.bytes": "50000"})
    producer = Producer(millrace.conf({**SMALL_BATCHES, "compression.type": "lz4"}))
    rnd = random.Random(39)
    sent = Sent()
    for i in range(20_000):
        key = b"key-%03d" % rnd.randrange(500)
        _produce(producer, topic, key, None if rnd.random() < 0.1 else b"v-%d" % i, sent)
    _flush(producer, sent)
    txn = Producer(millrace.conf({"transactional.id": "cmp-to-kafka", "linger.ms": 5}))
    txn.init_transactions(60)
    for commit in (True, False, True, False):
        txn.begin_transaction()
        for i in range(20):
            value = b"txn-%s-%d" % (b"c" if commit else b"a", i)
            _produce(txn, topic, b"key-%03d" % i, value, sent)
        _flush(txn, sent)
        txn.commit_transaction(60) if commit else txn.abort_transaction(60)
    _roll(millrace, producer, topic, "fill", sent)
    _wait_cleaned(millrace, topic)
    served = _read(millrace.bootstrap, topic)
    # the latest committed write of each key; the cleaner removed the aborted ones
    assert served == _survivors(r for r in sent.records if not (r[2] or b"").startswith(b"txn-a"))
    assert _read(millrace.bootstrap, topic, "read_committed") == served
    assert any(v is None for _o, _k, v in served), "setup: tombstones in the cleaned log"

    millrace.stop_broker()  # controlled shutdown
    wait_for(lambda: millrace.zk_get("/brokers/ids/1") is None, 30, "broker 1 deregistered")
    port = free_port()
    log_dirs = ",".join(str(d) for d in millrace.log_dirs())
    proc = start_kafka_broker(
        tmp_path,
        {
            "broker.id": "1",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": log_dirs,
            "zookeeper.connect": str(millrace.json["zookeeper"]),
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "log.cleaner.backoff.ms": "300",
            "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
        },
    )
    kafka = f"127.0.0.1:{port}"
    try:

        def serving() -> bool:
            assert proc.poll() is None, f"Kafka exited {proc.returncode}"
            md = KafkaAdmin(kafka).client.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            return t is not None and t.error is None and t.partitions[0].leader == 1

        wait_for(serving, 120, f"Kafka leading {topic}-0")
        assert _read(kafka, topic) == served
        assert _read(kafka, topic, "read_committed") == served

        # Kafka's own cleaner takes over from Millrace's checkpoint
        before = _cleaner_checkpoint(millrace.log_dirs(), topic)
        assert before is not None
        producer = Producer(confluent_conf(kafka, SMALL_BATCHES))
        sent = Sent()
        for i in range(3000):
            _produce(producer, topic, b"key-%03d" % (i % 300), b"kafka-%d" % i, sent)
        _flush(producer, sent)
        _roll(millrace, producer, topic, "kafka-fill", sent)
        _wait_cleaned(millrace, topic, after=before)
        assert _read(kafka, topic) == _survivors([*served, *sent.records])
        output = (tmp_path / "kafka.out").read_text(errors="replace")
        # (its controller connecting to its own listener before it is open is no problem)
        problems = [
            line
            for line in output.splitlines()
            if (" WARN " in line or " ERROR " in line) and not line.endswith(CONNECTING)
        ]
        assert not problems, "Kafka complained:\n" + "\n".join(problems[:20])
    finally:
        stop_kafka_broker(proc)
