"""The native cleaner against the Python cleaner, its reference (broker/log/cleaner/native.py).

Random logs (keys, tombstones, headers, compressed batches, idempotent and transactional
producers with commits and aborts, batch and segment boundaries, several cleaning rounds with
time passing so that delete horizons are stamped and then reached, offset maps too small for
the dirty section) are cleaned by a cleaner whose executor runs every round twice: with the
Python cleaner, then with the native one; the ``.cleaned`` files (log and indexes) must be
byte-identical and the round's results equal. Also: the native record scan locates records as
``split_records`` does, and corrupt records sections raise CorruptRecordError, never crash.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.clock import ManualClock
from broker.log.cleaner import native
from broker.log.cleaner.cleaning import CleaningJob, CleaningResult, run_cleaning
from broker.log.cleaner.manager import CleanerSettings, LogCleaner
from broker.log.log import AppendOrigin, Log
from broker.log.segment import CLEANED_SUFFIX
from broker.protocol import compression, records
from broker.protocol.batch_rewrite import split_records
from broker.protocol.control_records import ControlType, encode_marker_batch
from broker.topic_config import LogConfig
from broker.types import TopicPartition

pytestmark = [
    pytest.mark.property,
    pytest.mark.skipif(not native.NATIVE, reason="the native cleaner is not built"),
]

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)
CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4]
if "zstd" in compression.NAMES.values():
    CODECS.append(compression.ZSTD)

# twelve keys (two longer than the 16 bytes a native slot holds inline), the empty key, and
# now and then no key (which compaction drops)
_KEYS = [b"key-%d" % i for i in range(10)] + [b"a-key-longer-than-16-bytes-%d" % i for i in (0, 1)]
_key = st.integers(0, 13).map(lambda i: _KEYS[i] if i < 12 else b"" if i == 12 else None)
_value = st.one_of(st.none(), st.binary(min_size=0, max_size=40))
_headers = st.lists(
    st.tuples(st.sampled_from(["h", "trace"]), st.one_of(st.none(), st.binary(max_size=8))),
    max_size=2,
).map(tuple)
_records = st.lists(st.tuples(_key, _value, st.integers(-50, 50), _headers), min_size=1, max_size=8)

# one step: ("data", records, codec, producer) | ("txn", pid, records, codec)
# | ("end", pid, commit) | ("roll",) | ("clean", advance_ms)
_step = st.one_of(
    st.tuples(st.just("data"), _records, st.sampled_from(CODECS), st.sampled_from([None, 7])),
    st.tuples(st.just("txn"), st.sampled_from([5, 6]), _records, st.sampled_from(CODECS)),
    st.tuples(st.just("end"), st.sampled_from([5, 6]), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.integers(0, 3000)),
)


@dataclasses.dataclass
class _Producers:
    seq: dict[int, int] = dataclasses.field(default_factory=dict)
    open_txn: set[int] = dataclasses.field(default_factory=set)

    def next_seq(self, pid: int, n: int) -> int:
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + n
        return seq


def _cleaned_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob(f"*{CLEANED_SUFFIX}"))}


def _untimed(result: CleaningResult) -> CleaningResult:
    return dataclasses.replace(result, map_seconds=0.0, clean_seconds=0.0, throttled_seconds=0.0)


class TwinExecutor(Executor):
    """Runs each cleaning job with the Python cleaner, then the native one, in this thread,
    and checks that both wrote the same files and results."""

    def __init__(self) -> None:
        self.rounds = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        assert fn is run_cleaning
        (job,) = args
        assert isinstance(job, CleaningJob) and job.native
        future: Future[Any] = Future()
        directory = Path(job.directory)
        try:
            reference = run_cleaning(dataclasses.replace(job, native=False))
            expected = _cleaned_files(directory)
            result = run_cleaning(job)
            assert _cleaned_files(directory) == expected
            assert _untimed(result) == _untimed(reference)
            self.rounds += 1
            future.set_result(result)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting side
            future.set_exception(exc)
        return future


def _append(
    log: Log, recs: list[tuple[bytes | None, bytes | None, int, Any]], **batch: Any
) -> None:
    buf = bytearray(
        records.encode_batch(
            [
                records.SimpleRecord(value=v, key=k, timestamp=NOW + ts, headers=h)
                for k, v, ts, h in recs
            ],
            **batch,
        )
    )
    log.append_as_leader(buf, list(records.iter_batches(buf)), leader_epoch=0)


def _marker(log: Log, pid: int, commit: bool) -> None:
    buf = bytearray(
        encode_marker_batch(
            ControlType.COMMIT if commit else ControlType.ABORT,
            producer_id=pid,
            producer_epoch=0,
            coordinator_epoch=0,
            timestamp_ms=NOW,
        )
    )
    log.append_as_leader(
        buf, list(records.iter_batches(buf)), leader_epoch=0, origin=AppendOrigin.COORDINATOR
    )


async def _clean(cleaner: LogCleaner) -> None:
    rounds = 0
    while await cleaner.clean_filthiest():
        rounds += 1
        assert rounds < 50


def _run(steps: list[tuple[Any, ...]], dedupe_keys: int, tmp: Path) -> int:
    clock = ManualClock(NOW)
    log = Log.open(
        tmp / "t-0",
        LogConfig(
            cleanup_policy=("compact",),
            segment_bytes=1200,
            delete_retention_ms=1000,
            file_delete_delay_ms=0,
            min_cleanable_dirty_ratio=0.01,
            index_interval_bytes=100,
        ),
        clock=clock,
    )
    executor = TwinExecutor()
    cleaner = LogCleaner(
        lambda: {TP: log},
        [tmp],
        # map_capacity = size / 24 * 0.9: dedupe_keys keys per round (more than a batch holds,
        # or a round could not map one batch and would make no progress)
        CleanerSettings(dedupe_buffer_size=dedupe_keys * 24 * 10 // 9 + 23),
        clock=clock,
        executor_factory=lambda _n: executor,
    )
    cleaner.load_checkpoints()
    cleaner._executor = executor
    producers = _Producers()
    try:
        fresh = [(b"key-0", b"fresh", 0, ())]
        ending: list[tuple[Any, ...]] = [("end", 5, True), ("end", 6, False), ("clean", 0)]
        # new dirty data, so that rounds run again after the delete horizons passed
        ending += [("data", fresh, 0, None), ("clean", 2500), ("data", fresh, 0, None)]
        for step in [*steps, *ending, ("clean", 0)]:
            kind = step[0]
            if kind == "data":
                _kind, recs, codec, pid = step
                extra: dict[str, Any] = {}
                if pid is not None:
                    extra = {
                        "producer_id": pid,
                        "producer_epoch": 0,
                        "base_sequence": producers.next_seq(pid, len(recs)),
                    }
                _append(log, recs, compression_type=codec, **extra)
            elif kind == "txn":
                _kind, pid, recs, codec = step
                producers.open_txn.add(pid)
                _append(
                    log,
                    recs,
                    compression_type=codec,
                    producer_id=pid,
                    producer_epoch=0,
                    base_sequence=producers.next_seq(pid, len(recs)),
                    transactional=True,
                )
            elif kind == "end":
                _kind, pid, commit = step
                if pid in producers.open_txn:
                    producers.open_txn.discard(pid)
                    _marker(log, pid, commit)
            elif kind == "roll":
                if log.segments[-1].size:
                    log.roll()
            else:
                clock.advance(step[1])
                if log.segments[-1].size:
                    log.roll()
                log.high_watermark = log.log_end_offset
                asyncio.run(_clean(cleaner))
    finally:
        log.close()
    return executor.rounds


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(steps=st.lists(_step, min_size=3, max_size=40), dedupe_keys=st.sampled_from([9, 1000]))
def test_native_cleaner_writes_what_the_python_cleaner_writes(
    steps: list[tuple[Any, ...]], dedupe_keys: int
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="cleaner-twin-"))
    try:
        _run(steps, dedupe_keys, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_twin_rounds_happen(tmp_path: Path) -> None:
    """The comparison above is not vacuous: a plain history is cleaned in rounds."""
    recs = [(b"key-%d" % (i % 3), b"v%d" % i, 0, ()) for i in range(6)]
    steps: list[tuple[Any, ...]] = [("data", recs, 0, None), ("roll",), ("data", recs, 1, 7)]
    assert _run(steps, 1000, tmp_path) >= 1


@settings(max_examples=200, deadline=None)
@given(recs=_records, codec=st.sampled_from(CODECS))
def test_native_scan_locates_records_as_split_records(
    recs: list[tuple[bytes | None, bytes | None, int, Any]], codec: int
) -> None:
    batch = records.encode_batch(
        [records.SimpleRecord(value=v, key=k, timestamp=NOW + t, headers=h) for k, v, t, h in recs],
        compression_type=codec,
    )
    header = records.read_header(batch)
    payload = records.batch_payload(batch, header)
    expected = [tuple(r) for r in split_records(payload, header.record_count)]
    assert native._native_cleaner.records(payload, header.record_count) == expected


@settings(max_examples=300, deadline=None)
@given(
    recs=_records,
    cut=st.integers(0, 400),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
    extra=st.binary(max_size=3),
    count_delta=st.integers(-1, 2),
)
def test_corrupt_records_raise_corrupt_record_error(
    recs: list[tuple[bytes | None, bytes | None, int, Any]],
    cut: int,
    flips: list[tuple[int, int]],
    extra: bytes,
    count_delta: int,
) -> None:
    batch = records.encode_batch(
        [records.SimpleRecord(value=v, key=k, timestamp=NOW + t, headers=h) for k, v, t, h in recs]
    )
    payload = bytearray(batch[records.HEADER_SIZE :])
    for at, byte in flips:
        if payload:
            payload[at % len(payload)] = byte
    data = bytes(payload[: max(len(payload) - cut % 8, 0)] if cut % 3 else payload) + extra
    count = len(recs) + count_delta
    offset_map = native._native_cleaner.OffsetMap(100, 1)
    offset_map.update_latest_offset(3)
    for call in (
        lambda: native._native_cleaner.records(data, count),
        lambda: offset_map.map_records(data, count, 0, 0),
        lambda: offset_map.filter_records(data, count, 0, True, NOW, False, NOW + 5),
    ):
        try:
            call()
        except records.CorruptRecordError:
            pass
        except ValueError as exc:  # a negative count
            assert count < 0, exc
