"""``millrace dump-log``: print the contents of log segment files, like Kafka's
``kafka-dump-log.sh`` (``kafka.tools.DumpLogSegments``).

Supported files, recognised by suffix, in a partition directory laid out as Kafka's:

* ``.log``: record batches (magic v2). One line per batch; with ``--print-data-log`` (or
  ``--deep-iteration``) one ``| offset: ...`` line per record as well. A batch whose CRC-32C
  does not match is printed with ``isvalid: false``; bytes at the end that do not form a
  whole batch (a torn write) are reported as ``Found N invalid bytes at the end of <file>``.
* ``.index``: offset index, 8-byte entries ``relativeOffset int32, position int32``.
* ``.timeindex``: time index, 12-byte entries ``timestamp int64, relativeOffset int32``.
* ``.txnindex``: aborted transactions, 34-byte entries ``version int16, producerId int64,
  firstOffset int64, lastOffset int64, lastStableOffset int64``.
* ``.snapshot``: producer-state snapshots (Kafka's version-1 format).

All integers are big-endian; a segment's base offset is its 20-digit file name. Index files
may be preallocated and end in all-zero entries: as in Kafka, an entry whose offset equals the
base offset after the first one ends the index. Index entries are checked against the
``.log`` next to them (the offset of an index entry must be the last offset of the batch at
its position); mismatches are reported on stderr after all files, as Kafka does. So are
non-consecutive record offsets (with ``--deep-iteration``), compared record by record as
Kafka compares them: a compacted segment has gaps between and inside batches, and a batch the
cleaner emptied (``count: 0``) has no record to compare.

The dumpers are pure generators of output lines (``dump_segment``, ``dump_offset_index``,
``dump_time_index``, ...), so they are unit-testable; only ``run`` touches stdout/stderr.
Large segments are memory-mapped, never read whole.

Concurrency: read-only; safe to run against the files of a live broker (a batch being
appended may show up as invalid bytes at the end).
"""

from __future__ import annotations

import argparse
import mmap
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from broker.cli.common import fail, silence_stdout

if TYPE_CHECKING:
    from broker.protocol.records import BatchHeader

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset
_TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, LSO
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_SEQ_MODULUS = 2**31
_DELETE_HORIZON_MASK = 0x40
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT"}
_EMPTY = b""

_PROG = "millrace dump-log"


@dataclass(slots=True)
class DumpProblems:
    """Inconsistencies found while dumping, reported on stderr after all files (as Kafka)."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    other: list[str] = field(default_factory=list)

    def lines(self) -> Iterator[str]:
        for name, pairs in self.index_mismatches.items():
            yield f"Mismatches in :{name}"
            for index_offset, log_offset in pairs:
                yield f"  Index offset: {index_offset}, log offset: {log_offset}"
        for name, pairs in self.non_consecutive.items():
            yield f"Non-consecutive offsets in {name}"
            # the last gap first: Kafka prepends each pair to a list and prints the list
            for prev, cur in reversed(pairs):
                yield f"  {prev} is followed by {cur}"
        yield from self.other

    def __bool__(self) -> bool:
        return bool(self.index_mismatches or self.non_consecutive or self.other)


def base_offset_of(path: Path) -> int:
    """The base offset encoded in a segment file's name (``00000000000000000042.log``)."""
    stem = path.name.split(".", 1)[0]
    if not stem.isdigit():
        raise ValueError(f"{path.name}: file name does not start with a base offset")
    return int(stem)


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview]:
    """Map a file read-only (an empty file maps to an empty view)."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            yield memoryview(_EMPTY)
            return
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(m)
        try:
            yield view
        finally:
            view.release()
            try:
                m.close()
            except BufferError:
                pass  # a slice is still referenced; the map closes when it is collected


# --- .log --------------------------------------------------------------------------------


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _record_lines(
    buf: memoryview, header: BatchHeader, print_data: bool
) -> Iterator[tuple[int, str]]:
    """``(offset, line)`` for each record of the batch."""
    from broker.protocol.records import decode_records

    records = decode_records(buf, header)
    ts_type = "LogAppendTime" if header.is_log_append_time else "CreateTime"
    for record in records:
        if header.base_sequence >= 0:
            seq = (header.base_sequence + (record.offset - header.base_offset)) % _SEQ_MODULUS
        else:
            seq = -1
        key_size = -1 if record.key is None else len(record.key)
        value_size = -1 if record.value is None else len(record.value)
        header_keys = ",".join(k for k, _ in record.headers)
        line = (
            f"| offset: {record.offset} {ts_type}: {record.timestamp} "
            f"keySize: {key_size} valueSize: {value_size} "
            f"sequence: {seq} headerKeys: [{header_keys}]"
        )
        if header.is_control:
            line += _control_suffix(record.key, record.value)
        elif print_data:
            if record.key is not None:
                line += f" key: {_text(record.key)}"
            if record.value is not None:
                line += f" payload: {_text(record.value)}"
        yield record.offset, line


def _control_suffix(key: bytes | None, value: bytes | None) -> str:
    if key is None or len(key) < _CONTROL_KEY.size:
        return " controlType: UNKNOWN(-1)"
    _version, ctype = _CONTROL_KEY.unpack_from(key, 0)
    name = _CONTROL_TYPES.get(ctype)
    if name is None:
        return f" controlType: UNKNOWN({ctype})"
    epoch = -1
    if value is not None and len(value) >= _END_TXN_VALUE.size:
        _v, epoch = _END_TXN_VALUE.unpack_from(value, 0)
    return f" endTxnMarker: {name} coordinatorEpoch: {epoch}"


def dump_segment(
    path: Path | str,
    print_data: bool = False,
    *,
    deep_iteration: bool = False,
    max_batches: int | None = None,
    max_bytes: int | None = None,
    problems: DumpProblems | None = None,
) -> Iterator[str]:
    """Yield DumpLogSegments-style lines for a ``.log`` segment (without ``Dumping``).

    ``print_data`` implies ``deep_iteration`` (one line per record). ``max_batches`` and
    ``max_bytes`` stop early (a dump of the head of a big segment).
    """
    from broker.protocol import compression
    from broker.protocol.errors import KafkaError
    from broker.protocol.records import (
        HEADER_SIZE,
        LOG_OVERHEAD,
        MIN_BATCH_LENGTH,
        crc_ok,
        read_header,
    )

    path = Path(path)
    deep = deep_iteration or print_data
    yield f"Log starting offset: {base_offset_of(path)}"
    with _mapped(path) as buf:
        end = len(buf)
        limit = end if max_bytes is None else min(end, max_bytes)
        pos = 0
        batches = 0
        last_record: int | None = None  # offset of the last record printed
        gaps = problems.non_consecutive if deep and problems is not None else None
        name = str(path.absolute())  # Kafka's key: File.getAbsolutePath
        stopped_early = False
        while pos < end:
            if (max_batches is not None and batches >= max_batches) or pos >= limit:
                stopped_early = True
                break
            if end - pos < HEADER_SIZE:
                break
            header = read_header(buf, pos)
            if header.magic != 2 or header.batch_length < MIN_BATCH_LENGTH:
                break
            if pos + header.batch_length + LOG_OVERHEAD > end:
                break
            valid = crc_ok(buf, header)
            delete_horizon = (
                f"OptionalLong[{header.first_timestamp}]"
                if header.attributes & _DELETE_HORIZON_MASK
                else "OptionalLong.empty"
            )
            ts_type = "LogAppendTime" if header.is_log_append_time else "CreateTime"
            codec = compression.NAMES.get(header.compression, f"unknown({header.compression})")
            yield (
                f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
                f"count: {header.record_count} baseSequence: {header.base_sequence} "
                f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
                f"producerEpoch: {header.producer_epoch} "
                f"partitionLeaderEpoch: {header.partition_leader_epoch} "
                f"isTransactional: {str(header.is_transactional).lower()} "
                f"isControl: {str(header.is_control).lower()} "
                f"deleteHorizonMs: {delete_horizon} position: {pos} "
                f"{ts_type}: {header.max_timestamp} size: {header.size} "
                f"magic: {header.magic} compresscodec: {codec} crc: {header.crc} "
                f"isvalid: {str(valid).lower()}"
            )
            if deep:
                try:
                    for offset, line in _record_lines(buf, header, print_data):
                        if (
                            gaps is not None
                            and last_record is not None
                            and offset != last_record + 1
                        ):
                            gaps.setdefault(name, []).append((last_record, offset))
                        last_record = offset
                        yield line
                except KafkaError as exc:
                    yield f"| cannot decode the records of this batch: {exc}"
            batches += 1
            pos += header.size
        if not stopped_early and pos < end:
            yield f"Found {end - pos} invalid bytes at the end of {path.name}"


# --- .index / .timeindex -------------------------------------------------------------------


def read_offset_index(path: Path | str) -> list[tuple[int, int]]:
    """The ``(absolute offset, position)`` entries of an offset index, without zero padding."""
    path = Path(path)
    base = base_offset_of(path)
    data = path.read_bytes()
    entries: list[tuple[int, int]] = []
    usable = len(data) - len(data) % _OFFSET_ENTRY.size
    for i, (rel, position) in enumerate(_OFFSET_ENTRY.iter_unpack(data[:usable])):
        if i > 0 and rel == 0:
            break  # preallocated, never-written tail
        entries.append((base + rel, position))
    return entries


def read_time_index(path: Path | str) -> list[tuple[int, int]]:
    """The ``(timestamp, absolute offset)`` entries of a time index, without zero padding."""
    path = Path(path)
    base = base_offset_of(path)
    data = path.read_bytes()
    entries: list[tuple[int, int]] = []
    usable = len(data) - len(data) % _TIME_ENTRY.size
    for i, (timestamp, rel) in enumerate(_TIME_ENTRY.iter_unpack(data[:usable])):
        if i > 0 and rel == 0:
            break
        entries.append((timestamp, base + rel))
    return entries


def _batch_at(log_path: Path, position: int) -> tuple[int, int] | None:
    """``(baseOffset, lastOffset)`` of the batch starting at ``position`` in a log file."""
    from broker.protocol.records import HEADER_SIZE, read_header

    if not log_path.is_file():
        return None
    with log_path.open("rb") as f:
        f.seek(position)
        head = f.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return None
    header = read_header(head)
    return header.base_offset, header.last_offset


def _first_batch_ending_at_or_after(
    log_path: Path, position: int, offset: int
) -> tuple[int, int, int] | None:
    """From ``position``, the first batch whose last offset is >= ``offset``:
    ``(lastOffset, position, maxTimestamp over its records)``."""
    from broker.protocol.records import HEADER_SIZE, MIN_BATCH_LENGTH, read_header

    if not log_path.is_file():
        return None
    with _mapped(log_path) as buf:
        pos, end = position, len(buf)
        while end - pos >= HEADER_SIZE:
            header = read_header(buf, pos)
            if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > end:
                return None
            if header.last_offset >= offset:
                return header.last_offset, pos, header.max_timestamp
            pos += header.size
    return None


def dump_offset_index(
    path: Path | str,
    *,
    verify_only: bool = False,
    sanity_only: bool = False,
    problems: DumpProblems | None = None,
) -> Iterator[str]:
    """Yield ``offset: N position: P`` lines for an offset index, checking each entry
    against the ``.log`` beside it (mismatches go to ``problems``)."""
    path = Path(path)
    base = base_offset_of(path)
    size = path.stat().st_size
    entries = read_offset_index(path)
    if not entries:
        yield f"{path} is empty."
        return
    if sanity_only:
        error = _offset_index_sanity(path, size, entries)
        yield error if error else f"{path} passed sanity check."
        return
    log_path = path.with_name(f"{base:020d}.log")
    for offset, position in entries:
        batch = _batch_at(log_path, position)
        log_offset = -1 if batch is None else batch[1]
        if log_offset != offset and problems is not None:
            problems.index_mismatches.setdefault(str(path), []).append((offset, log_offset))
        if not verify_only:
            yield f"offset: {offset} position: {position}"


def _offset_index_sanity(path: Path, size: int, entries: list[tuple[int, int]]) -> str | None:
    if size % _OFFSET_ENTRY.size:
        return (
            f"Index file {path.name} is corrupt, found {size} bytes which is neither positive "
            f"nor a multiple of {_OFFSET_ENTRY.size}."
        )
    last = entries[-1][0]
    base = base_offset_of(path)
    if last < base:
        return (
            f"Corrupt index found, index file ({path}) has non-zero size but the last offset "
            f"is {last} which is less than the base offset {base}."
        )
    prev = -1
    for offset, _pos in entries:
        if offset <= prev:
            return f"Corrupt index found, index file ({path}) offsets are not increasing."
        prev = offset
    return None


def dump_time_index(
    path: Path | str,
    *,
    verify_only: bool = False,
    sanity_only: bool = False,
    problems: DumpProblems | None = None,
) -> Iterator[str]:
    """Yield ``timestamp: T offset: N`` lines for a time index, checking each entry against
    the log (the entry's offset must end a batch whose max timestamp is the entry's)."""
    path = Path(path)
    base = base_offset_of(path)
    size = path.stat().st_size
    entries = read_time_index(path)
    if sanity_only:
        if size % _TIME_ENTRY.size:
            yield (
                f"Time index file {path.name} is corrupt, found {size} bytes which is neither "
                f"positive nor a multiple of {_TIME_ENTRY.size}."
            )
        else:
            yield f"{path} passed sanity check."
        return
    log_path = path.with_name(f"{base:020d}.log")
    index_path = path.with_name(f"{base:020d}.index")
    offset_entries = read_offset_index(index_path) if index_path.is_file() else []
    prev_ts: int | None = None
    for timestamp, offset in entries:
        start = 0
        for idx_offset, idx_pos in offset_entries:
            if idx_offset > offset:
                break
            start = idx_pos
        found = _first_batch_ending_at_or_after(log_path, start, offset)
        if problems is not None:
            name = str(path)
            if found is None:
                problems.other.append(f"{name}: indexed offset {offset} not found in the log")
            elif found[0] != offset:
                problems.other.append(
                    f"{name}: indexed offset {offset}, found log offset {found[0]}"
                )
            elif found[2] != timestamp:
                problems.other.append(
                    f"{name}: indexed timestamp {timestamp}, log timestamp {found[2]}"
                )
            if prev_ts is not None and prev_ts >= timestamp:
                problems.other.append(
                    f"{name}: indexed timestamp {timestamp}, previous indexed timestamp "
                    f"{prev_ts} (out of order)"
                )
        if not verify_only:
            yield f"timestamp: {timestamp} offset: {offset}"
        prev_ts = timestamp


# --- .txnindex / .snapshot -----------------------------------------------------------------


def dump_txn_index(path: Path | str) -> Iterator[str]:
    """Yield one line per aborted transaction of a ``.txnindex`` file."""
    data = Path(path).read_bytes()
    usable = len(data) - len(data) % _TXN_ENTRY.size
    for version, pid, first, last, lso in _TXN_ENTRY.iter_unpack(data[:usable]):
        yield (
            f"version: {version} producerId: {pid} firstOffset: {first} "
            f"lastOffset: {last} lastStableOffset: {lso}"
        )
    if usable != len(data):
        yield f"Found {len(data) - usable} invalid bytes at the end of {Path(path).name}"


def dump_producer_snapshot(path: Path | str) -> Iterator[str]:
    """Yield one line per producer of a producer-state ``.snapshot`` file."""
    from broker.log.producer_state import CorruptSnapshotError, decode_snapshot

    try:
        entries = decode_snapshot(Path(path).read_bytes())
    except CorruptSnapshotError as exc:
        yield f"{Path(path).name}: {exc}"
        return
    for e in entries:
        txn = (
            f"OptionalLong[{e.current_txn_first_offset}]"
            if e.current_txn_first_offset >= 0
            else "OptionalLong.empty"
        )
        line = (
            f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"lastTimestamp: {e.last_timestamp} "
        )
        if e.batches:
            b = e.batches[-1]
            line += (
                f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} "
                f"lastOffset: {b.last_offset} offsetDelta: {b.last_offset - b.first_offset} "
                f"timestamp: {b.timestamp}"
            )
        yield line


# --- dispatch and CLI ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """What to print: the ``dump-log`` command-line switches."""

    print_data: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_batches: int | None = None
    max_bytes: int | None = None


def dump_file(
    path: Path | str, options: DumpOptions | None = None, problems: DumpProblems | None = None
) -> Iterator[str]:
    """Yield the dump of one file, starting with ``Dumping <file>``; unknown suffixes and
    unreadable files yield a single explanatory line instead."""
    opts = options or DumpOptions()
    path = Path(path)
    yield f"Dumping {path}"
    name = path.name
    suffix = name[name.rfind(".") :] if "." in name else ""
    if suffix == ".deleted":
        suffix = Path(name[: -len(".deleted")]).suffix
    if suffix in (".log", ".index", ".timeindex", ".txnindex", ".snapshot"):
        try:
            base_offset_of(path)
        except ValueError as exc:
            yield str(exc)
            return
    if suffix == ".log":
        yield from dump_segment(
            path,
            opts.print_data,
            deep_iteration=opts.deep_iteration,
            max_batches=opts.max_batches,
            max_bytes=opts.max_bytes,
            problems=problems,
        )
    elif suffix == ".index":
        yield from dump_offset_index(
            path,
            verify_only=opts.verify_index_only,
            sanity_only=opts.index_sanity_check,
            problems=problems,
        )
    elif suffix == ".timeindex":
        yield from dump_time_index(
            path,
            verify_only=opts.verify_index_only,
            sanity_only=opts.index_sanity_check,
            problems=problems,
        )
    elif suffix == ".txnindex":
        yield from dump_txn_index(path)
    elif suffix == ".snapshot":
        yield from dump_producer_snapshot(path)
    else:
        yield f"Ignoring unknown file {path}"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dump-log",
        help="print log segments and indexes (like kafka-dump-log.sh)",
        description="Print the contents of .log, .index, .timeindex, .txnindex and "
        ".snapshot files, in the format of Kafka's DumpLogSegments.",
    )
    p.add_argument(
        "--files",
        nargs="+",
        required=True,
        metavar="FILE",
        help="files to dump (space- or comma-separated)",
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print each record's key and payload (implies --deep-iteration)",
    )
    p.add_argument(
        "--deep-iteration",
        action="store_true",
        help="print one line per record, not only per batch",
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the log without printing them",
    )
    p.add_argument(
        "--index-sanity-check", action="store_true", help="only run the index sanity check"
    )
    p.add_argument(
        "--max-batches",
        type=int,
        default=None,
        metavar="N",
        help="stop after N batches of each .log file",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=None,
        metavar="BYTES",
        help="stop reading a .log file after BYTES bytes",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files = [f for arg in args.files for f in arg.split(",") if f]
    options = DumpOptions(
        print_data=args.print_data_log,
        deep_iteration=args.deep_iteration,
        verify_index_only=args.verify_index_only,
        index_sanity_check=args.index_sanity_check,
        max_batches=args.max_batches,
        max_bytes=args.max_bytes,
    )
    problems = DumpProblems()
    status = 0
    out = sys.stdout
    try:
        for name in files:
            path = Path(name)
            if not path.is_file():
                status = fail(_PROG, f"file {name} not found")
                continue
            try:
                for line in dump_file(path, options, problems):
                    out.write(line + "\n")
            except BrokenPipeError:
                raise
            except OSError as exc:
                status = fail(_PROG, f"cannot read {name}: {exc}")
        out.flush()
    except BrokenPipeError:
        silence_stdout()
        return status
    for line in problems.lines():
        sys.stderr.write(line + "\n")
    return status
