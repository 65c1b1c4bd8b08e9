"""The log cleaners' own reports of their rounds, Apache Kafka's and Millrace's, and where
each running system writes them (``bench.compaction`` reads them).

Kafka's ``kafka.log.LogCleaner`` logs, at INFO, one multi-line message per round (its own
``config/log4j.properties`` sends that logger to ``log-cleaner.log``; :data:`CLEANER_LOG4J`
does the same for ``bench.systems.KafkaSystem``)::

    [2026-11-25 07:45:55,058] INFO [kafka-log-cleaner-thread-0]:
        Log cleaner thread 0 cleaned log t-0 (dirty section = [0, 190440])
        22.9 MB of log processed in 0.5 seconds (48.6 MB/sec).
        Indexed 22.9 MB in 0.2 seconds (118.0 Mb/sec, 41.2% of total time)
        Buffer utilization: 0.1%
        Cleaned 22.9 MB in 0.3 seconds (82.6 Mb/sec, 58.8% of total time)
        Start size: 22.9 MB (190,440 messages)
        End size: 0.6 MB (5,000 messages)
        97.4% size reduction (97.4% fewer messages)
     (kafka.log.LogCleaner)

A Millrace broker logs one line per round, at INFO, in its ``broker.out`` (JSON lines)::

    {"ts": "...", "level": "INFO", "logger": "broker.log.cleaner.manager", "msg": "cleaned log
    t-0 (dirty section = [0, 190440]): 22.9 MB of log processed in 0.88 seconds (26.0 MB/sec),
    0.6 MB written, 5000 of 190440 records kept, 5000 keys mapped"}

Both count MB as 2^20 bytes, and "MB of log processed" as the bytes the round read while
rewriting its segments.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from bench.systems import LOG4J, System

# Kafka's own config/log4j.properties sends kafka.log.LogCleaner to log-cleaner.log at INFO.
CLEANER_LOG4J = (
    LOG4J
    + """log4j.appender.cleanerAppender=org.apache.log4j.FileAppender
log4j.appender.cleanerAppender.File=${kafka.logs.dir}/log-cleaner.log
log4j.appender.cleanerAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.cleanerAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.log.LogCleaner=INFO, cleanerAppender
log4j.additivity.kafka.log.LogCleaner=false
"""
)


@dataclass(frozen=True, slots=True)
class CleanerRound:
    """One finished cleaning round as the cleaner itself reports it; MB are 2^20 bytes."""

    log: str  # "<topic>-<partition>"
    first_dirty: int
    end: int  # the dirty section is [first_dirty, end)
    mb: float  # "MB of log processed"
    seconds: float
    written_mb: float | None = None
    records_read: int | None = None
    records_kept: int | None = None

    @property
    def mb_s(self) -> float:
        return self.mb / self.seconds if self.seconds > 0 else math.inf


_NUM = r"[\d,]+(?:\.\d+)?|Infinity|NaN"
_KAFKA_ROUND = re.compile(
    r"cleaned log (?P<log>\S+) \(dirty section = \[(?P<first>\d+), (?P<end>\d+)\]\)\s+"
    rf"(?P<mb>{_NUM}) MB of log processed in (?P<s>{_NUM}) seconds \((?P<rate>{_NUM}) MB/sec\)"
)
_KAFKA_START = re.compile(rf"Start size: (?P<mb>{_NUM}) MB \((?P<n>[\d,]+) messages\)")
_KAFKA_END = re.compile(rf"End size: (?P<mb>{_NUM}) MB \((?P<n>[\d,]+) messages\)")
_MILLRACE_ROUND = re.compile(
    r"cleaned log (?P<log>\S+) \(dirty section = \[(?P<first>\d+), (?P<end>\d+)\]\): "
    rf"(?P<mb>{_NUM}) MB of log processed in (?P<s>{_NUM}) seconds \((?P<rate>{_NUM}) MB/sec\)"
    rf"(?:, (?P<written>{_NUM}) MB written, (?P<kept>\d+) of (?P<read>\d+) records kept)?"
)


def _number(text: str) -> float:
    """A figure as Java's ``%,.1f`` or Python's ``%.1f`` prints it (``1,234.5``, ``Infinity``)."""
    return float(text.replace(",", ""))


def parse_kafka_rounds(text: str) -> list[CleanerRound]:
    """The rounds in Kafka's cleaner log (``kafka.log.LogCleaner``), in order. Each is one
    multi-line message::

        [...] INFO [kafka-log-cleaner-thread-0]:
            Log cleaner thread 0 cleaned log t-0 (dirty section = [0, 190440])
            22.9 MB of log processed in 0.5 seconds (48.6 MB/sec).
            ...
            Start size: 22.9 MB (190,440 messages)
            End size: 0.6 MB (5,000 messages)

    Kafka prints the seconds with one decimal and the rate from the unrounded time, so the
    seconds are taken as MB / rate where that is finite (0.471 s above, not 0.5)."""
    matches = list(_KAFKA_ROUND.finditer(text))
    rounds = []
    for i, m in enumerate(matches):
        block = text[m.end() : matches[i + 1].start() if i + 1 < len(matches) else len(text)]
        mb, seconds, rate = _number(m["mb"]), _number(m["s"]), _number(m["rate"])
        if math.isfinite(rate) and rate > 0:
            seconds = mb / rate
        start, end = _KAFKA_START.search(block), _KAFKA_END.search(block)
        rounds.append(
            CleanerRound(
                log=m["log"],
                first_dirty=int(m["first"]),
                end=int(m["end"]),
                mb=mb,
                seconds=seconds,
                written_mb=_number(end["mb"]) if end else None,
                records_read=int(_number(start["n"])) if start else None,
                records_kept=int(_number(end["n"])) if end else None,
            )
        )
    return rounds


def parse_millrace_rounds(text: str) -> list[CleanerRound]:
    """The rounds in a Millrace broker's output (JSON lines, or plain text lines), in order::

    {"ts": ..., "logger": "broker.log.cleaner.manager", "msg": "cleaned log t-0 (dirty
    section = [0, 190440]): 22.9 MB of log processed in 0.88 seconds (26.0 MB/sec),
    0.6 MB written, 5000 of 190440 records kept, 5000 keys mapped"}
    """
    rounds = []
    for line in text.splitlines():
        if "cleaned log" not in line:
            continue
        msg = line
        if line.startswith("{"):
            try:
                msg = str(json.loads(line).get("msg", ""))
            except json.JSONDecodeError:
                pass  # a line still being written: its text is all there is
        m = _MILLRACE_ROUND.search(msg)
        if m is None:
            continue
        rounds.append(
            CleanerRound(
                log=m["log"],
                first_dirty=int(m["first"]),
                end=int(m["end"]),
                mb=_number(m["mb"]),
                seconds=_number(m["s"]),
                written_mb=_number(m["written"]) if m["written"] else None,
                records_read=int(m["read"]) if m["read"] else None,
                records_kept=int(m["kept"]) if m["kept"] else None,
            )
        )
    return rounds


class CleanerLog:
    """Where a running system's cleaner reports its rounds, read from an offset onwards."""

    def __init__(self, system: System) -> None:
        home = system.homes[0]
        self.path = home / ("log-cleaner.log" if system.name == "Kafka" else "broker.out")
        self._parse: Callable[[str], list[CleanerRound]] = (
            parse_kafka_rounds if system.name == "Kafka" else parse_millrace_rounds
        )

    def mark(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def rounds(self, since: int, log_name: str) -> list[CleanerRound]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(since)
                text = fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return []
        return [r for r in self._parse(text) if r.log == log_name]
