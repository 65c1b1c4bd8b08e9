"""Type stub of the C extension ``_native_records.c`` (see :class:`spark_connector.records.decoder.PyColumns`)."""

from spark_connector.records.decoder import Taken

class Columns:
    """Kafka v2 records decoded into Arrow column buffers. One thread at a time."""

    def __init__(self, with_headers: bool) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def data_bytes(self) -> int: ...
    @property
    def with_headers(self) -> bool: ...
    def add(
        self,
        records: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        base_timestamp: int,
        max_timestamp: int,
        log_append_time: bool,
        from_offset: int,
        until_offset: int,
        /,
    ) -> int: ...
    def add_batches(
        self,
        blob: bytes | bytearray | memoryview,
        start: int,
        from_offset: int,
        until_offset: int,
        max_rows: int,
        max_bytes: int,
        /,
    ) -> tuple[int, int]: ...
    def take(self) -> Taken: ...

def scan_batches(blob: bytes | bytearray | memoryview, /) -> tuple[int, int]: ...
def _set_error_class(cls: type[Exception], /) -> None: ...
