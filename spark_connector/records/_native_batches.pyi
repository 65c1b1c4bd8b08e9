"""Type stub of the C extension ``_native_batches.c`` (see :mod:`spark_connector.records.encoder`)."""

from typing import Any

def partition_keys(column: tuple[Any, ...], num_partitions: int, /) -> bytes: ...
def encode_records(
    keys: tuple[Any, ...] | None,
    values: tuple[Any, ...],
    rows: Any,
    start: int,
    stop: int,
    max_bytes: int,
    headers: tuple[Any, ...] | None = None,
    delta_base: int = 0,
    timestamp_delta: int = 0,
    /,
) -> tuple[bytes, int]: ...
