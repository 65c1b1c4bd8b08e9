"""The first-micro-batch benchmark's arithmetic (bench/first_batch.py): Spark's progress
timestamps read as epoch seconds, and the report's medians, differences and verdict."""

from __future__ import annotations

import datetime

import pytest

from bench import first_batch
from bench.first_batch import FirstBatch

pytestmark = pytest.mark.unit


def test_spark_progress_timestamps_are_utc_with_milliseconds() -> None:
    expected = datetime.datetime(2026, 11, 28, 11, 2, 3, 123000, datetime.UTC).timestamp()
    assert first_batch._spark_time("2026-11-28T11:02:03.123Z") == pytest.approx(expected)


def _fb(to_end: float, add_batch: float = 100.0) -> FirstBatch:
    return FirstBatch(to_trigger=0.1, to_end=to_end, durations={"addBatch": add_batch})


def test_section_reports_medians_difference_and_the_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(first_batch, "commit", lambda: "abc1234")
    monkeypatch.setattr(first_batch, "machine", lambda: "test machine")
    results = {
        "millrace": {"first": [_fb(2.0), _fb(9.0), _fb(2.2)], "second": [_fb(1.0)] * 3},
        "kafka": {
            "first": [_fb(1.9, 50.0), _fb(2.0, 50.0), _fb(5.0, 50.0)],
            "second": [_fb(1.1)] * 3,
        },
    }
    text = first_batch.section(results, 1000, 3)
    assert text.startswith(first_batch.HEADING)
    assert "| first query: first batch done after | 2.20 s | 2.00 s | +0.20 s |" in text
    assert "| second query: first batch done after | 1.00 s | 1.10 s | -0.10 s |" in text
    assert "| first query, batch 0 `addBatch` | 100 ms | 50 ms | +50 ms |" in text
    assert "= 2.30 s; measured 2.20 s: **met**" in text
    results["millrace"]["first"] = [_fb(2.5)] * 3
    assert "measured 2.50 s: **not met**" in first_batch.section(results, 1000, 3)


def test_section_reports_later_micro_batches_when_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(first_batch, "commit", lambda: "abc1234")
    monkeypatch.setattr(first_batch, "machine", lambda: "test machine")

    def second(*later: float) -> FirstBatch:
        fb = _fb(1.0)
        fb.later = [{"latestOffset": v, "triggerExecution": 10 * v} for v in later]
        return fb

    results = {
        "millrace": {"first": [_fb(2.0)], "second": [second(2.0, 4.0), second(3.0)]},
        "kafka": {"first": [_fb(2.0)], "second": [second(5.0), second(7.0, 9.0)]},
    }
    text = first_batch.section(results, 1000, 3)
    assert "later micro-batches* read 100 new records each" in text
    assert "| second query, later micro-batches: `latestOffset` | 3 ms | 7 ms | -4 ms |" in text
    assert "`triggerExecution` | 30 ms | 70 ms | -40 ms |" in text
    results["kafka"]["second"] = [_fb(1.0)]  # nothing timed for one format: no rows
    text = first_batch.section(results, 1000, 3)
    assert "later micro-batches" not in text


def test_section_reports_the_python_source_floor_when_measured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(first_batch, "commit", lambda: "abc1234")
    monkeypatch.setattr(first_batch, "machine", lambda: "test machine")
    results = {
        "millrace": {"first": [_fb(2.0)], "second": [_fb(1.0)]},
        "kafka": {"first": [_fb(1.5)], "second": [_fb(1.2)]},
    }
    assert "Spark's floor" not in first_batch.section(results, 1000, 3)
    results[first_batch.FLOOR] = {"first": [_fb(1.4), _fb(1.6), _fb(9.0)], "second": [_fb(0.6)]}
    text = first_batch.section(results, 1000, 3)
    assert "ends its first query's micro-batch 0 after 1.60 s (trigger began after 0.10 s)" in text
    assert "its second query's after 0.60 s." in text
