"""The read-ceiling benchmark's report (bench/read_ceiling.py): medians per query, the
broker's user and system CPU, and each read's ratio to its ceiling against the 0.8x target."""

from __future__ import annotations

import pytest

from bench import read_ceiling
from bench.read_ceiling import Sample

pytestmark = pytest.mark.unit


def _s(wall: float, cpu: float = 3.0, user: float = 0.0, sys_: float = 0.0) -> Sample:
    return Sample(wall=wall, cpu=cpu, broker_user=user, broker_sys=sys_)


def test_section_reports_medians_and_the_ratio_to_each_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(read_ceiling, "commit", lambda: "abc1234")
    monkeypatch.setattr(read_ceiling, "machine", lambda: "test machine")
    results = {
        "ceiling count": [_s(1.0), _s(2.0), _s(9.0)],  # median 2.0 s
        "millrace count": [_s(2.5, 4.0, 0.2, 0.4), _s(2.4, 5.0, 0.1, 0.3), _s(30.0, 6.0, 0.3, 0.5)],
        "millrace count over TCP": [_s(4.0)] * 3,
        "ceiling noop": [_s(2.0)] * 3,
        "millrace noop": [_s(4.0)] * 3,
        "millrace noop over TCP": [_s(5.0)] * 3,
    }
    text = read_ceiling.section(results, 10_000_000, 3)
    assert text.startswith(read_ceiling.HEADING)
    assert "commit abc1234, on test machine" in text
    assert "| ceiling count | 5,000,000 | 2.00 | 3.00 | 0.00 (0.00 + 0.00) |" in text
    assert "| millrace count | 4,000,000 | 2.50 | 5.00 | 0.60 (0.20 + 0.40) |" in text
    assert "| millrace count over TCP | 2,500,000 | 4.00 |" in text
    assert (
        'count: `format("millrace")` at **0.80x** its ceiling\'s rate (target 0.8x: met); '
        "over TCP 0.50x" in text
    )
    assert (
        'noop: `format("millrace")` at **0.50x** its ceiling\'s rate (target 0.8x: not met); '
        "over TCP 0.40x" in text
    )


def test_machine_and_process_cpu_read_proc() -> None:
    import os

    before = read_ceiling.machine_cpu()
    user, system = read_ceiling.process_cpu(os.getpid())
    sum(i * i for i in range(200_000))  # some CPU
    assert read_ceiling.machine_cpu() >= before
    assert read_ceiling.process_cpu(os.getpid())[0] >= user and system >= 0
