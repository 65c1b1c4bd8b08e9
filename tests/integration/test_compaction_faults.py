"""Log compaction under SIGKILL: a compacted topic with small segments, written by an
idempotent confluent-kafka producer (acks=all) that keeps updating a few thousand keys, while
the single broker is SIGKILLed again and again at moments drawn from a seeded
``random.Random`` (the seed is printed and named in every assertion message):

* ``rewriting``: while a (throttled) cleaning round writes its ``.cleaned`` segments;
* ``index-swap``, ``log-swap``, ``old-deleted``, ``swapped``: as the swap of a cleaned group
  renames its first index to ``.swap``, its ``.log`` to ``.swap``, the replaced segments to
  ``.deleted``, or the ``.swap`` ``.log`` to its final name (inotify tells the test the moment
  the rename happens; the kill lands a few instructions or an fsync later);
* ``after-round``: shortly after a round's summary line (the checkpoint write, ``.deleted``
  files pending, or the next round mapping its dirty section);
* ``worker``: only the cleaner worker, while it writes ``.cleaned`` segments: the broker
  notices, discards the round's files, starts a new worker and cleans again.

After each broker kill: no cleaner worker process outlives the broker (PR_SET_PDEATHSIG); the broker
restarts and loads the log; no ``.cleaned``/``.swap`` file from before the kill is left; the
cleaner cleans the log again; and a consumer reading from offset 0 sees offsets strictly
increasing and, for every key, exactly the latest value the producer had acknowledged (a
key whose latest acknowledged write is a tombstone is absent or ends with that tombstone).

``MILLRACE_COMPACTION_SEED`` and ``MILLRACE_COMPACTION_KILLS`` choose another seed and more
kills: ``make test`` runs 2 kills at seeded moments, ``make fault`` 60 (every moment several
times, to hunt for rarer interleavings).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from confluent_kafka import Producer

from tests.harness.dir_watch import IN_CREATE, IN_MOVED_TO, DirectoryWatch
from tests.harness.processes import child_pids, pid_alive, process_identity
from tests.harness.waiting import wait_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.harness.cluster import Cluster

# about 15 s per kill: room for the longer runs of make fault (MILLRACE_COMPACTION_KILLS)
pytestmark = [
    pytest.mark.integration,
    pytest.mark.fault,
    pytest.mark.timeout(300 + 20 * int(os.environ.get("MILLRACE_COMPACTION_KILLS", "2"))),
]

SEED = int(os.environ.get("MILLRACE_COMPACTION_SEED", "20250611"))
KILLS = int(os.environ.get("MILLRACE_COMPACTION_KILLS", "2"))
KEYS = 3000
TOPIC = "compacted-under-kill"
PROPS = {
    "zookeeper.session.timeout.ms": "4000",
    "log.cleaner.backoff.ms": "200",
    # rounds last about a second: long enough to be killed in the middle
    "log.cleaner.io.max.bytes.per.second": str(1024 * 1024),
}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": str(64 * 1024),
    "min.cleanable.dirty.ratio": "0.01",
}
RATE_PER_S = 1500  # updates per second while the broker is killed and restarted
TOMBSTONE_SHARE = 0.03
PAD = b"." * 80

Expected = dict[bytes, tuple[int, bytes | None]]  # key -> (sequence, value) last acknowledged


def _value(seq: int) -> bytes:
    return b"%010d" % seq + PAD


class Writer:
    """An idempotent acks=all producer in a thread, updating random keys at ``RATE_PER_S``;
    ``acked`` holds the latest acknowledged (sequence, value) of every key."""

    def __init__(self, bootstrap: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "batch.size": 16384,  # a batch must fit a 64 KB segment
                "linger.ms": 5,
                "message.timeout.ms": 300_000,
                "reconnect.backoff.ms": 100,
                "reconnect.backoff.max.ms": 1000,
            }
        )
        self.seq = 0
        self.acked: Expected = {}
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _on_delivery(self, key: bytes, seq: int, value: bytes | None) -> Callable[..., None]:
        def done(err: Any, _msg: Any) -> None:
            with self.lock:
                if err is not None:
                    self.failed.append(f"key {key!r} seq {seq}: {err}")
                elif self.acked.get(key, (-1, None))[0] < seq:
                    self.acked[key] = (seq, value)

        return done

    def produce(self, key: bytes, tombstone: bool = False) -> None:
        self.seq += 1
        value = None if tombstone else _value(self.seq)
        while True:
            try:
                self.producer.produce(
                    TOPIC,
                    key=key,
                    value=value,
                    partition=0,
                    on_delivery=self._on_delivery(key, self.seq, value),
                )
                return
            except BufferError:
                self.producer.poll(0.05)

    def fill(self, versions: int) -> None:
        for _ in range(versions):
            for k in range(KEYS):
                self.produce(b"key-%05d" % k)
            self.producer.poll(0)
        assert self.producer.flush(120) == 0, "initial records not acknowledged within 120s"

    def _run(self) -> None:
        started = time.monotonic()
        sent = 0
        while not self._stop.is_set():
            for _ in range(50):
                key = b"key-%05d" % self.rng.randrange(KEYS)
                self.produce(key, tombstone=self.rng.random() < TOMBSTONE_SHARE)
            sent += 50
            self.producer.poll(0)
            ahead = sent / RATE_PER_S - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="compaction-writer", daemon=True)
        self._thread.start()

    def halt(self, flush_s: float) -> int:
        """Stop writing, wait up to ``flush_s`` for acknowledgements; returns how many
        records are still unacknowledged."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        return int(self.producer.flush(flush_s))

    def stop(self) -> None:
        """Stop writing and wait until every record is acknowledged."""
        left = self.halt(180)
        assert left == 0, f"{left} records never acknowledged"


# --- moments to kill at ---------------------------------------------------------------------

MODES = (
    "rewriting",
    "index-swap",
    "log-swap",
    "old-deleted",
    "swapped",
    "after-round",
    "worker",
)
RENAMED_TO = {
    "index-swap": ".index.swap",
    "log-swap": ".log.swap",
    "old-deleted": ".log.deleted",
    "swapped": ".log",
}


def _output_size(cluster: Cluster) -> int:
    return Path(cluster.broker(1)["out"]).stat().st_size


def _rounds_since(cluster: Cluster, position: int) -> int:
    """ "cleaned log" summary lines of the topic in the broker's output after ``position``."""
    with Path(cluster.broker(1)["out"]).open("rb") as fh:
        fh.seek(position)
        return fh.read().count(f"cleaned log {TOPIC}-0 ".encode())


def _noticed_and_cleaned(cluster: Cluster, position: int) -> bool:
    """After ``position`` the broker logged that its cleaner worker died, then finished a
    cleaning round. A worker killed mid-round is noticed when the round's result does not
    come; one killed just after it returned a round's result (the native cleaner writes its
    ``.cleaned`` segments in a short final burst, so a kill up to 0.5 s after the first one
    can land there), when the next round is handed to it."""
    with Path(cluster.broker(1)["out"]).open("rb") as fh:
        fh.seek(position)
        out = fh.read()
    died = out.find(b"died; restarting the pool")
    return died >= 0 and _rounds_since(cluster, position + died) > 0


def _descendants(pid: int) -> set[tuple[int, int]]:
    return {i for p in child_pids(pid) if (i := process_identity(p)) is not None}


def _is_pool_worker(ident: tuple[int, int]) -> bool:
    """A multiprocessing "spawn" child (the cleaner's worker pool) still running."""
    try:
        cmdline = Path(f"/proc/{ident[0]}/cmdline").read_bytes()
    except OSError:
        return False
    return process_identity(ident[0]) == ident and b"spawn_main" in cmdline


def _kill_at(
    mode: str, cluster: Cluster, watch: DirectoryWatch, rng: random.Random, tag: str
) -> tuple[str, set[tuple[int, int]], int]:
    """Wait for the moment ``mode`` names, SIGKILL the broker then; returns what happened,
    the broker's descendants (identities) seen before the kill and how many of them were
    cleaner workers."""
    pid = cluster.broker_pid(1)
    children = _descendants(pid)
    workers = {c for c in children if _is_pool_worker(c)}
    watch.drain()
    what = mode
    if mode == "rewriting":
        event = watch.wait(
            lambda mask, name: bool(mask & IN_CREATE) and name.endswith(".log.cleaned"), 90
        )
        assert event is not None, f"{tag}: no cleaning round wrote a .cleaned segment in 90s"
        children |= _descendants(pid)
        workers |= {c for c in children if _is_pool_worker(c)}
        delay = rng.uniform(0.0, 1.0)
        time.sleep(delay)
        what = f"rewriting ({event[1]} + {delay:.2f}s)"
    elif mode == "after-round":
        position = _output_size(cluster)
        wait_for(lambda: _rounds_since(cluster, position) > 0, 90, f"{tag}: a cleaning round")
        delay = rng.uniform(0.0, 0.5)
        time.sleep(delay)
        what = f"after-round (+{delay:.2f}s)"
    else:
        suffix = RENAMED_TO[mode]
        event = watch.wait(
            lambda mask, name: bool(mask & IN_MOVED_TO) and name.endswith(suffix), 90
        )
        assert event is not None, f"{tag}: no rename to *{suffix} within 90s"
        what = f"{mode} ({event[1]})"
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not pid_alive(pid), 30, f"{tag}: broker pid {pid} to die")
    return what, children, len(workers)


def _kill_worker(
    cluster: Cluster, watch: DirectoryWatch, rng: random.Random, tag: str
) -> tuple[str, int]:
    """SIGKILL the cleaner worker (only) while it writes ``.cleaned`` segments; returns what
    happened and the broker's output position before."""
    position = _output_size(cluster)
    watch.drain()
    event = watch.wait(
        lambda mask, name: bool(mask & IN_CREATE) and name.endswith(".log.cleaned"), 90
    )
    assert event is not None, f"{tag}: no cleaning round wrote a .cleaned segment in 90s"
    delay = rng.uniform(0.0, 0.5)
    time.sleep(delay)
    workers = [ident for ident in _descendants(cluster.broker_pid(1)) if _is_pool_worker(ident)]
    assert workers, f"{tag}: no cleaner worker under broker pid {cluster.broker_pid(1)}"
    for pid, _start in workers:
        os.kill(pid, signal.SIGKILL)
    return f"worker ({event[1]} + {delay:.2f}s, pids {[w[0] for w in workers]})", position


def _leftovers(directory: Path, before_ns: int) -> list[str]:
    """``.cleaned``/``.swap`` files last modified before ``before_ns`` (so not written by the
    restarted broker's own rounds)."""
    out = []
    for entry in os.scandir(directory):
        if entry.name.endswith((".cleaned", ".swap")):
            try:
                if entry.stat().st_mtime_ns < before_ns:
                    out.append(entry.name)
            except FileNotFoundError:
                continue
    return sorted(out)


def _unfinished(directory: Path) -> str:
    """The ``.cleaned`` files (how many) and ``.swap`` files (which) in ``directory``."""
    names = os.listdir(directory)
    cleaned = sum(n.endswith(".cleaned") for n in names)
    swaps = sorted(n for n in names if n.endswith(".swap"))
    return f"{cleaned} .cleaned, .swap {swaps}"


def _loader_lines(cluster: Cluster, position: int) -> str:
    """What the restarted broker's loader did with the leftovers (its log lines)."""
    with Path(cluster.broker(1)["out"]).open("rb") as fh:
        fh.seek(position)
        text = fh.read().decode(errors="replace")
    return (
        f"{text.count('removing leftover file')} leftovers removed, "
        f"{text.count('swap segment')} swaps completed"
    )


def _check_log(cluster: Cluster, expected: Expected, tag: str) -> int:
    """Read the topic from offset 0: offsets increase, each key ends at its latest
    acknowledged value. Returns how many records were read."""
    [msgs] = cluster.consume(TOPIC, [0]).values()
    offsets = [m.offset() for m in msgs]
    assert all(a < b for a, b in itertools.pairwise(offsets)), (
        f"{tag}: offsets not strictly increasing"
    )
    latest: dict[bytes, bytes | None] = {}
    for m in msgs:
        latest[m.key()] = m.value()
    problems = []
    for key, (_seq, value) in sorted(expected.items()):
        if value is None:
            if latest.get(key) is not None:
                problems.append(f"{key!r}: deleted, but reads {latest[key]!r}")
        elif key not in latest:
            problems.append(f"{key!r}: missing (acknowledged {value[:10]!r})")
        elif latest[key] != value:
            problems.append(f"{key!r}: reads {latest[key]!r:.14}, acknowledged {value[:10]!r}")
    unknown = sorted(set(latest) - set(expected))
    assert not problems and not unknown, (
        f"{tag}: {len(problems)} keys wrong, first {problems[:5]}; unknown keys {unknown[:5]}"
    )
    return len(msgs)


def _stop_and_check(writer: Writer, cluster: Cluster, tag: str) -> int:
    """Stop the writer once all it wrote is acknowledged, then ``_check_log``."""
    writer.stop()
    with writer.lock:
        assert not writer.failed, f"{tag}: deliveries failed: {writer.failed[:5]}"
        expected = dict(writer.acked)
    return _check_log(cluster, expected, tag)


@pytest.mark.long  # make fault (60 kills there); 25 s of make test's budget (issue 30)
def test_compaction_survives_sigkill_at_random_moments(
    cluster_factory: Callable[..., Cluster],
) -> None:
    rng = random.Random(SEED)
    modes = [*MODES, *(rng.choice(MODES) for _ in range(max(KILLS - len(MODES), 0)))]
    rng.shuffle(modes)
    modes = modes[:KILLS]
    print(f"seed {SEED}: kills {modes}")
    cluster = cluster_factory(PROPS)
    cluster.create_topic(TOPIC, 1, TOPIC_CONFIG)
    directory = cluster.log_dir(TOPIC, 0)
    writer = Writer(cluster.bootstrap, rng.randrange(2**32))
    writer.fill(versions=5)
    report: list[str] = []
    workers_seen = 0
    try:
        with DirectoryWatch(directory) as watch:
            for i, mode in enumerate(modes):
                tag = f"seed {SEED}, kill {i + 1}/{len(modes)} ({mode})"
                started = time.monotonic()
                writer.start()
                if mode == "worker":
                    what, position = _kill_worker(cluster, watch, rng, tag)
                    killed_ns = time.time_ns()
                    # the broker discards the round, starts a new worker and cleans again
                    wait_for(
                        lambda position=position: _noticed_and_cleaned(cluster, position),
                        90,
                        f"{tag}: the broker noticing its worker died and cleaning again",
                    )
                    assert pid_alive(cluster.broker_pid(1)), f"{tag}: the broker died"
                    left = _leftovers(directory, killed_ns)
                    assert not left, f"{tag}: the killed worker's files are left: {left}"
                    read = _stop_and_check(writer, cluster, tag)
                    report.append(
                        f"{i + 1}: {what}; read {read} records after {writer.seq} writes "
                        f"({time.monotonic() - started:.1f}s)"
                    )
                    continue
                what, children, workers = _kill_at(mode, cluster, watch, rng, tag)
                at_kill = _unfinished(directory)
                workers_seen += workers
                # no cleaner worker (nor any other child) outlives the broker
                wait_for(
                    lambda children=children: all(
                        process_identity(pid) != ident for pid, ident in children
                    ),
                    15,
                    f"{tag}: the killed broker's child processes {sorted(children)} to exit",
                )
                restart_ns = time.time_ns()
                position = _output_size(cluster)
                cluster.start_broker(1)
                cluster.admin().wait_for_leaders(TOPIC, 1)
                left = _leftovers(directory, restart_ns)
                assert not left, f"{tag}: left after the restarted broker loaded the log: {left}"
                # the cleaner carries on
                wait_for(
                    lambda position=position: _rounds_since(cluster, position) > 0,
                    90,
                    f"{tag}: a cleaning round after the restart",
                )
                read = _stop_and_check(writer, cluster, tag)
                report.append(
                    f"{i + 1}: {what}; at the kill: {at_kill}; at load: "
                    f"{_loader_lines(cluster, position)}; {len(children)} child processes "
                    f"({workers} cleaner workers); "
                    f"read {read} records after {writer.seq} writes "
                    f"({time.monotonic() - started:.1f}s)"
                )
    finally:
        writer.halt(5)
        print("\n".join(report))
    assert workers_seen > 0, f"seed {SEED}: no cleaner worker was ever seen under the broker"
    # compaction did its job across the restarts: far fewer records than writes remain
    read = _check_log(cluster, writer.acked, f"seed {SEED}, final")
    assert read < writer.seq // 2, f"seed {SEED}: {read} records left of {writer.seq} writes"
