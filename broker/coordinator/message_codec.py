"""Kafka's generated-message encoding for the records coordinators keep in internal topics
(``__consumer_offsets``, ``__transaction_state``), and Kafka's key -> partition mapping.

Encoding (Kafka's ``MessageUtil.toVersionPrefixedBytes``): a big-endian ``int16`` version,
then the schema's fields in order. ``int8/16/32/64`` are big-endian. Non-flexible versions
write a string as an ``int16`` byte length (``-1`` for null) and UTF-8 bytes, bytes as an
``int32`` length and the bytes, an array as an ``int32`` count (``-1`` for null). Flexible
versions write them "compact": an unsigned varint of length + 1 (``0`` for null), and end
each struct with a tagged-field section (an unsigned varint count, then ``tag, size, bytes``
for each field).

:class:`MessageWriter` and :class:`MessageReader` raise the error class they are given (a
subclass of :class:`RecordFormatError`), naming the record and the field, so a caller can
tell its record kind's problems apart. The reader is strict: bytes left after the last
field (:meth:`MessageReader.finish`), invalid UTF-8 and lengths that lie are errors, never
silently accepted.

:func:`partition_for` is Kafka's ``Utils.abs(key.hashCode()) % partitions`` (Java's
``String.hashCode`` over UTF-16 code units; ``Utils.abs(Integer.MIN_VALUE) == 0``), which
places a group in ``__consumer_offsets`` and a transactional id in ``__transaction_state``.

Concurrency: pure functions and per-call objects; safe from any thread.
"""

from __future__ import annotations

import struct

__all__ = [
    "MAX_STRING_BYTES",
    "MessageReader",
    "MessageWriter",
    "RecordFormatError",
    "java_string_hash",
    "partition_for",
]

MAX_STRING_BYTES = 0x7FFF

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A coordinator record that cannot be decoded, or a value that cannot be encoded in
    Kafka's format (a string longer than 32767 UTF-8 bytes, an int out of range)."""


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units,
    in 32-bit two's complement."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    """The internal-topic partition of ``key`` (a group id or a transactional id), as Kafka
    computes it.

    Kafka's ``Utils.abs`` is ``Math.abs`` except that ``Integer.MIN_VALUE`` maps to 0 (it is
    not ``n & 0x7fffffff``, which gives a different partition for every negative hash).
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


class MessageWriter:
    """Serialises fields in Kafka's generated-message encoding (non-flexible or flexible),
    after the ``int16`` version."""

    __slots__ = ("_buf", "_error", "_flexible")

    def __init__(
        self, version: int, flexible: bool, error: type[RecordFormatError] = RecordFormatError
    ) -> None:
        self._buf = bytearray(_I16.pack(version))
        self._flexible = flexible
        self._error = error

    def getvalue(self) -> bytes:
        return bytes(self._buf)

    def _pack(self, fmt: struct.Struct, value: int, field: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._error(f"field {field} must be an int, got {value!r}")
        try:
            self._buf += fmt.pack(value)
        except struct.error as exc:
            raise self._error(f"field {field} out of range: {value}") from exc

    def int8(self, value: int, field: str) -> None:
        self._pack(_I8, value, field)

    def int16(self, value: int, field: str) -> None:
        self._pack(_I16, value, field)

    def int32(self, value: int, field: str) -> None:
        self._pack(_I32, value, field)

    def int64(self, value: int, field: str) -> None:
        self._pack(_I64, value, field)

    def raw(self, data: bytes) -> None:
        """Bytes as they are (a tagged field's already-encoded value)."""
        self._buf += data

    def uvarint(self, value: int) -> None:
        while value >= 0x80:
            self._buf.append((value & 0x7F) | 0x80)
            value >>= 7
        self._buf.append(value)

    def string(self, value: str | None, field: str, nullable: bool = False) -> None:
        if value is None:
            if not nullable:
                raise self._error(f"non-nullable field {field} is None")
            if self._flexible:
                self.uvarint(0)
            else:
                self._buf += _I16.pack(-1)
            return
        if not isinstance(value, str):
            raise self._error(f"field {field} must be a str, got {value!r}")
        try:
            raw = value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise self._error(f"field {field} is not encodable as UTF-8: {exc}") from exc
        if len(raw) > MAX_STRING_BYTES:
            raise self._error(
                f"field {field} is too long to be serialized: {len(raw)} UTF-8 bytes"
                f" (at most {MAX_STRING_BYTES})"
            )
        if self._flexible:
            self.uvarint(len(raw) + 1)
        else:
            self._buf += _I16.pack(len(raw))
        self._buf += raw

    def bytes_(self, value: bytes, field: str) -> None:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise self._error(f"field {field} must be bytes, got {type(value).__name__}")
        raw = bytes(value)
        if len(raw) > 0x7FFFFFFF:
            raise self._error(f"field {field} is too long: {len(raw)} bytes")
        if self._flexible:
            self.uvarint(len(raw) + 1)
        else:
            self._buf += _I32.pack(len(raw))
        self._buf += raw

    def array_length(self, count: int | None) -> None:
        """An array's element count; ``None`` writes a null array."""
        if count is None:
            if self._flexible:
                self.uvarint(0)
            else:
                self._buf += _I32.pack(-1)
            return
        if self._flexible:
            self.uvarint(count + 1)
        else:
            self._buf += _I32.pack(count)

    def tagged_fields(self) -> None:
        if self._flexible:
            self.uvarint(0)


class MessageReader:
    """Reads fields in Kafka's generated-message encoding; every failure is an ``error``
    (a :class:`RecordFormatError` subclass) naming the record and field."""

    __slots__ = ("_data", "_error", "_pos", "_what", "flexible")

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        what: str,
        error: type[RecordFormatError] = RecordFormatError,
    ) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._what = what
        self._error = error
        self.flexible = False

    def error(self, message: str) -> RecordFormatError:
        return self._error(f"malformed {self._what}: {message}")

    def _take(self, n: int, field: str) -> memoryview:
        end = self._pos + n
        if end > len(self._data):
            raise self.error(
                f"field {field} needs {n} bytes at position {self._pos},"
                f" only {len(self._data) - self._pos} remain"
            )
        out = self._data[self._pos : end]
        self._pos = end
        return out

    def raw(self, n: int, field: str) -> bytes:
        """``n`` bytes as they are (a tagged field's value)."""
        return bytes(self._take(n, field))

    def int8(self, field: str) -> int:
        return int(_I8.unpack(self._take(1, field))[0])

    def int16(self, field: str) -> int:
        return int(_I16.unpack(self._take(2, field))[0])

    def int32(self, field: str) -> int:
        return int(_I32.unpack(self._take(4, field))[0])

    def int64(self, field: str) -> int:
        return int(_I64.unpack(self._take(8, field))[0])

    def uvarint(self, field: str) -> int:
        result = 0
        for shift in range(0, 35, 7):
            b = self._take(1, field)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
        raise self.error(f"field {field}: varint longer than 5 bytes")

    def _length(self, field: str, wide: bool) -> int:
        """The length prefix of a string (``wide=False``), bytes or array; ``-1`` is null."""
        if self.flexible:
            return self.uvarint(field) - 1
        return self.int32(field) if wide else self.int16(field)

    def string(self, field: str) -> str:
        value = self.nullable_string(field)
        if value is None:
            raise self.error(f"non-nullable field {field} was serialized as null")
        return value

    def nullable_string(self, field: str) -> str | None:
        n = self._length(field, wide=False)
        if n < 0:
            if n != -1:
                raise self.error(f"field {field} has negative length {n}")
            return None
        if n > MAX_STRING_BYTES:
            raise self.error(f"string field {field} had invalid length {n}")
        raw = self._take(n, field)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise self.error(f"field {field} is not valid UTF-8: {exc}") from exc

    def bytes_(self, field: str) -> bytes:
        n = self._length(field, wide=True)
        if n < 0:
            raise self.error(f"non-nullable field {field} was serialized as null")
        return bytes(self._take(n, field))

    def nullable_array_length(self, field: str, min_element_bytes: int = 1) -> int | None:
        """An array's element count, or None for a null array."""
        n = self._length(field, wide=True)
        if n < 0:
            if n != -1:
                raise self.error(f"array field {field} has negative length {n}")
            return None
        if n * min_element_bytes > len(self._data) - self._pos:
            raise self.error(f"array field {field} claims {n} elements in fewer bytes")
        return n

    def array_length(self, field: str, min_element_bytes: int = 1) -> int:
        n = self.nullable_array_length(field, min_element_bytes)
        if n is None:
            raise self.error(f"non-nullable field {field} was serialized as null")
        return n

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint("tagged field count")):
            self.uvarint("tag")
            self._take(self.uvarint("tagged field size"), "tagged field")

    def finish(self) -> None:
        left = len(self._data) - self._pos
        if left:
            raise self.error(f"{left} unexpected bytes after the last field")
