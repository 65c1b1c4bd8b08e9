"""Kafka's client quota managers (``ClientQuotaManager`` with its ``DefaultQuotaCallback``,
``ClientRequestQuotaManager``): which quota applies to a request, the rate it is measured
against, and how long a client that exceeds it is throttled.

Precedence (the most specific configured entity wins, per quota type)::

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>
    quota.producer.default / quota.consumer.default (deprecated static client-id defaults)

As in Kafka, a request is first mapped to *metric tags* ``(user, client id)`` naming the level
that applies (``(user, "")`` for a user-level quota, ``("", client)`` for a client-id level
one, both for the (user, client id) levels); every connection with the same tags shares one
rate, so a user quota is shared by all the user's clients and a ``<default>`` quota is
applied to each user (or client id) separately. The limit is then looked up from the tags.

Enforcement (KIP-219): the value is recorded, and if the rate now exceeds the bound the
client is throttled for ``(O - T) / T * W`` ms (:func:`broker.quota.rate.throttle_time_ms`);
request-time throttles are capped at one window (Kafka's ``ClientRequestQuotaManager``).
``request_percentage`` is measured in percent of one thread: a request that keeps the event
loop busy for 10 ms records 1 (% of a second); 100 is the whole event loop.

Concurrency: used on the broker's event loop only.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

from broker.quota.entities import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    quota_values,
)
from broker.quota.rate import SampledRate, throttle_time_ms

__all__ = ["ClientQuotaManager", "ClientQuotas", "QuotaSettings", "QuotaType", "quota_settings"]

log = logging.getLogger(__name__)

INACTIVE_SENSOR_EXPIRY_MS = 3_600_000  # Kafka's InactiveSensorExpirationTimeSeconds
_EXPIRY_CHECK_MS = 60_000
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9

Tags = tuple[str, str]


class QuotaType(enum.Enum):
    """A client quota type, by the config key that sets it."""

    PRODUCE = PRODUCER_BYTE_RATE
    FETCH = CONSUMER_BYTE_RATE
    REQUEST = REQUEST_PERCENTAGE


@dataclass(frozen=True, slots=True)
class QuotaSettings:
    """The broker's quota properties."""

    samples: int = 11  # quota.window.num
    window_seconds: int = 1  # quota.window.size.seconds
    producer_default: float | None = None  # quota.producer.default (None: unlimited)
    consumer_default: float | None = None  # quota.consumer.default


class _Sensor:
    """The rate shared by the connections with the same metric tags, and its bound."""

    __slots__ = ("bound", "rate", "tags")

    def __init__(self, tags: Tags, rate: SampledRate, bound: float | None) -> None:
        self.tags = tags
        self.rate = rate
        self.bound = bound


class ClientQuotaManager:
    """One quota type's overrides, sensors and throttling (Kafka's ``ClientQuotaManager``)."""

    def __init__(
        self,
        quota_type: QuotaType,
        settings: QuotaSettings,
        static_client_default: float | None = None,
        *,
        max_throttle_ms: int | None = None,
    ) -> None:
        self.quota_type = quota_type
        self._samples = settings.samples
        self._window_ms = settings.window_seconds * 1000
        self._static = static_client_default
        self._max_throttle_ms = max_throttle_ms
        self._overrides: dict[QuotaEntity, float] = {}
        self._sensors: dict[Tags, _Sensor] = {}
        self._resolved: dict[Tags, _Sensor] = {}  # (user, client id) -> its sensor
        self._next_expiry_ms = 0
        self.enabled = static_client_default is not None

    # -- configuration --

    def update_quota(self, entity: QuotaEntity, value: float | None) -> None:
        """Set (or, with None, remove) the entity's quota of this type."""
        if value is None:
            if self._overrides.pop(entity, None) is None:
                return
        elif self._overrides.get(entity) == value:
            return
        else:
            self._overrides[entity] = value
        log.info("%s quota of %s: %s", self.quota_type.value, entity, value)
        self.enabled = bool(self._overrides) or self._static is not None
        self._resolved.clear()
        for sensor in self._sensors.values():
            sensor.bound = self.quota_limit(sensor.tags)

    def metric_tags(self, user: str, client_id: str) -> Tags:
        """The tags of the level that applies to (sanitized user, sanitized client id)."""
        overrides = self._overrides
        if QuotaEntity(user, client_id) in overrides or QuotaEntity(user, DEFAULT) in overrides:
            return user, client_id
        if QuotaEntity(user, None) in overrides:
            return user, ""
        if (
            QuotaEntity(DEFAULT, client_id) in overrides
            or QuotaEntity(DEFAULT, DEFAULT) in overrides
        ):
            return user, client_id
        if QuotaEntity(DEFAULT, None) in overrides:
            return user, ""
        return "", client_id

    def quota_limit(self, tags: Tags) -> float | None:
        """The bound for these metric tags, or None (unlimited)."""
        user, client_id = tags
        get = self._overrides.get
        quota: float | None = None
        if user and client_id:
            quota = get(QuotaEntity(user, client_id))
            if quota is None:
                quota = get(QuotaEntity(user, DEFAULT))
            if quota is None:
                quota = get(QuotaEntity(DEFAULT, client_id))
            if quota is None:
                quota = get(QuotaEntity(DEFAULT, DEFAULT))
        elif user:
            quota = get(QuotaEntity(user, None))
            if quota is None:
                quota = get(QuotaEntity(DEFAULT, None))
        elif client_id:
            quota = get(QuotaEntity(None, client_id))
            if quota is None:
                quota = get(QuotaEntity(None, DEFAULT))
            if quota is None:
                quota = self._static
        return quota

    def quota(self, user: str, client_id: str) -> float | None:
        """The bound that applies to (sanitized user, sanitized client id)."""
        return self.quota_limit(self.metric_tags(user, client_id))

    # -- recording --

    def _sensor(self, user: str, client_id: str) -> _Sensor:
        key = (user, client_id)
        sensor = self._resolved.get(key)
        if sensor is not None:
            return sensor
        tags = self.metric_tags(user, client_id)
        sensor = self._sensors.get(tags)
        if sensor is None:
            sensor = _Sensor(
                tags, SampledRate(self._samples, self._window_ms), self.quota_limit(tags)
            )
            self._sensors[tags] = sensor
        if len(self._resolved) >= 100_000:
            self._resolved.clear()
        self._resolved[key] = sensor
        return sensor

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` for the client; the throttle time in ms (0: within its quota)."""
        if now_ms >= self._next_expiry_ms:
            self._expire(now_ms)
        sensor = self._sensor(user, client_id)
        rate = sensor.rate
        rate.record(value, now_ms)
        bound = sensor.bound
        if bound is None:
            return 0
        window_ms = rate.window_ms(now_ms)
        measured = rate.measure(now_ms)
        if measured <= bound:
            return 0
        throttle = throttle_time_ms(measured, bound, window_ms)
        if self._max_throttle_ms is not None:
            throttle = min(throttle, self._max_throttle_ms)
        return throttle

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a recorded value (a throttled fetch returns no data)."""
        self._sensor(user, client_id).rate.record(-value, now_ms)

    def max_value_in_window(self, user: str, client_id: str) -> float | None:
        """The most that one request may record without certainly being throttled:
        ``quota * (samples - 1) * window`` (None: unlimited)."""
        bound = self._sensor(user, client_id).bound
        if bound is None:
            return None
        return bound * (self._samples - 1) * (self._window_ms / 1000.0)

    def _expire(self, now_ms: int) -> None:
        """Forget the sensors nobody used for an hour (Kafka expires its sensors so)."""
        self._next_expiry_ms = now_ms + _EXPIRY_CHECK_MS
        stale = [
            tags
            for tags, s in self._sensors.items()
            if now_ms - s.rate.idle_since_ms() >= INACTIVE_SENSOR_EXPIRY_MS
        ]
        if stale:
            for tags in stale:
                del self._sensors[tags]
            self._resolved.clear()


class ClientQuotas:
    """The broker's three client quota managers (produce, fetch, request) and the quota
    configs they were given, by entity."""

    def __init__(self, settings: QuotaSettings | None = None) -> None:
        settings = settings or QuotaSettings()
        self.settings = settings
        self.produce = ClientQuotaManager(QuotaType.PRODUCE, settings, settings.producer_default)
        self.fetch = ClientQuotaManager(QuotaType.FETCH, settings, settings.consumer_default)
        self.request = ClientQuotaManager(
            QuotaType.REQUEST, settings, max_throttle_ms=settings.window_seconds * 1000
        )
        self._managers = (self.produce, self.fetch, self.request)
        self._configs: dict[QuotaEntity, dict[str, float]] = {}
        self.enabled = any(m.enabled for m in self._managers)
        """Whether any quota is configured: False keeps every request on the fast path."""

    def apply(self, entity: QuotaEntity, config: dict[str, str]) -> None:
        """Take the entity's whole config (its quota keys; other keys are ignored)."""
        values = quota_values(config, entity)
        for manager in self._managers:
            manager.update_quota(entity, values.get(manager.quota_type.value))
        if values:
            self._configs[entity] = values
        else:
            self._configs.pop(entity, None)
        self.enabled = any(m.enabled for m in self._managers)

    def configs(self) -> dict[QuotaEntity, dict[str, float]]:
        return {e: dict(v) for e, v in self._configs.items()}

    def remove_missing(self, present: set[QuotaEntity]) -> None:
        """Drop the entities no longer in ZooKeeper (after a full reload)."""
        for entity in [e for e in self._configs if e not in present]:
            self.apply(entity, {})


def quota_settings(config: Any) -> QuotaSettings:
    """The quota properties of a broker config (``quota.window.num``,
    ``quota.window.size.seconds``, the deprecated ``quota.producer.default`` and
    ``quota.consumer.default``, whose default Long.MAX_VALUE means unlimited)."""
    unlimited = 2**63 - 1

    def static(name: str) -> float | None:
        value = int(config[name])
        return None if value >= unlimited else float(value)

    return QuotaSettings(
        samples=int(config["quota.window.num"]),
        window_seconds=int(config["quota.window.size.seconds"]),
        producer_default=static("quota.producer.default"),
        consumer_default=static("quota.consumer.default"),
    )
