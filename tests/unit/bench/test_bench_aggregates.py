"""The Spark aggregates benchmark's pure parts (bench/aggregates.py): its options, the data it
produces, the order of the formats, the rows a query read, medians and ratios and the
report's table: a swapped column or an inverted ratio would publish a wrong comparison."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path

import pytest

from bench import aggregates
from bench.aggregates import Events, Results, Updates

pytestmark = pytest.mark.unit


# --------------------------------------------------------------------- options


def test_full_defaults_are_the_documented_sizes() -> None:
    args = aggregates.parse_args([])
    assert (args.records, args.keys, args.max_offsets) == (2_000_000, 10_000, 500_000)
    assert (args.table_updates, args.table_keys, args.segment_mb) == (1_000_000, 10_000, 16)
    assert (args.runs, args.partitions, args.kafka) == (3, 2, True)
    assert args.parts == ["agg", "table", "delta"]
    assert args.out == str(aggregates.ROOT / "BENCHMARKS.md")


def test_quick_is_small_and_writes_under_tmp() -> None:
    args = aggregates.parse_args(["--quick"])
    assert args.records == 100_000 and args.table_updates == 100_000 and args.runs == 1
    assert args.max_offsets < args.records  # several micro-batches
    assert args.out == str(aggregates.QUICK_OUT)
    assert "BENCHMARKS.md" not in args.out


def test_explicit_options_win_over_quick() -> None:
    args = aggregates.parse_args(["--quick", "--records", "7", "--runs", "3", "--out", "x.md"])
    assert (args.records, args.runs, args.out) == (7, 3, "x.md")


def test_parts_keep_the_documented_order() -> None:
    args = aggregates.parse_args(["--parts", "delta", "agg", "--no-kafka"])
    assert args.parts == ["agg", "delta"] and args.kafka is False


@pytest.mark.parametrize(
    "argv",
    [
        ["--records", "0"],
        ["--runs", "-1"],
        ["--partitions", "0"],
        ["--segment-mb", "1"],
        ["--warm-up", "50000"],
    ],
)
def test_bad_sizes_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        aggregates.parse_args(argv)


def test_command_reproduces_the_run() -> None:
    assert aggregates.command(aggregates.parse_args(["--quick"])) == (
        "python -m bench.aggregates --quick"
    )
    full = aggregates.command(aggregates.parse_args(["--runs", "5", "--no-kafka"]))
    assert full == (
        "python -m bench.aggregates --records 2000000 --keys 10000 --max-offsets 500000 "
        "--table-updates 1000000 --table-keys 10000 --runs 5 --no-kafka"
    )
    assert aggregates.command(aggregates.parse_args(["--quick", "--parts", "table"])).endswith(
        "--quick --parts table"
    )


# --------------------------------------------------------------------- data


def test_events_are_reproducible_json_with_known_totals() -> None:
    events = Events.make(1000, 50, seed=7)
    assert events == Events.make(1000, 50, seed=7)
    assert events != Events.make(1000, 50, seed=8)
    records = list(events.records())
    assert len(records) == len(events) == 1000
    decoded = [json.loads(v) for _k, v in records]
    assert all(k == d["key"].encode() for (k, _v), d in zip(records, decoded, strict=True))
    assert sum(d["amount"] for d in decoded) == events.total
    assert len({d["key"] for d in decoded}) == events.distinct_keys <= 50
    assert all(1 <= d["amount"] < 100 for d in decoded)


def test_updates_have_100_byte_values_and_count_live_keys() -> None:
    updates = Updates.make(500, 40, seed=3)
    records = list(updates.records())
    assert len(records) == 500
    assert {len(v) for _k, v in records} == {aggregates.VALUE_BYTES}
    assert len({k for k, _v in records}) == updates.live_keys <= 40
    latest = {k: v for k, v in records}  # what a table read must see
    assert len(latest) == updates.live_keys
    assert records[-1][1].startswith(b"000000000499")


def test_formats_alternate_which_goes_first() -> None:
    assert aggregates.format_order(0) == ("millrace", "kafka")
    assert aggregates.format_order(1) == ("kafka", "millrace")
    assert aggregates.format_order(2) == ("millrace", "kafka")


def test_input_rows_add_up_the_progress_reports() -> None:
    progresses = [{"numInputRows": 25_000}, {"numInputRows": "25000"}, {"batchId": 2}]
    assert aggregates.input_rows(progresses) == 50_000
    assert aggregates.input_rows([]) == 0


def test_phase_seconds_sum_the_micro_batches_largest_first() -> None:
    progresses = [
        {"durationMs": {"addBatch": 1500, "latestOffset": 20, "triggerExecution": 2600}},
        {"durationMs": {"addBatch": 500, "latestOffset": 30, "getBatch": 1}},
        {"numInputRows": 0},
    ]
    phases = aggregates.phase_seconds(progresses)
    assert list(phases) == ["triggerExecution", "addBatch", "latestOffset", "getBatch"]
    assert phases["addBatch"] == pytest.approx(2.0)
    assert phases["latestOffset"] == pytest.approx(0.05)
    assert aggregates.describe_phases(phases, top=2) == "addBatch 2.00s, latestOffset 0.05s"
    assert aggregates.describe_phases({}) == ""


def test_startup_is_the_time_to_the_first_trigger() -> None:
    started = datetime.datetime(2026, 11, 25, 8, 38, 10, tzinfo=datetime.UTC).timestamp()
    progresses = [{"timestamp": "2026-11-25T08:38:11.250Z"}, {"timestamp": "2026-11-25T08:38:12Z"}]
    assert aggregates.startup_seconds(started, progresses) == pytest.approx(1.25)
    assert math.isnan(aggregates.startup_seconds(started, []))


# --------------------------------------------------------------------- results


def test_medians_and_ratio() -> None:
    r = Results()
    for v in (100.0, 300.0, 200.0):
        r.add("agg", "Millrace", "millrace", v)
    for v in (50.0, 100.0, 400.0):
        r.add("agg", "Millrace", "kafka", v)
    assert r.median("agg", "Millrace", "millrace") == 200.0
    assert r.median("agg", "Millrace", "kafka") == 100.0
    assert aggregates.ratio(200.0, 100.0) == 2.0  # millrace / kafka
    assert r.runs("agg", "Millrace", "millrace") == [100.0, 300.0, 200.0]
    assert math.isnan(r.median("agg", "Kafka", "millrace"))


def test_ratio_is_nan_when_a_side_is_missing() -> None:
    assert math.isnan(aggregates.ratio(math.nan, 1.0))
    assert math.isnan(aggregates.ratio(1.0, math.nan))
    assert math.isnan(aggregates.ratio(1.0, 0.0))


def test_systems_list_millrace_first() -> None:
    r = Results()
    r.add("agg", "Kafka", "kafka", 1.0)
    r.add("agg", "Millrace", "kafka", 1.0)
    assert r.systems() == ["Millrace", "Kafka"]


def _row(text: str, label: str, broker: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0].startswith(label) and cells[1] == broker:
            return cells
    raise AssertionError(f"no row {label!r} / {broker!r} in:\n{text}")


def test_table_puts_each_format_in_its_column() -> None:
    r = Results()
    for m, k in ((120_000.0, 100_000.0), (130_000.0, 90_000.0), (110_000.0, 95_000.0)):
        r.add("agg", "Millrace", "millrace", m)
        r.add("agg", "Millrace", "kafka", k)
    r.add("table-before", "Millrace", "millrace", 1.5)
    r.add("table-before", "Millrace", "kafka", 3.0)
    r.add("agg", "Kafka", "millrace", 80_000.0)
    r.add("agg", "Kafka", "kafka", 160_000.0)
    text = aggregates.table(r)
    agg = _row(text, "1. aggregation job", "Millrace")
    assert agg[2:8] == [
        'format("millrace")',
        'format("kafka")',
        "120,000",
        "95,000",
        "**1.26**",
        "120,000, 130,000, 110,000; 100,000, 90,000, 95,000",
    ]
    assert _row(text, "1. aggregation job", "Apache Kafka 3.9.1")[4:7] == [
        "80,000",
        "160,000",
        "**0.50**",
    ]
    table = _row(text, "2. table read, before cleaning (seconds)", "Millrace")
    assert table[2:7] == [
        'format("millrace") readAs=table',
        'format("kafka") + groupBy',
        "1.50",
        "3.00",
        "**0.50**",
    ]
    # measures nobody ran have no line
    assert "after cleaning" not in text and "Delta" not in text


def test_a_missing_side_shows_na_and_no_ratio() -> None:
    r = Results()
    r.add("delta", "Millrace", "millrace", 1000.0)
    cells = _row(aggregates.table(r), "3. topic to Delta", "Millrace")
    assert cells[4:7] == ["1,000", "n/a", ""]


def test_report_section_is_written_and_replaced(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    out.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    args = aggregates.parse_args(["--quick", "--out", str(out)])
    r = Results()
    r.add("agg", "Millrace", "millrace", 2.0)
    r.add("agg", "Millrace", "kafka", 1.0)
    aggregates.write_report(out, args, r, ["a note"], 60.0)
    aggregates.write_report(out, args, r, ["a note"], 60.0)
    text = out.read_text()
    assert text.count(aggregates.HEADING) == 1
    assert "## Other\n\nkept" in text
    assert "Quick run" in text and "- a note" in text
    assert "`.venv/bin/python -m bench.aggregates --quick`" in text
    assert "`make bench` runs `python -m bench.aggregates --records 2000000 " in text
    assert "**2.00**" in text


def test_make_bench_runs_the_full_sizes() -> None:
    makefile = (aggregates.ROOT / "Makefile").read_text()
    full = aggregates.command(aggregates.parse_args([]))
    assert f"$(PY) -m {full.removeprefix('python -m ')}\n" in makefile
