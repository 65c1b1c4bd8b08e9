"""The BROKER_LOGGER config resource (type 8): this broker's loggers and their levels, read
with DescribeConfigs and changed at run time with IncrementalAlterConfigs, as Kafka's
``Log4jController`` does (``kafka-configs --entity-type broker-loggers``).

Loggers are Python's: every logger name the process has (``logging``'s registry, package
names such as ``broker.replication`` included, each of which sets the level of everything
below it) and ``root``. Levels use Kafka's (log4j) names, mapped onto Python's numbers:
OFF (above CRITICAL: nothing), FATAL (CRITICAL), ERROR, WARN (WARNING), INFO, DEBUG, TRACE
(5, below DEBUG) and ALL (1). A logger's described value is its *effective* level (its own,
or the nearest ancestor's that is set), as Kafka describes log4j's.

Operations (Kafka's ``ConfigAdminManager.validateLogLevelConfigs``): SET a known logger to a
valid level; DELETE a known logger's own level, after which it follows its parent (``root``
cannot be deleted: INVALID_REQUEST); an unknown logger or level is INVALID_CONFIG; APPEND and
SUBTRACT are INVALID_REQUEST. The whole resource is validated before anything changes.
Changes last until the broker restarts (Kafka's do too); the broker's log handler passes every
level, so a logger's level alone decides what is written.

Concurrency: event loop thread; ``logging``'s registry is copied before it is read (other
threads may add loggers).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from broker.protocol.errors import ErrorCode, KafkaError

ROOT_LOGGER = "root"
TRACE = 5
OFF = logging.CRITICAL + 10
LEVELS: dict[str, int] = {
    "OFF": OFF,
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": TRACE,
    "ALL": 1,
}
"""Kafka's level names (``Log4jController``'s valid levels) -> Python's levels."""
_HIGHEST_FIRST = sorted(LEVELS.items(), key=lambda item: -item[1])

OP_SET, OP_DELETE = 0, 1

if logging.getLevelName(TRACE) == f"Level {TRACE}":
    logging.addLevelName(TRACE, "TRACE")


def level_name(level: int) -> str:
    """Kafka's name of a Python level (the highest named level not above it)."""
    for name, value in _HIGHEST_FIRST:
        if level >= value:
            return name
    return "ALL"


def loggers() -> dict[str, str]:
    """{logger name: Kafka's name of its effective level}, ``root`` first, then by name."""
    names = sorted(str(n) for n in list(logging.Logger.manager.loggerDict))
    out = {ROOT_LOGGER: level_name(logging.getLogger().getEffectiveLevel())}
    for name in names:
        out[name] = level_name(logging.getLogger(name).getEffectiveLevel())
    return out


def alter(ops: Iterable[tuple[int, str, str | None]], *, validate_only: bool = False) -> None:
    """Apply (operation, logger, level) triples, all validated first (``validate_only``:
    only that); raises KafkaError."""
    ops = list(ops)
    known = set(loggers())
    for op, name, value in ops:
        if op not in (OP_SET, OP_DELETE):
            raise KafkaError(
                f"operation {op} is not allowed for the BROKER_LOGGER resource",
                ErrorCode.invalid_request,
            )
        if name not in known:
            raise KafkaError(f"Logger {name} does not exist!", ErrorCode.invalid_config)
        if op == OP_SET and (value or "").upper() not in LEVELS:
            raise KafkaError(
                f"Cannot set the log level of {name} to {value} as it is not a supported log "
                f"level. Valid log levels are {', '.join(LEVELS)}",
                ErrorCode.invalid_config,
            )
        if op == OP_DELETE and name == ROOT_LOGGER:
            raise KafkaError(
                f"Removing the log level of the {ROOT_LOGGER} logger is not allowed",
                ErrorCode.invalid_request,
            )
    if validate_only:
        return
    for op, name, value in ops:
        logger = logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)
        if op == OP_SET:
            logger.setLevel(LEVELS[(value or "").upper()])
        else:
            logger.setLevel(logging.NOTSET)
