"""Delayed operations (broker/replication/purgatory.py), driven by a manual clock: nothing
here sleeps for a deadline."""

from __future__ import annotations

import asyncio

import pytest

from broker.clock import ManualClock
from broker.replication.purgatory import Purgatory

pytestmark = pytest.mark.unit


async def _spin() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_wakes_on_notify_and_rechecks_condition() -> None:
    async def run() -> tuple[bool, int, int]:
        p = Purgatory(ManualClock())
        state = {"n": 0}
        waiter = asyncio.create_task(p.wait_until(["tp"], lambda: state["n"] >= 3, 10))
        for _ in range(3):
            await _spin()
            state["n"] += 1
            p.notify("tp")
        ok = await waiter
        return ok, p.watched_keys, p.waiting

    assert asyncio.run(run()) == (True, 0, 0)


def test_times_out_when_the_clock_passes_the_deadline() -> None:
    async def run() -> tuple[bool, bool, int]:
        clock = ManualClock()
        p = Purgatory(clock)
        waiter = asyncio.create_task(p.wait_until(["a", "b"], lambda: False, 30))
        await _spin()
        clock.advance(29_999)
        assert p.expire() == 0
        await _spin()
        still_waiting = not waiter.done()
        clock.advance(1)
        assert p.expire() == 1
        ok = await waiter
        return ok, still_waiting, p.watched_keys

    assert asyncio.run(run()) == (False, True, 0)


def test_notification_on_other_key_does_not_complete() -> None:
    async def run() -> bool:
        clock = ManualClock()
        p = Purgatory(clock)
        waiter = asyncio.create_task(p.wait_until(["tp"], lambda: False, 5))
        await _spin()
        p.notify("other")
        await _spin()
        assert not waiter.done()
        clock.advance(5000)
        p.expire()
        return await waiter

    assert asyncio.run(run()) is False


def test_already_true_returns_immediately() -> None:
    assert asyncio.run(Purgatory(ManualClock()).wait_until(["x"], lambda: True, 0)) is True


def test_the_real_clock_times_out_by_itself() -> None:
    async def run() -> bool:
        return await Purgatory().wait_until(["x"], lambda: False, 0.01)

    assert asyncio.run(run()) is False


@pytest.mark.parametrize("notified", [False, True])
def test_no_recheck_at_the_deadline_unless_notified(notified: bool) -> None:
    """``recheck_at_deadline=False``: a deadline with no notification since the last check
    returns without calling the condition again; after a notification it is checked."""

    async def run() -> tuple[bool, int]:
        clock = ManualClock()
        p = Purgatory(clock)
        checks = [0]

        def condition() -> bool:
            checks[0] += 1
            return False

        waiter = asyncio.create_task(p.wait_until(["tp"], condition, 5, recheck_at_deadline=False))
        await _spin()
        if notified:
            p.notify("tp")
            await _spin()
        clock.advance(5_000)
        p.expire()
        return await waiter, checks[0]

    assert asyncio.run(run()) == (False, 2 if notified else 1)


def test_wait_for_changes_reports_the_notified_keys() -> None:
    """A waiter sees which of its keys changed since it last looked, including a key notified
    after its wake-up but before it ran, and never a key it does not watch."""

    async def run() -> tuple[list[set[str]], bool, int]:
        p = Purgatory(ManualClock())
        seen: list[set[str]] = []

        def changed(keys: set[object]) -> bool:
            seen.append({str(k) for k in keys})
            return len(seen) == 2

        waiter = asyncio.create_task(p.wait_for_changes(["a", "b", "c"], changed, 10))
        await _spin()
        p.notify("a")
        p.notify("c")  # before the woken waiter ran
        p.notify("other")
        await _spin()
        p.notify("b")
        ok = await waiter
        return seen, ok, p.watched_keys

    assert asyncio.run(run()) == ([{"a", "c"}, {"b"}], True, 0)


def test_wait_for_changes_returns_false_at_the_deadline_without_checking() -> None:
    async def run() -> tuple[bool, int]:
        clock = ManualClock()
        p = Purgatory(clock)
        calls = 0

        def changed(_keys: set[object]) -> bool:
            nonlocal calls
            calls += 1
            return True

        waiter = asyncio.create_task(p.wait_for_changes(["a"], changed, 5))
        await _spin()
        clock.advance(5_000)
        p.expire()
        return await waiter, calls

    assert asyncio.run(run()) == (False, 0)
