"""Polling until a condition holds, with a deadline and a message naming what never
happened: :func:`wait_for` from a test's thread, :func:`wait_for_async` on an event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout_s: float = 60.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; return that. Exceptions raised by
    the predicate count as "not yet" (a broker may be restarting). On timeout raise
    AssertionError naming ``what`` with the last value or exception seen."""
    deadline = time.monotonic() + timeout_s
    last: object = "never evaluated"
    while True:
        try:
            value = predicate()
        except Exception as exc:  # noqa: BLE001 - keep polling, report at the end
            value = None
            last = f"raised {exc!r}"
        else:
            if value:
                return value
            last = f"returned {value!r}"
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s:g}s (last: {last})")
        time.sleep(0.2)


async def wait_for_async(
    predicate: Callable[[], Any], timeout_s: float = 30.0, what: str = "condition"
) -> Any:
    """:func:`wait_for` for a test running on an event loop: poll ``predicate`` (a plain
    function of the loop's state) every 5 ms, yielding to the loop in between, until it
    returns something truthy; return that. On timeout raise AssertionError naming ``what``
    with the last value seen (exceptions propagate: the predicate runs on the loop)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not reached within {timeout_s:g}s (last: {value!r})")
        await asyncio.sleep(0.005)
