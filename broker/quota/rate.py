"""Kafka's sampled rate (``org.apache.kafka.common.metrics.stats.Rate`` over a
``WindowedSum``, as in Kafka 3.9) and the quota throttle-time formula (``QuotaUtils``).

Theory of operation. A rate keeps ``samples + 1`` windows of ``window_ms`` each; a value is
added to the current window, and a window that is ``window_ms`` old is recycled for the next
value. A window whose last event is ``samples * window_ms`` old is obsolete and reset before
measuring. The rate is the sum of the windows' values divided by the time elapsed since the
oldest window started, where that time counts at least ``samples - 1`` whole windows (so the
first values after a quiet period are measured over the full span, not over a few
milliseconds: a burst of up to ``(samples - 1) * window`` seconds' worth of quota passes).

Throttling: when the rate ``O`` exceeds the bound ``T`` after recording, the client must stay
away long enough that ``O * W / (W + X) = T`` over the rate's window ``W``:
``X = (O - T) / T * W`` (rounded to milliseconds).

Concurrency: plain objects, used on the broker's event loop.
"""

from __future__ import annotations

__all__ = ["SampledRate", "throttle_time_ms"]


class _Sample:
    __slots__ = ("last_event_ms", "start_ms", "value")

    def __init__(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = now_ms
        self.last_event_ms = now_ms
        self.value = 0.0


class SampledRate:
    """A per-second rate over ``samples`` windows of ``window_ms`` (Kafka's ``Rate``)."""

    __slots__ = ("_current", "_samples", "_window_ms", "samples")

    def __init__(self, samples: int, window_ms: int) -> None:
        if samples < 1 or window_ms < 1:
            raise ValueError("a rate needs at least one window of at least 1 ms")
        self.samples = samples
        self._window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    @property
    def window_size_ms(self) -> int:
        return self._window_ms

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self._window_ms:
            sample = self._advance(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        self._purge(now_ms)
        total = sum(s.value for s in self._samples)
        return total / (self.window_ms(now_ms) / 1000.0)

    def window_ms(self, now_ms: int) -> int:
        """The span the rate is measured over (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        elapsed = now_ms - self._oldest(now_ms).start_ms
        full_windows = elapsed // self._window_ms
        min_full_windows = self.samples - 1
        if full_windows < min_full_windows:
            elapsed += (min_full_windows - full_windows) * self._window_ms
        return max(elapsed, 1)

    def idle_since_ms(self) -> int:
        """When a value was last recorded (for expiring unused rates)."""
        return max((s.last_event_ms for s in self._samples), default=0)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        # one extra window is kept: the oldest may overlap the measured span
        self._current = (self._current + 1) % (self.samples + 1)
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
            return sample
        sample = self._samples[self._current]
        sample.reset(now_ms)
        return sample

    def _oldest(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return min(self._samples, key=lambda s: s.start_ms)

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.samples * self._window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_ms:
                sample.reset(now_ms)


def throttle_time_ms(rate: float, bound: float, window_ms: int) -> int:
    """How long a client whose measured ``rate`` exceeds ``bound`` must be held so that the
    rate over ``window_ms`` falls back to the bound: ``(O - T) / T * W`` (Kafka's
    ``QuotaUtils.throttleTime``; Java's ``Math.round``: halves round up). A quota of 0 (or
    less), for which the formula has no answer, holds the client for the whole window."""
    if rate <= bound:
        return 0
    if bound <= 0:
        return window_ms
    value = (rate - bound) / bound * window_ms
    return min(int(value + 0.5), 2**31 - 1)
