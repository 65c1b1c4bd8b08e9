"""A Hypothesis state machine for the partition log against a list model.

Operations: leader appends (with leader epochs), rolls, truncation, advancing the log start,
flushes, clean reopen (close + open), crash (reopen without closing, with recovery, or
trusting the files), reads and timestamp lookups. After every step the log's offsets, contents and leader epoch cache must match the
model exactly.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.clock import ManualClock
from broker.log.errors import OffsetOutOfRangeError
from broker.log.log import Log
from broker.protocol import records
from broker.topic_config import LogConfig

pytestmark = pytest.mark.property

NOW = 1_700_000_000_000
CONFIG = LogConfig(
    segment_bytes=600,
    index_interval_bytes=64,
    segment_index_bytes=48,
    file_delete_delay_ms=1000,
    retention_ms=-1,
)


@dataclass
class _Batch:
    base: int
    values: list[bytes]
    timestamps: list[int]

    @property
    def last(self) -> int:
        return self.base + len(self.values) - 1


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="logsm-"))
        self.dir = self.tmp / "prop-topic-0"
        self.clock = ManualClock(NOW)
        self.log = Log.open(self.dir, CONFIG, clock=self.clock)
        self.batches: list[_Batch] = []  # every batch ever kept, including those below lso
        self.origin = 0  # where the log starts when it has no batch
        self.lso = 0
        self.epochs: list[tuple[int, int]] = []
        self.epoch = 0
        self.counter = 0

    def teardown(self) -> None:
        self.log.close_handles()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- model helpers -------------------------------------------------------------------

    @property
    def leo(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.origin

    def _model_truncate_epochs_from_end(self, end: int) -> None:
        self.epochs = [(e, s) for e, s in self.epochs if s < end]

    def _model_truncate_epochs_from_start(self, start: int) -> None:
        below = [(e, s) for e, s in self.epochs if s <= start]
        if below and not (len(below) == 1 and below[0][1] == start):
            self.epochs = [(below[-1][0], start)] + [(e, s) for e, s in self.epochs if s > start]

    # --- rules ---------------------------------------------------------------------------

    @rule(
        sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3),
        ts=st.lists(st.integers(0, 500), min_size=12, max_size=12),
        bump=st.booleans(),
    )
    def append(self, sizes: list[int], ts: list[int], bump: bool) -> None:
        if bump:
            self.epoch += 1
        raw = bytearray()
        new: list[_Batch] = []
        base = self.leo
        k = 0
        for n in sizes:
            values = [b"value-%06d" % (self.counter + i) for i in range(n)]
            stamps = [NOW + ts[(k + i) % len(ts)] for i in range(n)]
            self.counter += n
            k += n
            raw += records.encode_batch(
                [records.SimpleRecord(v, b"key", t) for v, t in zip(values, stamps, strict=True)],
                base_offset=999,
            )
            new.append(_Batch(base, values, stamps))
            base += n
        result = self.log.append_as_leader(
            raw, list(records.iter_batches(raw)), leader_epoch=self.epoch
        )
        assert result.first_offset == new[0].base
        assert result.last_offset == new[-1].last
        if not self.epochs or self.epoch > self.epochs[-1][0]:
            # a new epoch replaces entries starting at or after it (they hold no data)
            self._model_truncate_epochs_from_end(new[0].base)
            self.epochs.append((self.epoch, new[0].base))
        self.batches.extend(new)

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(fraction=st.floats(0, 1))
    def truncate(self, fraction: float) -> None:
        offset = self.lso + int((self.leo - self.lso) * fraction)
        self.log.truncate_to(offset)
        if offset < self.leo:
            self.batches = [b for b in self.batches if b.last < offset]
            self.lso = min(self.lso, self.leo)
            self._model_truncate_epochs_from_end(self.leo)

    @rule(fraction=st.floats(0, 1))
    def advance_log_start(self, fraction: float) -> None:
        offset = self.lso + int((self.leo - self.lso) * fraction)
        self.log.advance_log_start_offset(offset)
        if offset > self.lso:
            self.lso = offset
            self._model_truncate_epochs_from_start(offset)

    @rule(beyond=st.integers(1, 5))
    def advance_beyond_the_end_fails(self, beyond: int) -> None:
        with pytest.raises(OffsetOutOfRangeError):
            self.log.advance_log_start_offset(self.leo + beyond)

    @rule(offset=st.integers(0, 2000))
    def truncate_fully(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.batches = []
        self.origin = offset
        self.lso = offset
        self.epochs = []

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.leo

    @rule(ms=st.integers(0, 2000))
    def delete_pending(self, ms: int) -> None:
        self.clock.advance(ms)
        self.log.delete_pending_files()

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = Log.open(
            self.dir,
            CONFIG,
            clock=self.clock,
            recovery_point=self.log.recovery_point,
            log_start_offset=self.log.log_start_offset,
            clean_shutdown=True,
        )
        self._after_reopen()

    @rule()
    def crash(self) -> None:
        recovery_point = self.log.recovery_point
        self.log.close_handles()
        self.log = Log.open(
            self.dir,
            CONFIG,
            clock=self.clock,
            recovery_point=recovery_point,
            log_start_offset=self.lso,
        )
        self._after_reopen()

    @rule()
    def crash_but_trusted(self) -> None:
        """A crash after which the files are complete (the page cache survived), opened as
        if cleanly shut down: untrimmed, preallocated indexes must be read correctly."""
        recovery_point = self.log.recovery_point
        self.log.close_handles()
        self.log = Log.open(
            self.dir,
            CONFIG,
            clock=self.clock,
            recovery_point=recovery_point,
            log_start_offset=self.lso,
            clean_shutdown=True,
        )
        self._after_reopen()

    def _after_reopen(self) -> None:
        # loading drops epoch entries that start at or after the log end (no data in them)
        self._model_truncate_epochs_from_end(self.leo)

    @precondition(lambda self: self.leo > self.lso)
    @rule(fraction=st.floats(0, 1), max_bytes=st.integers(1, 700))
    def read(self, fraction: float, max_bytes: int) -> None:
        offset = min(self.lso + int((self.leo - self.lso) * fraction), self.leo - 1)
        chunk = self.log.read(offset, max_bytes)
        assert chunk is not None
        data = chunk.read_bytes()
        headers = list(records.iter_batches(data))
        first = next(b for b in self.batches if b.last >= offset)
        assert headers[0].base_offset == first.base <= offset
        assert chunk.size == len(data)
        assert len(headers) == 1 or chunk.size <= max_bytes
        for header in headers:
            batch = next(b for b in self.batches if b.base == header.base_offset)
            recs = records.decode_records(data, header)
            assert [r.value for r in recs] == batch.values
            assert [r.timestamp for r in recs] == batch.timestamps

    @rule(wanted=st.integers(-10, 520))
    def offset_for_timestamp(self, wanted: int) -> None:
        expected = next(
            (
                (b.base + i, t)
                for b in self.batches
                for i, t in enumerate(b.timestamps)
                if b.base + i >= self.lso and t >= NOW + wanted
            ),
            None,
        )
        assert self.log.offset_for_timestamp(NOW + wanted) == expected

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_end_offset == self.leo
        assert self.log.log_start_offset == self.lso
        assert self.log.recovery_point <= self.leo
        bases = [s.base_offset for s in self.log.segments]
        assert bases == sorted(set(bases))
        assert bases[0] <= self.lso

    @invariant()
    def contents_match(self) -> None:
        got: list[tuple[int, bytes | None]] = []
        offset = self.lso
        while offset < self.leo:
            chunk = self.log.read(offset, 10_000)
            assert chunk is not None
            data = chunk.read_bytes()
            for header in records.iter_batches(data):
                assert records.crc_ok(data, header)
                got.extend((r.offset, r.value) for r in records.decode_records(data, header))
            offset = chunk.last_offset + 1
        expected = [
            (b.base + i, v)
            for b in self.batches
            for i, v in enumerate(b.values)
            if b.last >= self.lso
        ]
        assert got == expected

    @invariant()
    def epochs_match(self) -> None:
        assert self.log.leader_epoch_cache.entries == self.epochs


TestLogStateMachine = LogMachine.TestCase
TestLogStateMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
