"""Topic names: the broker's one legal-name rule (Kafka's ``Topic.validate``) and the two
errors about a name, illegal or already taken, that the ZooKeeper client raises and the
controller and the handlers answer to clients.

Concurrency: constants and pure functions.
"""

from __future__ import annotations

import re

from broker.protocol.errors import ErrorCode, KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


class InvalidTopicError(KafkaError, ValueError):
    """An illegal topic name (also a ``ValueError``: the ZooKeeper client refuses it too)."""

    code = ErrorCode.invalid_topic_exception


class TopicExistsError(KafkaError):
    """The topic already exists, or is still marked for deletion. The broker's only such
    error: the ZooKeeper client raises it and the controller answers it to clients."""

    code = ErrorCode.topic_already_exists


def validate_topic_name(name: str) -> None:
    """The broker's topic-name rule (Kafka's ``Topic.validate``): 1 to 249 characters of
    ASCII letters, digits, '.', '_' and '-', and not '.' or '..'. Raises
    :class:`InvalidTopicError`."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_NAME_LENGTH} characters")
    if not _LEGAL.match(name):
        raise InvalidTopicError(
            f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
        )
