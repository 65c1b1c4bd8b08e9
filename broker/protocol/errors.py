"""Kafka error codes and the one mapping from exceptions to codes.

``ErrorCode`` is kio's enum of Kafka's codes (generated from Kafka's sources). A
:class:`KafkaError` carries the code a handler answers with; ``error_code_for`` is the one
place that turns any exception into a code.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "error_code_for"]


class KafkaError(Exception):
    """An error with a Kafka error code. Subclasses set ``code``; instances may override it."""

    code: ErrorCode = ErrorCode.unknown_server_error

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


def error_code_for(exc: BaseException) -> ErrorCode:
    """The Kafka error code that answers ``exc`` (UNKNOWN_SERVER_ERROR for the unexpected)."""
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, OSError):
        return ErrorCode.kafka_storage_error  # the log directory failed (disk full, I/O error)
    return ErrorCode.unknown_server_error
