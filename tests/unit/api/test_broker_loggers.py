"""The BROKER_LOGGER resource's levels (broker/api/broker_loggers.py): Kafka's level names
over Python's levels, effective levels inherited from parents, SET/DELETE validated as a
whole before anything changes, ``validate_only``, and Kafka's errors."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from broker.api import broker_loggers
from broker.api.broker_loggers import OP_DELETE, OP_SET
from broker.protocol.errors import ErrorCode, KafkaError

pytestmark = pytest.mark.unit

PARENT = "millrace_test_loggers"
CHILD = f"{PARENT}.child"


@pytest.fixture(autouse=True)
def _loggers() -> Iterator[None]:
    logging.getLogger(CHILD)  # PARENT exists as its placeholder until set
    root = logging.getLogger()
    saved = root.level
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.setLevel(saved)
        logging.getLogger(PARENT).setLevel(logging.NOTSET)
        logging.getLogger(CHILD).setLevel(logging.NOTSET)


@pytest.mark.parametrize(
    ("level", "name"),
    [
        (logging.CRITICAL + 10, "OFF"),
        (logging.CRITICAL, "FATAL"),
        (logging.ERROR, "ERROR"),
        (logging.WARNING, "WARN"),
        (25, "INFO"),
        (logging.INFO, "INFO"),
        (logging.DEBUG, "DEBUG"),
        (5, "TRACE"),
        (1, "ALL"),
    ],
)
def test_level_names_are_kafkas(level: int, name: str) -> None:
    assert broker_loggers.level_name(level) == name


def test_loggers_list_root_first_and_packages_with_effective_levels() -> None:
    listed = broker_loggers.loggers()
    assert next(iter(listed)) == "root"
    assert listed["root"] == "INFO"
    assert listed[PARENT] == listed[CHILD] == "INFO"  # a package name without its own logger


def test_set_then_delete_a_package_level() -> None:
    broker_loggers.alter([(OP_SET, PARENT, "debug")])
    assert logging.getLogger(CHILD).isEnabledFor(logging.DEBUG)
    assert broker_loggers.loggers()[CHILD] == "DEBUG"
    broker_loggers.alter([(OP_SET, CHILD, "TRACE"), (OP_SET, "root", "ERROR")])
    listed = broker_loggers.loggers()
    assert (listed[CHILD], listed[PARENT], listed["root"]) == ("TRACE", "DEBUG", "ERROR")
    broker_loggers.alter([(OP_DELETE, CHILD, None), (OP_DELETE, PARENT, None)])
    assert broker_loggers.loggers()[CHILD] == "ERROR"  # follows root again


@pytest.mark.parametrize(
    ("ops", "code", "message"),
    [
        ([(OP_SET, "no.such.logger", "INFO")], ErrorCode.invalid_config, "does not exist"),
        ([(OP_SET, PARENT, "LOUD")], ErrorCode.invalid_config, "not a supported log level"),
        ([(OP_SET, PARENT, None)], ErrorCode.invalid_config, "not a supported log level"),
        ([(OP_DELETE, "root", None)], ErrorCode.invalid_request, "root logger is not allowed"),
        ([(2, PARENT, "INFO")], ErrorCode.invalid_request, "not allowed for the BROKER_LOGGER"),
    ],
)
def test_refused_operations_change_nothing(
    ops: list[tuple[int, str, str | None]], code: ErrorCode, message: str
) -> None:
    with pytest.raises(KafkaError) as err:
        broker_loggers.alter([(OP_SET, CHILD, "DEBUG"), *ops])
    assert err.value.code == code and message in str(err.value)
    assert broker_loggers.loggers()[CHILD] == "INFO"  # the valid SET before it was not applied


def test_validate_only_changes_nothing() -> None:
    broker_loggers.alter([(OP_SET, CHILD, "DEBUG")], validate_only=True)
    assert broker_loggers.loggers()[CHILD] == "INFO"
