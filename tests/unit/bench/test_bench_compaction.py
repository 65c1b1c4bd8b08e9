"""The compaction benchmark's parsers of the two cleaners' stats (bench/cleaner_stats.py) and
its pure arithmetic (bench/compaction.py, bench/client_load.py): a misread stats line or a
window off by a round would publish a wrong comparison."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from bench import compaction
from bench.cleaner_stats import CleanerRound, parse_kafka_rounds, parse_millrace_rounds
from bench.client_load import LatencyHistogram, count_at, produce_windows, rate_between
from bench.loadgen import percentile

pytestmark = pytest.mark.unit

# What Kafka 3.9.1's log-cleaner.log holds (kafka.log.LogCleaner at INFO), trimmed.
KAFKA_LOG = """\
[2026-11-25 07:45:49,346] INFO Starting the log cleaner (kafka.log.LogCleaner)
[2026-11-25 07:45:54,585] INFO Cleaner 0: Beginning cleaning of log cmp-0 (kafka.log.LogCleaner)
[2026-11-25 07:45:54,630] INFO Cleaner 0: Building offset map for log cmp-0 for 6 segments \
in offset range [0, 190440). (kafka.log.LogCleaner)
[2026-11-25 07:45:54,884] INFO Cleaner 0: Growing cleaner I/O buffers from 262144 bytes to \
524288 bytes. (kafka.log.LogCleaner)
[2026-11-25 07:45:55,058] INFO [kafka-log-cleaner-thread-0]: \n\
\tLog cleaner thread 0 cleaned log cmp-0 (dirty section = [0, 190440])
\t22.9 MB of log processed in 0.5 seconds (48.6 MB/sec).
\tIndexed 22.9 MB in 0.2 seconds (118.0 Mb/sec, 41.2% of total time)
\tBuffer utilization: 0.1%
\tCleaned 22.9 MB in 0.3 seconds (82.6 Mb/sec, 58.8% of total time)
\tStart size: 22.9 MB (190,440 messages)
\tEnd size: 0.6 MB (5,000 messages)
\t97.4% size reduction (97.4% fewer messages)
 (kafka.log.LogCleaner)
[2026-11-25 07:47:01,001] INFO Cleaner 0: Beginning cleaning of log other-3 (kafka.log.LogCleaner)
[2026-11-25 07:47:13,412] INFO [kafka-log-cleaner-thread-0]: \n\
\tLog cleaner thread 0 cleaned log other-3 (dirty section = [190440, 4520000])
\t1,234.5 MB of log processed in 12.4 seconds (99.5 MB/sec).
\tIndexed 1,234.5 MB in 4.0 seconds (308.6 Mb/sec, 32.3% of total time)
\tBuffer utilization: 12.0%
\tCleaned 1,234.5 MB in 8.4 seconds (147.0 Mb/sec, 67.7% of total time)
\tStart size: 1,234.5 MB (10,643,000 messages)
\tEnd size: 12.1 MB (100,000 messages)
\t99.0% size reduction (99.1% fewer messages)
 (kafka.log.LogCleaner)
[2026-11-25 07:48:18,435] INFO Shutting down the log cleaner. (kafka.log.LogCleaner)
"""


def _json_line(logger: str, msg: str) -> str:
    return json.dumps(
        {"ts": "2026-11-25T07:46:09.216", "level": "INFO", "logger": logger, "msg": msg}
    )


MILLRACE_ROUND = (
    "cleaned log cmp-0 (dirty section = [0, 190440]): 22.9 MB of log processed in 0.88 "
    "seconds (26.0 MB/sec), 0.6 MB written, 5000 of 190440 records kept, 5000 keys mapped"
)
MILLRACE_OUT = "\n".join(
    [
        _json_line("broker.server", "broker 1 started (cluster fqF9S9okQSOgFmk8EQRVsw)"),
        _json_line(
            "broker.log.local_log",
            "cmp-0: cleaned segment 0 replaces segments [0] (3999228 -> 0 bytes)",
        ),
        _json_line("broker.log.cleaner.manager", MILLRACE_ROUND),
        # A round of another log, written by a plain-text logging configuration.
        "INFO broker.log.cleaner.manager cleaned log t-2 (dirty section = [10, 20]): 0.0 MB "
        "of log processed in 0.01 seconds (0.5 MB/sec), 0.0 MB written, 3 of 10 records "
        "kept, 3 keys mapped",
        "",
    ]
)


def test_kafka_rounds_are_parsed_from_the_multiline_messages() -> None:
    first, second = parse_kafka_rounds(KAFKA_LOG)
    assert first.log == "cmp-0"
    assert (first.first_dirty, first.end) == (0, 190440)
    assert first.mb == 22.9
    assert first.written_mb == 0.6
    assert (first.records_read, first.records_kept) == (190_440, 5_000)
    # "0.5 seconds" has one decimal; the rate was computed from the exact time.
    assert first.seconds == pytest.approx(22.9 / 48.6)
    assert first.mb_s == pytest.approx(48.6)
    # Thousands separators (Java's %,.1f).
    assert second.log == "other-3"
    assert (second.first_dirty, second.end) == (190440, 4_520_000)
    assert second.mb == 1234.5
    assert second.seconds == pytest.approx(1234.5 / 99.5)
    assert (second.records_read, second.records_kept) == (10_643_000, 100_000)
    assert second.written_mb == 12.1


def test_kafka_round_still_being_written_is_not_a_round() -> None:
    partial = KAFKA_LOG.split("\t22.9 MB of log processed", maxsplit=1)[0]
    assert parse_kafka_rounds(partial) == []
    # The header and the processed line alone make a round (the rest is optional detail).
    head = KAFKA_LOG.split("\tIndexed 22.9 MB", maxsplit=1)[0]
    (only,) = parse_kafka_rounds(head)
    assert only.mb == 22.9
    assert only.written_mb is None
    assert only.records_kept is None


def test_kafka_round_with_zero_elapsed_time_keeps_the_printed_seconds() -> None:
    text = (
        "\tLog cleaner thread 0 cleaned log t-0 (dirty section = [0, 5])\n"
        "\t0.0 MB of log processed in 0.0 seconds (Infinity MB/sec).\n"
    )
    (only,) = parse_kafka_rounds(text)
    assert only.seconds == 0.0
    assert math.isinf(only.mb_s)


def test_millrace_rounds_from_json_and_plain_lines() -> None:
    first, second = parse_millrace_rounds(MILLRACE_OUT)
    assert first == CleanerRound(
        log="cmp-0",
        first_dirty=0,
        end=190440,
        mb=22.9,
        seconds=0.88,
        written_mb=0.6,
        records_read=190440,
        records_kept=5000,
    )
    assert first.mb_s == pytest.approx(22.9 / 0.88)
    assert (second.log, second.first_dirty, second.end, second.records_kept) == ("t-2", 10, 20, 3)


def test_millrace_line_cut_short_is_read_as_text_or_skipped() -> None:
    line = _json_line("broker.log.cleaner.manager", MILLRACE_ROUND)
    cut = line[: line.index(", 0.6 MB written")]
    (only,) = parse_millrace_rounds(cut)  # the round's figures are all there
    assert (only.mb, only.seconds, only.written_mb) == (22.9, 0.88, None)
    assert parse_millrace_rounds(line[: line.index(" MB of log processed")]) == []
    # Segment swaps mention "cleaned" but are not rounds.
    assert parse_millrace_rounds(MILLRACE_OUT.splitlines()[1]) == []


def test_shrink_seconds_is_the_first_time_near_the_final_size() -> None:
    # Kafka-like: swapped in segment by segment.
    trace = [(0.0, 1000), (0.1, 1000), (0.2, 700), (0.3, 300), (0.4, 120), (0.5, 100)]
    assert compaction.shrink_seconds(trace) == 0.4  # 120 <= 100 + 5% of 900
    assert compaction.shrink_seconds(trace, tolerance=0.0) == 0.5
    # Millrace-like: all at once.
    assert compaction.shrink_seconds([(0.0, 1000), (0.9, 1000), (1.0, 50)]) == 1.0
    assert compaction.shrink_seconds([(0.0, 1000), (1.0, 1000)]) is None
    assert compaction.shrink_seconds([]) is None


def test_produce_windows_count_acks_and_latencies_by_window() -> None:
    # 8 records, a mark every 2 sends: sent at 0, 0, 1, 1, 2, 2, 3, 3.
    marks = [0.0, 1.0, 2.0, 3.0]
    latencies = [0.5, 0.5, 0.5, 1.5, math.nan, 0.1, 0.2, 0.3]
    # acknowledged at 0.5, 0.5, 1.5, 2.5, (never), 2.1, 3.2, 3.3
    early, late = produce_windows(marks, latencies, [(0.0, 2.0), (2.0, 4.0)], mark_every=2)
    assert early.records_s == pytest.approx(3 / 2.0)
    assert late.records_s == pytest.approx(4 / 2.0)
    # latencies of the records *sent* in each window (nearest rank)
    assert early.p50_ms == pytest.approx(500.0)
    assert early.p99_ms == pytest.approx(1500.0)
    assert late.p50_ms == pytest.approx(200.0)
    assert late.p99_ms == pytest.approx(300.0)
    (none,) = produce_windows([], [], [(0.0, 1.0)])
    assert none.records_s == 0.0


def test_rate_between_interpolates_the_count_trace() -> None:
    times = [10.0, 11.0, 13.0]
    counts = [0, 100, 500]
    assert count_at(times, counts, 9.0) == 0.0
    assert count_at(times, counts, 10.5) == 50.0
    assert count_at(times, counts, 12.0) == 300.0
    assert count_at(times, counts, 20.0) == 500.0
    assert rate_between(times, counts, 10.5, 12.0) == pytest.approx(250.0 / 1.5)


def test_updates_are_the_same_for_the_same_seed() -> None:
    a = compaction.Updates.make(0.01, 50, seed=7)
    b = compaction.Updates.make(0.01, 50, seed=7)
    assert a == b
    assert len(a.order) == int(0.01 * compaction.MB) // 116
    assert {len(k) for k in a.keys} == {compaction.KEY_BYTES}
    assert set(a.order) <= set(a.keys)
    assert compaction.Updates.make(0.01, 50, seed=8).order != a.order


def test_quick_and_full_sizes() -> None:
    quick = compaction.parse_args(["--quick"])
    assert (quick.mb, quick.keys, quick.runs) == (50.0, 10_000, 1)
    assert quick.out == str(compaction.QUICK_OUT)
    full = compaction.parse_args([])
    assert (full.mb, full.keys, full.runs, full.segment_mb) == (500.0, 100_000, 3, 16)
    assert full.out.endswith("BENCHMARKS.md")
    with pytest.raises(SystemExit):
        compaction.parse_args(["--mb", "10", "--segment-mb", "16"])


def _sample(scale: float) -> dict[str, float]:
    return {
        "clean MB": 48.0,
        "clean s": 1.0 * scale,
        "clean MB/s": 48.0 / scale,
        "written MB": 1.2,
        "records read": 400_000.0,
        "records kept": 100.0,
        "trigger to shrunk s": 1.2 * scale,
        "trigger to stats s": 1.3 * scale,
        "cpu s/MB": 0.01 * scale,
        "p clean MB/s": 40.0 / scale,
        "produce idle rec/s": 300_000.0,
        "produce busy rec/s": 300_000.0 / scale,
        "produce busy/idle": 1 / scale,
        "produce idle p50 ms": 10.0,
        "produce busy p50 ms": 10.0 * scale,
        "produce idle p99 ms": 20.0,
        "produce busy p99 ms": 20.0 * scale,
    }


def test_report_section_has_ratios_and_the_command(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    args = compaction.parse_args(["--mb", "48", "--keys", "100", "--runs", "2", "--out", str(out)])
    samples = {"Kafka": [_sample(1.0), _sample(1.0)], "Millrace": [_sample(2.0), _sample(4.0)]}
    compaction.write_report(out, args, samples)
    text = out.read_text()
    assert "## Other\n\nkept" in text
    assert text.count(compaction.HEADING) == 1
    assert "| cleaner alone: MB/s (own stats) | 48.0 | 18.0 | **0.38** |" in text
    assert "| produce during / idle | 1.00 | 0.38 | **0.38** |" in text
    assert "| MB processed / written per round (own stats) | 48.0 / 1.2 | 48.0 / 1.2 | |" in text
    assert "| records read / kept per round (own stats) | 400,000 / 100 | 400,000 / 100 | |" in text
    assert "fetch" not in text.split("| measure |")[1]  # no fetch figures, no fetch rows
    assert "python -m bench.compaction --mb 48 --keys 100 --runs 2" in text
    assert "Quick run" not in text


def test_report_of_a_quick_run_says_so(tmp_path: Path) -> None:
    out = tmp_path / "quick.md"
    args = argparse.Namespace(**{**vars(compaction.parse_args(["--quick"])), "out": str(out)})
    compaction.write_report(out, args, {"Kafka": [_sample(1.0)], "Millrace": [_sample(1.0)]})
    assert "Quick run" in out.read_text()


def test_latency_histogram_percentiles_match_the_nearest_rank() -> None:
    values = [0.001 * i for i in range(1, 1001)] + [2.5, 0.00001]
    hist = LatencyHistogram()
    for v in values:
        hist.add(v)
    ordered = sorted(values)
    for q in (0, 50, 99, 99.9, 100):
        assert hist.percentile(q) == pytest.approx(percentile(ordered, q), abs=1e-5)
    assert math.isnan(LatencyHistogram().percentile(50))


def test_cleaning_sums_its_rounds() -> None:
    rounds = [
        CleanerRound("t-0", 0, 10, mb=10.0, seconds=1.0, written_mb=1.0, records_read=100),
        CleanerRound("t-0", 10, 20, mb=5.0, seconds=0.5, written_mb=0.5, records_read=50),
    ]
    c = compaction.Cleaning(rounds, 0.0, 2.0, 1.9, 0.7, 1000, 100)
    assert (c.mb, c.seconds, c.written_mb) == (15.0, 1.5, 1.5)
    read, kept = c.records
    assert read == 150.0
    assert math.isnan(kept)  # a round that did not say
