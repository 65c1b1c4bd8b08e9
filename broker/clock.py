"""Injected time, so tests advance time instead of sleeping.

Concurrency: both clocks are safe to read from any thread; ``ManualClock.advance`` is meant
to be called from the test that owns it.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall-clock milliseconds and monotonic seconds."""

    def time_ms(self) -> int:
        """Milliseconds since the epoch (record timestamps, retention)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin that never goes backwards (timeouts)."""
        ...


class SystemClock:
    """The real clock."""

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, time_ms: int = 1_700_000_000_000) -> None:
        self._ms = time_ms
        self._mono = 0.0

    def time_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, ms: int) -> None:
        self._ms += ms
        self._mono += ms / 1000.0


SYSTEM_CLOCK = SystemClock()
