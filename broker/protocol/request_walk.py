"""Check a request body against its schema, without allocating, before kio decodes it.

kio's decoder reserves memory for an array from the element count the request claims before
it reads the elements, so a few bytes claiming 2**31-1 elements made the broker abort on a
failed allocation of hundreds of GB (the CVE-2022-34917 class; found by the protocol fuzzer,
issue 17). :func:`check` walks the body first: every string, bytes and records length and
every array count must be backed by bytes that are there (each array element is walked), and
each tagged-field section must fit. Only then does kio decode it, so what kio allocates is
bounded by the frame the broker already read (at most ``socket.request.max.bytes``).

The walk runs in C (``broker/protocol/_request_check.c``) over a small program compiled once
per request class from the kio dataclasses (the op codes are listed there); without the
extension the same program is interpreted in Python.

Concurrency: pure; the compiled programs are cached and immutable.
"""

from __future__ import annotations

import dataclasses
import struct
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

from kio.serial._introspect import EntityTupleField, PrimitiveTupleField, classify_field

from broker.protocol.framing import InvalidRequestError

_FIXED = {
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "bool": 1,
    "float64": 8,
    "uuid": 16,
    "error_code": 2,
    "timedelta_i32": 4,
    "timedelta_i64": 8,
    "datetime_i64": 8,
}
FIXED, STRING, BYTES, COMPACT, ARRAY, COMPACT_ARRAY, STRUCT, TAGS = range(1, 9)


def _primitive(kafka_type: str, flexible: bool) -> bytes:
    size = _FIXED.get(kafka_type)
    if size is not None:
        return bytes([FIXED, size])
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            return bytes([COMPACT])
        return bytes([STRING if kafka_type == "string" else BYTES])
    raise ValueError(f"no walk op for {kafka_type}")


@cache
def program(cls: Any) -> bytes:
    """The walk program of the message class ``cls`` (its fields, then its tagged-field
    section if flexible; tagged fields are skipped by size, not walked)."""
    flexible = bool(cls.__flexible__)
    hints = typing.get_type_hints(cls)
    out = bytearray()
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            continue
        probe = dataclasses.field(metadata=f.metadata)
        probe.name = f.name
        probe.type = hints[f.name]
        kind = classify_field(probe)
        if isinstance(kind, EntityTupleField):
            inner = program(kind.type_)
            element = bytes([STRUCT, len(inner) >> 8, len(inner) & 0xFF]) + inner
        else:
            element = _primitive(str(f.metadata["kafka_type"]), flexible)
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            out += bytes([COMPACT_ARRAY if flexible else ARRAY]) + element
        else:
            out += element
    if flexible:
        out.append(TAGS)
    if len(out) > 0xFFFF:
        raise ValueError(f"{cls.__name__}: walk program too long")
    return bytes(out)


def _walk_py(prog: bytes, buf: bytes | memoryview, pos: int) -> int:
    """The Python twin of ``_request_check.walk``."""
    walk = _PyWalk(prog, buf, pos)
    walk.run(0, len(prog))
    return walk.pos


class _PyWalk:
    """One walk of ``buf`` from ``pos`` by the program ``prog``: each op a method."""

    def __init__(self, prog: bytes, buf: bytes | memoryview, pos: int) -> None:
        self.prog = prog
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def need(self, n: int) -> None:
        if n > self.end - self.pos:
            raise ValueError("a length runs past the end of the request")
        self.pos += n

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(10):
            if self.pos >= self.end:
                raise ValueError("truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise ValueError("varint too long")

    def int_length(self, width: int, what: str) -> int:
        """A big-endian int16 (``width`` 2) or int32 (4) length; -1 (null) or more."""
        if self.end - self.pos < width:
            raise ValueError(f"truncated {what}")
        (n,) = struct.unpack_from(">h" if width == 2 else ">i", self.buf, self.pos)
        self.pos += width
        if n < -1:
            raise ValueError(f"negative {what}")
        return int(n)

    def size_of(self, pc: int) -> int:
        """The length of the op at ``pc`` in the program (with its operands)."""
        op = self.prog[pc]
        if op == FIXED:
            return 2
        if op in (ARRAY, COMPACT_ARRAY):
            return 1 + self.size_of(pc + 1)
        if op == STRUCT:
            return 3 + (self.prog[pc + 1] << 8 | self.prog[pc + 2])
        return 1

    def run(self, pc: int, stop: int) -> None:
        while pc < stop:
            self.one(pc)
            pc += self.size_of(pc)

    def one(self, pc: int) -> None:
        step = _PY_OPS.get(self.prog[pc])
        if step is None:
            raise ValueError("bad program")
        step(self, pc)

    def op_fixed(self, pc: int) -> None:
        self.need(self.prog[pc + 1])

    def op_string(self, pc: int) -> None:
        self.need(max(self.int_length(2, "length"), 0))

    def op_bytes(self, pc: int) -> None:
        self.need(max(self.int_length(4, "length"), 0))

    def op_compact(self, pc: int) -> None:
        self.need(max(self.uvarint() - 1, 0))

    def op_array(self, pc: int) -> None:
        self.elements(pc, self.int_length(4, "array length"))

    def op_compact_array(self, pc: int) -> None:
        count = self.uvarint() - 1
        if count > 2**31 - 1:
            raise ValueError("array length out of range")
        self.elements(pc, count)

    def elements(self, pc: int, count: int) -> None:
        """``count`` elements of the array op at ``pc``."""
        if count > self.end - self.pos:
            raise ValueError("array length exceeds the request")
        for _ in range(count):
            self.one(pc + 1)

    def op_struct(self, pc: int) -> None:
        self.run(pc + 3, pc + self.size_of(pc))

    def op_tags(self, pc: int) -> None:
        count = self.uvarint()
        if count > self.end - self.pos:
            raise ValueError("tagged-field count exceeds the request")
        for _ in range(count):
            self.uvarint()
            self.need(self.uvarint())


_PY_OPS: dict[int, Callable[[_PyWalk, int], None]] = {
    FIXED: _PyWalk.op_fixed,
    STRING: _PyWalk.op_string,
    BYTES: _PyWalk.op_bytes,
    COMPACT: _PyWalk.op_compact,
    ARRAY: _PyWalk.op_array,
    COMPACT_ARRAY: _PyWalk.op_compact_array,
    STRUCT: _PyWalk.op_struct,
    TAGS: _PyWalk.op_tags,
}
"""The method walking each op."""


try:
    from broker.protocol._request_check import walk as _walk
except ImportError:  # built without a C compiler
    _walk = _walk_py


def check(cls: Any, buf: bytes | memoryview, pos: int) -> int:
    """Raise InvalidRequestError unless the body of ``cls`` at ``buf[pos:]`` is backed by
    its bytes; return the position after it."""
    try:
        return int(_walk(program(cls), buf, pos))
    except ValueError as exc:
        raise InvalidRequestError(f"{cls.__name__}: {exc}") from exc
