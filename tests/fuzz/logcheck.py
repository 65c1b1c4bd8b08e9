"""After a fuzz run: every batch on disk must be one a correct broker could have written.

For each partition directory under the broker's log dirs, every ``.log`` segment is read
and walked batch by batch (no partial tail tolerated): magic 2, a batch length that fits,
a matching CRC-32C, ``recordCount > 0`` and ``lastOffsetDelta == recordCount - 1``, known
codec bits, base offsets increasing across batches and segments, and records that decode
(bounded decompression) to exactly ``recordCount`` records with nothing left over. In a
compacted topic a batch the log cleaner rewrote keeps its ``lastOffsetDelta`` with fewer
records, as in Kafka: there ``recordCount <= lastOffsetDelta + 1`` and the records' offset
deltas must increase and stay within it.

Concurrency: reads files only; run it while the broker is idle (no appends in flight).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from broker.protocol import records as rec
from broker.protocol.errors import KafkaError

DECOMPRESS_LIMIT = 64 * 2**20


@dataclass(slots=True)
class LogReport:
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    records: int = 0
    problems: list[str] = field(default_factory=list)


def check_partition(directory: Path, report: LogReport, *, compacted: bool = False) -> None:
    report.partitions += 1
    next_offset = -1
    for seg in sorted(directory.glob("*.log")):
        report.segments += 1
        data = seg.read_bytes()
        try:
            for header in rec.iter_batches(data):
                report.batches += 1
                where = f"{seg} batch at byte {header.position} (offset {header.base_offset})"
                if not rec.crc_ok(data, header):
                    report.problems.append(f"{where}: CRC mismatch")
                    continue
                counts_fit = (
                    0 < header.record_count <= header.last_offset_delta + 1
                    if compacted
                    else header.record_count > 0
                    and header.last_offset_delta == header.record_count - 1
                )
                if not counts_fit:
                    report.problems.append(
                        f"{where}: recordCount {header.record_count}, lastOffsetDelta "
                        f"{header.last_offset_delta}"
                    )
                if header.compression > 4:
                    report.problems.append(f"{where}: unknown codec {header.compression}")
                    continue
                if header.base_offset < next_offset:
                    report.problems.append(f"{where}: offset goes back from {next_offset}")
                next_offset = header.next_offset
                try:
                    decoded = rec.decode_records(data, header, DECOMPRESS_LIMIT)
                except KafkaError as exc:  # corrupt records, failed decompression
                    report.problems.append(f"{where}: records do not decode: {exc}")
                    continue
                if len(decoded) != header.record_count:
                    report.problems.append(
                        f"{where}: {len(decoded)} records, header says {header.record_count}"
                    )
                deltas = [r.offset - header.base_offset for r in decoded]
                if deltas != sorted(set(deltas)) or (
                    deltas and (deltas[0] < 0 or deltas[-1] > header.last_offset_delta)
                ):
                    report.problems.append(f"{where}: record offset deltas {deltas[:8]}...")
                report.records += len(decoded)
        except rec.CorruptRecordError as exc:
            report.problems.append(f"{seg}: {exc}")
        except rec.UnsupportedMagicError as exc:
            report.problems.append(f"{seg}: {exc}")


def check_log_dirs(log_dirs: list[Path], compacted: frozenset[str] = frozenset()) -> LogReport:
    """Check every partition directory (``<topic>-<n>``) under ``log_dirs``; the topics in
    ``compacted`` (and Kafka's internal ones) may hold batches the cleaner rewrote."""
    report = LogReport()
    internal = {"__consumer_offsets", "__transaction_state"}
    for root in log_dirs:
        for directory in sorted(p for p in root.iterdir() if p.is_dir()):
            if any(directory.glob("*.log")):
                topic = directory.name.rsplit("-", 1)[0]
                check_partition(directory, report, compacted=topic in compacted | internal)
    return report
