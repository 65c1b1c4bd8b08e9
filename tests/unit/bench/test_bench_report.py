"""The side-by-side benchmark's parsers of Kafka's perf tools and its ratios and verdicts
(bench/perf_tools.py, bench/results.py, bench/report.py): a misread tool line or an inverted
ratio would publish a wrong comparison."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import perf_tools, report
from bench.procstat import Usage
from bench.results import Measurement, Run

pytestmark = pytest.mark.unit

PRODUCER_OUT = """\
499981 records sent, 99996.2 records/sec (9.54 MB/sec), 95.1 ms avg latency, 301.0 ms max latency.
1000000 records sent, 185459.940653 records/sec (17.69 MB/sec), 217.42 ms avg latency, \
508.00 ms max latency, 225 ms 50th, 297 ms 95th, 319 ms 99th, 327 ms 99.9th.
"""

CONSUMER_OUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-22 07:50:56:560, 2026-11-22 07:51:01:198, 47.6837, 10.2811, 500000, 107805.0884, \
3990, 648, 73.5860, 771604.9383
"""


def test_producer_perf_summary_is_the_final_line() -> None:
    r = perf_tools.parse_producer_perf(PRODUCER_OUT)
    assert r.records == 1_000_000
    assert r.records_s == pytest.approx(185459.940653)
    assert r.mb_s == pytest.approx(17.69)
    assert (r.avg_ms, r.max_ms) == (217.42, 508.0)
    assert (r.p50_ms, r.p95_ms, r.p99_ms, r.p999_ms) == (225, 297, 319, 327)


def test_consumer_perf_csv_by_header() -> None:
    r = perf_tools.parse_consumer_perf(CONSUMER_OUT)
    assert r.records == 500_000
    assert r.records_s == pytest.approx(107805.0884)
    assert r.rebalance_ms == 3990
    assert r.fetch_records_s == pytest.approx(771604.9383)
    assert r.mb == pytest.approx(47.6837)


def test_unparsable_tool_output_is_an_error() -> None:
    with pytest.raises(ValueError, match="ProducerPerformance"):
        perf_tools.parse_producer_perf("Exception in thread main")
    with pytest.raises(ValueError, match="ConsumerPerformance"):
        perf_tools.parse_consumer_perf("WARN no records")


def test_producer_perf_args_pass_every_property() -> None:
    args = perf_tools.producer_perf_args("h:1", "t", 10, 100, {"acks": "all"}, -1)
    assert args[args.index("--producer-props") + 1 :] == ["bootstrap.servers=h:1", "acks=all"]
    assert args[args.index("--num-records") + 1] == "10"


def _run() -> Run:
    run = Run()
    use = Usage(cpu_s=1.0, peak_rss_mib=50.0, seconds=2.0)
    for system, rates, p99s in (
        ("Kafka", (100.0, 300.0, 200.0), (10.0, 30.0, 20.0)),
        ("Millrace", (50.0, 60.0, 70.0), (5.0, 5.0, 5.0)),
    ):
        for rate, p99 in zip(rates, p99s, strict=True):
            run.add(Measurement.of("1", "tool", system, {"records/s": rate, "p99 ms": p99}, use))
    return run


def test_ratio_is_millrace_over_kafka_of_medians() -> None:
    run = _run()
    assert run.median("1", "tool", "Kafka", "records/s") == 200.0
    assert report.ratio(run, "1", "tool", "records/s") == pytest.approx(60.0 / 200.0)
    assert report.ratio(run, "1", "tool", "p99 ms") == pytest.approx(5.0 / 20.0)
    assert report.ratio(run, "1", "missing", "records/s") is None


def test_verdict_reads_rates_and_latencies_the_right_way_round() -> None:
    assert report.verdict(0.3, "records/s") == "Kafka 3.33x faster"
    assert report.verdict(2.0, "records/s") == "Millrace 2.00x faster"
    assert report.verdict(0.25, "p99 ms") == "Millrace 4.00x better"
    assert report.verdict(2.0, "seconds") == "Kafka 2.00x better"
    assert report.verdict(1.02, "records/s") == "about equal"
    assert report.verdict(None, "records/s") == "—"
    assert report.verdict(1.5, "GB on disk") == "—"


def test_results_round_trip_and_report_renders(tmp_path: Path) -> None:
    run = _run()
    run.context = {"date": "2026-11-22", "machine": "test box, Python 3.11.7", "args": {}}
    path = tmp_path / "results.json"
    run.save(path)
    again = Run.load(path)
    assert again.measurements == run.measurements
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    report.write(again, out, tmp_path)
    text = out.read_text()
    assert "## Other\n\nkept" in text
    assert "| 1 | tool | records/s | 200 | 60 | 0.30 | Kafka 3.33x faster |" in text
    assert (tmp_path / "throughput.png").stat().st_size > 0


def test_merge_replaces_only_the_rerun_workloads(tmp_path: Path) -> None:
    from bench import compare

    run = _run()
    use = Usage(cpu_s=1.0, peak_rss_mib=50.0, seconds=2.0)
    for w in ("5", "6a", "6b"):
        run.add(Measurement.of(w, "case", "Kafka", {"rows/s": 1.0}, use))
    run.context = {"date": "2026-11-22", "profile": {"samples": 1}}
    path = tmp_path / "results.json"
    run.save(path)
    args = compare.parse_args(["--only", "1", "6", "--merge", "--results", str(path)])
    merged = compare.merged(path, args)
    assert {m.workload for m in merged.measurements} == {"5"}
    assert "profile" not in merged.context
    assert merged.context["reruns"][0]["workloads"] == ["1", "6"]
    with pytest.raises(SystemExit, match="no saved run"):
        compare.merged(tmp_path / "missing.json", args)


def test_bad_command_line_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import compare

    with pytest.raises(SystemExit):
        compare.parse_args(["--only", "7"])
    assert "--only: unknown workload(s) 7" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.parse_args(["--records", "0"])
    assert "--records must be positive" in capsys.readouterr().err
