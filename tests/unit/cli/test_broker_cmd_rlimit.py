"""The broker raises its soft open-file limit to the hard limit at start
(broker/cli/broker_cmd.py), as the JVM does for Kafka."""

from __future__ import annotations

import argparse
import resource
from pathlib import Path

import pytest

from broker.cli import broker_cmd

pytestmark = pytest.mark.unit

INF = resource.RLIM_INFINITY


@pytest.mark.parametrize(
    ("soft", "hard", "target"),
    [
        (1024, 20_000, 20_000),  # raised to the hard limit
        (20_000, 20_000, None),  # already there
        (1024, INF, None),  # no finite limit to raise to: left as is
        (INF, INF, None),
    ],
)
def test_nofile_soft_target(soft: int, hard: int, target: int | None) -> None:
    assert broker_cmd.nofile_soft_target(soft, hard) == target


def test_raise_nofile_limit_sets_soft_to_hard(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, tuple[int, int]]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", lambda which, lim: calls.append((which, lim)))
    broker_cmd.raise_nofile_limit()
    assert calls == [(resource.RLIMIT_NOFILE, (4096, 4096))]


def test_raise_nofile_limit_never_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(_which: int, _lim: tuple[int, int]) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(resource, "getrlimit", lambda _which: (1024, 4096))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    broker_cmd.raise_nofile_limit()  # logs and carries on


def test_raise_nofile_limit_on_this_process_keeps_a_valid_limit() -> None:
    broker_cmd.raise_nofile_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard in (soft, INF)


def test_broker_start_raises_the_limit_first(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    called: list[bool] = []
    monkeypatch.setattr(broker_cmd, "raise_nofile_limit", lambda: called.append(True))
    args = argparse.Namespace(config=str(tmp_path / "missing.properties"), set=[])
    assert broker_cmd.run(args) == 2  # no config: exits before any broker starts
    assert called == [True]
