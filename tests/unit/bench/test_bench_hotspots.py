"""Summarising a py-spy raw profile (bench/hotspots.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import hotspots

pytestmark = pytest.mark.unit

ROOT = hotspots.ROOT
STDLIB = "/root/.pyenv/versions/3.11.7/lib/python3.11"
SITE = "/work/main/.venv/lib/python3.11/site-packages"

MAIN = f"<module> ({ROOT}/broker/cli/main.py:40)"
RUN = f"BaseEventLoop.run_forever ({STDLIB}/asyncio/base_events.py:607)"
READ = f"_SelectorSocketTransport._read_ready ({STDLIB}/asyncio/selector_events.py:1009)"
APPEND = f"Segment.append ({ROOT}/broker/log/segment.py:88)"
APPEND_2 = f"Segment.append ({ROOT}/broker/log/segment.py:91)"
WALK = f"walk ({ROOT}/broker/log/tree.py:10)"
WALK_2 = f"walk ({ROOT}/broker/log/tree.py:14)"
CRC = f"crc32c ({SITE}/crc32c/__init__.py:5)"

RAW = "\n".join(
    [
        f"{MAIN};{RUN};{READ};{APPEND};{CRC} 10",
        f"{MAIN};{RUN};{READ};{APPEND} 4",
        # Same function at another line: the same function.
        f"{MAIN};{RUN};{READ};{APPEND_2} 2",
        # Recursion: walk is on the stack three times, inclusive counts it once.
        f"{MAIN};{RUN};{WALK};{WALK_2};{WALK} 3",
        f"{MAIN};{RUN} 1",
        # A thread header (py-spy --threads) is not a function.
        f"thread (0x7F12AB);{MAIN};{RUN};{READ} 5",
        # No Python frame at all.
        " 2",
        "",
    ]
)


@pytest.fixture
def profile(tmp_path: Path) -> hotspots.Profile:
    raw = tmp_path / "profile.txt"
    raw.write_text(RAW)
    return hotspots.summarize(raw, top=20)


def _table(rows: tuple[hotspots.Row, ...]) -> dict[str, int]:
    return {row.label: row.samples for row in rows}


def test_total_counts_every_sample(profile: hotspots.Profile) -> None:
    assert profile.total == 10 + 4 + 2 + 3 + 1 + 5 + 2


def test_self_time_is_the_leaf(profile: hotspots.Profile) -> None:
    assert _table(profile.self_time) == {
        "crc32c/__init__.py:crc32c": 10,
        "broker/log/segment.py:Segment.append": 6,
        "<stdlib> asyncio/selector_events.py:_SelectorSocketTransport._read_ready": 5,
        "broker/log/tree.py:walk": 3,
        "<stdlib> asyncio/base_events.py:BaseEventLoop.run_forever": 1,
        hotspots.NO_FRAME: 2,
    }
    assert [row.samples for row in profile.self_time] == [10, 6, 5, 3, 2, 1]
    assert profile.self_time[0].share == pytest.approx(10 / 27)
    assert sum(row.samples for row in profile.self_time) == profile.total


def test_inclusive_counts_a_function_once_per_stack(profile: hotspots.Profile) -> None:
    inclusive = _table(profile.inclusive)
    assert inclusive == {
        "broker/cli/main.py:<module>": 25,
        "<stdlib> asyncio/base_events.py:BaseEventLoop.run_forever": 25,
        "<stdlib> asyncio/selector_events.py:_SelectorSocketTransport._read_ready": 21,
        "broker/log/segment.py:Segment.append": 16,
        "crc32c/__init__.py:crc32c": 10,
        "broker/log/tree.py:walk": 3,
    }
    # Self and inclusive differ for a caller; equal for a function that calls nothing.
    assert _table(profile.self_time)["broker/log/segment.py:Segment.append"] == 6
    assert inclusive["crc32c/__init__.py:crc32c"] == 10
    assert profile.inclusive[0].share == pytest.approx(25 / 27)


def test_by_file_groups_self_time(profile: hotspots.Profile) -> None:
    assert _table(profile.by_file) == {
        "crc32c/__init__.py": 10,
        "broker/log/segment.py": 6,
        "<stdlib> asyncio/selector_events.py": 5,
        "broker/log/tree.py": 3,
        hotspots.NO_FRAME: 2,
        "<stdlib> asyncio/base_events.py": 1,
    }


def test_top_limits_each_table(tmp_path: Path) -> None:
    raw = tmp_path / "profile.txt"
    raw.write_text(RAW)
    profile = hotspots.summarize(raw, top=2)
    assert [row.label for row in profile.self_time] == [
        "crc32c/__init__.py:crc32c",
        "broker/log/segment.py:Segment.append",
    ]
    assert len(profile.inclusive) == 2
    assert len(profile.by_file) == 2
    assert profile.total == 27


@pytest.mark.parametrize(
    ("path", "short"),
    [
        (f"{ROOT}/broker/log/segment.py", "broker/log/segment.py"),
        (f"{SITE}/kio/schema/produce/v9/request.py", "kio/schema/produce/v9/request.py"),
        ("/usr/lib/python3/dist-packages/six.py", "six.py"),
        (f"{STDLIB}/asyncio/selector_events.py", "<stdlib> asyncio/selector_events.py"),
        (f"{STDLIB}/json/__init__.py", "<stdlib> json/__init__.py"),
        ("/usr/lib/python3.13t/threading.py", "<stdlib> threading.py"),
        ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap>"),
        ("<string>", "<string>"),
        ("asyncio/events.py", "asyncio/events.py"),
        ("/nowhere/at/all/script.py", "all/script.py"),
    ],
)
def test_short_path(path: str, short: str) -> None:
    assert hotspots.short_path(path) == short


def test_frame_label_without_line_number_or_file() -> None:
    assert hotspots.frame_label("<module> (<string>:1)") == ("<string>:<module>", "<string>")
    assert hotspots.frame_label(f"f ({ROOT}/bench/x.py)") == ("bench/x.py:f", "bench/x.py")
    assert hotspots.frame_label("_find_and_load (<frozen importlib._bootstrap>:1176)") == (
        "<frozen importlib._bootstrap>:_find_and_load",
        "<frozen importlib._bootstrap>",
    )
