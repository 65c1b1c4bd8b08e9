"""Errors raised by the partition log storage (``broker.log``).

Each carries the Kafka error code a request handler answers with (see
``broker.protocol.errors.error_code_for``). Errors that never reach a client (a corrupt index
that is silently rebuilt) still subclass :class:`KafkaError` so that, if one ever escapes, it
maps to a sensible code instead of UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

from broker.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CorruptCheckpointError",
    "CorruptIndexError",
    "InconsistentBrokerMetadataError",
    "KafkaStorageError",
    "LogClosedError",
    "LogDirOfflineError",
    "OffsetOutOfRangeError",
    "UnexpectedAppendOffsetError",
]


class OffsetOutOfRangeError(KafkaError):
    """A read, DeleteRecords or similar request named an offset outside
    ``[log_start_offset, log_end_offset]``."""

    code = ErrorCode.offset_out_of_range


class KafkaStorageError(KafkaError):
    """The log could not be read or written (I/O error, unusable log directory)."""

    code = ErrorCode.kafka_storage_error


class CorruptIndexError(KafkaStorageError):
    """An ``.index`` or ``.timeindex`` file failed its sanity check; it is rebuilt from the
    ``.log`` by the loader, so this error normally never leaves ``broker.log``."""


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file (offset checkpoint, leader-epoch checkpoint, meta.properties) is
    malformed."""


class UnexpectedAppendOffsetError(KafkaError):
    """A follower append whose batches do not start at or after the log end offset, or whose
    offsets go backwards (Kafka's UnexpectedAppendOffsetException / OffsetsOutOfOrder)."""

    code = ErrorCode.unknown_server_error


class LogClosedError(KafkaStorageError):
    """An operation on a log that has been closed or deleted."""


class LogDirOfflineError(KafkaStorageError):
    """The log's directory is offline after an I/O error (KIP-112): nothing in it is read or
    written until the broker restarts (:mod:`broker.log.log_dir_failure`)."""


class InconsistentBrokerMetadataError(KafkaStorageError):
    """A log directory's ``meta.properties`` names another broker id or cluster id."""
