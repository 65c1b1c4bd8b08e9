"""Quota entities and their configs, as Kafka stores them in ZooKeeper.

An entity is a user, a client id, or a (user, client id) pair; either part may be the
*default* (``<default>``, Kafka's ``ConfigEntityName.Default``). Its config lives in

* ``/config/users/<user>`` (beside the user's SCRAM credentials),
* ``/config/users/<user>/clients/<client-id>``,
* ``/config/clients/<client-id>``,

as ``{"version":1,"config":{"producer_byte_rate":"1024",...}}``, names *sanitized* as Kafka's
``Sanitizer`` does (URL-encoded; ``*`` as ``%2A``, space as ``%20``), and changes are
announced with ``/config/changes`` notifications naming ``users/<user>``,
``clients/<client-id>`` or ``users/<user>/clients/<client-id>``.

Values: ``producer_byte_rate`` and ``consumer_byte_rate`` are longs (bytes per second),
``request_percentage`` and ``controller_mutation_rate`` doubles, stored as Java prints them
(``1024``, ``200.0``).

Concurrency: immutable values and pure functions.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from decimal import Decimal
from urllib.parse import unquote_plus

__all__ = [
    "CLIENTS",
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "DEFAULT",
    "IP",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "USERS",
    "QuotaEntity",
    "desanitize",
    "format_value",
    "quota_values",
    "sanitize",
]

log = logging.getLogger(__name__)

DEFAULT = "<default>"
USERS = "users"
CLIENTS = "clients"

# ClientQuotaEntity's entity types (the admin API's names)
USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
QUOTA_KEYS: dict[str, str] = {
    PRODUCER_BYTE_RATE: "LONG",
    CONSUMER_BYTE_RATE: "LONG",
    REQUEST_PERCENTAGE: "DOUBLE",
    CONTROLLER_MUTATION_RATE: "DOUBLE",
}
"""Kafka's ``QuotaConfigs`` of users and client ids, with their ``ConfigDef`` types."""

_UNRESERVED = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


@functools.lru_cache(maxsize=4096)
def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: ``URLEncoder.encode`` (UTF-8) with ``*`` as ``%2A`` and
    a space as ``%20``."""
    if all(c in _UNRESERVED for c in name):
        return name
    out = []
    for ch in name:
        if ch in _UNRESERVED:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(out)


def desanitize(name: str) -> str:
    """Kafka's ``Sanitizer.desanitize`` (``URLDecoder.decode``)."""
    return unquote_plus(name)


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A quota entity: ``user`` and ``client_id`` are sanitized names, :data:`DEFAULT`, or
    None when the entity has no such part."""

    user: str | None
    client_id: str | None

    def __post_init__(self) -> None:
        if self.user is None and self.client_id is None:
            raise ValueError("a quota entity names a user, a client id or both")

    def config_path(self) -> tuple[str, str]:
        """``(entity type, name)`` of its znode under ``/config``: ``("users", "alice")``,
        ``("users", "alice/clients/c1")``, ``("clients", "c1")``."""
        if self.user is None:
            assert self.client_id is not None
            return CLIENTS, self.client_id
        if self.client_id is None:
            return USERS, self.user
        return USERS, f"{self.user}/{CLIENTS}/{self.client_id}"

    @property
    def entity_path(self) -> str:
        kind, name = self.config_path()
        return f"{kind}/{name}"

    @classmethod
    def from_entity_path(cls, path: str) -> QuotaEntity | None:
        """The entity a ``/config/changes`` notification names, or None (not a quota entity:
        a topic, a broker, an IP)."""
        parts = path.split("/")
        if len(parts) == 2 and parts[0] == USERS and parts[1]:
            return cls(parts[1], None)
        if len(parts) == 2 and parts[0] == CLIENTS and parts[1]:
            return cls(None, parts[1])
        if len(parts) == 4 and parts[0] == USERS and parts[2] == CLIENTS and parts[1] and parts[3]:
            return cls(parts[1], parts[3])
        return None

    def describe(self) -> dict[str, str | None]:
        """The admin API's view: entity type -> desanitized name, None for the default."""
        out: dict[str, str | None] = {}
        if self.user is not None:
            out[USER] = None if self.user == DEFAULT else desanitize(self.user)
        if self.client_id is not None:
            out[CLIENT_ID] = None if self.client_id == DEFAULT else desanitize(self.client_id)
        return out

    def __str__(self) -> str:
        return self.entity_path


def quota_values(config: dict[str, str], entity: object = "") -> dict[str, float]:
    """The quota entries of a user or client config (SCRAM credentials and other keys are
    left out); a value that is not a number is ignored (logged)."""
    out: dict[str, float] = {}
    for key in QUOTA_KEYS:
        text = config.get(key)
        if text is None:
            continue
        try:
            value = float(text)
        except ValueError:
            log.warning("ignoring %s=%r of %s: not a number", key, text, entity)
            continue
        if math.isnan(value):
            log.warning("ignoring %s=%r of %s: not a number", key, text, entity)
            continue
        out[key] = value
    return out


def format_value(key: str, value: float) -> str:
    """The text Kafka stores for a quota value: a long as an integer, a double as Java's
    ``Double.toString`` prints it."""
    if QUOTA_KEYS.get(key) == "LONG":
        return str(int(value))
    return java_double(value)


def java_double(value: float) -> str:
    """Java's ``Double.toString``: ``200.0``, ``0.5``, ``1.0E7``, ``1.0E-4``."""
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "0.0"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        text = repr(value)
        return text if "e" not in text else f"{value:f}"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    exp10 = len(digits) - 1 + exponent
    mantissa = f"{digits[0]}." + ("".join(map(str, digits[1:])) or "0")
    return f"{'-' if sign else ''}{mantissa}E{exp10}"
