"""After a fuzz run: every batch on disk must be one a correct broker could have written.

For each partition directory under the broker's log dirs, every ``.log`` segment is read
and walked batch by batch (no partial tail tolerated): magic 2, a batch length that fits,
a matching CRC-32C, ``recordCount > 0`` and ``lastOffsetDelta == recordCount - 1``, known
codec bits, base offsets increasing across batches and segments, and records that decode
(bounded decompression) to exactly ``recordCount`` records with nothing left over.

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


def check_partition(directory: Path, report: LogReport) -> None:
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
                if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
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
                report.records += len(decoded)
        except rec.CorruptRecordError as exc:
            report.problems.append(f"{seg}: {exc}")
        except rec.UnsupportedMagicError as exc:
            report.problems.append(f"{seg}: {exc}")


def check_log_dirs(log_dirs: list[Path]) -> LogReport:
    """Check every partition directory (``<topic>-<n>``) under ``log_dirs``."""
    report = LogReport()
    for root in log_dirs:
        for directory in sorted(p for p in root.iterdir() if p.is_dir()):
            if any(directory.glob("*.log")):
                check_partition(directory, report)
    return report
