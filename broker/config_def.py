"""Typed configuration properties (Kafka's ``ConfigDef``): a property's name, type, default,
documentation and validator, the parsing of raw values (strings from ``server.properties``,
ZooKeeper or a request) with errors that name the property, a few validators, and Kafka's
rendering of a value in DescribeConfigs.

The broker properties (:mod:`broker.config`) and the topic-level configs
(:mod:`broker.topic_config`) are tables of these definitions.

Concurrency: immutable definitions and pure functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kafka_security.errors import ConfigError

__all__ = [
    "ConfigDef",
    "ConfigError",
    "ConfigType",
    "at_least",
    "format_config_value",
    "one_of",
]


class ConfigType(Enum):
    """Kafka's DescribeConfigs ``config_type`` values."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One property: its name, type, default (already parsed), validator and documentation."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Callable[[Any], bool] | None = None
    valid_text: str = ""

    def parse(self, raw: object) -> Any:
        """Parse a raw (usually string) value; raise ConfigError naming the property."""
        try:
            value = _parse_typed(self.type, raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(
                f"Invalid value {raw!r} for configuration {self.name}: expected "
                f"{self.type.name.lower()}"
            ) from exc
        if self.validator is not None and value is not None and not self.validator(value):
            hint = f" ({self.valid_text})" if self.valid_text else ""
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}{hint}")
        return value


def _parse_typed(kind: ConfigType, raw: object) -> Any:
    if raw is None:
        return None
    parser = _PARSERS.get(kind)
    return str(raw).strip() if parser is None else parser(raw)


def _parse_boolean(raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(raw)


def _integer_parser(bits: int) -> Callable[[object], int]:
    """The parser of a signed integer of ``bits`` bits (a bool refused)."""
    limit = 2 ** (bits - 1)

    def parse(raw: object) -> int:
        if isinstance(raw, bool):
            raise ValueError(raw)
        value = int(str(raw).strip())
        if not -limit <= value < limit:
            raise ValueError(raw)
        return value

    return parse


def _parse_list(raw: object) -> tuple[str, ...]:
    if isinstance(raw, list | tuple):
        return tuple(str(x) for x in raw)
    return tuple(p.strip() for p in str(raw).split(",") if p.strip())


_PARSERS: dict[ConfigType, Callable[[object], Any]] = {
    ConfigType.BOOLEAN: _parse_boolean,
    ConfigType.INT: _integer_parser(32),
    ConfigType.SHORT: _integer_parser(16),
    ConfigType.LONG: _integer_parser(64),
    ConfigType.DOUBLE: lambda raw: float(str(raw).strip()),
    ConfigType.LIST: _parse_list,
}
"""The value parser of each type but the strings (STRING, CLASS, PASSWORD: stripped)."""


def at_least(n: int) -> Callable[[Any], bool]:
    """A validator: the value is ``>= n``."""
    return lambda v: v >= n


def one_of(*choices: str) -> Callable[[Any], bool]:
    """A validator: the value is one of ``choices``."""
    return lambda v: v in choices


def format_config_value(value: Any) -> str:
    """Render a parsed value the way Kafka prints it in DescribeConfigs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)
