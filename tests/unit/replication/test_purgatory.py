"""Delayed operations (broker/replication/purgatory.py)."""

from __future__ import annotations

import asyncio

import pytest

from broker.replication.purgatory import Purgatory

pytestmark = pytest.mark.unit


def test_wakes_on_notify_and_rechecks_condition() -> None:
    async def run() -> tuple[bool, int]:
        p = Purgatory()
        state = {"n": 0}

        async def producer() -> None:
            for _ in range(3):
                await asyncio.sleep(0.01)
                state["n"] += 1
                p.notify("tp")

        task = asyncio.create_task(producer())
        ok = await p.wait_until(["tp"], lambda: state["n"] >= 3, 10)
        await task
        return ok, p.watched_keys

    assert asyncio.run(run()) == (True, 0)


def test_times_out_with_false_and_leaves_no_watchers() -> None:
    async def run() -> tuple[bool, int]:
        p = Purgatory()
        ok = await p.wait_until(["a", "b"], lambda: False, 0.05)
        return ok, p.watched_keys

    assert asyncio.run(run()) == (False, 0)


def test_notification_on_other_key_does_not_complete() -> None:
    async def run() -> bool:
        p = Purgatory()
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, p.notify, "other")
        return await p.wait_until(["tp"], lambda: False, 0.05)

    assert asyncio.run(run()) is False


def test_already_true_returns_immediately() -> None:
    assert asyncio.run(Purgatory().wait_until(["x"], lambda: True, 0)) is True
